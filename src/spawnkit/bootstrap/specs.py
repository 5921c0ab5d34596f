"""The spec template every rank starts from, built the way ``spawn_with_plugins`` builds it.

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
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spawnkit.spec import Payload, ProcessSpec

if TYPE_CHECKING:
    from spawnkit.namespace import Namespace
    from spawnkit.spec import NamespaceConfig

__all__ = ["build_spec", "write_launch_spec"]


def build_spec(
    entry: str | Callable[..., Any],
    payload: Any = None,
    *,
    nprocs: int = 1,
    namespace: Namespace | NamespaceConfig | str | None = None,
    env: Mapping[str, str] | None = None,
    run_id: str | None = None,
) -> ProcessSpec:
    """The rank-0 spec template for a group of ``nprocs`` ranks running ``entry(payload)``.

    ``env`` is what the ranks get on top of their launcher's environment; the
    namespace's selection variables in it (``<PREFIX>_PLATFORM``,
    ``<PREFIX>_PLUGINS``) win over this process's own, because the ranks will
    see them.  The run id (fresh unless given) tags every rank's process so
    :func:`spawnkit.cleanup` can find leftovers.  Raises the platform and
    plugin selection errors of the namespace, here and not in the ranks.
    """
    from spawnkit.bootstrap._parent_death import RUN_ID_VAR
    from spawnkit.bootstrap.launcher import _entry_reference, _parent_selection
    from spawnkit.namespace import get_namespace

    if not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be a positive int, got {nprocs!r}")
    ns = get_namespace(namespace)
    entry_str, entry_payload = _entry_reference(entry)
    captured: Payload | None
    if payload is None or isinstance(payload, Payload):
        captured = payload
    else:
        captured = Payload.capture(payload)
    child_env = {str(k): str(v) for k, v in (env or {}).items()}
    platform, plugins, entry_points = _parent_selection(ns, child_env)
    run_id = run_id or uuid.uuid4().hex[:16]
    child_env[RUN_ID_VAR] = run_id
    return ProcessSpec(
        entry=entry_str,
        world_size=nprocs,
        namespace=ns.config,
        platform=platform,
        plugins=plugins,
        entry_points=entry_points,
        env=child_env,
        payload=captured,
        entry_payload=entry_payload,
        run_id=run_id,
    )


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
