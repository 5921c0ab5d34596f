"""Running spawnkit's bootstrap under launchers it does not own: Ray and torchrun.

This package holds the launcher-neutral parts (environment policy, the
torchelastic error file); :mod:`spawnkit.ray` and :mod:`spawnkit.run` are the
entry points.  Nothing here imports ray or torch.
"""

from __future__ import annotations

from spawnkit.scaleout.env import (
    DEVICE_VISIBILITY_VARS,
    NEVER_COPY_ENV,
    NEVER_COPY_PREFIXES,
    RANK_VARS,
    apply_env,
    is_never_copied,
    split_env,
)
from spawnkit.scaleout.errorfile import ERROR_FILE_VAR, error_file_payload, write_error_file

__all__ = [
    "DEVICE_VISIBILITY_VARS",
    "ERROR_FILE_VAR",
    "NEVER_COPY_ENV",
    "NEVER_COPY_PREFIXES",
    "RANK_VARS",
    "apply_env",
    "error_file_payload",
    "is_never_copied",
    "split_env",
    "write_error_file",
]
