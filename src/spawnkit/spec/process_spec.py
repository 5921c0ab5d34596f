"""``ProcessSpec``: everything a worker needs, in standard-library types only, checked once.

Unpickling a spec imports nothing of the engine. A wrong type would fail late in the worker
(``plugins="ab"`` reads as two plugins), so every field is checked at construction; unpickling
skips ``__post_init__``, and plain ``type(...) is`` tests keep one spec per rank cheap.
"""

from __future__ import annotations

import copyreg
from multiprocessing.connection import Connection

from spawnkit._compat import TYPE_CHECKING
from spawnkit.spec._control import NO_CONTROL, LaunchControl
from spawnkit.spec._namespace_config import NamespaceConfig
from spawnkit.spec._record import field as _field
from spawnkit.spec._record import reading, record, replace, set_state
from spawnkit.spec.payload import Payload

if TYPE_CHECKING:
    from typing import Any

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


def check_spec(spec: ProcessSpec) -> None:
    """Check every field, as a spec is built (``__post_init__``): a wrong type would fail late
    in the worker.  The checks live in ``_spec_checks``: a worker only unpickles, never runs them.
    """
    from spawnkit.spec._spec_checks import check

    check(spec)
