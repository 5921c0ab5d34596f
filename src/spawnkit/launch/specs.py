"""A signed spec file for launchers that are not ``spawn_with_plugins`` (torchrun, your scheduler).

One builder for every launcher, so a group started by ``spawn_with_plugins``,
by ``torchrun -m spawnkit.run --spec FILE`` or by a scheduler of your own gets
the same decisions: the entry by reference (or by value when it is not
importable), the payload captured once, and the platform, the allowed
plugins and their entry-point rows resolved once in this process and frozen
into the spec.  A misconfiguration (two platform plugins activated, a
platform whose hardware is missing) therefore fails here, before any rank
exists, with the full explanation.

Usage (torchrun)::

    from spawnkit import write_launch_spec
    from spawnkit.spec.signing import generate_key

    key = generate_key()
    write_launch_spec("/private/dir/spec.bin", "myengine.worker:run", args, key=key)
    # SPAWNKIT_SPEC_KEY=<key> torchrun --nproc-per-node 4 \\
    #     -m spawnkit.run --spec /private/dir/spec.bin
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
    """:func:`build_spec`, signed with ``key`` (default: ``$SPAWNKIT_SPEC_KEY``) into ``path``.

    The file is written atomically and readable by this user only; every
    rank of ``python -m spawnkit.run --spec PATH`` needs the same key in its
    environment.  Returns the template written, for its ``run_id`` and the
    selection it froze.
    """
    from spawnkit.spec.signing import write_spec_file

    template = build_spec(
        entry, payload, nprocs=nprocs, namespace=namespace, env=env, run_id=run_id
    )
    write_spec_file(template, Path(path), key)
    return template
