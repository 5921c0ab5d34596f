"""A signed spec file for launchers that are not ``spawn_with_plugins`` (torchrun, your scheduler).

Same decisions as ``spawn_with_plugins``, frozen once into the spec; see README for usage.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spawnkit.launch.launcher import build_spec
from spawnkit.spec import ProcessSpec

if TYPE_CHECKING:
    from spawnkit.namespace import Namespace
    from spawnkit.spec import NamespaceConfig

__all__ = ["build_spec", "write_launch_spec"]


def write_launch_spec(
    path: str | os.PathLike[str],
    entry: str | Callable[..., Any],
    payload: Any = None,
    *,
    key: str | bytes | None = None,
    nprocs: int = 1,
    namespace: Namespace | NamespaceConfig | str | None = None,
    env: Mapping[str, str] | None = None,
    run_id: str | None = None,
) -> ProcessSpec:
    """Sign :func:`build_spec` with ``key`` (default ``$SPAWNKIT_SPEC_KEY``) into ``path``.

    Written atomically, mode 0600; every rank needs the key.  Returns the template.
    """
    from spawnkit.spec.signing import write_spec_file

    template = build_spec(
        entry, payload, nprocs=nprocs, namespace=namespace, env=env, run_id=run_id
    )
    write_spec_file(template, Path(path), key)
    return template
