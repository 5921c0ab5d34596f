"""spawnkit's pytest plugin, registered through the ``pytest11`` entry point.

Fixtures are added here by the testing component (issue 6).
"""

from __future__ import annotations
