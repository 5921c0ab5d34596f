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

Which plugins are selected (metadata only, nothing imported) is ``_plugin_selection``.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
import types
import warnings
from collections.abc import Callable, Collection

from spawnkit import _metadata, _namespace_registry, _steps
from spawnkit._compat import TYPE_CHECKING
from spawnkit._flags import check_flag
from spawnkit._log import DEBUG, LazyLogger
from spawnkit._namedtuple import NamedTuple
from spawnkit._once import Once, OnceState
from spawnkit.errors import HookApplyError, PluginError, SpawnkitError
from spawnkit.hooks import _conflicts, _queries
from spawnkit.hooks import _plugin_selection as _sel
from spawnkit.hooks._outside import OutsideWatch
from spawnkit.hooks._plugin_selection import PluginInfo, PluginOwner, PluginSelectionWarning
from spawnkit.hooks.types import HookSource, HookType, current_plugin_source
from spawnkit.spec._namespace_config import DEFAULT_NAMESPACE_NAME, default_config
from spawnkit.spec._record import field, record, replace

if TYPE_CHECKING:
    from typing import Any

    from spawnkit.hooks.registry import HookRegistry
    from spawnkit.platforms.discovery import PlatformManager
    from spawnkit.spec import NamespaceConfig

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

_parse_bool = _sel.parse_bool  # launch.specs parses the lenient variable with it

_log = LazyLogger("spawnkit.hooks")  # logging is imported only if a record is emitted

#: How long apply_plugin_hooks() in one thread waits for load_plugins() running in another
#: (the launcher's default ready_timeout: a bootstrap slower than that fails anyway).
LOAD_WAIT_S = 300.0

_LENIENT_NONE = "the namespace's <PREFIX>_LENIENT_PLUGINS, else its strict_plugins, decides"


@record(frozen=True)
class LoadedPlugin:
    """A plugin that loaded: how long it took and which modules its code imported."""

    name: str
    value: str
    dist: str
    version: str
    seconds: float
    imported: tuple[str, ...] = ()
    registrations: int = 0
    #: ``module:attr`` its callback set, replaced or deleted in modules imported before it
    #: ran, and ``sys.modules:name`` for each module it put there directly (``_outside``)
    outside_registry: tuple[str, ...] = ()
    #: ``time.monotonic()`` when loading began: with ``seconds``, its span in a start-up trace
    started: float = 0.0


@record(frozen=True)
class FailedPlugin:
    """A plugin that failed in lenient mode; kept so the report says what is missing."""

    name: str
    value: str
    dist: str
    version: str
    error: str
    traceback_text: str = ""
    outside_registry: tuple[str, ...] = ()  # see LoadedPlugin: left in place by the failure


@record
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


class _Default(NamedTuple):
    """The default namespace as plugin loading sees it: its state is owned by these layers."""

    name: str
    config: NamespaceConfig
    hooks: HookRegistry
    platforms: PlatformManager


_default_lock = threading.Lock()


class PluginManager:
    """General-plugin discovery and the load/apply stages of one namespace."""

    _default: PluginManager | None = None

    @classmethod
    def default(cls) -> PluginManager:
        """The default namespace's manager (``default_namespace().plugins`` is this one)."""
        found = cls._default
        if found is not None:  # the hot path, and no lock a fork could have left held
            return found
        from spawnkit.hooks.registry import HookRegistry
        from spawnkit.platforms.discovery import PlatformManager

        with _default_lock:
            if PluginManager._default is None:
                owner = _Default(DEFAULT_NAMESPACE_NAME, default_config(), HookRegistry.default(),
                                 PlatformManager.default())  # fmt: skip
                PluginManager._default = PluginManager(owner)
            return PluginManager._default

    def __init__(self, namespace: PluginOwner) -> None:
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
                import copy  # a second call after a failure only: no worker that runs needs it

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
    def discover(
        self, *, names: tuple[str, ...] | list[str] | None = None, platform: str | None = None
    ) -> list[PluginInfo]:
        """Every plugin entry point of the namespace with its selection status; imports none.

        Pure: an unknown selected name is not judged here (``spawnkit doctor``
        lists it; :meth:`select` and :meth:`load` refuse it).  ``platform``
        names the platform the exclusion rule compares with (default: this
        process's selection).
        """
        return _sel.classify(self.namespace, names, platform)[0]

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
        check_flag("lenient", lenient, call="select", none=_LENIENT_NONE)
        infos, unknown, origin = _sel.classify(self.namespace, names, platform, origin)
        lenient = _sel.is_lenient(self.namespace, lenient)
        if unknown:
            _sel.refuse_unknown(self.namespace, unknown, infos, lenient, origin)
        _sel.refuse_excluded(self.namespace, infos, lenient, origin)
        selected = [i for i in infos if i.status == "selected"]
        _sel.check_duplicates(self.namespace, selected, lenient)
        return tuple(dict.fromkeys(i.name for i in selected))

    # --------------------------------------------------------------- loading
    def load(
        self,
        *,
        names: tuple[str, ...] | list[str] | None = None,
        lenient: bool | None = None,
        apply_deferred: bool = True,
        after_each: Callable[[str, str], None] | None = None,
    ) -> list[LoadedPlugin]:
        """Import and call each selected plugin once per process; see the module docstring.

        A re-entrant call (a plugin calling ``load_plugins()``) returns ``[]``.
        When a plugin asked for ``apply_plugin_hooks()`` while loading, that
        request was deferred (applying then would patch a half-built registry);
        this call honours it once every plugin has registered, unless
        ``apply_deferred=False`` says the caller applies next itself (the
        bootstrap's own apply stage).  ``after_each(name, dist)`` runs right after each plugin
        loaded (the warm-start server checks there that it left the process safe to fork); what
        it raises fails plugin loading, with the plugin named.
        """
        check_flag("lenient", lenient, call="load", none=_LENIENT_NONE)
        check_flag("apply_deferred", apply_deferred, call="load")
        result = self._load_once.run(lambda: self._load(names, lenient, after_each))
        if result is None:
            return []
        deferred = self._deferred_apply
        if deferred is not None and apply_deferred:
            self.apply(strict=deferred)
        return list(result)

    def _load(
        self,
        names: tuple[str, ...] | list[str] | None,
        lenient: bool | None,
        after_each: Callable[[str, str], None] | None,
    ) -> list[LoadedPlugin]:
        report = self.report = PluginReport(lenient=_sel.is_lenient(self.namespace, lenient))
        report.modules_before = _steps.mark_plugins_began()
        infos, unknown, origin = _sel.classify(self.namespace, names)
        report.unknown_names = unknown
        if unknown:
            _sel.refuse_unknown(self.namespace, unknown, infos, report.lenient, origin)
        _sel.refuse_excluded(self.namespace, infos, report.lenient, origin)
        selected = [i for i in infos if i.status == "selected"]
        report.skipped = [i for i in infos if i.status != "selected"]
        for info in report.skipped:
            if _log.isEnabledFor(DEBUG):
                _log.debug("skipping %s: %s", info.describe(), info.reason)
        _sel.check_duplicates(self.namespace, selected, report.lenient)
        platform_dist = _sel.norm(self._selected_dist_quiet()) if selected else ""
        seen: set[str] = set()
        watch = OutsideWatch() if selected else None
        handover = _Handover(selected)
        for info in selected:
            if info.name in seen:
                continue  # duplicate name, already warned about; first on sys.path wins
            seen.add(info.name)
            strict = not report.lenient or (
                bool(platform_dist) and _sel.norm(info.dist) == platform_dist
            )
            self._load_one(info, strict, report, watch, handover)
            if after_each is not None and report.loaded and report.loaded[-1].name == info.name:
                after_each(info.name, info.dist)
        return list(report.loaded)

    def _selected_dist_quiet(self) -> str | None:
        try:
            dist: str | None = self.namespace.platforms.selected_dist()
        except Exception:
            # A platform failure is reported by the platform stage, not here; without a
            # selected platform no dist gets the "always strict" treatment.
            return None
        return dist

    def _load_one(
        self,
        info: PluginInfo,
        strict: bool,
        report: PluginReport,
        watch: OutsideWatch | None,
        handover: _Handover,
    ) -> None:
        source = HookSource(info.name, info.dist, info.version)
        registry = self.namespace.hooks
        before_regs = registry._count()
        # sys.modules keeps insertion order and imports only append, so the modules this
        # plugin imported are the tail: no per-plugin set of every loaded module (a
        # thousand of them once torch is preloaded in a warm worker).
        before_mods = len(sys.modules)
        # CLOCK_MONOTONIC, the clock every process of the host shares (see spawnkit._trace)
        start = time.monotonic()
        failure = _run(self.namespace.config, info, source, registry, handover)
        seconds = time.monotonic() - start
        imported = tuple(itertools.islice(sys.modules, before_mods, None))
        # before a failure discards this plugin's registrations: another's are not its to lose
        moved = handover.give_back(registry, source, imported)
        outside = tuple(watch.changes(list(imported))) if watch is not None else ()
        if failure is not None:
            registry.discard_source(source)
            _failed(self.namespace.config, info, strict, report, *failure, outside=outside)
            return
        loaded = LoadedPlugin(
            info.name,
            info.value,
            info.dist,
            info.version,
            seconds,
            imported,
            registry._count() - before_regs - moved + handover.held.get(info.name, 0),
            outside,
            start,
        )
        report.loaded.append(loaded)
        if _log.isEnabledFor(DEBUG):
            _log.debug("loaded %s in %.2f ms", info.describe(), seconds * 1e3)

    # -------------------------------------------------------------- applying
    def apply(self, *, strict: bool = True, clean_modules: Collection[str] = ()) -> list[str]:
        """Patch every registered target once per process (loading plugins first if needed).

        After this, payloads and lazy proxies may be resolved in a worker.
        ``clean_modules`` is passed to ``HookRegistry.apply_hooks``.
        """
        check_flag("strict", strict, call="apply")
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
        config = self.namespace.config
        var = config.hook_conflicts_var
        # the selected platform's own hooks apply strictly, as its plugins load: lenient mode
        # does not cover the platform's own code (hooks/_apply.py _strict_dists_failed)
        platform = None if strict else self._selected_dist_quiet()
        self.namespace.hooks._state.strict_dists = frozenset(
            [_sel.norm(platform)] if platform else []
        )
        try:
            patched: list[str] = list(
                self.namespace.hooks.apply_hooks(
                    strict=strict,
                    clean_modules=clean_modules,
                    conflicts=_conflicts.parse_policy(var, os.environ.get(var)),
                    conflicts_var=var,
                )
            )
        except HookApplyError as exc:
            # A launched worker's user never calls apply_hooks(): name their knob as well.
            exc.args = (
                str(exc).replace(
                    "or call apply_hooks(strict=False)",
                    f"or set {config.lenient_var}=1 (apply_hooks(strict=False) when you call "
                    "it yourself)",
                ),
                *exc.args[1:],
            )
            raise
        self.report.applied = patched
        namespace = self.namespace  # asked at capture, as it is then (a test may swap its hooks)
        _phase.mark_hooks_applied(namespace.name, lambda: _queries.built_hooked(namespace.hooks))
        return patched

    def reset_for_tests(self) -> None:
        """Forget loading and applying (the registry is reset separately)."""
        self._load_once.reset()
        self._apply_once.reset()
        self._deferred_apply = None
        self.report = PluginReport()


#: What calling an ``async def`` or a ``def`` with ``yield`` gives: the function's body has not
#: run, and nothing here would run it (loading calls a callback and drops what it returns).
_NEVER_RAN = (types.CoroutineType, types.GeneratorType, types.AsyncGeneratorType)


def _never_ran(returned: Any) -> str:
    kind = {
        types.CoroutineType: "a coroutine function (async def)",
        types.GeneratorType: "a generator function (it contains yield)",
        types.AsyncGeneratorType: "an async generator function",
    }[type(returned)]
    return (
        f"its callback is {kind}: calling it returned a {type(returned).__name__} that nothing "
        "runs, so none of its code ran and none of its hooks were registered. Make it a plain "
        "def that registers its hooks when called"
    )


def _uncalled(module: types.ModuleType, registered: bool) -> str:
    """Why a module entry point may have meant a register function it never called.

    The function may live in a submodule (``from pkg.hooks import register``) and be named
    ``register_hooks`` (the seed's diffusion plugin); a module whose import ``registered``
    hooks (a ``@plugin_hook`` decorator) may still leave its register function's uncalled.
    """
    found = _register_function(module, skip_empty=registered)
    if found is None:
        return ""
    attr, func = found
    home = sys.modules.get(func.__module__)
    modules = [module] if home is None or home is module else [module, home]
    called = _called_in_source({attr, func.__name__}, modules)
    if called or (called is None and registered):
        return ""  # its own module calls it (or may: no source to read) as it is imported
    where = "defines" if func.__module__ == module.__name__ else "has"
    where += f" {attr}()" + ("" if where == "defines" else f" from {func.__module__}")
    if registered:
        said = (
            "but never calls it: a module entry point is imported, never called, so only the "
            f"hooks registered as it was imported are in place, none of those {attr}() "
            "registers"
        )
    else:
        said = (
            "but registered no hook as it was imported: a module entry point is imported, "
            "never called"
        )
    return (
        f"the entry point names module {module.__name__!r}, which {where} {said}. "
        f"Point it at the function: '{module.__name__}:{attr}'"
    )


def _register_function(
    module: types.ModuleType, *, skip_empty: bool
) -> tuple[str, types.FunctionType] | None:
    """The module's (or its submodules') function a loader would call, taking no argument:
    ``register``, ``register_hooks`` or another ``register_*``; a ``register_op(fn)`` helper
    or decorator takes one, and one of spawnkit's or an engine's lives elsewhere.  With
    ``skip_empty``, a stub beside decorators (``def register(): pass``) is no such function."""
    name = module.__name__
    names = sorted(
        (n for n in vars(module) if n == "register" or n.startswith("register_")),
        key=lambda n: (n != "register", n != "register_hooks", n),
    )
    for attr in names:
        func = getattr(module, attr, None)
        home = getattr(func, "__module__", None) or ""
        if not isinstance(func, types.FunctionType) or not (
            home == name or home.startswith(name + ".")
        ):
            continue
        code = func.__code__
        required = code.co_argcount - len(func.__defaults__ or ())
        required += code.co_kwonlyargcount - len(func.__kwdefaults__ or {})
        # one that names no global or attribute (``pass``, a docstring) reaches no registry
        if required == 0 and not (skip_empty and not code.co_names):
            return attr, func
    return None


def _called_in_source(names: set[str], modules: list[types.ModuleType]) -> bool | None:
    """Whether the modules' source calls one of the names (``register()`` at the bottom of
    the module: importing it did call it); ``None`` when a module's source cannot be read.
    Any call by name counts (``hooks.register_hooks()`` too: ``NS.hooks.register(...)`` is
    the registry's) but one under ``if __name__ == "__main__":``, which importing skips."""
    import ast  # only for a module entry point that has a register function

    for module in modules:
        try:
            with open(module.__file__ or "", "rb") as f:
                tree = ast.parse(f.read())
        except (OSError, TypeError, SyntaxError, ValueError):
            return None
        skipped = {
            id(n)
            for node in tree.body
            if isinstance(node, ast.If) and "'__main__'" in ast.dump(node.test)
            for n in ast.walk(node)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and id(node) not in skipped:
                func = node.func
                called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if called in names and (isinstance(func, ast.Name) or called != "register"):
                    return True
    return False


def _dropped(obj: object, returned: object) -> str:
    """Why a callback that registered nothing may have meant ``returned`` to be used: a function
    (a factory's product: ``pkg:get_plugin`` returning ``register``) or an instance of the class
    the entry point names (a pluggy-style plugin object), or hooks handed back as data
    (``[(target, fn, HookType.AFTER)]``); "" for plain data (status words, dicts of names)."""
    if isinstance(obj, type):
        what = f"the entry point names class {obj.__qualname__}: loading made an instance"
    elif callable(returned) and not isinstance(returned, type):
        what = f"its callback returned {returned!r}"
    elif _holds_hooks(returned):
        shown = repr(returned)
        shown = shown if len(shown) <= 200 else shown[:200] + "..."
        return (
            f"its callback returned hook data ({shown}) and registered no hook: loading calls "
            "the entry point once and drops what it returns, so none of those hooks would "
            "ever be applied. Register each one in the callback instead "
            "(NS.hooks.register(target, fn, HookType.AFTER), NS being the engine's "
            "spawnkit namespace)"
        )
    else:
        return ""
    return (
        f"{what}, which nothing calls or reads, and no hook was registered: loading calls the "
        "entry point once and drops what it returns. Point the entry point at the function "
        "that registers the hooks ('module:register'), or call that function from the "
        "callback"
    )


def _holds_hooks(returned: object) -> bool:
    """Whether a returned list/tuple/dict carries hooks (``[(target, fn, HookType.AFTER)]``,
    ``{target: fn}``): a loader of another library's protocol reads them, this one never does.
    Two levels deep, callables that are no class: data (names, flags, versions) holds none."""
    if isinstance(returned, dict):
        items: list[object] = list(returned.values())
    elif isinstance(returned, (list, tuple)):
        items = list(returned)
    else:
        return False
    for item in items:
        inner = list(item.values()) if isinstance(item, dict) else item
        for x in inner if isinstance(inner, (list, tuple)) else (item,):
            if isinstance(x, HookType) or (callable(x) and not isinstance(x, type)):
                return True
    return False


def _platform_answer(returned: object) -> bool:
    """Whether a general plugin's callback returned what a platform plugin's ``activate()``
    does: a class, or a qualname (``pkg.mod.Class``, ``pkg.mod:Class``), not a status word."""
    if isinstance(returned, type):
        return True
    if not isinstance(returned, str):
        return False
    parts = returned.strip().replace(":", ".", 1).split(".")  # a second ':' is no identifier
    return len(parts) > 1 and all(map(str.isidentifier, parts))


def _elsewhere(registry: Any, source: Any) -> dict[int, tuple[Any, int]]:
    """Every registry but ``registry`` a plugin could register into by mistake (the default
    one; another namespace's that exists), with how many registrations ``source`` has there."""
    # Not created for the asking (a worker has none): a plugin registering there creates it
    # (HookRegistry.default()), so where there is none yet, none was registered there.
    default = type(registry)._default
    found = {}
    if default is not None and default is not registry:
        found[id(default)] = (default, _count_from(default, source))
    for ns in list(_namespace_registry.DECLARED.values()):
        other = getattr(ns, "_hooks", None)  # not created for the asking
        if other is not None and other is not registry and id(other) not in found:
            found[id(other)] = (other, _count_from(other, source))
    return found


def _check_elsewhere(ns: str, registry: Any, source: Any, before: dict[int, Any]) -> None:
    """What a plugin loaded for ``ns`` registered in another registry: on the default one it is
    refused (no worker applies it); on another namespace's it is said, since only a process
    that bootstraps that namespace too applies it."""
    for other, count in _elsewhere(registry, source).values():
        start = before.get(id(other), (other, 0))[1]
        if count <= start:
            continue
        if other is type(registry)._default:
            _refuse_misrouted(ns, other, source, start)
            continue
        stray = [r for r in other.registrations() if r.source == source][start:]
        targets = ", ".join(sorted({r.target for r in stray}))
        warnings.warn(
            f"{source} was loaded for namespace {ns!r} but registered {len(stray)} hook(s) "
            f"(on {targets}) in namespace {other.name!r}'s registry: a worker of {ns!r} "
            f"never applies them, only a process that also bootstraps {other.name!r} does. "
            f"Register through spawnkit.get_namespace({ns!r}).hooks (get_namespace() with no "
            f"argument is the worker's own), or declare the plugin in {other.name!r}'s plugin "
            "group too.",
            PluginSelectionWarning,
            stacklevel=2,
        )


def _refuse_misrouted(ns: str, default: Any, source: Any, before: int) -> None:
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


def _run(
    config: NamespaceConfig, info: PluginInfo, source: Any, registry: Any, handover: _Handover
) -> tuple[str, Exception] | None:
    """Import the plugin's entry point and call it; on failure, what failed and why."""
    ep = _metadata.EntryPointInfo(info.name, info.value, info.group, info.dist, info.version)
    before = _elsewhere(registry, source)
    own_before = _made(registry)
    what = "failed to import"
    # plugin_source(source) and _steps.step(...), spelled out: no context-manager objects
    token = current_plugin_source.set(source)
    previous_step = _steps.set_step(_steps.plugin_step(info.name))
    try:
        obj = _metadata.load_entry_point(ep)
        handover.imported_until = registry._state.seq
        held = handover.held.get(info.name, 0)  # its module ran (and registered) in another's load
        if isinstance(obj, types.ModuleType):
            # names a module: importing it (its @plugin_hook decorators) is the plugin, unless
            # it has a register function the entry point forgot to name
            registered = _made(registry) != own_before or held > 0
            uncalled = _uncalled(obj, registered)
            if uncalled:
                what = "never called its register function" if registered else "registered nothing"
                raise TypeError(uncalled)
        elif callable(obj):
            what = "raised in its callback"
            returned = obj()
            if isinstance(returned, _NEVER_RAN):
                what = "never ran its callback's body"
                if not isinstance(returned, types.AsyncGeneratorType):
                    returned.close()  # no "never awaited" warning later: this error says it
                raise TypeError(_never_ran(returned))
            if returned is not None and _platform_answer(returned):
                what = "is a platform plugin in the general plugin group"
                raise TypeError(
                    f"its callback returned {returned!r}, what a platform plugin's "
                    "activate() returns (its platform class). A general plugin is called for "
                    "the hooks it registers and what it returns is dropped, so that platform "
                    f"would never be selected. Declare the entry point in group "
                    f"{config.platform_group!r} instead of {info.group!r}"
                )
            dropped = _dropped(obj, returned)
            if dropped and _made(registry) == own_before and not held:
                what = "registered nothing and returned what nothing calls"
                raise TypeError(dropped)
        else:
            what = "raised in its callback"
            raise TypeError(
                f"entry point resolves to a {type(obj).__name__}, not a callable; point "
                "it at the plugin's register function ('module:register')"
            )
        _check_elsewhere(config.name, registry, source, before)
    except Exception as exc:
        return what, exc
    finally:
        _steps.set_step(previous_step)
        current_plugin_source.reset(token)
    return None


class _Handover:
    """Import-time registrations made in one plugin's load that belong to another plugin.

    Plugin ``a_extra`` doing ``from vendor.core import helper`` runs ``vendor.core``, the
    module entry point of plugin ``b_core``, so its ``@plugin_hook`` decorators register
    while ``a_extra`` is the current source; ``b_core``'s own load then imports nothing.
    Left so, those hooks are named as ``a_extra``'s, and lost with it when it fails in
    lenient mode while ``b_core`` "loads" with none.  A hook function defined in a module
    that first ran during this load (during its import, not its callback's call) and lies
    under another selected plugin's entry-point module is handed to that plugin.
    """

    def __init__(self, selected: list[PluginInfo]) -> None:
        self.owners: dict[str, HookSource] = {}
        for info in selected:
            module = info.value.partition(":")[0].partition("[")[0].strip()
            self.owners.setdefault(module, HookSource(info.name, info.dist, info.version))
        self.held: dict[str, int] = {}  # plugin name -> registrations handed to it
        self.imported_until: int | None = None  # registry seq when the entry point was loaded

    def give_back(self, registry: Any, source: HookSource, imported: tuple[str, ...]) -> int:
        """Move ``source``'s registrations that are another plugin's over to it; how many."""
        until, self.imported_until = self.imported_until, None
        if len(self.owners) < 2 or not imported:  # the common case costs nothing more
            return 0
        fresh = set(imported)
        # the entry-point modules this load ran (a C-level intersection; usually its own only)
        hits = self.owners.keys() & fresh
        if all(self.owners[m].plugin_name == source.plugin_name for m in hits):
            return 0
        moved = 0
        with registry._lock:
            st = registry._state
            for regs in st.regs.values():
                for i, reg in enumerate(regs):
                    owner = self._owner(reg, source, fresh, until)
                    if owner is not None:
                        regs[i] = replace(reg, source=owner)
                        self.held[owner.plugin_name] = self.held.get(owner.plugin_name, 0) + 1
                        moved += 1
            if moved:
                st.touch()
        if moved and _log.isEnabledFor(DEBUG):
            _log.debug("%d hook(s) registered during %s's load handed to their plugin", moved,
                       source)  # fmt: skip
        return moved

    def _owner(
        self, reg: Any, source: HookSource, fresh: set[str], until: int | None
    ) -> HookSource | None:
        if reg.source != source or (until is not None and reg.seq > until):
            return None
        name = getattr(reg.hook, "__module__", None)
        if not isinstance(name, str) or name not in fresh:
            return None  # a string hook, or one from a module imported before this load
        while name:
            owner = self.owners.get(name)
            if owner is not None:
                return owner if owner != source and name in fresh else None
            name = name.rpartition(".")[0]
        return None


def _failed(
    config: NamespaceConfig,
    info: PluginInfo,
    strict: bool,
    report: PluginReport,
    what: str,
    exc: Exception,
    *,
    outside: tuple[str, ...] = (),
) -> None:
    """A plugin failed: ``PluginError`` when strict, else logged and kept in the report."""
    kept = (
        f" What it changed outside the hook registry before it failed is still in place "
        f"(spawnkit cannot undo it): {', '.join(outside)}."
        if outside
        else ""
    )
    unread = _unread_pth(exc)
    fix = (
        "Restart the launcher (an interpreter reads .pth files only as it starts)"
        if unread
        else f"Fix or upgrade {info.dist}"
    )
    message = (
        f"{info.describe()} {what}: {type(exc).__name__}: {exc}.{unread} Its hook "
        f"registrations were discarded.{kept} {fix}, or deselect it with {config.plugins_var}"
    )
    if strict:
        if report.lenient:
            message += (
                " (it belongs to the selected platform's distribution, so lenient mode "
                "does not apply)"
            )
        else:
            message += f", or set {config.lenient_var}=1 to run without it"
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
    _log.error("lenient plugin loading: %s; continuing without it.", message, exc_info=exc)
    report.failed.append(
        FailedPlugin(
            info.name,
            info.value,
            info.dist,
            info.version,
            f"{type(exc).__name__}: {exc}",
            "".join(traceback.format_exception(exc)),
            outside,
        )
    )


def _unread_pth(exc: Exception) -> str:
    """Why a module is missing when a ``.pth`` file names its directory: an editable install
    made while the launcher ran (``spawnkit._pth``); else nothing.  Its advice, "fix or
    upgrade" the plugin, sent the user to code that is fine."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return ""
    from spawnkit._pth import unread_entry  # only on this failure path

    found = unread_entry(exc.name)
    if found is None:
        return ""
    pth, entry = found
    return (
        f" {exc.name!r} is in {entry}, which {pth} puts on sys.path as an interpreter "
        "starts, but that entry is not on this process's sys.path (a spawnkit worker's is "
        "its launcher's): the file was written after the launcher started (an editable "
        "install, pip install -e, made while it ran), so the launcher found the "
        "distribution's metadata and selected the plugin, but not its code."
    )


def _made(registry: Any) -> tuple[int, int]:
    """What the registry holds, hooks and provided modules: a plugin that leaves it as it was
    registered nothing (plugins load one at a time; counting by source cost 40 us each)."""
    return registry._count(), len(registry._state.provides)


def _count_from(registry: Any, source: Any) -> int:
    return int(registry._count(source))


def _manager(namespace: Any) -> PluginManager:
    found = _namespace_registry.find(namespace)
    if found is None:
        return PluginManager.default()
    manager: PluginManager = found.plugins
    return manager


def load_plugins(namespace: Any = None, **kwargs: Any) -> list[LoadedPlugin]:
    """Load the namespace's general plugins (registration only); see :meth:`PluginManager.load`.

    ``namespace=None`` is this worker's namespace inside a worker, else the default one.
    """
    return _manager(namespace).load(**kwargs)


def apply_plugin_hooks(namespace: Any = None, **kwargs: Any) -> list[str]:
    """Apply every hook registered in the namespace; see :meth:`PluginManager.apply`."""
    return _manager(namespace).apply(**kwargs)
