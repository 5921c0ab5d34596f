"""The CLI's own error: bad input, reported as one line with the fix and exit status 2."""

from __future__ import annotations

__all__ = ["EXIT_FAILURE", "EXIT_OK", "EXIT_USAGE", "UsageError"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """The command line asks for something that cannot work; nothing was started (never pickled)."""

    def __init__(self, problem: str, fix: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix

    def line(self, command: str) -> str:
        prefix = f"spawnkit {command}: error: " if command else "spawnkit: error: "
        text = self.problem.rstrip(".")
        if self.fix:
            text = f"{text}. Fix: {self.fix.rstrip('.')}."
        else:
            text += "."
        return prefix + " ".join(text.split())
