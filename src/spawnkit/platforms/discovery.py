"""Platform discovery: the per-process current platform of a namespace, and its pinning.

What a request resolves to is ``_table`` (README's decision table).  A name
is selected by ``set_selection()`` (a parent pinning its decision), else
``<PREFIX>_PLATFORM``; then only that entry point is imported.  Never is an
error turned into a fallback: a plugin that raises while its hardware might
be present would otherwise run the job on another device.  Nothing here
creates an accelerator context.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping

from spawnkit._compat import TYPE_CHECKING
from spawnkit._log import INFO, LazyLogger
from spawnkit._namedtuple import NamedTuple
from spawnkit._once import Once, OnceState
from spawnkit.errors import PlatformError
from spawnkit.platforms._candidates import Trace, exc_text
from spawnkit.platforms._probes import Probe
from spawnkit.platforms._selection import PlatformSelection
from spawnkit.platforms._table import DecisionTable, NamespaceView
from spawnkit.platforms.builtin import BUILTINS
from spawnkit.platforms.interface import Platform

if TYPE_CHECKING:
    from typing import Any

    from spawnkit.platforms.explanation import PlatformExplanation
    from spawnkit.spec import NamespaceConfig

__all__ = [
    "RESERVED_NAMES",
    "PlatformExplanation",
    "PlatformManager",
    "PlatformSelection",
    "env_applied",
]

logger = LazyLogger("spawnkit.platforms")  # logging is imported only if a record is emitted

#: Names a plugin may not use: they select the built-ins (and ``base`` the base platform).
RESERVED_NAMES = tuple(row.name for row in BUILTINS)


def _probes() -> dict[str, Callable[[], Probe]]:
    """The built-ins' hardware probes, a fresh dict: a test may replace one per manager."""
    return {row.name: row.probe for row in BUILTINS if row.probe is not None}


def _again(namespace: str, what: str) -> Callable[[BaseException], BaseException]:
    """The error every later caller gets after the first attempt at ``what`` failed."""

    def build(first: BaseException) -> BaseException:
        return PlatformError(
            f"platform {what} for namespace {namespace!r} previously failed in "
            f"this process ({exc_text(first).splitlines()[0]}); it is not retried, so "
            "every caller sees the same outcome. Fix the cause (chained below) and start "
            "a new process.",
            explanation=getattr(first, "explanation", ""),
            namespace=namespace,
            kind="init",
        )

    return build


_managers: weakref.WeakSet[PlatformManager] = weakref.WeakSet()

# The launcher's ``env=`` during selection (see ``env_applied``): one window at a time per
# process; the overrides' key is per thread, so only the window's own selections use it.
_ENV_LOCK = threading.RLock()
_window = threading.local()


def _window_key() -> tuple[tuple[str, str], ...]:
    key: tuple[tuple[str, str], ...] = getattr(_window, "key", ())
    return key


_decisions = itertools.count(1)


@contextlib.contextmanager
def env_applied(overrides: Mapping[str, str], *, fresh: bool = False) -> Iterator[None]:
    """Run platform selection as the workers will: with ``overrides`` set in ``os.environ``.

    A launcher's ``env=`` reaches its workers on top of its own environment, so
    a device made visible only there (``MY_DEVICE_VISIBLE=1``, a
    ``CUDA_VISIBLE_DEVICES``) must count in the parent's decision too: the
    plugins' ``activate()`` and the built-in probes read ``os.environ``.  The
    overrides are set for the window and every variable they touched is
    restored afterwards exactly (unset again, or its old value).  The module
    lock makes the windows of concurrent launches take turns and keeps another
    thread's uncached selection out of the window; other code of this process
    that reads the environment from another thread during the window (a few
    milliseconds of selection) sees the overrides.  Selections made inside are
    cached under the overrides, apart from the plain ones.  The launcher also starts a
    process inside this window when ``env=`` sets a variable read only at start
    (``spawnkit._environ``): the exec copies the environment as it is in the window.

    ``fresh``: one launch's decision.  A long-lived launcher changes ``os.environ``
    between launches (``<PREFIX>_USE_CPU_ENGINE=1``, a device's visibility), so a
    decision kept from an earlier launch would start the next one's workers on the
    old platform; the selections made inside are shared by that launch's questions
    and forgotten when it ends.  This process's own platform is not decided here.
    """
    if not overrides and not fresh:
        yield
        return
    with _ENV_LOCK:
        saved = {var: os.environ.get(var) for var in overrides}
        outer = _window_key()
        # no variable has an empty name: the launch's own entry never meets an override
        own = (("", f"decision {next(_decisions)}"),) if fresh else ()
        try:
            os.environ.update(overrides)
            _window.key = tuple(sorted({**dict(outer), **overrides, **dict(own)}.items()))
            yield
        finally:
            if fresh:
                for manager in list(_managers):
                    manager._forget(_window.key)
            _window.key = outer
            for var, old in saved.items():
                if old is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = old


class _Default(NamedTuple):
    name: str
    config: NamespaceConfig


_default_lock = threading.Lock()


class PlatformManager(DecisionTable):
    """Discovery, selection and the current platform of one namespace (``ns.platforms``)."""

    _default: PlatformManager | None = None

    @classmethod
    def default(cls) -> PlatformManager:
        """The default namespace's manager, owned here so the module-level API needs no facade."""
        found = cls._default
        if found is None:
            from spawnkit.spec._namespace_config import default_config

            with _default_lock:
                found = PlatformManager._default
                if found is None:
                    config = default_config()
                    found = PlatformManager(_Default(config.name, config))
                    PlatformManager._default = found
        return found

    def __init__(self, namespace: NamespaceView) -> None:
        self.namespace = namespace
        self._lock = threading.RLock()
        self._local = threading.local()
        #: Hardware probes by built-in name.  Per manager so a test can simulate a GPU
        #: for one namespace without touching the process-wide functions.
        self._probes = _probes()
        self._composed: dict[tuple[str, type], type[Platform]] = {}
        self._reset_state()
        _managers.add(self)

    def _reset_state(self) -> None:
        # The instance built and whether its init_backend() ran: kept across a fork, which
        # starts the gates below over (``inherit``; ``_forked``: a fork's, from its parent).
        self._built: tuple[Platform, bool] | None = None
        self._forked = False
        self._pinned: str | None = None
        self._pinned_by = ""
        # By (requested name, the env_applied window's overrides: () outside one).
        self._selections: dict[Any, tuple[PlatformSelection, type[Platform]]] = {}
        self._current: PlatformSelection | None = None
        # This process's own decision's record: ``explain()`` describes the platform this process
        # runs on, never a launch's decision for its workers (``env_applied``) or an explicit
        # ``select(name)``, which are kept only as the latest resolution.
        self._trace: Trace | None = None
        self._latest: Trace | None = None
        name = self.namespace.config.name
        self._current_once: Once[Platform] = Once(
            f"{name}: resolve platform", again=_again(name, "resolution")
        )
        self._init_once: Once[Platform] = Once(
            f"{name}: initialize platform", again=_again(name, "initialization (init_backend)")
        )

    def _forget(self, window: tuple[tuple[str, str], ...]) -> None:
        """Drop the selections made in one ``env_applied(fresh=True)`` window (it has ended)."""
        with self._lock:
            for key in [k for k in self._selections if k[1] == window]:
                del self._selections[key]

    def reset_for_tests(self) -> None:
        """Forget every decision, pin, instance and probe override, as in a fresh process."""
        with self._lock:
            self._reset_state()
            self._probes = _probes()

    # ------------------------------------------------------------ metadata
    def platform_dists(self) -> dict[str, str]:
        """Entry name -> distribution for every platform entry point (metadata only); the first
        distribution of a name two declare, which the decision refuses in every row."""
        dists: dict[str, str] = {}
        for ep in self._entry_points():
            dists.setdefault(ep.name, ep.dist)
        return dists

    # ----------------------------------------------------------- selection
    def set_selection(self, name: str | None, *, by: str = "") -> None:
        """Pin the platform by name (a child pinning its parent's decision); None unpins.

        Must come before the platform is first resolved in this process:
        afterwards the pin could not change what callers already hold.
        ``by`` says, in the user's terms, who decided (explanations and
        reports show it); default: this call.
        """
        if name is not None:
            if not isinstance(name, str) or not name.strip():
                raise PlatformError(
                    f"set_selection() needs a platform name or None, got {name!r}",
                    namespace=self.namespace.name,
                )
            name = name.strip()
        with self._lock:
            once_state = self._current_once.state
            if once_state is not OnceState.NOT_STARTED:
                current = self._current.name if self._current is not None else None
                if current == name and once_state is OnceState.DONE:
                    self._pinned, self._pinned_by = name, by
                    return
                if not (self._forked and name is not None):  # a fork: its launch's decision
                    raise PlatformError(
                        f"set_selection({name!r}) for namespace {self.namespace.name!r} came after "
                        f"the platform was already resolved ({once_state.value}, "
                        f"selected: {current!r}). Pin the selection before the first use of "
                        "current_platform / initialize_current_platform().",
                        namespace=self.namespace.name,
                    )
                _drop_inherited(self)
            self._pinned, self._pinned_by = name, by

    def _requested(self, name: str | None, origin: str, pinned: bool) -> tuple[str | None, str]:
        if name is not None:
            return name.strip(), origin or f"selected by argument {name.strip()!r}"
        if pinned and self._pinned is not None:
            by = self._pinned_by or f"set_selection({self._pinned!r})"
            return self._pinned, f"{self._pinned!r} chosen by {by}"
        var = self.namespace.config.platform_var
        env = os.environ.get(var, "").strip()
        if env:
            return env, f"{var}={env}"
        return None, "auto-discovery"

    def select(
        self, name: str | None = None, *, origin: str = "", pinned: bool = True
    ) -> PlatformSelection:
        """Resolve the platform without instantiating it or running ``init_backend()``.

        ``origin`` says where an explicit ``name`` came from, in the user's terms
        (``"SPAWNKIT_PLATFORM='x' (in env=)"``), for the messages.  ``pinned=False``: as if
        unpinned, for the launches of a process whose pin is its own ``bootstrap_here()``'s
        (a worker's is its launcher's decision, and holds for its own launches).
        """
        return self._select(name, origin, pinned)[0]

    def _select(
        self, name: str | None, origin: str = "", pinned: bool = True
    ) -> tuple[PlatformSelection, type[Platform]]:
        requested, how = self._requested(name, origin, pinned)
        key = (requested, _window_key())
        cached = self._selections.get(key)
        if cached is not None:
            return cached
        with _ENV_LOCK, self._lock:  # never inside another thread's env_applied window
            cached = self._selections.get(key)
            if cached is not None:
                return cached
            if getattr(self._local, "resolving", False):
                raise PlatformError(
                    f"platform of namespace {self.namespace.name!r} requested while it is being "
                    "resolved (from a plugin's activate() or a platform module import). "
                    "activate() must only check for hardware and return a qualname or None.",
                    namespace=self.namespace.name,
                )
            self._local.resolving = True
            mode = "auto" if requested is None else "selected"
            trace = Trace(self.namespace.config, mode, requested)
            trace.step(how)
            self._latest = trace
            if name is None and pinned and not key[1] and self._current is None:
                self._trace = trace  # this process's own, until built (a later select() is not)
            try:
                result = self._decide(requested, how, trace)
            finally:
                self._local.resolving = False
            trace.winner = result[0]
            self._selections[key] = result
            if logger.isEnabledFor(INFO):  # every worker selects: no logging import for it
                logger.info(
                    "namespace %r: platform %s %r (%s) [%s]",
                    self.namespace.name,
                    result[0].kind,
                    result[0].name,
                    result[0].qualname,
                    " -> ".join(result[0].path),
                )
            return result

    def selection(self) -> PlatformSelection:
        """This process's platform: the current one once built, else what ``select()`` says."""
        return self._current if self._current is not None else self.select()

    def selected_dist(self) -> str | None:
        """The winning plugin's distribution, or None for a built-in or the base platform."""
        selection = self.selection()
        return selection.dist if selection.kind == "plugin" else None

    # --------------------------------------------------------- the instance
    def current(self) -> Platform:
        """The current platform, resolved and instantiated once per process (thread-safe)."""
        once = self._current_once
        result = once.result if once.state is OnceState.DONE else once.run(self._build_current)
        if result is None:
            raise PlatformError(
                f"current platform of namespace {self.namespace.name!r} requested while it is "
                "being constructed (from the platform's __init__ or a plugin's activate()).",
                namespace=self.namespace.name,
            )
        return result

    def inherit(self) -> None:
        """In a forked child (``_after_fork``, any fork; a warm worker): the platform its parent
        built, and initialised if it did.  Every ``Once`` starts over in a forked child, so the
        child built a new instance on first use, without what the parent's ``init_backend()``
        set on it, and ``initialize()`` ran ``init_backend()`` again."""
        with self._lock:
            if self._built is None:
                return
            platform, initialised = self._built
            self._current_once.settle(platform)
            if initialised:
                self._init_once.settle(platform)
            self._current = platform.__dict__.get("_selection", self._current)

    def built(self) -> Platform | None:
        """The current platform if it was built, without building it (None otherwise)."""
        once = self._current_once
        return once.result if once.state is OnceState.DONE else None

    def _build_current(self) -> Platform:
        selection, cls = self._select(None)
        try:
            instance = cls()
        except Exception as exc:
            what = (
                f"platform plugin {selection.name!r} ({selection.dist} {selection.version})"
                if selection.kind == "plugin"
                else f"{selection.kind} platform {selection.name!r}"
            )
            raise PlatformError(
                f"constructing {selection.qualname} for {what} raised {exc_text(exc)}.",
                explanation=self._explanation_text(),
                namespace=self.namespace.name,
                kind="init",
            ) from exc
        instance.__dict__["_selection"] = selection
        self._current = selection
        self._built = (instance, False)
        return instance

    def initialize(self) -> Platform:
        """Resolve the platform and run its ``init_backend()`` once; a failure is final."""
        once = self._init_once
        result = once.result if once.state is OnceState.DONE else once.run(self._run_init_backend)
        if result is None:  # re-entered from init_backend(): the instance exists
            return self.current()
        return result

    def _run_init_backend(self) -> Platform:
        platform = self.current()
        try:
            platform.init_backend()
            self._built = (platform, True)
        except Exception as exc:
            sel = self._current
            origin = f" from {sel.dist} {sel.version}" if sel is not None and sel.dist else ""
            raise PlatformError(
                f"{type(platform).__qualname__}.init_backend(){origin} failed in namespace "
                f"{self.namespace.name!r}: {exc_text(exc)}. The platform is resolved but not "
                "usable; this failure is final for the process.",
                explanation=self._explanation_text(),
                namespace=self.namespace.name,
                kind="init",
            ) from exc
        return platform

    def explain(self) -> PlatformExplanation:
        """How this process's own platform was decided; runs that decision (errors recorded, not
        raised) if it has not run yet.  A launch's decision for its workers, made with its ``env=``
        applied, is not this process's: it described a platform ``current_platform`` never was."""
        return self._last_trace().explanation()

    def decision(self) -> dict[str, Any]:
        """How this process's own decision chose, in plain fields, without building its
        explanation.

        Keys: ``winner`` (a :class:`PlatformSelection` or None), ``mode``, ``path``,
        ``selector_var`` and ``selector_value``: what a worker's report needs (``explain()`` has
        the rest).  Runs a resolution as ``explain()`` does if none ran.
        """
        trace = self._last_trace()
        return {
            "winner": trace.winner,
            "mode": trace.mode,
            "path": list(trace.path),
            "selector_var": trace.selector_var,
            "selector_value": trace.selector_value,
        }

    def _last_trace(self) -> Trace:
        if self._trace is None:
            try:
                self.select()
            except PlatformError:
                pass
        # asked inside a launch's window, the decision just made there is the one at hand
        trace = self._trace or self._latest
        assert trace is not None
        return trace

    def _explanation_text(self) -> str:
        return str(self._trace.explanation()) if self._trace is not None else ""


def _drop_inherited(manager: PlatformManager) -> None:
    """Forget the platform a fork inherited: the child is pinned to another (a fork-context
    worker of a launcher whose own platform is not its launch's decision)."""
    manager._current_once.reset()
    manager._init_once.reset()
    manager._built = manager._current = manager._trace = None
    manager._forked = False


def decisions_for_tests() -> dict[PlatformManager, tuple[Any, str | None, frozenset[Any]]]:
    """Each manager's platform built (or None), pin and selections made so far, for the pytest
    plugin to forget what one test decided (``spawnkit.testing._platforms``)."""
    return {m: (m.built(), m._pinned, frozenset(m._selections)) for m in list(_managers)}


def forget_selections_for_tests(manager: PlatformManager, keys: Collection[Any]) -> None:
    """Drop ``manager``'s selections ``keys`` (a test's ``select()``), keeping its platform."""
    with manager._lock:
        for key in keys:
            manager._selections.pop(key, None)


def _after_fork() -> None:
    global _ENV_LOCK, _default_lock
    _ENV_LOCK = threading.RLock()  # a thread of the parent may have held it at the fork
    _default_lock = threading.Lock()
    for manager in list(_managers):
        manager._lock = threading.RLock()
        manager._local = threading.local()
        manager._selections = {}
        manager._current = None
        trace = manager._trace
        manager._trace = manager._latest = None
        if manager._built is not None:
            # Any fork of a process that built its platform (a worker's DataLoader or Pool
            # child) keeps that instance and its init_backend(), as a warm worker does: the
            # reset alone made the child build a new one and run init_backend() again.
            manager.inherit()
            manager._trace = trace
            manager._forked = True


os.register_at_fork(after_in_child=_after_fork)


def __getattr__(name: str) -> Any:
    if name == "PlatformExplanation":  # in __all__; loaded on first use (see Trace)
        from spawnkit.platforms.explanation import PlatformExplanation

        return PlatformExplanation
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
