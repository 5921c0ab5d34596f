"""ProcessSpec and Payload: what crosses the spawn boundary, and what unpickling it may import."""

from __future__ import annotations

import json
import pickle
import pickletools
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spawnkit.errors import (
    BootstrapError,
    BootstrapOrderError,
    SpawnkitError,
    SpecError,
    SpecTypeError,
    SpecValueError,
)
from spawnkit.spec import NamespaceConfig, Payload, ProcessSpec, _phase
from spawnkit.spec._control import LaunchControl

_Ctl = LaunchControl  # short, for the table of wrong fields

# spawnkit._plain: the spec types' record base (@record), standard library only itself;
# spawnkit._templates/_prebuilt: the code their __init__ is made from (standard library only);
# spawnkit._compat: TYPE_CHECKING and typing's stand-ins, so that unpickling imports no typing
ALLOWED_SPAWNKIT = (
    "spawnkit",
    "spawnkit._compat",
    "spawnkit._plain",
    "spawnkit._templates",
    "spawnkit._prebuilt",
    "spawnkit.errors",
    "spawnkit.spec",
)


def _allowed(module: str) -> bool:
    if module == "__mp_main__":
        return True  # multiprocessing aliases the running __main__ under this name; no import
    top = module.split(".", 1)[0]
    if top in sys.stdlib_module_names:
        return True
    return module in ALLOWED_SPAWNKIT or module.startswith("spawnkit.spec.")


def _full_spec() -> ProcessSpec:
    return ProcessSpec(
        entry="engine.worker:run",
        rank=1,
        local_rank=1,
        world_size=4,
        namespace=NamespaceConfig.build("t_spec", "T_SPEC"),
        platform="cpu",
        plugins=("a", "b"),
        lenient_plugins=True,
        env={"OMP_NUM_THREADS": "1"},
        payload=Payload.capture({"server_args": [1, 2.5, "x", (None, True)]}),
        run_id="run-1",
        guard_policy="warn",
        extra={"note": b"bytes"},
        _control=LaunchControl(
            parent_pid=4242, pdeathsig=True, context="multiprocess", local_world_size=2
        ),
    )


def _globals_of(data: bytes) -> set[str]:
    """Every module a pickle asks ``find_class`` for (GLOBAL and STACK_GLOBAL opcodes)."""
    modules: set[str] = set()
    strings: list[str] = []
    for opcode, arg, _ in pickletools.genops(data):
        if opcode.name in ("GLOBAL", "INST"):
            modules.add(str(arg).split(" ", 1)[0])
        elif opcode.name == "STACK_GLOBAL":
            modules.add(strings[-2])
        elif opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"):
            strings.append(str(arg))
        elif opcode.name in ("BINGET", "LONG_BINGET", "GET"):
            pass  # memo fetches of strings already seen are covered by the list above
    return modules


# ---------------------------------------------------------------- ProcessSpec
def test_spec_is_frozen_and_replace_makes_per_rank_copies() -> None:
    spec = _full_spec()
    with pytest.raises(AttributeError):
        spec.rank = 2  # type: ignore[misc]
    other = spec.replace(rank=3, local_rank=3)
    assert (other.rank, other.local_rank, spec.rank) == (3, 3, 1)
    assert other.payload is spec.payload


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"entry": "no_colon"}, "module:qualname"),
        ({"entry": ""}, "entry_payload"),
        ({"entry": "m:f", "rank": 2, "world_size": 2}, r"range\(world_size=2\)"),
        ({"entry": "m:f", "local_rank": -1}, "local_rank"),
    ],
)
def test_spec_rejects_invalid_fields(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        ProcessSpec(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "field", "needles"),
    [
        ({"plugins": "ab"}, SpecTypeError, "plugins", ["tuple of plugin names", "'ab'", "('ab',)"]),
        ({"plugins": ("a", 1)}, SpecTypeError, "plugins", ["item 1"]),
        ({"env": {"X": 1}}, SpecTypeError, "env['X']", ["a str", "int 1", "pass '1'"]),
        ({"env": {1: "x"}}, SpecTypeError, "env", ["str keys", "key 1"]),
        ({"env": [("X", "1")]}, SpecTypeError, "env", ["a dict", "list"]),
        ({"entry": 123}, SpecTypeError, "entry", ["'module:qualname' str", "int 123"]),
        ({"rank": "zero"}, SpecTypeError, "rank", ["an int", "str 'zero'"]),
        ({"rank": True}, SpecTypeError, "rank", ["an int", "bool True"]),
        ({"rank": -1}, SpecValueError, "rank", [">= 0", "-1"]),
        ({"world_size": 0}, SpecValueError, "world_size", [">= 1", "got 0"]),
        ({"world_size": 2.0}, SpecTypeError, "world_size", ["an int", "float 2.0"]),
        ({"local_rank": None}, SpecTypeError, "local_rank", ["an int", "None"]),
        ({"namespace": "minieng"}, SpecTypeError, "namespace", ["NamespaceConfig", "'minieng'"]),
        ({"platform": 7}, SpecTypeError, "platform", ["platform name", "int 7"]),
        ({"platform": ""}, SpecValueError, "platform", ["non-empty"]),
        ({"lenient_plugins": "no"}, SpecTypeError, "lenient_plugins", ["a bool", "'no'"]),
        ({"entry_points": (("a", "b", "c"),)}, SpecTypeError, "entry_points", ["row ('a'"]),
        ({"entry_points": "x"}, SpecTypeError, "entry_points", ["str tuples"]),
        ({"payload": {"a": 1}}, SpecTypeError, "payload", ["Payload", "Payload.capture"]),
        ({"entry_payload": b"x"}, SpecTypeError, "entry_payload", ["Payload"]),
        ({"report_conn": 3}, SpecTypeError, "report_conn", ["Connection", "int 3"]),
        ({"death_conn": "pipe"}, SpecTypeError, "death_conn", ["Connection"]),
        ({"run_id": 5}, SpecTypeError, "run_id", ["a str", "int 5"]),
        ({"guard_policy": "warm"}, SpecValueError, "guard_policy", ["'warn'", "'warm'"]),
        ({"guard_policy": 1}, SpecTypeError, "guard_policy", ["one of"]),
        ({"extra": {2: "x"}}, SpecTypeError, "extra", ["str keys"]),
        ({"_control": {"context": "x"}}, SpecTypeError, "_control", ["LaunchControl", "dict"]),
        ({"_control": _Ctl(fault_conn=3)}, SpecTypeError, "_control.fault_conn", ["int 3"]),
        ({"_control": _Ctl(parent_pid=True)}, SpecTypeError, "_control.parent_pid", ["pid"]),
        ({"_control": _Ctl(pdeathsig=1)}, SpecTypeError, "_control.pdeathsig", ["a bool"]),
        ({"_control": _Ctl(context="dill")}, SpecValueError, "_control.context", ["'dill'"]),
        ({"_control": _Ctl(local_world_size=0)}, SpecTypeError, "_control.local_world_size", ["1"]),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_spec_names_the_wrong_field_its_type_and_value(
    kwargs: dict[str, object], error: type[SpecError], field: str, needles: list[str]
) -> None:
    with pytest.raises(error) as info:
        ProcessSpec(**{"entry": "m:f", **kwargs})  # type: ignore[arg-type]
    err = info.value
    assert isinstance(err, SpawnkitError)
    assert isinstance(err, TypeError if error is SpecTypeError else ValueError)
    assert err.field == field
    text = str(err)
    assert text.startswith(f"ProcessSpec.{field} must be {err.expected}, got ")
    for needle in needles:
        assert needle in text, text
    again = pickle.loads(pickle.dumps(err))  # it crosses process boundaries like every error
    assert (type(again), str(again), again.field) == (error, text, field)


def test_replace_checks_the_changed_fields_too() -> None:
    spec = _full_spec()
    with pytest.raises(SpecTypeError, match=r"ProcessSpec\.plugins"):
        spec.replace(plugins="a")
    with pytest.raises(SpecValueError, match=r"ProcessSpec\.rank"):
        spec.replace(rank=4)


def test_unambiguous_spellings_are_normalised() -> None:
    class Index:
        def __index__(self) -> int:
            return 2

    spec = ProcessSpec(entry="m:f", rank=Index(), world_size=3, plugins=["a"])  # type: ignore[arg-type]
    assert (type(spec.rank), spec.rank, spec.plugins) == (int, 2, ("a",))
    rows = [["n", "m:f", "g", "d", "1"]]
    with pytest.raises(SpecTypeError):  # rows must be tuples: they are compared and hashed
        ProcessSpec(entry="m:f", entry_points=rows)  # type: ignore[arg-type]


def test_unpickling_a_spec_runs_no_field_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers only unpickle: the checks belong to the parent that built the spec."""
    from spawnkit.spec import process_spec

    data = pickle.dumps(_full_spec())
    calls: list[object] = []
    monkeypatch.setattr(process_spec, "check_spec", calls.append)
    assert pickle.loads(data) == _full_spec()
    assert len(calls) == 1  # only the _full_spec() built for the comparison


@pytest.mark.parametrize("protocol", [2, pickle.DEFAULT_PROTOCOL, pickle.HIGHEST_PROTOCOL])
def test_pickled_spec_references_only_stdlib_and_spawnkit_spec(protocol: int) -> None:
    data = pickle.dumps(_full_spec(), protocol=protocol)
    modules = _globals_of(data)
    assert "spawnkit.spec.process_spec" in modules  # the check does see our globals
    bad = sorted(m for m in modules if not _allowed(m))
    assert not bad, f"spec pickle references non-stdlib modules: {bad}"
    assert pickle.loads(data) == _full_spec()


def test_unpickling_spec_in_fresh_interpreter_imports_only_stdlib_and_spec(tmp_path: Path) -> None:
    blob = tmp_path / "spec.pkl"
    blob.write_bytes(pickle.dumps(_full_spec()))
    code = textwrap.dedent(
        f"""
        import json, pickle, sys
        before = set(sys.modules)
        with open({str(blob)!r}, "rb") as f:
            spec = pickle.load(f)
        assert spec.rank == 1 and spec.payload.size > 0
        print(json.dumps(sorted(set(sys.modules) - before)))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    new = json.loads(out.stdout)
    assert "spawnkit.spec.process_spec" in new
    bad = [m for m in new if not _allowed(m)]
    assert not bad, f"unpickling a spec imported {bad}"
    assert "torch" not in new and not any(m.startswith("spawnkit.hooks") for m in new)


# -------------------------------------------------------------------- Payload
class _Config:
    def __init__(self, value: int) -> None:
        self.value = value


def test_payload_roundtrip_by_reference() -> None:
    payload = Payload.capture(_Config(7))
    assert not payload.by_value
    assert payload.type_name.endswith("_Config")
    obj = payload.materialize(_Config)
    assert isinstance(obj, _Config) and obj.value == 7
    assert pickle.loads(pickle.dumps(payload)) == payload


def test_payload_expected_type_error_names_both_types() -> None:
    payload = Payload.capture(_Config(1))
    with pytest.raises(TypeError) as info:
        payload.materialize(dict)
    text = str(info.value)
    assert "_Config" in text and "but a dict was expected" in text  # builtins by bare name


def test_truncated_payload_is_a_payload_error() -> None:
    good = Payload.capture(list(range(100)))
    truncated = Payload(data=good.data[:-7], type_name=good.type_name, digest=good.digest)
    with pytest.raises(BootstrapError, match="corrupt or truncated") as info:
        truncated.materialize()
    assert info.value.stage == "materialize_payload"


def test_corrupt_payload_with_matching_digest_is_a_payload_error() -> None:
    data = b"\x80\x05not a pickle at all"
    bad = Payload.from_pickled(data, "x.Y")  # checksum matches: the bytes are simply bad
    with pytest.raises(BootstrapError, match="could not be unpickled") as info:
        bad.materialize()
    assert info.value.__cause__ is not None


def test_payload_refusing_before_hooks_applied_in_a_worker() -> None:
    payload = Payload.capture({"a": 1})
    _phase.enter_worker()
    try:
        with pytest.raises(BootstrapOrderError, match="before the bootstrap applied hooks"):
            payload.materialize()
        _phase.mark_hooks_applied()
        assert payload.materialize() == {"a": 1}
    finally:
        _phase.leave_worker()


def _make_closure(k: int):  # type: ignore[no-untyped-def]
    def add(x: int) -> int:
        return x + k

    return add


def _main_function() -> object:
    """A function that claims to live in ``__main__``, as a launching script's functions do."""
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec("def triple(x):\n    return 3 * x\n", namespace)
    return namespace["triple"]


@pytest.mark.parametrize(
    ("make", "arg", "expected"),
    [
        (lambda: lambda x: x * 2, 21, 42),
        (lambda: _make_closure(5), 1, 6),
        (_main_function, 5, 15),
    ],
    ids=["lambda", "closure", "main-function"],
)
def test_lambdas_closures_and_main_objects_go_by_value(
    tmp_path: Path, make: object, arg: int, expected: int
) -> None:
    fn = make()  # type: ignore[operator]
    payload = Payload.capture(fn)
    assert payload.by_value
    # A fresh interpreter, which has neither this test module's closure nor its __main__.
    blob = tmp_path / "payload.pkl"
    blob.write_bytes(pickle.dumps(payload))
    code = (
        f"import pickle; p = pickle.load(open({str(blob)!r}, 'rb')); print(p.materialize()({arg}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == str(expected)


def test_unpicklable_payload_is_a_payload_error() -> None:
    import threading

    with pytest.raises(BootstrapError, match="cannot capture"):
        Payload.capture(threading.Lock())


class _Slotted:
    __slots__ = ("sink",)

    def __init__(self, sink: object) -> None:
        self.sink = sink


def test_an_open_file_is_refused_not_copied_and_its_place_is_named(tmp_path: Path) -> None:
    """cloudpickle, the fallback for lambdas and closures, read an open text file into an
    ``io.StringIO``: the worker wrote to a copy in memory, the file never saw it, unsaid."""
    with open(tmp_path / "log.txt", "w+") as log:

        def closure() -> object:
            return log

        cases = [
            ({"sinks": [1, _Slotted(log)]}, "payload['sinks'][1].sink is an open file"),
            (closure, "payload's closure variable 'log' is an open file"),
            ([lambda: 1, log], "payload[1] is an open file"),  # a by-value cause beside it
        ]
        for obj, says in cases:
            with pytest.raises(BootstrapError, match="cannot capture") as info:
                Payload.capture(obj)
            assert says in str(info.value) and info.value.kind == "payload", str(info.value)


def test_a_logger_and_a_lambda_still_go_by_value() -> None:
    import logging

    payload = Payload.capture({"log": logging.getLogger("spawnkit.test.x"), "f": lambda: 7})
    assert payload.by_value
    got = pickle.loads(payload.data)
    assert got["f"]() == 7 and got["log"] is logging.getLogger("spawnkit.test.x")
