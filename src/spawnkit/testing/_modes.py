"""The (start method, multiprocessing package) combinations a process test runs under."""

from __future__ import annotations

import importlib.util
import multiprocessing
from dataclasses import dataclass
from typing import Any

__all__ = ["LAUNCH_MODES", "LaunchMode"]


@dataclass(frozen=True)
class LaunchMode:
    """One way of starting workers: ``start_method`` within the ``context`` package."""

    start_method: str
    context: str = "multiprocessing"

    @property
    def id(self) -> str:
        """The test id part, e.g. ``forkserver-multiprocessing``."""
        return f"{self.start_method}-{self.context}"

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``spawn_with_plugins`` (and ``run_entry``) selecting this mode."""
        return {"start_method": self.start_method, "context": self.context}

    def unavailable_reason(self) -> str | None:
        """Why this mode cannot run here (package missing, start method unsupported), or None."""
        if self.context not in ("multiprocessing", "multiprocess"):
            return f"unknown multiprocessing package {self.context!r}"
        if self.context == "multiprocess" and importlib.util.find_spec("multiprocess") is None:
            return "the 'multiprocess' package is not installed (pip install multiprocess)"
        if self.start_method not in multiprocessing.get_all_start_methods():
            return f"start method {self.start_method!r} is not supported on this platform"
        return None

    def get_context(self) -> Any:
        """The plain context of that package, for tests that start processes themselves."""
        if self.context == "multiprocess":
            import multiprocess

            return multiprocess.get_context(self.start_method)
        return multiprocessing.get_context(self.start_method)

    def __str__(self) -> str:
        return self.id


LAUNCH_MODES: tuple[LaunchMode, ...] = (
    LaunchMode("spawn", "multiprocessing"),
    LaunchMode("forkserver", "multiprocessing"),
    LaunchMode("spawn", "multiprocess"),
)
