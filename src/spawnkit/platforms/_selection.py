"""``PlatformSelection``: the platform decision, the one result every worker's resolution needs.

Apart from ``explanation`` (which re-exports it) so a worker never defines those types.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["PlatformSelection"]


@dataclass(frozen=True)
class PlatformSelection:
    """The decision without an instance; ``kind``: plugin, builtin or base; ``path``: the rows."""

    name: str
    kind: str
    qualname: str
    dist: str | None = None
    version: str | None = None
    path: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
