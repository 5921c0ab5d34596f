"""A cold worker that succeeds imports nothing it would only need to report a failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from spawnkit.testing import write_distribution

_PLUGIN = """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import Namespace

def around(original, *args, **kwargs):
    return original(*args, **kwargs) + 1

def register():
    Namespace("wi_ns", "WI_NS").hooks.register("wi_target.f", around, HookType.AROUND)
"""


def at_startup(env: dict[str, str] | None = None) -> set[str]:
    """What a bare interpreter here has loaded before any code runs: not the worker's doing.

    A site's ``.pth`` files can import anything at start-up (a GPU machine's image here loads
    ``inspect`` that way); only what a worker adds beyond that is spawnkit's.
    """
    code = "import json, sys; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env,
        check=True,
    )  # fmt: skip
    return set(json.loads(out.stdout))


#: Modules only a failure, ``explain_platform()`` or ``spawnkit doctor`` needs.
FAILURE_ONLY = ("logging", "traceback", "difflib", "spawnkit.platforms.explanation")
#: Modules a cold worker avoids altogether (issue #23): ``os.uname()`` stands for ``platform``;
#: ``@record`` (spec/_record.py) for ``dataclasses``; code objects for ``inspect`` (and with it
#: ``ast``, ``dis``, ``tokenize``), in the platform override check and the async-target test;
#: ``_ctypes`` alone for ``ctypes``, in the parent-death guardian's ``clone``; ``copy`` only
#: where a report holds a value beyond plain types, or a failed plugin load is asked again;
#: a table of opcode numbers by version for ``opcode``, in the AROUND hook's result check.
AVOIDED = (
    "platform", "dataclasses", "inspect", "ast", "dis", "tokenize", "ctypes", "copy", "opcode",
)  # fmt: skip


def test_a_successful_cold_worker_imports_neither_logging_nor_traceback(tmp_path: Path) -> None:
    write_distribution(
        tmp_path,
        "wi-plugin",
        "1.0",
        entry_points={"wi_ns.plugins": {"wi": "wi_plugin:register"}},
        modules={
            "wi_plugin": _PLUGIN,
            "wi_target": "def f():\n    return 1\n",
            "wi_entry": (
                "import sys\n"
                "from spawnkit.bootstrap import current_report\n"
                f"FAILURE_ONLY = {FAILURE_ONLY + AVOIDED!r}\n"
                "def run():\n"
                "    from wi_target import f\n"
                "    loaded = [m for m in FAILURE_ONLY if m in sys.modules]\n"
                "    return [f(), loaded, current_report().platform]\n"
            ),
        },
    )
    script = tmp_path / "launch.py"
    script.write_text(
        textwrap.dedent(
            f"""\
            import sys; sys.path.insert(0, {str(tmp_path)!r})

            if __name__ == "__main__":
                import json
                from spawnkit import spawn_with_plugins
                from spawnkit.namespace import Namespace

                Namespace("wi_ns", "WI_NS")
                with spawn_with_plugins("wi_entry:run", namespace="wi_ns") as group:
                    print(json.dumps(group.results(timeout=60)[0]))
            """
        )
    )
    # No GPU in sight, so that the parent pins the base platform on any machine.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    patched, loaded, platform = json.loads(proc.stdout.strip().splitlines()[-1])
    assert patched == 2  # the plugin's hook ran: the stages that used to log did run
    loaded = [m for m in loaded if m not in at_startup(env)]
    assert loaded == [], f"a successful cold worker imported {loaded}"
    # the report still says which platform won and how, without the explanation types
    assert platform["name"] == "base" and platform["kind"] == "base", platform
    assert "pinned by the parent" in platform["how"] and "base platform" in platform["how"]
