"""The ``spawnkit`` command: ``doctor``, ``launch``, ``bench`` and ``demo``.

``spawnkit.cli:main`` is the console script.  Importing this package is
cheap; each subcommand imports what it needs when it runs, so ``spawnkit
--help`` and bad-input errors never pay for torch or a plugin.
"""

from __future__ import annotations

from spawnkit.cli._app import main

__all__ = ["main"]
