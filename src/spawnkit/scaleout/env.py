"""Which environment variables a scaled-out worker gets, and which it must never inherit.

A worker started by Ray or torchrun gets its environment from two places:
the launcher (which knows the worker's devices and rank) and the spec (which
carries what the parent decided).  If the spec carried the *parent's* device
visibility or rank variables, every worker would claim the same GPU or the
same rank ("Duplicate GPU detected"), so those names are never copied from a
spec, whoever put them there; the launcher sets them per worker instead.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, MutableMapping

__all__ = [
    "DEVICE_VISIBILITY_VARS",
    "NEVER_COPY_ENV",
    "NEVER_COPY_PREFIXES",
    "RANK_VARS",
    "apply_env",
    "is_never_copied",
    "split_env",
]

_log = logging.getLogger("spawnkit.scaleout")

#: Variables that pick the devices a process may see; the launcher assigns them per worker.
DEVICE_VISIBILITY_VARS = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL",
        "ZE_AFFINITY_MASK",
        "ONEAPI_DEVICE_SELECTOR",
        "ASCEND_RT_VISIBLE_DEVICES",
        "NEURON_RT_VISIBLE_CORES",
        "TPU_VISIBLE_CHIPS",
        "HABANA_VISIBLE_MODULES",
    }
)

#: Variables that say which rank a process is; set from the spec's rank, never copied.
RANK_VARS = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
        "NODE_RANK",
    }
)

#: Every name that ``split_env`` drops.
NEVER_COPY_ENV = DEVICE_VISIBILITY_VARS | RANK_VARS

#: Prefixes of per-process launcher state: torchelastic's error file and restart
#: count, and Ray's reserved runtime-env variables (copying those into a nested
#: ``ray.init`` is the "reserved for the internal use" failure).
NEVER_COPY_PREFIXES = ("TORCHELASTIC_", "__RAY_", "RAY_RAYLET_", "RAY_JOB_ID")


def is_never_copied(name: str) -> bool:
    """Whether ``name`` is on the documented never-copy list (exact names or prefixes)."""
    return name in NEVER_COPY_ENV or name.startswith(NEVER_COPY_PREFIXES)


def split_env(
    *sources: Mapping[str, str] | None, context: str = "worker"
) -> tuple[dict[str, str], list[str]]:
    """Merge ``sources`` (later wins) and drop never-copied names.

    Returns the environment to give the worker and the names dropped; the
    dropped names are logged at WARNING so that a spec asking for them is not
    ignored silently.
    """
    merged: dict[str, str] = {}
    for src in sources:
        if src:
            for key, value in src.items():
                if not isinstance(key, str) or not isinstance(value, str):
                    raise TypeError(
                        f"{context} environment must map str to str; got {key!r}={value!r}"
                    )
                merged[key] = value
    dropped = sorted(k for k in merged if is_never_copied(k))
    for key in dropped:
        del merged[key]
    if dropped:
        _log.warning(
            "%s environment: not copying %s (device visibility and rank variables are set per "
            "worker by the launcher; see spawnkit.scaleout.env.NEVER_COPY_ENV)",
            context,
            ", ".join(dropped),
        )
    return merged, dropped


def apply_env(env: Mapping[str, str], target: MutableMapping[str, str] | None = None) -> None:
    """Write ``env`` into ``target`` (``os.environ`` by default), after the never-copy filter."""
    kept, _ = split_env(env)
    dest = os.environ if target is None else target
    dest.update(kept)
