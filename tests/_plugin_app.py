"""A launcher script beside one real plugin distribution, run as its own process.

What the tests that compare a spawned and a warm worker from the outside share: a unique
namespace (tag), a package of modules installed as a distribution with its plugins' entry
points, and the launching script, formatted with ``site``, ``tag``, ``prefix`` and ``pkg``.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any, NamedTuple

from spawnkit.testing import write_distribution

__all__ = [
    "LAUNCH", "MAIN", "App", "guard_stops_then_warns", "louder_plugin", "printed", "run_script",
    "warned", "write_app",
]  # fmt: skip

#: The head of a launcher script comparing spawned and warm workers: ``launch(entry, method,
#: **options)`` runs ``{pkg}.<entry>`` on the namespace and returns the ranks' results; a
#: warm launch preloads the entry's module.  A test appends its ``__main__`` part.
LAUNCH = """
import sys
sys.path.insert(0, {site!r})
import spawnkit

NS = spawnkit.Namespace({tag!r}, env_prefix={prefix!r})

def launch(entry, method, **options):
    module = "{pkg}." + entry.partition(":")[0]
    with spawnkit.spawn_with_plugins(
        "{pkg}." + entry, namespace=NS, start_method=method,
        preload=(module,) if method == "forkserver" else (),
        ready_timeout=120, join_timeout=120, **options,
    ) as group:
        return group.results(timeout=120)
"""


#: A ``__main__`` part for :data:`LAUNCH`: one rank of ``{pkg}.entry:main`` under the start
#: method the script's first argument names; prints the results.
MAIN = """
import sys

if __name__ == "__main__":
    print(launch("entry:main", sys.argv[1], nprocs=1))
"""


def louder_plugin(target: str) -> str:
    """A plugin module whose ``register()`` puts ``!`` after ``{pkg}.<target>``'s result."""
    return _LOUDER.replace("TARGET", target)


_LOUDER = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def louder(result):
    return result + "!"

def register():
    get_namespace({tag!r}).hooks.register("{pkg}.TARGET", louder, HookType.AFTER)
"""


class App(NamedTuple):
    script: Path
    tag: str  # the namespace's name; its variables' prefix is tag.upper()
    pkg: str


def write_app(
    tmp_path: Path,
    stem: str,
    launcher: str,
    plugins: dict[str, str],
    modules: dict[str, str],
    version: str = "1.0",
) -> App:
    """The script and names: ``plugins`` maps entry-point name to ``module:function`` and
    ``modules`` a submodule to its source, both relative to the package; ``{pkg}`` and
    ``{tag}`` in a source are the package's and the namespace's names."""
    tag = f"{stem}{uuid.uuid4().hex[:8]}"
    pkg = f"{tag}_plugs"
    site = tmp_path / "site"
    site.mkdir()
    write_distribution(
        site,
        f"{pkg}-dist",
        version,
        entry_points={f"{tag}.plugins": {n: f"{pkg}.{v}" for n, v in plugins.items()}},
        modules={
            f"{pkg}.__init__": "",
            **{f"{pkg}.{m}": src.format(pkg=pkg, tag=tag) for m, src in modules.items()},
        },
    )
    script = tmp_path / "launch.py"
    script.write_text(
        textwrap.dedent(launcher).format(site=str(site), tag=tag, prefix=tag.upper(), pkg=pkg)
    )
    return App(script, tag, pkg)


def run_script(
    script: Path,
    *args: str,
    flags: tuple[str, ...] = (),
    stdin: int | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """The script in a new interpreter (``flags`` before it), bounded; this environment without
    PYTHONWARNINGS, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    return subprocess.run(
        [sys.executable, *flags, str(script), *args],
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=script.parent,
        env={**base, **(env or {})},
    )


def printed(script: Path) -> Any:
    """The script's last line of output, as a Python literal; the script must succeed."""
    proc = run_script(script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return ast.literal_eval(proc.stdout.strip().splitlines()[-1])


def warned(proc: subprocess.CompletedProcess[str], category: str) -> list[str]:
    """The lines of the script's stderr that carry a warning of ``category``."""
    return [line for line in proc.stderr.splitlines() if category in line]


def guard_stops_then_warns(app: App, method: str) -> tuple[str, Any, str]:
    """Run ``app`` under ``method`` twice: the import guard's default stops it (its stderr,
    which must name an ``ImportGuardError``), ``<PREFIX>_IMPORT_GUARD=warn`` lets it run
    (its printed results and stderr, which must carry the ``ImportGuardWarning``)."""
    stopped = run_script(app.script, method)
    assert stopped.returncode != 0
    assert "ImportGuardError" in stopped.stderr, stopped.stderr
    lenient = run_script(app.script, method, env={f"{app.tag.upper()}_IMPORT_GUARD": "warn"})
    assert lenient.returncode == 0, lenient.stderr
    assert warned(lenient, "ImportGuardWarning: import guard"), lenient.stderr
    return stopped.stderr, ast.literal_eval(lenient.stdout.strip().splitlines()[-1]), lenient.stderr
