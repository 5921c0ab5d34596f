"""A library that bootstraps its own namespace as it loads (README's ``bootstrap_here()``
pattern), imported by a rank of another namespace's worker group: the rank stays its own.

Before, the library's ``bootstrap_here(B)`` entered B's worker phase with B's spec (rank 0 of
1): the rank's ``current_spec()``, ``current_report()``, default namespace and default context
became B's, unsaid, so an engine reading its rank there put every rank on device 0.  Real
distributions, a real launcher, real workers.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import uuid
from pathlib import Path

import spawnkit
from spawnkit.testing import write_distribution

_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def mark(original, *args, **kwargs):
    return original(*args, **kwargs) + "{mark}"

def register():
    get_namespace({ns!r}).hooks.register({target!r}, mark, HookType.AROUND)
"""

_ENTRY = """
import os

def snap():
    import spawnkit
    from spawnkit.bootstrap import current_report, current_spec
    spec, report = current_spec(), current_report()
    return (spec.rank, spec.world_size, spawnkit.get_namespace().name, report.namespace)

def main():
    import {a_target}
    before = snap()
    import {lib}.api  # bootstraps namespace {b} as it loads, then imports its target
    return before, snap(), {a_target}.f(), {lib}.api.run()
"""

_LAUNCH = """
import sys
import spawnkit

A = spawnkit.Namespace({a!r}, env_prefix={a!r}.upper())

if __name__ == "__main__":
    with spawnkit.spawn_with_plugins({entry!r}, nprocs=2, namespace=A, ready_timeout=120) as g:
        print(g.results(timeout=120))
"""


def test_a_library_bootstrapping_its_namespace_in_a_rank_leaves_the_rank_its_own(
    tmp_path: Path,
) -> None:
    tag = uuid.uuid4().hex[:8]
    a, b, lib = f"nsa{tag}", f"nsb{tag}", f"libb{tag}"
    a_target, b_target, up = f"tgta{tag}", f"tgtb{tag}", b.upper()
    site = tmp_path / "site"
    write_distribution(site, f"{a_target}-dist", modules={a_target: "def f():\n    return 'a'\n"})
    write_distribution(site, f"{b_target}-dist", modules={b_target: "def g():\n    return 'b'\n"})
    write_distribution(
        site,
        f"{lib}-dist",
        entry_points={"spawnkit.namespaces": {b: f"{lib}.ns:B"}},
        modules={
            f"{lib}.ns": f"import spawnkit\nB = spawnkit.Namespace({b!r}, env_prefix={up!r})\n",
            f"{lib}.api": (
                f"import spawnkit\nfrom {lib}.ns import B\nspawnkit.bootstrap_here(B)\n"
                f"import {b_target}\n\ndef run():\n    return {b_target}.g()\n"
            ),
        },
    )
    for ns, target, mark in ((a, f"{a_target}.f", "A"), (b, f"{b_target}.g", "B")):
        write_distribution(
            site,
            f"plug{mark.lower()}{tag}",
            entry_points={
                f"{ns}.plugins": {f"p{mark.lower()}": f"plug{mark.lower()}{tag}:register"}
            },
            modules={f"plug{mark.lower()}{tag}": _PLUGIN.format(ns=ns, target=target, mark=mark)},
        )
    entry = f"enga{tag}.entry"
    write_distribution(
        site, f"enga{tag}", modules={entry: _ENTRY.format(a_target=a_target, lib=lib, b=b)}
    )
    script = tmp_path / "launch.py"
    script.write_text(_LAUNCH.format(a=a, entry=f"{entry}:main"))
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=_env(site),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    for rank, (before, after, a_word, b_word) in enumerate(results):
        assert before == (rank, 2, a, a), results
        assert after == before, results  # was (0, 1, b, b): the library's namespace took over
        assert (a_word, b_word) == ("aA", "bB"), results  # both namespaces' hooks run


def _env(site: Path) -> dict[str, str]:
    """This environment, the site and the spawnkit under test first on the path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    ours = str(Path(spawnkit.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), ours, env.get("PYTHONPATH")) if p)
    return env


_SHARED_ENTRY = """
def main():
    import {target_mod}
    before = {target_mod}.f()
    import {lib}.api  # bootstraps namespace {b} as it loads: its plugin hooks the same f
    return before, {target_mod}.f()
"""


def test_a_library_namespace_hooking_the_ranks_target_too_bootstraps_in_the_rank(
    tmp_path: Path,
) -> None:
    """Both namespaces hook one function, whose module the rank's own hook application
    imported: before, the library's ``bootstrap_here(B)`` was refused as an early import
    ("first imported at .../hooks/_resolve.py ... during the bootstrap stage 'apply_hooks'",
    a fix that moved nothing); now B's hooks wrap A's, and both run in every rank."""
    tag = uuid.uuid4().hex[:8]
    a, b, lib, target_mod = f"nsa{tag}", f"nsb{tag}", f"libb{tag}", f"tgt{tag}"
    site = tmp_path / "site"
    write_distribution(
        site, f"{target_mod}-dist", modules={target_mod: "def f():\n    return 'o'\n"}
    )
    write_distribution(
        site,
        f"{lib}-dist",
        entry_points={"spawnkit.namespaces": {b: f"{lib}.ns:B"}},
        modules={
            f"{lib}.ns": (
                f"import spawnkit\nB = spawnkit.Namespace({b!r}, env_prefix={b.upper()!r})\n"
            ),
            f"{lib}.api": f"import spawnkit\nfrom {lib}.ns import B\nspawnkit.bootstrap_here(B)\n",
        },
    )
    for ns, mark in ((a, "A"), (b, "B")):
        plug = f"plug{mark.lower()}{tag}"
        write_distribution(
            site,
            plug,
            entry_points={f"{ns}.plugins": {f"p{mark.lower()}": f"{plug}:register"}},
            modules={plug: _PLUGIN.format(ns=ns, target=f"{target_mod}.f", mark=mark)},
        )
    entry = f"enga{tag}.entry"
    code = _SHARED_ENTRY.format(target_mod=target_mod, lib=lib, b=b)
    write_distribution(site, f"enga{tag}", modules={entry: code})
    script = tmp_path / "launch.py"
    script.write_text(_LAUNCH.format(a=a, entry=f"{entry}:main"))
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=_env(site),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    assert results == [("oA", "oAB"), ("oA", "oAB")], results
