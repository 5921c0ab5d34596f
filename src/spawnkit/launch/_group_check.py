"""Entry points declared in a group one slip from this namespace's: a plugin never loaded.

``[project.entry-points."eng.plugin"]`` (the S missing), ``"eng-plugins"`` or
``"eng.platform"``: the distribution installs, ``importlib.metadata`` lists it, and no
namespace reads that group, so the plugin or the device it adds is never loaded, with nothing
said.  Once per launch, in the parent, every installed group that no namespace this process
can name reads is compared with this namespace's two groups; one a slip away (the same after
case and ``-``/``_``/``.`` are evened out, or one character changed, added, dropped or swapped
in one dotted part), or one an author plausibly meant for it (vLLM's ``<ns>.general_plugins``
and ``<ns>.platform_plugins``; ``eng.plugins`` / ``eng.platforms``, the engine's top package's,
for namespace ``eng.srt``), is a ``PluginSelectionWarning`` naming the distributions, their
entry points and the group to declare them in.  So is a distribution with two metadata
folders in one directory that declares plugins in one of them (``_metadata.installed_twice``).
The answer is kept while what is installed and the
namespaces declared here are unchanged: a warm launch's path is the launcher's own work.
"""

from __future__ import annotations

import warnings

from spawnkit import _metadata
from spawnkit._names import one_edit
from spawnkit.hooks.plugins import PluginSelectionWarning
from spawnkit.launch._env_check import _others, _user_line
from spawnkit.namespace import Namespace

__all__ = ["check_groups", "find_group_problems"]

_kept: dict[tuple[object, ...], list[str]] = {}  # (installed, namespaces, ours) -> messages


def find_group_problems(ns: Namespace) -> list[str]:
    """One message per installed group a slip from one of ``ns``'s groups that nobody reads."""
    config = ns.config
    key = (
        _metadata.path_fingerprint(),
        frozenset(Namespace._registry),
        config.plugin_group,
        config.platform_group,
    )
    found = _kept.get(key)
    if found is None:
        found = _kept[key] = _find(ns)
    return list(found)


def _find(ns: Namespace) -> list[str]:
    config = ns.config
    ours = {config.plugin_group: "general plugins", config.platform_group: "platform plugins"}
    read = set(ours)
    for other in _others(ns):
        read.update((other.config.plugin_group, other.config.platform_group))
    found = _metadata.installed_twice(ours)  # one name's two folders in a directory: one read
    plausible = _plausible(ns.name, config.plugin_group, config.platform_group)
    for group in sorted(_metadata.groups() - read):
        for want, role in ours.items():
            if not _slip(group, want) and plausible.get(_even(group)) != want:
                continue
            eps = _metadata.entry_points(group)
            who = ", ".join(sorted({f"{ep.dist} {ep.version}" for ep in eps}))
            names = ", ".join(repr(ep.name) for ep in eps)
            found.append(
                f"distribution {who} declares entry point(s) {names} in group {group!r}, which "
                f"no namespace reads: namespace {ns.name!r} loads its {role} from {want!r}, so "
                f"they are never loaded. Fix the group name where the distribution declares it "
                f'([project.entry-points."{want}"] in its pyproject.toml) and reinstall it'
            )
    return found


def _plausible(name: str, plugins: str, platforms: str) -> dict[str, str]:
    """Groups an author plausibly writes for namespace ``name`` that no slip reaches (evened),
    with the group meant: vLLM's ``<ns>.general_plugins`` / ``<ns>.platform_plugins``, and the
    engine's top package's (``eng.plugins`` for ``eng.srt``)."""
    meant = {f"{name}.general_plugins": plugins, f"{name}.platform_plugins": platforms}
    parts = name.split(".")
    for end in range(1, len(parts)):
        prefix = ".".join(parts[:end])
        meant.update({f"{prefix}.plugins": plugins, f"{prefix}.platforms": platforms})
    return {_even(group): want for group, want in meant.items()}


def _slip(group: str, want: str) -> bool:
    if abs(len(group) - len(want)) > 1:  # evening keeps lengths; one slip moves one by 1
        return False
    a, b = _even(group), _even(want)
    if a == b:
        return True
    pa, pb = a.split("."), b.split(".")
    if len(pa) != len(pb):
        return False
    differ = [(x, y) for x, y in zip(pa, pb, strict=True) if x != y]
    return len(differ) == 1 and one_edit(*differ[0])


def _even(group: str) -> str:
    return group.lower().replace("-", ".").replace("_", ".")


def check_groups(ns: Namespace) -> list[str]:
    """Warn once about each group found (``PluginSelectionWarning``, at the user's line)."""
    found = find_group_problems(ns)
    filename, lineno, module = _user_line()
    for message in found:
        warnings.warn_explicit(message, PluginSelectionWarning, filename, lineno, module)
    return found
