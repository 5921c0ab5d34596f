"""Which plugins of a namespace are selected: read from metadata only, no plugin imported.

Rules are README's; an unknown or doubly provided name is a ``PluginError`` (a warning when
lenient), since a typo must not silently run with no plugins.
"""

from __future__ import annotations

import os
import warnings

from spawnkit import _metadata
from spawnkit._compat import TYPE_CHECKING
from spawnkit._namedtuple import NamedTuple
from spawnkit._warnopts import user_stacklevel
from spawnkit.errors import PluginError, PluginSelectionWarning
from spawnkit.spec._record import record

if TYPE_CHECKING:
    from typing import Protocol

    from spawnkit.hooks.registry import HookRegistry
    from spawnkit.platforms.discovery import PlatformManager
    from spawnkit.spec import NamespaceConfig
else:
    from spawnkit._compat import Protocol

__all__ = ["PluginInfo", "PluginOwner", "PluginSelectionWarning"]


class PluginOwner(Protocol):
    """What plugin loading reads of a namespace (``Namespace`` is one; it sits above the hooks)."""

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> NamespaceConfig: ...

    @property
    def hooks(self) -> HookRegistry: ...

    @property
    def platforms(self) -> PlatformManager: ...


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def norm(dist: str | None) -> str:
    return (dist or "").lower().replace("-", "_").replace(".", "_")


def parse_bool(var: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    from spawnkit.errors import ConfigError

    raise ConfigError(
        f"{var}={raw!r} is not a boolean; use 1/0, true/false, yes/no or on/off.", setting=var
    )


@record(frozen=True)
class PluginInfo:
    """One discovered entry point; ``status``: ``selected``, ``not-selected`` or ``excluded``."""

    name: str
    value: str
    dist: str
    version: str
    group: str
    status: str = "selected"
    reason: str = ""

    def describe(self) -> str:
        return f"plugin {self.name!r} = {self.value!r} from {self.dist} {self.version}"


def is_lenient(namespace: PluginOwner, lenient: bool | None) -> bool:
    """Lenient mode: the argument, else the namespace's variable, else its default."""
    if lenient is not None:
        return bool(lenient)
    var = namespace.config.lenient_var
    raw = os.environ.get(var)
    if raw is not None:
        return parse_bool(var, raw)
    return not namespace.config.strict_plugins


def _wanted(
    namespace: PluginOwner, names: tuple[str, ...] | list[str] | None
) -> tuple[set[str] | None, str]:
    """The selected names (``None`` = all) and where the selection came from."""
    if names is not None:
        return {n.strip() for n in names if n.strip()}, "the parent's selection (names=)"
    var = namespace.config.plugins_var
    raw = os.environ.get(var)
    if raw is None:
        return None, ""
    return {n.strip() for n in raw.split(",") if n.strip()}, f"{var}={raw!r}"


class _PlatformRule(NamedTuple):
    """What the platform rule makes of a plugin's distribution: left out, or kept whole."""

    #: normalised dist -> why its plugins are left out (it ships an unselected platform)
    excluded: dict[str, str]
    #: the normalised distribution of the selected platform plugin ("" for none), and that
    #: platform's name: its general plugins carry the device's kernels and stay selected
    own_dist: str = ""
    platform: str = ""


def _platform_rule(
    namespace: PluginOwner,
    candidates: tuple[_metadata.EntryPointInfo, ...],
    platform: str | None = None,
) -> _PlatformRule:
    """Which plugin distributions also ship a platform, and which of them is the selected one.

    Asks the platform manager only when a plugin's distribution also ships a platform.
    ``platform``: the caller's selection (the launcher's ``env=``) instead of this process's.
    Every platform row counts, not one distribution per name: of two declaring the same
    name, the second was never left out (the decision refuses such a name in every row).
    """
    platforms = namespace.platforms
    providing: dict[str, list[str]] = {}
    for plat in _metadata.entry_points(namespace.config.platform_group):
        providing.setdefault(norm(plat.dist), []).append(plat.name)
    if not any(norm(ep.dist) in providing for ep in candidates):
        return _PlatformRule({})
    chosen = platforms.selection() if platform is None else platforms.select(platform)
    selected = norm(chosen.dist if chosen.kind == "plugin" else None)
    excluded = {
        dist: (
            f"its distribution provides platform {', '.join(sorted(eps))}, which is not the "
            "selected platform"
        )
        for dist, eps in providing.items()
        if dist != selected
    }
    return _PlatformRule(excluded, selected, chosen.name if selected else "")


def classify(
    namespace: PluginOwner,
    names: tuple[str, ...] | list[str] | None,
    platform: str | None = None,
    origin: str = "",
) -> tuple[list[PluginInfo], list[str], str]:
    """Each plugin's status; the selected names no plugin has; where the selection came from.

    A plugin of the selected platform's own distribution stays selected whatever the
    allow-list says: it is part of that platform (its kernels; lenient mode spares it too),
    so leaving it out would run the device on the native code, unsaid.
    """
    group = namespace.config.plugin_group
    eps = _metadata.entry_points(group)
    wanted, found_origin = _wanted(namespace, names)
    origin = origin or found_origin
    rule = _platform_rule(namespace, eps, platform) if eps else _PlatformRule({})
    infos: list[PluginInfo] = []
    for ep in sorted(eps, key=lambda e: e.name):
        status, reason = "selected", ""
        if wanted is not None and ep.name not in wanted:
            if rule.own_dist and norm(ep.dist) == rule.own_dist:
                reason = (
                    f"part of platform {rule.platform!r} (distribution {ep.dist}), so "
                    f"{origin} does not leave it out; select another platform to run without it"
                )
            else:
                status, reason = "not-selected", f"not in {origin}"
        elif norm(ep.dist) in rule.excluded:
            status, reason = "excluded", rule.excluded[norm(ep.dist)]
        infos.append(PluginInfo(ep.name, ep.value, ep.dist, ep.version, group, status, reason))
    unknown = sorted(wanted - {ep.name for ep in eps}) if wanted else []
    return infos, unknown, origin


def is_blank(raw: str) -> bool:
    """An allow-list value that names no plugin: empty, spaces, or only separators.

    The parsers drop empty items, so ``','`` (``X=${A},${B}`` with both unset) selects none
    exactly as ``''`` does; judged by ``strip()`` alone it was never said.
    """
    return not any(n.strip() for n in raw.split(","))


def blank_message(
    namespace: PluginOwner,
    infos: list[PluginInfo],
    origin: str,
    platform: str | None = None,
    *,
    raw: str = "",
) -> str:
    """What a set but blank allow-list (``''``, spaces, ``','``) leaves out, or "" when it
    leaves out none.

    README's "empty: none" stands, but SGLang's own loader reads an empty value as *all*, and
    one comes easily (``SGLANG_PLUGINS=${UNSET}``, a k8s ``value: ""``): the plugins it drops
    are named, so a run without them is said.  Plugins the platform rule leaves out would stay
    out with the variable unset too, so they are not listed.  ``raw``: the value, when it may
    hold separators (they are said, as what made it blank).
    """
    eps = _metadata.entry_points(namespace.config.plugin_group)
    excluded = _platform_rule(namespace, eps, platform).excluded if eps else {}
    dropped = [i for i in infos if i.status == "not-selected" and norm(i.dist) not in excluded]
    if not dropped:
        return ""
    var = namespace.config.plugins_var
    listed = ", ".join(f"{i.name!r} ({i.dist} {i.version})" for i in dropped)
    commas = (
        f" (only separators: '{var}=${{A}},${{B}}' with both unset gives one)"
        if raw.strip()
        else ""
    )
    return (
        f"{origin} is set but blank{commas}, so {listed} will not be loaded (an empty {var} "
        f"selects no plugin here; SGLang's own loader reads it as all, and "
        f"'{var}=${{UNSET}}' or a k8s 'value: \"\"' sets it so). Unset {var} to load every "
        f"plugin, or set it to the names to load ({var}={dropped[0].name})"
    )


def refuse_unknown(
    namespace: PluginOwner, unknown: list[str], infos: list[PluginInfo], lenient: bool, origin: str
) -> None:
    """A selected name matches nothing: ``PluginError``, or one warning when lenient."""
    import difflib  # only on this path

    config = namespace.config
    installed = sorted({i.name for i in infos})
    platforms = {ep.name for ep in _metadata.entry_points(config.platform_group)}
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, installed, n=1)
        if name in platforms:  # a device, not a general plugin: another variable selects it
            parts.append(f"{name!r} (a platform plugin: select it with {config.platform_var})")
        else:
            parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    message = (
        f"{origin or config.plugins_var} selects "
        f"{', '.join(parts)}, but no installed plugin of {config.plugin_group!r} has that "
        f"name; installed: {', '.join(installed) or 'none'}."
    )
    if not lenient:
        raise PluginError(
            f"{message} Fix the name in {config.plugins_var}, or set "
            f"{config.lenient_var}=1 to run without it.",
            plugin=unknown[0],
            group=config.plugin_group,
        )
    warnings.warn(
        f"{message} Lenient mode ({config.lenient_var}): running without it.",
        PluginSelectionWarning,
        stacklevel=user_stacklevel(),
    )


def refuse_excluded(
    namespace: PluginOwner, infos: list[PluginInfo], lenient: bool, origin: str
) -> None:
    """A plugin named on purpose that its platform rule leaves out: ``PluginError`` (lenient:
    one warning).  Only an explicit selection: with none, leaving it out is the rule's job."""
    named = [i for i in infos if i.status == "excluded"] if origin else []
    if not named:
        return
    config = namespace.config
    parts = [f"{i.name!r} ({i.dist} {i.version}): {i.reason}" for i in named]
    message = (
        f"{origin} selects {', '.join(repr(i.name) for i in named)}, which will not be loaded: "
        f"{'; '.join(parts)}. Select that platform with {config.platform_var}, or leave "
        f"the plugin out of {config.plugins_var}."
    )
    if not lenient:
        raise PluginError(
            f"{message} (Or set {config.lenient_var}=1 to run without it.)",
            plugin=named[0].name,
            dist=named[0].dist,
            group=config.plugin_group,
        )
    warnings.warn(
        f"{message} Lenient mode ({config.lenient_var}): running without it.",
        PluginSelectionWarning,
        stacklevel=user_stacklevel(),
    )


def check_duplicates(namespace: PluginOwner, selected: list[PluginInfo], lenient: bool) -> None:
    by_name: dict[str, list[PluginInfo]] = {}
    for info in selected:
        by_name.setdefault(info.name, []).append(info)
    for name, infos in by_name.items():
        if len(infos) < 2:
            continue
        dists = ", ".join(f"{i.dist} {i.version} ({i.value})" for i in infos)
        message = (
            f"plugin name {name!r} in {namespace.config.plugin_group} is provided by "
            f"several distributions: {dists}. Uninstall one, or rename its entry point"
        )
        if not lenient:
            first = infos[0]
            raise PluginError(
                f"{message}; or set {namespace.config.lenient_var}=1 to load the first.",
                plugin=name, value=first.value, dist=first.dist, version=first.version,
                group=first.group,
            )  # fmt: skip
        warnings.warn(
            message + ". Lenient mode: loading the first.",
            PluginSelectionWarning,
            stacklevel=user_stacklevel(),
        )
