"""A logger that imports ``logging`` (milliseconds of a cold worker) only when a record could be
emitted: until something imports ``logging`` nothing can have configured a handler or level."""

from __future__ import annotations

import sys

from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

__all__ = ["DEBUG", "INFO", "LazyLogger"]

DEBUG = 10
INFO = 20
_WARNING = 30  # the default effective level of an unconfigured logger


class LazyLogger:
    """``logging.getLogger(name)``, created on first real use."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def _get(self) -> Any:
        if self._logger is None:
            import logging

            self._logger = logging.getLogger(self._name)
        return self._logger

    def isEnabledFor(self, level: int) -> bool:
        logger = self._logger
        if logger is None:
            if "logging" not in sys.modules:
                return level >= _WARNING
            logger = self._get()
        return bool(logger.isEnabledFor(level))

    def debug(self, msg: str, *args: Any, **kwargs: Any) -> None:
        if self.isEnabledFor(DEBUG):
            self._get().debug(msg, *args, **kwargs)

    def info(self, msg: str, *args: Any, **kwargs: Any) -> None:
        if self.isEnabledFor(INFO):
            self._get().info(msg, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get(), name)
