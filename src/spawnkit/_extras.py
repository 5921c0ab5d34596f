"""The optional parts of spawnkit (``spawnkit[torch]``) and the one error for a missing one."""

from __future__ import annotations

import importlib.util
import sys
from typing import NoReturn

from spawnkit.errors import MissingExtraError

__all__ = [
    "TORCH_EXTRA",
    "require_torch",
    "reraise_torch_import",
    "torch_installed",
    "torch_missing",
]

TORCH_EXTRA = "torch"


def torch_installed() -> bool:
    """Whether ``import torch`` can find torch here (nothing is imported)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def torch_missing(feature: str) -> MissingExtraError:
    """The error for ``feature`` (a dotted name or a command) run where torch is not installed."""
    return MissingExtraError(
        f"{feature} needs torch, which is not installed for {sys.executable}: install the "
        f'extra with pip install "spawnkit[{TORCH_EXTRA}]" (pin torch first, e.g. '
        "pip install torch==2.13.0, or pip pulls a CUDA build of several GB)",
        extra=TORCH_EXTRA,
        module="torch",
        feature=feature,
    )


def require_torch(feature: str) -> None:
    """Refuse ``feature`` up front (in the parent, before any worker starts) without torch."""
    if not torch_installed():
        raise torch_missing(feature)


def reraise_torch_import(exc: ImportError, feature: str) -> NoReturn:
    """Raise for ``exc`` from ``import torch``; a broken (not absent) torch keeps its own error."""
    if isinstance(exc, ModuleNotFoundError) and exc.name == "torch":
        raise torch_missing(feature) from exc
    raise exc
