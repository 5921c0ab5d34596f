"""A hook on a constructor never runs for the payload the worker is handed: it is said.

The launcher builds the engine's arguments before any plugin loads; the worker unpickles them,
which calls neither ``__init__`` nor ``__post_init__``.  A plugin hooking
``ServerArgs.__post_init__`` saw its hook applied, run for every ``ServerArgs`` the worker
built, and never for the one the engine ran with.  Real launchers, a real installed plugin,
spawned and warm workers.
"""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

from _plugin_app import LAUNCH, run_script, warned, write_app
from spawnkit.bootstrap import _payload_hooks
from spawnkit.testing import write_distribution

#: The launcher first bootstraps another namespace (``{tag}a``), whose plugin
#: (:func:`_other_namespace`) hooks a target of its own: none of NS's hooks is applied by it.
_OTHER_FIRST = """
if __name__ == "__main__" and os.environ.get("OTHER_FIRST"):
    spawnkit.bootstrap_here(spawnkit.Namespace({tag!r} + "a", env_prefix={prefix!r} + "A"))
"""

_MAIN = """
import os
""" + _OTHER_FIRST + """
if __name__ == "__main__":
    if os.environ.get("HOOK_IN_LAUNCHER"):  # the launcher loads the plugins first
        spawnkit.bootstrap_here(NS)
    from {pkg}.config import Sub
    print([launch("entry:main", m, nprocs=1, payload=[Sub(3)]) for m in ("spawn", "forkserver")])
"""

_MODULES = {
    "config": """
from dataclasses import dataclass

@dataclass
class Args:
    n: int

    def __post_init__(self):
        self.tuned = False

class Sub(Args):  # a subclass: its construction runs the hooked base's __post_init__ too
    pass
""",
    "entry": """
def main(payload):
    from {pkg}.config import Args
    return payload[0].tuned, Args(1).tuned
""",
    "other": """
def f():
    return 1
""",
    "plugin": """
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def tune(result, self):
    self.tuned = True

def register():
    get_namespace({tag!r}).hooks.register("{pkg}.config.Args.__post_init__", tune, HookType.AFTER)
""",
}


@pytest.fixture
def app(tmp_path: Path):  # type: ignore[no-untyped-def]
    return write_app(tmp_path, "ctor", LAUNCH + _MAIN, {"tuner": "plugin:register"}, _MODULES)


def _other_namespace(app, target: str) -> None:  # type: ignore[no-untyped-def]
    """Namespace ``{tag}a``'s plugin, installed beside the app's: an AFTER hook on ``target``
    (of the app's package) that marks a ``self`` it gets as built by it."""
    source = f"""
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def mark(result, *args, **kwargs):
    if args and hasattr(args[0], "tuned"):
        args[0].tuned = "by a"
    return result

def register():
    get_namespace({app.tag + "a"!r}).hooks.register("{app.pkg}.{target}", mark, HookType.AFTER)
"""
    write_distribution(
        app.script.parent / "site",
        f"{app.pkg}-other",
        entry_points={f"{app.tag}a.plugins": {"other": f"{app.pkg}_other:register"}},
        modules={f"{app.pkg}_other": source},
    )


def _last(proc) -> object:  # type: ignore[no-untyped-def]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return ast.literal_eval(proc.stdout.strip().splitlines()[-1])


def test_a_hooked_constructor_the_payload_bypassed_is_named_in_spawned_and_warm_workers(
    app,  # type: ignore[no-untyped-def]
) -> None:
    proc = run_script(app.script)
    # Before: the same results, with nothing said.
    assert _last(proc) == [[(False, True)], [(False, True)]]
    lines = warned(proc, "HookConflictWarning")
    assert len(lines) == 2, proc.stderr  # one per worker: spawned, then warm
    for line in lines:
        assert f"target '{app.pkg}.config.Args.__post_init__'" in line
        assert "plugin 'tuner'" in line and f"payload's {app.pkg}.config.Sub" in line
    assert "bootstrap_here()" in proc.stderr and "_HOOK_CONFLICTS=error" in proc.stderr


def test_refused_with_hook_conflicts_error(app) -> None:  # type: ignore[no-untyped-def]
    proc = run_script(app.script, env={f"{app.tag.upper()}_HOOK_CONFLICTS": "error"})
    assert proc.returncode != 0
    assert "HookConflictError" in proc.stderr and "resolve_entry" in proc.stderr, proc.stderr


def test_a_payload_built_after_the_launcher_applied_the_hooks_is_not_named(
    app,  # type: ignore[no-untyped-def]
) -> None:
    proc = run_script(app.script, env={"HOOK_IN_LAUNCHER": "1"})
    assert _last(proc) == [[(True, True)], [(True, True)]]  # the launcher's construction ran it
    assert not warned(proc, "HookConflictWarning"), proc.stderr


_ENTRY_MAIN = """
import functools
import os

if __name__ == "__main__":
    if os.environ.get("HOOK_IN_LAUNCHER"):
        spawnkit.bootstrap_here(NS)
    from {pkg}.config import Sub
    from {pkg}.entry import main
    args = [Sub(3)]
    entries = [functools.partial(main, args), lambda: main(args)]
    out = []
    for entry in entries:
        with spawnkit.spawn_with_plugins(entry, namespace=NS, ready_timeout=120) as group:
            out.append(group.results(timeout=120))
    print(out)
"""


@pytest.mark.parametrize("launcher_hooked", [False, True], ids=["named", "control"])
def test_the_objects_of_a_by_value_entry_are_checked_as_the_payloads_are(
    tmp_path: Path, launcher_hooked: bool
) -> None:
    """``partial(main, args)``, a lambda closing over ``args``: the same objects the payload
    would carry reach the worker inside the entry, unpickled the same way; only the payload
    was read, so the hook's bypass went unsaid, even under ``_HOOK_CONFLICTS=error``."""
    app = write_app(
        tmp_path, "ctorentry", LAUNCH + _ENTRY_MAIN, {"tuner": "plugin:register"}, _MODULES
    )
    env = {"HOOK_IN_LAUNCHER": "1"} if launcher_hooked else {}
    proc = run_script(app.script, env=env)
    tuned = launcher_hooked  # the launcher's construction ran the hook only when it had it
    assert _last(proc) == [[(tuned, True)], [(tuned, True)]]
    lines = warned(proc, "HookConflictWarning")
    if launcher_hooked:
        assert not lines, proc.stderr
        return
    assert len(lines) == 2, proc.stderr
    for line in lines:
        assert f"target '{app.pkg}.config.Args.__post_init__'" in line
        assert f"by-value entry's {app.pkg}.config.Sub" in line
    proc = run_script(app.script, env={f"{app.tag.upper()}_HOOK_CONFLICTS": "error"})
    assert proc.returncode != 0 and "HookConflictError" in proc.stderr, proc.stderr


_EXTRA_MAIN = """
import os

if __name__ == "__main__":
    if os.environ.get("HOOK_IN_LAUNCHER"):
        spawnkit.bootstrap_here(NS)
    from {pkg}.config import Sub
    args = [Sub(3)]
    extra = dict(rank_extra=lambda rank: {{"args": args}}, entry_args=("args",))
    print([launch("entry:main", "forkserver", nprocs=1, **extra)])
"""


@pytest.mark.parametrize("launcher_hooked", [False, True], ids=["named", "control"])
def test_the_objects_of_rank_extra_are_checked_in_a_warm_worker(
    tmp_path: Path, launcher_hooked: bool
) -> None:
    """``rank_extra=lambda rank: {"args": args}`` under forkserver: the rank unpickles its
    values after its server applied the hooks, so the import guard (which stops a spawned
    rank) sees nothing, and the bypassed hook went unsaid even under ``_HOOK_CONFLICTS=error``."""
    app = write_app(
        tmp_path, "ctorextra", LAUNCH + _EXTRA_MAIN, {"tuner": "plugin:register"}, _MODULES
    )
    proc = run_script(app.script, env={"HOOK_IN_LAUNCHER": "1"} if launcher_hooked else {})
    assert _last(proc) == [[(launcher_hooked, True)]]
    lines = warned(proc, "HookConflictWarning")
    if launcher_hooked:  # the launcher's construction ran the hook
        assert not lines, proc.stderr
        return
    assert len(lines) == 1, proc.stderr
    assert f"target '{app.pkg}.config.Args.__post_init__'" in lines[0]
    assert f"rank_extra['args']'s {app.pkg}.config.Sub" in lines[0], lines[0]
    proc = run_script(app.script, env={f"{app.tag.upper()}_HOOK_CONFLICTS": "error"})
    assert proc.returncode != 0 and "HookConflictError" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("target", "built"),
    [("other.f", False), ("config.Args.__post_init__", "by a")],
    ids=["unrelated-target", "same-constructor"],
)
def test_a_launcher_that_bootstrapped_another_namespace_first_is_still_named(
    app, target: str, built: object  # type: ignore[no-untyped-def]
) -> None:
    """Before: ``bootstrap_here(A)`` in the launcher made every payload it captured count as
    built by hooked constructors, for any namespace: B's workers got the payload as the
    unhooked (or A's) constructor made it, with nothing said.  A's hook on the same
    constructor is not B's: named too."""
    _other_namespace(app, target)
    proc = run_script(app.script, env={"OTHER_FIRST": "1"})
    assert _last(proc) == [[(built, True)], [(built, True)]]  # B's hook never ran for it
    lines = warned(proc, "HookConflictWarning")
    assert len(lines) == 2, proc.stderr  # one per worker: spawned, then warm
    for line in lines:
        assert f"target '{app.pkg}.config.Args.__post_init__'" in line
        assert "plugin 'tuner'" in line and f"payload's {app.pkg}.config.Sub" in line


def test_a_launcher_that_bootstrapped_another_namespace_and_then_this_one_is_not_named(
    app,  # type: ignore[no-untyped-def]
) -> None:
    """The control: B's hooks applied in the launcher before it built the payload ran there,
    whatever else it bootstrapped first."""
    _other_namespace(app, "other.f")
    proc = run_script(app.script, env={"OTHER_FIRST": "1", "HOOK_IN_LAUNCHER": "1"})
    assert _last(proc) == [[(True, True)], [(True, True)]]
    assert not warned(proc, "HookConflictWarning"), proc.stderr


class _Held:
    pass


class _Nested:
    class Inner:
        pass


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_the_pickle_reader_finds_every_class_at_every_protocol(protocol: int) -> None:
    obj = {"a": [_Held(), _Held()], "b": (_Nested.Inner(),), "c": 3}
    found = _payload_hooks._references(pickle.dumps(obj, protocol=protocol))
    assert (__name__, "_Held") in found
    inner = "_Nested.Inner" if protocol >= 4 else None  # older protocols cannot name it
    if inner is not None:
        assert (__name__, inner) in found


class _Revalidated:
    """Rebuilt through its constructor (to re-validate in the worker): a hook on it runs."""

    def __init__(self, device: str = "cuda") -> None:
        self.device = device

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (_Revalidated, (self.device,))


class _Options(dict):  # type: ignore[type-arg]
    pass


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_class_the_pickle_calls_or_only_holds_is_not_read_as_built(protocol: int) -> None:
    """Before: every class the pickle named counted, so a ``__reduce__`` returning
    ``(cls, args)``, whose unpickling calls the hooked constructor, was warned about (an
    error under ``-W error`` or ``_HOOK_CONFLICTS=error``) though the hook ran."""
    obj = [_Revalidated(), _Held, _Options(a=1), _Held()]
    found = _payload_hooks._references(pickle.dumps(obj, protocol=protocol))
    assert (__name__, "_Revalidated") not in found
    assert (__name__, "_Options") in found and (__name__, "_Held") in found  # built, not called
    only_held = _payload_hooks._references(pickle.dumps([_Held], protocol=protocol))
    assert (__name__, "_Held") not in only_held


_REPLACE_MAIN = """
import os
""" + _OTHER_FIRST + """
if __name__ == "__main__":
    if os.environ.get("HOOK_IN_LAUNCHER"):  # the launcher loads the plugins first
        spawnkit.bootstrap_here(NS)
    from {pkg}.config import Args
    print([launch("entry:main", m, nprocs=1, payload=Args(3)) for m in ("spawn", "forkserver")])
"""

_REPLACE_MODULES = {
    "config": """
from dataclasses import dataclass

@dataclass
class Args:
    n: int

    def __post_init__(self):
        self.backend = "generic"
""",
    "mine": """
from dataclasses import dataclass
from {pkg}.config import Args

@dataclass
class MyArgs(Args):
    def __post_init__(self):
        super().__post_init__()
        self.backend = "rdna3"

class Quiet(Args):  # methods only: an unpickled Args is a whole Quiet
    def describe(self):
        return self.backend
""",
    "entry": """
def main(payload):
    from {pkg}.config import Args
    return type(payload).__name__, payload.backend, Args(1).backend
""",
    "other": """
def f():
    return 1
""",
    "plugin": """
import os
from spawnkit.hooks.types import HookType
from spawnkit.namespace import get_namespace

def register():
    replacement = os.environ.get("REPLACEMENT", "MyArgs")
    get_namespace({tag!r}).hooks.register(
        "{pkg}.config.Args", "{pkg}.mine:" + replacement, HookType.REPLACE
    )
""",
}


@pytest.fixture
def replacing(tmp_path: Path):  # type: ignore[no-untyped-def]
    return write_app(
        tmp_path, "repl", LAUNCH + _REPLACE_MAIN, {"swap": "plugin:register"}, _REPLACE_MODULES
    )


def test_a_replaced_class_the_payload_is_rebuilt_as_without_its_constructor_is_named(
    replacing,  # type: ignore[no-untyped-def]
) -> None:
    """The payload arrived as a ``MyArgs`` (its type said so) whose ``__post_init__`` never
    ran: ``backend`` was the original's, in spawned and warm workers, with nothing said."""
    proc = run_script(replacing.script)
    assert _last(proc) == [[("MyArgs", "generic", "rdna3")]] * 2
    lines = warned(proc, "HookConflictWarning")
    assert len(lines) == 2, proc.stderr  # one per worker: spawned, then warm
    for line in lines:
        assert f"target '{replacing.pkg}.config.Args' (replaced by plugin 'swap'" in line
        assert f"the payload's {replacing.pkg}.config.Args was built by the original" in line
        assert "a MyArgs whose own constructor never ran" in line


def test_a_replaced_class_is_named_after_the_launcher_bootstrapped_another_namespace(
    replacing,  # type: ignore[no-untyped-def]
) -> None:
    """Before: ``bootstrap_here(A)`` first in the launcher silenced it: the payload counted as
    built by B's replacement, which was never applied there."""
    _other_namespace(replacing, "other.f")
    proc = run_script(replacing.script, env={"OTHER_FIRST": "1"})
    assert _last(proc) == [[("MyArgs", "generic", "rdna3")]] * 2
    lines = warned(proc, "HookConflictWarning")
    assert len(lines) == 2, proc.stderr
    assert all("a MyArgs whose own constructor never ran" in line for line in lines)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"REPLACEMENT": "Quiet"}, [[("Quiet", "generic", "generic")]] * 2),
        ({"HOOK_IN_LAUNCHER": "1"}, [[("MyArgs", "rdna3", "rdna3")]] * 2),
    ],
)
def test_a_replacement_without_a_constructor_or_a_payload_built_after_it_is_not_named(
    replacing, env: dict[str, str], expected: object  # type: ignore[no-untyped-def]
) -> None:
    proc = run_script(replacing.script, env=env)
    assert _last(proc) == expected
    assert not warned(proc, "HookConflictWarning"), proc.stderr
