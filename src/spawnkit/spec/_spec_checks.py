"""The field checks of a ``ProcessSpec``, run once, where it is built (``check_spec``).

Apart from :mod:`spawnkit.spec.process_spec` because a worker only unpickles its spec, which
skips them: it never imports this (issue #23).  ``spec`` is typed ``Any`` here: naming
``ProcessSpec`` would tie this module back to the one that imports it.
"""

from __future__ import annotations

from itertools import chain

from spawnkit._compat import TYPE_CHECKING
from spawnkit.spec._control import CONTEXTS, NO_CONTROL, LaunchControl
from spawnkit.spec._namespace_config import GUARD_POLICIES, NamespaceConfig
from spawnkit.spec.payload import Payload

if TYPE_CHECKING:
    from typing import Any, NoReturn

__all__ = ["check"]


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


def _set(spec: Any, field: str, value: Any) -> None:
    object.__setattr__(spec, field, value)  # frozen: normalising is part of construction


def _int(spec: Any, field: str, minimum: int) -> int:
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


def _optional_str(spec: Any, field: str, expected: str) -> None:
    value = getattr(spec, field)
    if value is None:
        return
    if type(value) is not str:
        _type_error(field, expected, value)
    if not value:
        _value_error(field, expected, value)


def _str_dict(spec: Any, field: str, values_too: bool) -> None:
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


def _plugins(spec: Any) -> None:
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


def _entry_points(spec: Any) -> None:
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


def _control(spec: Any) -> None:
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


def check(spec: Any) -> None:
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
