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
import sys
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spawnkit import _metadata, _reference
from spawnkit.bootstrap.stages import Stage
from spawnkit.errors import ConfigError, EntryResolutionError
from spawnkit.launch._checks import check_count, check_entry_module, namespace_value
from spawnkit.spec import Payload, ProcessSpec

if TYPE_CHECKING:
    from spawnkit.namespace import Namespace
    from spawnkit.spec import NamespaceConfig

__all__ = ["build_spec", "write_launch_spec"]

_MAIN_MODULES = frozenset({"__main__", "__mp_main__"})


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
    from spawnkit.namespace import get_namespace

    check_count("nprocs", nprocs)
    ns = get_namespace(namespace)
    entry_str, entry_payload = entry_reference(entry)
    if entry_str:
        check_entry_module(entry_str)
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


def entry_reference(entry: str | Callable[..., Any]) -> tuple[str, Payload | None]:
    """``"module:qualname"`` when the child can import it; otherwise the callable by value.

    The one place every launcher (``spawn_with_plugins``, ``write_launch_spec``,
    ``spawn_on_ray``) turns its ``entry`` into spec fields.  A callable travels by
    reference only when that reference resolves back to the very same object
    here: a decorated or re-bound function, or one defined in a loop, would
    otherwise make the workers import something else under its name.
    """
    if isinstance(entry, str):
        try:
            _reference.parse(entry)
        except _reference.BadReference as exc:
            raise ConfigError(
                f"entry must be 'module:function' (for example 'myengine.worker:run'), "
                f"got {entry!r}: {exc.why}",
                setting="entry",
            ) from None
        return entry, None
    if not callable(entry):
        raise EntryResolutionError(
            f"entry {entry!r} (type {type(entry).__name__}) is not callable; pass a "
            "'module:function' string (for example 'myengine.worker:run') or a callable",
            stage=Stage.RESOLVE_ENTRY.value,
        )
    owner: Any = getattr(entry, "__module__", None)
    name: Any = getattr(entry, "__qualname__", None)
    if (
        isinstance(owner, str)
        and isinstance(name, str)
        and owner not in _MAIN_MODULES
        and "<" not in name
    ):
        obj: Any = sys.modules.get(owner)
        for part in name.split("."):
            obj = getattr(obj, part, None)
        if obj is entry:
            return f"{owner}:{name}", None
    return "", Payload.capture(entry, by_value=True)


def _parent_selection(
    ns: Namespace, env: dict[str, str]
) -> tuple[str, tuple[str, ...], tuple[tuple[str, str, str, str, str], ...]]:
    """The platform, the plugins to load and their entry points, resolved once for every rank.

    Resolving here, in the parent, means a misconfiguration (two platform
    plugins activated, a platform whose hardware is missing) fails once with
    the full explanation instead of once per rank, and every rank does what
    the parent decided.  The entry-point rows travel in the spec so that
    workers need not scan distribution metadata again.
    """
    from spawnkit.bootstrap import guard
    from spawnkit.hooks.plugins import _parse_bool

    config = ns.config
    # The namespace's selection variables given in ``env=`` win over the parent's own
    # environment: the workers would see them, so the parent decides with them.
    name = env.get(config.platform_var, "").strip() or None
    names: tuple[str, ...] | None = None
    origin = ""
    if config.plugins_var in env:
        raw = env[config.plugins_var]
        names = tuple(n.strip() for n in raw.split(",") if n.strip())
        origin = f"{config.plugins_var}={raw!r} (in env=)"
    # Values every worker would refuse are refused once, here, by variable name.
    guard.resolve_policy(
        config.guard_policy,
        namespace_value(env, os.environ, config.guard_var),
        var=config.guard_var,
    )
    lenient = (
        _parse_bool(config.lenient_var, env[config.lenient_var])
        if config.lenient_var in env
        else None
    )
    selection = ns.platforms.select(name)
    plugins = ns.plugins.select(names=names, platform=name, lenient=lenient, origin=origin)
    rows = _metadata.snapshot((ns.config.platform_group, ns.config.plugin_group))
    return selection.name, plugins, rows
