"""General plugins of a namespace: discover from metadata, load in order, register only, apply.

Why two stages.  Loading a plugin runs its code, which registers hooks on
targets given as strings; applying patches those targets, which imports them.
Keeping the stages apart is what lets a worker import *no* hook target until
every plugin has registered, and lets the import guard look at the complete
set of targets in between.

Why strict.  A plugin that fails in one worker but not another (a missing
optional dependency on one node) makes ranks disagree about the code they
run; by default the failure stops the bootstrap with ``PluginError`` naming
the plugin, its entry point, distribution and version.  Lenient mode logs and
continues, except for the plugins of the selected platform's own
distribution: those carry the device's kernels and are never optional.

Why ``apply_plugin_hooks()`` never runs while plugins load.  Applying then
would patch only what the plugins loaded so far registered and mark applying
done, so every later plugin's hooks would silently never apply.  A call from
inside a plugin (same thread) is deferred to the outer load/apply; a call from
another thread waits, bounded by ``LOAD_WAIT_S``, for loading to finish.

Selection rules, in order: the explicit ``names=`` (the parent's frozen
selection) or else the namespace's ``<PREFIX>_PLUGINS`` variable (unset: all,
empty: none, otherwise comma-separated names); plugins of a distribution that
provides a platform other than the selected one are skipped without being
imported.  A selected name that matches no installed plugin is a
``PluginError`` (did-you-mean and the installed names) unless lenient mode is
on, where it is one warning: a typo must not silently run with no plugins.
"""

from __future__ import annotations

import copy
import os
import sys
import time
import types
import warnings
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spawnkit import _metadata, _steps
from spawnkit._exports import load_export
from spawnkit._log import DEBUG, LazyLogger
from spawnkit._once import Once, OnceState
from spawnkit.errors import PluginError, SpawnkitError

if TYPE_CHECKING:
    from spawnkit.namespace import Namespace, apply_plugin_hooks, load_plugins

__all__ = [
    "FailedPlugin",
    "LoadedPlugin",
    "PluginInfo",
    "PluginManager",
    "PluginReport",
    "PluginSelectionWarning",
    "apply_plugin_hooks",
    "load_plugins",
]

#: ``load_plugins`` / ``apply_plugin_hooks`` take ``namespace=None``, and choosing the
#: namespace is the facade's job: they are defined there and re-exported here by name.
_FACADE = "spawnkit.namespace"

_log = LazyLogger("spawnkit.hooks")  # logging is imported only if a record is emitted

#: Called with ``(plugin name, distribution)`` right after each plugin loaded.  The warm-start
#: server sets it to check, per plugin, that the plugin left the process safe to fork; what it
#: raises fails plugin loading, with the plugin named.
after_each_plugin: Callable[[str, str], None] | None = None

#: How long apply_plugin_hooks() in one thread waits for load_plugins() running in another
#: (the launcher's default ready_timeout: a bootstrap slower than that fails anyway).
LOAD_WAIT_S = 300.0

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


class PluginSelectionWarning(UserWarning):
    """A selected plugin name matches no installed plugin, or two distributions share one."""


def _norm(dist: str | None) -> str:
    return (dist or "").lower().replace("-", "_").replace(".", "_")


@dataclass(frozen=True)
class PluginInfo:
    """One discovered entry point and whether it would load (for ``spawnkit doctor``).

    ``status`` is ``"selected"``, ``"not-selected"`` (filtered by name) or
    ``"excluded"`` (its distribution provides an unselected platform).
    """

    name: str
    value: str
    dist: str
    version: str
    group: str
    status: str = "selected"
    reason: str = ""

    def describe(self) -> str:
        return f"plugin {self.name!r} = {self.value!r} from {self.dist} {self.version}"


@dataclass(frozen=True)
class LoadedPlugin:
    """A plugin that loaded: how long it took and which modules its code imported."""

    name: str
    value: str
    dist: str
    version: str
    seconds: float
    imported: tuple[str, ...] = ()
    registrations: int = 0


@dataclass(frozen=True)
class FailedPlugin:
    """A plugin that failed in lenient mode; kept so the report says what is missing."""

    name: str
    value: str
    dist: str
    version: str
    error: str
    traceback_text: str = ""


@dataclass
class PluginReport:
    """What :meth:`PluginManager.load` did, for the bootstrap report and the import guard."""

    loaded: list[LoadedPlugin] = field(default_factory=list)
    failed: list[FailedPlugin] = field(default_factory=list)
    skipped: list[PluginInfo] = field(default_factory=list)
    unknown_names: list[str] = field(default_factory=list)
    lenient: bool = False
    modules_before: frozenset[str] = frozenset()
    applied: list[str] = field(default_factory=list)

    @property
    def plugin_imports(self) -> dict[str, str]:
        """Module -> plugin that imported it while loading (the guard allows those)."""
        found: dict[str, str] = {}
        for plug in self.loaded:
            for mod in plug.imported:
                found.setdefault(mod, plug.name)
        return found


def _parse_bool(var: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    from spawnkit.errors import ConfigError

    raise ConfigError(
        f"{var}={raw!r} is not a boolean; use 1/0, true/false, yes/no or on/off.", setting=var
    )


def _user_stacklevel() -> int:
    """``stacklevel`` for the caller of this function's caller that points outside spawnkit.

    A warning about the user's configuration should show the user's line
    (their ``spawn_with_plugins`` or ``load_plugins`` call), not a spawnkit
    module they never wrote; inside a worker, where every frame is spawnkit's,
    it stays on the warning's own line.
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(root):
        frame = frame.f_back
        level += 1
    return level if frame is not None else 1


class PluginManager:
    """General-plugin discovery and the load/apply stages of one namespace."""

    def __init__(self, namespace: Namespace) -> None:
        self.namespace = namespace
        self.report = PluginReport()
        self._load_once: Once[list[LoadedPlugin]] = Once(
            f"{namespace.name}: load_plugins", again=self._again("load_plugins")
        )
        self._apply_once: Once[list[str]] = Once(
            f"{namespace.name}: apply_plugin_hooks", again=self._again("apply_plugin_hooks")
        )
        # strict flag of an apply_plugin_hooks() a plugin called while loading (None: none)
        self._deferred_apply: bool | None = None

    def __repr__(self) -> str:
        return f"PluginManager({self.namespace.name!r}, load={self._load_once.state.value})"

    def _again(self, stage: str) -> Any:
        def build(first: BaseException) -> BaseException:
            if isinstance(first, SpawnkitError):
                # Same type and fields (plugin, dist, ...), so callers see the first cause again.
                return copy.copy(first)
            return PluginError(
                f"{stage} already failed in this process for namespace "
                f"{self.namespace.name!r} ({type(first).__name__}: {first}); the failure is "
                "final, so this call cannot succeed either. Fix the first error.",
            )

        return build

    @property
    def loaded(self) -> bool:
        return self._load_once.state is OnceState.DONE

    @property
    def applied(self) -> bool:
        return self._apply_once.state is OnceState.DONE

    # ------------------------------------------------------------ discovery
    def _lenient(self, lenient: bool | None) -> bool:
        if lenient is not None:
            return bool(lenient)
        var = self.namespace.config.lenient_var
        raw = os.environ.get(var)
        if raw is not None:
            return _parse_bool(var, raw)
        return not self.namespace.config.strict_plugins

    def _wanted(self, names: tuple[str, ...] | list[str] | None) -> tuple[set[str] | None, str]:
        """The selected names (``None`` = all) and where the selection came from."""
        if names is not None:
            return {n.strip() for n in names if n.strip()}, "the parent's selection (names=)"
        var = self.namespace.config.plugins_var
        raw = os.environ.get(var)
        if raw is None:
            return None, ""
        return {n.strip() for n in raw.split(",") if n.strip()}, f"{var}={raw!r}"

    def _excluded_dists(
        self, candidates: tuple[_metadata.EntryPointInfo, ...], platform: str | None = None
    ) -> dict[str, str]:
        """Normalised dist -> reason, for dists providing a platform other than the selected one.

        Asks the platform manager only when some plugin's distribution also
        ships a platform, so a plain plugin set never triggers platform work.
        ``platform`` is a selection the caller decided on (the launcher's
        ``env=``), resolved instead of this process's own selection.
        """
        platforms = self.namespace.platforms
        plat_dists: dict[str, str] = dict(platforms.platform_dists())
        providing: dict[str, list[str]] = {}
        for ep_name, dist in plat_dists.items():
            providing.setdefault(_norm(dist), []).append(ep_name)
        if not any(_norm(ep.dist) in providing for ep in candidates):
            return {}
        if platform is None:
            selected = _norm(platforms.selected_dist())
        else:
            chosen = platforms.select(platform)
            selected = _norm(chosen.dist if chosen.kind == "plugin" else None)
        return {
            dist: (
                f"its distribution provides platform {', '.join(sorted(eps))}, which is not the "
                "selected platform"
            )
            for dist, eps in providing.items()
            if dist != selected
        }

    def _classify(
        self,
        names: tuple[str, ...] | list[str] | None,
        platform: str | None = None,
        origin: str = "",
    ) -> tuple[list[PluginInfo], list[str], str]:
        group = self.namespace.config.plugin_group
        eps = _metadata.entry_points(group)
        wanted, found_origin = self._wanted(names)
        origin = origin or found_origin
        excluded = self._excluded_dists(eps, platform) if eps else {}
        infos: list[PluginInfo] = []
        for ep in sorted(eps, key=lambda e: e.name):
            status, reason = "selected", ""
            if wanted is not None and ep.name not in wanted:
                status, reason = "not-selected", f"not in {origin}"
            elif _norm(ep.dist) in excluded:
                status, reason = "excluded", excluded[_norm(ep.dist)]
            infos.append(PluginInfo(ep.name, ep.value, ep.dist, ep.version, group, status, reason))
        unknown = sorted(wanted - {ep.name for ep in eps}) if wanted else []
        return infos, unknown, origin

    def discover(
        self, *, names: tuple[str, ...] | list[str] | None = None, platform: str | None = None
    ) -> list[PluginInfo]:
        """Every plugin entry point of the namespace with its selection status; imports none.

        Pure: an unknown selected name is not judged here (``spawnkit doctor``
        lists it; :meth:`select` and :meth:`load` refuse it).  ``platform``
        names the platform the exclusion rule compares with (default: this
        process's selection).
        """
        return self._classify(names, platform)[0]

    def select(
        self,
        *,
        names: tuple[str, ...] | list[str] | None = None,
        platform: str | None = None,
        lenient: bool | None = None,
        origin: str = "",
    ) -> tuple[str, ...]:
        """The plugin names a launcher freezes into its workers' specs, checked once, here.

        Refuses (``PluginError``) what would otherwise only show in every
        worker, or nowhere: a selected name that matches no installed plugin
        (the workers would silently run without it) and a name two
        distributions provide.  Lenient mode turns each into one warning.
        ``origin`` says where ``names`` came from, for the message.
        """
        infos, unknown, origin = self._classify(names, platform, origin)
        lenient = self._lenient(lenient)
        if unknown:
            self._unknown(unknown, infos, lenient, origin)
        selected = [i for i in infos if i.status == "selected"]
        self._check_duplicates(selected, lenient)
        return tuple(dict.fromkeys(i.name for i in selected))

    def _unknown(
        self, unknown: list[str], infos: list[PluginInfo], lenient: bool, origin: str
    ) -> None:
        """A selected name matches nothing: ``PluginError``, or one warning when lenient."""
        import difflib  # only on this path

        config = self.namespace.config
        installed = sorted({i.name for i in infos})
        parts = []
        for name in unknown:
            close = difflib.get_close_matches(name, installed, n=1)
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
            stacklevel=_user_stacklevel(),
        )

    # --------------------------------------------------------------- loading
    def load(
        self,
        *,
        names: tuple[str, ...] | list[str] | None = None,
        lenient: bool | None = None,
        apply_deferred: bool = True,
    ) -> list[LoadedPlugin]:
        """Import and call each selected plugin once per process; see the module docstring.

        A re-entrant call (a plugin calling ``load_plugins()``) returns ``[]``.
        When a plugin asked for ``apply_plugin_hooks()`` while loading, that
        request was deferred (applying then would patch a half-built registry);
        this call honours it once every plugin has registered, unless
        ``apply_deferred=False`` says the caller applies next itself (the
        bootstrap's own apply stage).
        """
        result = self._load_once.run(lambda: self._load(names, lenient))
        if result is None:
            return []
        deferred = self._deferred_apply
        if deferred is not None and apply_deferred:
            self.apply(strict=deferred)
        return list(result)

    def _load(
        self, names: tuple[str, ...] | list[str] | None, lenient: bool | None
    ) -> list[LoadedPlugin]:
        report = self.report = PluginReport(lenient=self._lenient(lenient))
        report.modules_before = _steps.mark_plugins_began()
        infos, unknown, origin = self._classify(names)
        report.unknown_names = unknown
        if unknown:
            self._unknown(unknown, infos, report.lenient, origin)
        selected = [i for i in infos if i.status == "selected"]
        report.skipped = [i for i in infos if i.status != "selected"]
        for info in report.skipped:
            if _log.isEnabledFor(DEBUG):
                _log.debug("skipping %s: %s", info.describe(), info.reason)
        self._check_duplicates(selected, report.lenient)
        platform_dist = _norm(self._selected_dist_quiet()) if selected else ""
        seen: set[str] = set()
        for info in selected:
            if info.name in seen:
                continue  # duplicate name, already warned about; first on sys.path wins
            seen.add(info.name)
            strict = not report.lenient or (
                bool(platform_dist) and _norm(info.dist) == platform_dist
            )
            self._load_one(info, strict, report)
        return list(report.loaded)

    def _selected_dist_quiet(self) -> str | None:
        try:
            dist: str | None = self.namespace.platforms.selected_dist()
        except Exception:
            # A platform failure is reported by the platform stage, not here; without a
            # selected platform no dist gets the "always strict" treatment.
            return None
        return dist

    def _check_duplicates(self, selected: list[PluginInfo], lenient: bool) -> None:
        by_name: dict[str, list[PluginInfo]] = {}
        for info in selected:
            by_name.setdefault(info.name, []).append(info)
        for name, infos in by_name.items():
            if len(infos) < 2:
                continue
            dists = ", ".join(f"{i.dist} {i.version} ({i.value})" for i in infos)
            message = (
                f"plugin name {name!r} in {self.namespace.config.plugin_group} is provided by "
                f"several distributions: {dists}. Uninstall one, or rename its entry point."
            )
            if not lenient:
                first = infos[0]
                raise PluginError(
                    message,
                    plugin=name,
                    value=first.value,
                    dist=first.dist,
                    version=first.version,
                    group=first.group,
                )
            warnings.warn(
                message + " Lenient mode: loading the first.",
                PluginSelectionWarning,
                stacklevel=_user_stacklevel(),
            )

    def _refuse_misrouted(self, default: Any, source: Any, before: int) -> None:
        """Hooks a plugin of this namespace put on the *default* registry would never run.

        A worker applies only its own namespace's registry, so a plugin written
        against the class-level ``HookRegistry.register`` / ``plugin_hook`` but
        loaded for an engine's namespace would load "successfully" and do
        nothing.  That is refused like any other plugin failure.
        """
        stray = [r for r in default.registrations() if r.source == source][before:]
        if not stray:
            return
        default.discard_source(source)
        ns = self.namespace.name
        targets = ", ".join(sorted({r.target for r in stray}))
        raise RuntimeError(
            f"it registered {len(stray)} hook(s) (on {targets}) on spawnkit's default registry "
            f"(spawnkit.hooks.HookRegistry / plugin_hook), but it was loaded for namespace "
            f"{ns!r}, whose workers apply only that namespace's registry, so those hooks would "
            f"never run. Register through spawnkit.get_namespace({ns!r}).hooks (or the "
            "engine's own registry) instead; an engine whose module re-exports "
            "spawnkit.hooks.HookRegistry / plugin_hook for its plugins should export its "
            "namespace's instead: HookRegistry = NS.HookRegistry, plugin_hook = NS.plugin_hook"
        )

    def _load_one(self, info: PluginInfo, strict: bool, report: PluginReport) -> None:
        from spawnkit.hooks.types import HookSource, plugin_source

        source = HookSource(info.name, info.dist, info.version)
        ep = _metadata.EntryPointInfo(info.name, info.value, info.group, info.dist, info.version)
        registry = self.namespace.hooks
        default = type(registry).default()
        before_regs = len(registry.registrations())
        before_default = _count_from(default, source) if default is not registry else 0
        # sys.modules keeps insertion order and imports only append, so the modules this
        # plugin imported are the tail: no per-plugin set of every loaded module (a
        # thousand of them once torch is preloaded in a warm worker).
        before_mods = len(sys.modules)
        start = time.perf_counter()
        step = "import"
        try:
            with plugin_source(source), _steps.step(_steps.plugin_step(info.name)):
                obj = _metadata.load_entry_point(ep)
                if isinstance(obj, types.ModuleType):
                    pass  # names a module: importing it (its @plugin_hook decorators) is the plugin
                elif callable(obj):
                    step = "call"
                    obj()
                else:
                    step = "call"
                    raise TypeError(
                        f"entry point resolves to a {type(obj).__name__}, not a callable; point "
                        "it at the plugin's register function ('module:register')"
                    )
                if default is not registry:
                    self._refuse_misrouted(default, source, before_default)
        except Exception as exc:
            registry.discard_source(source)
            what = "failed to import" if step == "import" else "raised in its callback"
            message = (
                f"{info.describe()} {what}: {type(exc).__name__}: {exc}. Its hook "
                f"registrations were discarded. Fix or upgrade {info.dist}, or deselect it "
                f"with {self.namespace.config.plugins_var}"
            )
            if strict:
                if report.lenient:
                    message += (
                        " (it belongs to the selected platform's distribution, so lenient mode "
                        "does not apply)"
                    )
                raise PluginError(
                    message + ".",
                    plugin=info.name,
                    value=info.value,
                    dist=info.dist,
                    version=info.version,
                    group=info.group,
                ) from exc
            import traceback  # only on this failure path

            # ERROR, not WARNING: the run goes on without this plugin's hooks, and alerting
            # keyed on ERROR must see that; the traceback says where it failed.
            _log.error("lenient plugin loading: %s; continuing without it.", message, exc_info=True)
            report.failed.append(
                FailedPlugin(
                    info.name,
                    info.value,
                    info.dist,
                    info.version,
                    f"{type(exc).__name__}: {exc}",
                    "".join(traceback.format_exception(exc)),
                )
            )
            return
        seconds = time.perf_counter() - start
        imported = tuple(list(sys.modules)[before_mods:])
        loaded = LoadedPlugin(
            info.name,
            info.value,
            info.dist,
            info.version,
            seconds,
            imported,
            len(registry.registrations()) - before_regs,
        )
        report.loaded.append(loaded)
        if _log.isEnabledFor(DEBUG):
            _log.debug("loaded %s in %.2f ms", info.describe(), seconds * 1e3)
        if after_each_plugin is not None:
            after_each_plugin(info.name, info.dist)

    # -------------------------------------------------------------- applying
    def apply(self, *, strict: bool = True, clean_modules: Collection[str] = ()) -> list[str]:
        """Patch every registered target once per process (loading plugins first if needed).

        After this, payloads and lazy proxies may be resolved in a worker.
        ``clean_modules`` is passed to ``HookRegistry.apply_hooks``.
        """
        if self._load_once.running_here():
            # Called from inside a plugin while plugins load: later plugins have not
            # registered yet, so applying now would patch a half-built registry and mark
            # applying done.  The outer load_plugins()/apply_plugin_hooks() applies all.
            self._deferred_apply = strict or bool(self._deferred_apply)
            _log.debug("apply_plugin_hooks() called while plugins load: deferred until loaded")
            return []
        self._wait_for_loading()
        result = self._apply_once.run(lambda: self._apply(strict, clean_modules))
        return list(result) if result is not None else []

    def _wait_for_loading(self) -> None:
        """Block (bounded) while another thread loads plugins, then make sure they are loaded.

        Outside the apply gate on purpose: a plugin callback of the loading
        thread that calls ``apply_plugin_hooks()`` must find that gate free.
        """
        if not self._load_once.wait(LOAD_WAIT_S):
            raise PluginError(
                f"apply_plugin_hooks() for namespace {self.namespace.name!r} waited "
                f"{LOAD_WAIT_S:g} s for load_plugins(), still running in another thread, and "
                "gave up without applying anything. A plugin callback is hung or waits for "
                "this thread; fix that plugin, or apply hooks after loading returns."
            )
        if self._load_once.state is not OnceState.DONE:
            # Not started: load now.  Failed: raise that failure again instead of applying
            # the hooks of the plugins that happened to load before it (half a plugin set).
            self.load(apply_deferred=False)

    def _apply(self, strict: bool, clean_modules: Collection[str] = ()) -> list[str]:
        from spawnkit.spec import _phase

        self._deferred_apply = None  # this call applies everything registered
        patched: list[str] = list(
            self.namespace.hooks.apply_hooks(strict=strict, clean_modules=clean_modules)
        )
        self.report.applied = patched
        _phase.mark_hooks_applied()
        return patched

    def reset_for_tests(self) -> None:
        """Forget loading and applying (the registry is reset separately)."""
        self._load_once.reset()
        self._apply_once.reset()
        self._deferred_apply = None
        self.report = PluginReport()


def _count_from(registry: Any, source: Any) -> int:
    return sum(1 for r in registry.registrations() if r.source == source)


def __getattr__(name: str) -> Any:
    if name in ("load_plugins", "apply_plugin_hooks"):
        return load_export(globals(), dict.fromkeys((name,), _FACADE), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
