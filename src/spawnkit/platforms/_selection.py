"""``PlatformSelection``: the platform decision, the one result every worker's resolution needs.

Apart from :mod:`spawnkit.platforms.explanation` (which re-exports it) so that
a worker that resolves its platform successfully does not import or define
the explanation types: those are built only for ``explain_platform()``,
``spawnkit doctor`` and errors.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["PlatformSelection"]


@dataclass(frozen=True)
class PlatformSelection:
    """The decision, without an instance: what the launcher puts into ``ProcessSpec.platform``.

    ``kind`` is ``"plugin"``, ``"builtin"`` or ``"base"``; ``qualname`` the
    class (``module:qualname`` or dotted, as the plugin returned it); ``dist``
    and ``version`` the winning plugin's distribution (None for in-tree ones);
    ``path`` the rows of the decision table that led here.
    """

    name: str
    kind: str
    qualname: str
    dist: str | None = None
    version: str | None = None
    path: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
