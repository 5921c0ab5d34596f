"""``ProcessSpec``: everything a worker needs, in standard-library types only, checked once.

Unpickling a spec imports nothing of the engine. A wrong type would fail late in the worker
(``plugins="ab"`` reads as two plugins), so every field is checked at construction; unpickling
skips ``__post_init__``, and plain ``type(...) is`` tests keep one spec per rank cheap.
"""

from __future__ import annotations

import copyreg
from itertools import chain
from multiprocessing.connection import Connection

from spawnkit._compat import TYPE_CHECKING
from spawnkit.spec._control import CONTEXTS, NO_CONTROL, LaunchControl
from spawnkit.spec._namespace_config import GUARD_POLICIES, NamespaceConfig
from spawnkit.spec._record import field as _field
from spawnkit.spec._record import reading, record, replace, set_state
from spawnkit.spec.payload import Payload

if TYPE_CHECKING:
    from typing import Any, NoReturn

__all__ = ["ProcessSpec", "check_spec"]


@record(frozen=True, slots=True)
class ProcessSpec:
    """One worker's instructions, decided by the parent.

    ``platform``/``plugins``/``entry_points``: the parent's resolved selection and discovery
    rows (``None``: resolve in the child). ``entry`` is ``""`` when ``entry_payload`` carries
    the callable by value. ``extra`` is the engine's; spawnkit's own travels in ``_control``.
    """

    entry: str
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    namespace: NamespaceConfig | None = None
    platform: str | None = None
    plugins: tuple[str, ...] | None = None
    lenient_plugins: bool = False
    entry_points: tuple[tuple[str, str, str, str, str], ...] | None = None
    env: dict[str, str] = _field(default_factory=dict)
    payload: Payload | None = None
    entry_payload: Payload | None = None
    report_conn: Connection | None = _field(default=None, repr=False, compare=False)
    death_conn: Connection | None = _field(default=None, repr=False, compare=False)
    run_id: str = ""
    guard_policy: str | None = None
    extra: dict[str, Any] = _field(default_factory=dict)
    _control: LaunchControl = NO_CONTROL

    def __post_init__(self) -> None:
        check_spec(self)

    def replace(self, **changes: Any) -> ProcessSpec:
        """A copy with some fields changed (one spec per rank from a template)."""
        return replace(self, **changes)

    def __new__(cls, *args: Any, **kwargs: Any) -> ProcessSpec:
        if args and type(args[0]) is tuple and args[0][:1] == _BUILT_BY:
            reading(args[0][1:])  # unpickling (__reduce__): the spawnkit that pickled it
        return object.__new__(cls)

    def __reduce__(self) -> tuple[Any, ...]:
        # This spawnkit's version and folder go first, read before any record inside the
        # spec: a worker whose spawnkit lays a record out otherwise says which two differ.
        # As arguments of __new__, which an older spawnkit's ProcessSpec ignores.
        from spawnkit.spec._layout import this_spawnkit

        marker = (*_BUILT_BY, *this_spawnkit())
        state = [getattr(self, name) for name in _FIELDS]
        return copyreg.__newobj__, (type(self), marker), state  # type: ignore[attr-defined]

    def __setstate__(self, state: list[Any]) -> None:
        set_state(self, state)
        reading(None)


_BUILT_BY = ("spawnkit-built-by",)
_FIELDS: tuple[str, ...] = ProcessSpec._fields  # type: ignore[attr-defined]


_ROW_FIELDS = 5  # (name, value, group, dist, version)
# Fast paths compare the set of item types (built by C-level map) before any Python loop.
_STR = {str}
_TUPLE = {tuple}
_ROW_LEN = {_ROW_FIELDS}


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _type_error(field: str, expected: str, value: Any, fix: str = "") -> NoReturn:
    from spawnkit.errors import SpecTypeError

    got = f"{type(value).__name__} {_show(value)}"
    raise SpecTypeError(
        f"ProcessSpec.{field} must be {expected}, got {got}" + (f" ({fix})" if fix else ""),
        field=field,
        expected=expected,
        value=_show(value),
    )


def _value_error(field: str, expected: str, value: Any, fix: str = "") -> NoReturn:
    from spawnkit.errors import SpecValueError

    raise SpecValueError(
        f"ProcessSpec.{field} must be {expected}, got {_show(value)}"
        + (f" ({fix})" if fix else ""),
        field=field,
        expected=expected,
        value=_show(value),
    )


def _set(spec: ProcessSpec, field: str, value: Any) -> None:
    object.__setattr__(spec, field, value)  # frozen: normalising is part of construction


def _int(spec: ProcessSpec, field: str, minimum: int) -> int:
    value = getattr(spec, field)
    if type(value) is not int:
        # bool is an int to Python, but rank=True is a bug; numpy integers are welcome.
        if isinstance(value, bool) or not hasattr(type(value), "__index__"):
            _type_error(field, "an int", value)
        value = type(value).__index__(value)
        _set(spec, field, value)
    if value < minimum:
        _value_error(field, f"an int >= {minimum}", value)
    return int(value)


def _optional_str(spec: ProcessSpec, field: str, expected: str) -> None:
    value = getattr(spec, field)
    if value is None:
        return
    if type(value) is not str:
        _type_error(field, expected, value)
    if not value:
        _value_error(field, expected, value)


def _str_dict(spec: ProcessSpec, field: str, values_too: bool) -> None:
    value = getattr(spec, field)
    if type(value) is not dict:
        if not isinstance(value, dict):
            _type_error(field, "a dict with str keys", value)
        value = dict(value)
        _set(spec, field, value)
    if set(map(type, value)) <= _STR and (not values_too or set(map(type, value.values())) <= _STR):
        return
    for key, item in value.items():
        if type(key) is not str:
            _type_error(field, "a dict with str keys", value, f"key {_show(key)} is not a str")
        if values_too and type(item) is not str:
            _type_error(
                f"{field}[{key!r}]",
                "a str (environment values are strings)",
                item,
                f"pass {str(item)!r}",
            )


def _plugins(spec: ProcessSpec) -> None:
    value = spec.plugins
    if value is None:
        return
    expected = "a tuple of plugin names or None"
    if type(value) is not tuple:
        if isinstance(value, str):
            _type_error("plugins", expected, value, f"a str is read letter by letter: ({value!r},)")
        if not isinstance(value, list | tuple):
            _type_error("plugins", expected, value)
        value = tuple(value)
        _set(spec, "plugins", value)
    if set(map(type, value)) <= _STR and "" not in value:
        return
    for name in value:
        if type(name) is not str or not name:
            _type_error("plugins", expected, value, f"item {_show(name)} is not a plugin name")


# The last rows that passed: immutable, and shared by every rank's copy of a template, so
# ``replace()`` per rank skips re-checking them (held strongly, so the id cannot be reused).
_last_rows: tuple[Any, ...] | None = None


def _entry_points(spec: ProcessSpec) -> None:
    global _last_rows
    rows = spec.entry_points
    if rows is None or rows is _last_rows:
        return
    expected = "a tuple of (name, value, group, dist, version) str tuples or None"
    if type(rows) is not tuple:
        if not isinstance(rows, list | tuple):
            _type_error("entry_points", expected, rows)
        rows = tuple(rows)
        _set(spec, "entry_points", rows)
    if (
        set(map(type, rows)) <= _TUPLE
        and set(map(len, rows)) <= _ROW_LEN
        and set(map(type, chain.from_iterable(rows))) <= _STR
    ):
        _last_rows = rows
        return
    for row in rows:
        if type(row) is not tuple or len(row) != _ROW_FIELDS:
            _type_error("entry_points", expected, rows, f"row {_show(row)}")
        for item in row:
            if type(item) is not str:
                _type_error("entry_points", expected, rows, f"row {_show(row)}")


def _conn(field: str, value: Any) -> None:
    # multiprocessing and multiprocess each have their own Connection class: check the behaviour.
    if value is not None and not (
        callable(getattr(value, "send", None)) and callable(getattr(value, "recv", None))
    ):
        _type_error(field, "a multiprocessing Connection or None", value)


def _control(spec: ProcessSpec) -> None:
    ctl = spec._control
    if ctl is NO_CONTROL:
        return
    if type(ctl) is not LaunchControl:
        _type_error("_control", "a LaunchControl", ctl, "set by spawnkit's launchers only")
    _conn("_control.fault_conn", ctl.fault_conn)
    _conn("_control.stdout_conn", ctl.stdout_conn)
    _conn("_control.stderr_conn", ctl.stderr_conn)
    names = ctl.entry_args
    if names is not None and (type(names) is not tuple or not all(type(n) is str for n in names)):
        _type_error("_control.entry_args", "a tuple of str or None", names)
    pid = ctl.parent_pid
    if pid is not None and (type(pid) is not int or pid <= 0):
        _type_error("_control.parent_pid", "a pid (int > 0) or None", pid)
    for name in ("pdeathsig", "sigint_restore"):
        if type(getattr(ctl, name)) is not bool:
            _type_error(f"_control.{name}", "a bool", getattr(ctl, name))
    if ctl.context not in CONTEXTS:
        _value_error("_control.context", f"one of {CONTEXTS}", ctl.context)
    size = ctl.local_world_size
    if size is not None and (type(size) is not int or size < 1):
        _type_error("_control.local_world_size", "an int >= 1 or None", size)


def check_spec(spec: ProcessSpec) -> None:
    """Raise ``SpecTypeError``/``SpecValueError`` for the first wrong field of ``spec``."""
    entry = spec.entry
    if type(entry) is not str:
        _type_error("entry", "a 'module:qualname' str", entry, "for example 'myengine.worker:run'")
    for field in ("payload", "entry_payload"):
        value = getattr(spec, field)
        if value is not None and type(value) is not Payload:
            _type_error(field, "a spawnkit Payload or None", value, "wrap it: Payload.capture(obj)")
    if not entry and spec.entry_payload is None:
        _value_error(
            "entry", "a 'module:qualname' str, or '' with an entry_payload", entry,
            "name the worker function, for example 'myengine.worker:run'",
        )  # fmt: skip
    if entry and ":" not in entry:
        _value_error("entry", "a 'module:qualname' str", entry, "for example 'myengine.worker:run'")
    world_size = _int(spec, "world_size", 1)
    rank = _int(spec, "rank", 0)
    if rank >= world_size:
        _value_error("rank", f"an int in range(world_size={world_size})", rank)
    _int(spec, "local_rank", 0)
    if spec.namespace is not None and type(spec.namespace) is not NamespaceConfig:
        _type_error(
            "namespace", "a NamespaceConfig or None", spec.namespace, "pass namespace.config"
        )
    _optional_str(spec, "platform", "a non-empty platform name or None")
    _plugins(spec)
    if type(spec.lenient_plugins) is not bool:
        _type_error("lenient_plugins", "a bool", spec.lenient_plugins)
    _entry_points(spec)
    _str_dict(spec, "env", values_too=True)
    _conn("report_conn", spec.report_conn)
    _conn("death_conn", spec.death_conn)
    if type(spec.run_id) is not str:
        _type_error("run_id", "a str", spec.run_id)
    policy = spec.guard_policy
    if policy is not None and policy not in GUARD_POLICIES:
        if type(policy) is not str:
            _type_error("guard_policy", f"one of {GUARD_POLICIES} or None", policy)
        _value_error("guard_policy", f"one of {GUARD_POLICIES} or None", policy)
    _str_dict(spec, "extra", values_too=False)
    _control(spec)
