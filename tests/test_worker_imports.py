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


#: Not in a cold worker beyond what a raw spawn worker of the same launcher has (issue #23):
#: ``typing`` (1.5 ms; annotation-only names under ``TYPE_CHECKING``, the few a class
#: statement needs from ``spawnkit._compat``, ``HookOptions``/``HookState`` on first use).
#: A launching *script* is another matter: a spawn child re-runs it through ``runpy``, whose
#: ``pkgutil`` imports ``typing`` in any child, spawnkit's or not; hence a ``-c`` launcher.
#: ``spawnkit.protocol.failure`` (47 kB of bytecode): making a failure record from an exception
#: and the parent's error from a record; the records themselves are in ``protocol/_failed.py``.
#: ``spawnkit.platforms._contract``: the platform interface's check, for classes spawnkit does not
#: ship (its own are checked by a test, not by every worker defining them).
#: ``spawnkit.spec._capture``: capturing a payload (plain pickle or cloudpickle, the refusals),
#: which only a launching process does.
#: ``spawnkit.bootstrap._payload_hooks``: the payload's unrun constructor hooks and copied
#: instances, checked only where a constructor is hooked or an instance was carried.
#: ``spawnkit.spec._spec_checks``: a spec's field checks, run where it is built (a worker only
#: unpickles it). ``spawnkit.bootstrap._guard_findings``: what the import guard says of a
#: target imported too early (where, what holds it, the message); a worker whose targets came
#: in time has none.
#: ``spawnkit.protocol.popen`` (32 kB): the launcher's half of the protocol; a worker unpickles
#: its ``Process`` class from ``protocol/_process_classes.py``, whose ``_Popen`` asks ``popen``
#: only when a process is started.  ``spawnkit.hooks._propagate`` (50 kB): the stale-binding
#: sweep, run only where a target's original has another reference (``other_references``); its
#: types and kinds are in ``hooks/_stale.py``.  ``spawnkit.platforms._checks`` (26 kB): the
#: checks of a platform candidate that is activated or imported; a worker whose launcher pinned
#: its platform decides through ``platforms/_candidates.py`` alone.
COLD_AVOIDED = (
    "typing", "spawnkit.protocol.failure", "spawnkit.platforms._contract", "spawnkit.spec._capture",
    "spawnkit.bootstrap._guard_findings", "spawnkit.spec._spec_checks",
    "spawnkit.bootstrap._payload_hooks", "spawnkit.protocol.popen", "spawnkit.hooks._propagate",
    "spawnkit.platforms._checks",
)  # fmt: skip

_CENSUS_ENTRY = """
import sys

def raw(conn):
    conn.send(sorted(sys.modules))
    conn.close()

def run():
    from wi_target import f
    return [f(), sorted(sys.modules)]
"""

_CENSUS_LAUNCH = """
import json, multiprocessing as mp
import wc_entry

ctx = mp.get_context("spawn")
r, w = ctx.Pipe(duplex=False)
p = ctx.Process(target=wc_entry.raw, args=(w,))
p.start()
w.close()
try:
    assert r.poll(60), "the raw spawn worker sent nothing within 60 s"
    raw = r.recv()
finally:
    p.join(60)
    if p.is_alive():
        p.kill()
        p.join(5)

from spawnkit import spawn_with_plugins
from spawnkit.namespace import Namespace

Namespace("wi_ns", "WI_NS")
with spawn_with_plugins("wc_entry:run", namespace="wi_ns") as group:
    patched, cold = group.results(timeout=60)[0]
print(json.dumps([patched, sorted(set(cold) - set(raw))]))
"""


def cold_extra(tmp_path: Path) -> list[str]:
    """The modules a cold worker has at its entry that a raw spawn worker does not: the census
    of ``spawnkit bench --only spawn_latency``, for one worker with one plugin's hook."""
    write_distribution(
        tmp_path,
        "wi-plugin",
        "1.0",
        entry_points={"wi_ns.plugins": {"wi": "wi_plugin:register"}},
        modules={
            "wi_plugin": _PLUGIN,
            "wi_target": "def f():\n    return 1\n",
            "wc_entry": _CENSUS_ENTRY,
        },
    )
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", _CENSUS_LAUNCH],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    patched, extra = json.loads(proc.stdout.strip().splitlines()[-1])
    assert patched == 2  # the plugin's hook ran
    return [m for m in extra if m not in at_startup(env)]


def test_a_cold_worker_imports_no_typing_nor_failure_only_modules(tmp_path: Path) -> None:
    extra = cold_extra(tmp_path)
    assert any(m.startswith("spawnkit.hooks") for m in extra), extra  # it read the census
    found = [m for m in COLD_AVOIDED if m in extra]
    assert found == [], f"a cold worker imported {found}"


_STARTS_UNPICKLED_CLASS = """
import json
from spawnkit.errors import ConfigError
from spawnkit.protocol import _process_classes

proc = _process_classes._StdSpawnProcess(target=print)
try:
    proc.start()
except ConfigError as exc:
    print(json.dumps([exc.setting, str(exc)]))
"""


def test_a_process_class_started_without_the_launchers_popen_says_so() -> None:
    """What a worker unpickles its ``Process`` from does not import the launcher's Popen; a
    process that starts such a class without ``spawnkit.protocol.popen`` is told, and starts
    nothing."""
    proc = subprocess.run(
        [sys.executable, "-c", _STARTS_UNPICKLED_CLASS],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    setting, message = json.loads(proc.stdout.strip().splitlines()[-1])
    assert setting == "start_method"
    assert "_StdSpawnProcess" in message and "spawnkit.protocol.popen" in message
    assert "spawn_with_plugins()" in message


def test_the_launchers_spawn_context_still_starts_its_process_class(tmp_path: Path) -> None:
    """The class a worker unpickles is the one ``spawn_context()`` starts: its Popen comes
    from ``popen`` once that is imported, and the child runs behind the guard."""
    (tmp_path / "sc_entry.py").write_text(
        "import sys\ndef send(conn):\n"
        "    conn.send(['spawnkit.bootstrap.guard' in sys.modules,"
        " 'spawnkit.protocol.popen' in sys.modules])\n    conn.close()\n"
    )
    code = textwrap.dedent(
        """\
        import json
        from spawnkit.protocol.popen import spawn_context
        import sc_entry

        ctx = spawn_context()
        r, w = ctx.Pipe(duplex=False)
        p = ctx.Process(target=sc_entry.send, args=(w,))
        p.start()
        w.close()
        try:
            assert r.poll(60), "the child sent nothing within 60 s"
            print(json.dumps([type(p).__module__, r.recv()]))
        finally:
            p.join(60)
            if p.is_alive():
                p.kill()
                p.join(5)
        """
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env=env, check=True,
    )  # fmt: skip
    module, (guarded, popen_loaded) = json.loads(proc.stdout.strip().splitlines()[-1])
    assert module == "spawnkit.protocol._process_classes"
    assert guarded and not popen_loaded  # armed by the command line, class read without popen
