"""``PlatformSelection``: the platform decision, the one result every worker's resolution needs.

Apart from ``explanation`` (which re-exports it) so a worker never defines those types.
"""

from __future__ import annotations

from spawnkit._compat import TYPE_CHECKING
from spawnkit.spec._record import as_dict, field, record

if TYPE_CHECKING:
    from typing import Any

__all__ = ["PlatformSelection"]


@record(frozen=True)
class PlatformSelection:
    """The decision without an instance; ``kind``: plugin, builtin or base; ``path``: the rows."""

    name: str
    kind: str
    qualname: str
    dist: str | None = None
    version: str | None = None
    path: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return as_dict(self)  # type: ignore[no-any-return]
