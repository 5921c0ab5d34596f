"""A module-level instance in the payload arrives as a copy, which a hook on its attribute
never reaches: it is said.

``payload={"engine": ENGINE}`` with a plugin hooking ``eng.sched.ENGINE.run``: pickle takes
``ENGINE`` by value, so the worker's ``payload["engine"]`` is a new object beside the module's
hooked one, and ran ``run`` unhooked while ``status()`` said applied.  Real launchers, a real
installed plugin, spawned and warm workers.
"""

from __future__ import annotations

import ast
import sys
import types
import uuid
from pathlib import Path

import pytest

from _plugin_app import LAUNCH, run_script, warned, write_app
from spawnkit.spec import Payload

_MAIN = """
if __name__ == "__main__":
    from {pkg}.sched import ENGINE
    payload = {{"engine": ENGINE}} if sys.argv[1] == "held" else {{"n": 1}}
    print([launch("entry:main", m, nprocs=1, payload=payload) for m in ("spawn", "forkserver")])
"""

_MODULES = {
    "sched": """
class Engine:
    def run(self):
        return "run"

ENGINE = Engine()
""",
    "entry": """
def main(payload):
    got = payload.get("engine")
    return None if got is None else got.run()
""",
    "plugin": """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def louder(result, *_):
    return result + "!"

def register():
    get_namespace({tag!r}).hooks.register("{pkg}.sched.TARGET", louder, HookType.AFTER)
""",
}


def _app(tmp_path: Path, target: str):  # type: ignore[no-untyped-def]
    modules = {**_MODULES, "plugin": _MODULES["plugin"].replace("TARGET", target)}
    return write_app(tmp_path, "inst", LAUNCH + _MAIN, {"louder": "plugin:register"}, modules)


def test_a_hook_on_a_module_level_instance_the_payload_copies_is_named(tmp_path: Path) -> None:
    app = _app(tmp_path, "ENGINE.run")
    proc = run_script(app.script, "held")
    assert proc.returncode == 0, proc.stderr
    assert ast.literal_eval(proc.stdout.strip().splitlines()[-1]) == [["run"], ["run"]]
    said = warned(proc, "HookConflictWarning")
    assert len(said) == 2, proc.stderr  # each worker, spawned and warm
    assert f"target '{app.pkg}.sched.ENGINE.run' (hooked by plugin 'louder'" in said[0]
    assert f"is patched on the module-level {app.pkg}.sched.ENGINE" in said[0]
    assert "payload's object at payload['engine'] is a copy of it, made by unpickling" in said[0]
    assert f"pass its name ('{app.pkg}.sched:ENGINE')" in proc.stderr


def test_hook_conflicts_error_refuses_it(tmp_path: Path) -> None:
    app = _app(tmp_path, "ENGINE.run")
    proc = run_script(app.script, "held", env={f"{app.tag.upper()}_HOOK_CONFLICTS": "error"})
    assert proc.returncode != 0
    assert "HookConflictError" in proc.stderr and "is a copy of it" in proc.stderr


@pytest.mark.parametrize(
    ("target", "which", "ran"),
    [("Engine.run", "held", "run!"), ("ENGINE.run", "plain", None)],
    ids=["a-hook-on-the-class-reaches-the-copy", "no-instance-in-the-payload"],
)
def test_what_reaches_the_worker_stays_quiet(
    tmp_path: Path, target: str, which: str, ran: str | None
) -> None:  # the controls
    app = _app(tmp_path, target)
    proc = run_script(app.script, which, flags=("-W", "error::spawnkit.HookConflictWarning"))
    assert proc.returncode == 0, proc.stderr
    assert ast.literal_eval(proc.stdout.strip().splitlines()[-1]) == [[ran], [ran]]


def test_capture_notes_module_level_instances_and_where_they_sit() -> None:
    name = f"held_{uuid.uuid4().hex[:8]}"
    module = types.ModuleType(name)
    exec("class Engine:\n    pass\nENGINE = Engine()\nOTHER = Engine()\n", module.__dict__)
    sys.modules[name] = module
    try:
        held = Payload.capture({"cfg": [1, module.ENGINE], "mine": module.Engine()})
        plain = Payload.capture({"mine": module.Engine()})
    finally:
        del sys.modules[name]
    assert held.instances == ((f"{name}.ENGINE", "payload['cfg'][1]"),)
    assert plain.instances == ()


def test_module_level_values_that_unpickle_as_themselves_are_not_noted() -> None:
    import re

    assert Payload.capture({"flags": re.IGNORECASE, "none": None, "n": 3}).instances == ()


class _Held:
    def __init__(self, n: int) -> None:
        self.n = n


def test_the_pickle_globals_reader_finds_a_class_in_every_protocol() -> None:
    """One reader of a pickle's globals serves the launcher's capture and a worker whose
    opcode simulation gave up (``_payload_hooks``): GLOBAL and INST (protocols 0, 1), a
    memoized STACK_GLOBAL (2-5), a second object of one class read back through the memo."""
    import pickle

    from spawnkit.spec._held_instances import class_refs

    ref = (__name__, "_Held")
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        data = pickle.dumps({"a": _Held(1), "b": [_Held(2), Path("x")]}, protocol)
        found = class_refs(data)
        assert ref in found, (protocol, found)
        assert any(module.startswith("pathlib") for module, _ in found), (protocol, found)
    assert class_refs(b"not a pickle") == set()
