"""Every process of an engine bootstrapped: a multiprocessing context, and the engine's own process.

``get_context(ns, method)`` returns a context with the interface of
``multiprocessing.get_context(method)`` whose ``Process`` bootstraps the
namespace (guard, platform, plugins, hooks) in the child before its target
runs (the child's half is ``protocol/context_process.py``).  The engine's
detokenizer (``ctx.Process``), its tokenizer pool
(``ProcessPoolExecutor(mp_context=ctx)``, ``ctx.Pool``) and its data loader
(``DataLoader(multiprocessing_context=ctx)``) then get the plugins its
schedulers get; with a plain ``multiprocessing`` context a plugin's hooks
silently never run there.

The platform and the plugin selection are decided here, when the context is
made, exactly as ``spawn_with_plugins`` decides them (a misconfiguration
fails once, in the parent), and frozen into the spec every child receives.
``method="forkserver"`` starts (or reuses) the warm server for that spec, so
children fork with plugins loaded and hooks applied.

``ctx.Pool`` returns a pool that stops at the first worker whose bootstrap
failed, failing every pending and later task with its root cause; the
standard pool would replace the dead worker forever.

``bootstrap_here(ns)`` runs the same stages in the calling process, for an
engine that imports scheduler code at module scope.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Sequence
from multiprocessing import pool as _mp_pool
from typing import Any

from spawnkit.bootstrap import _plain_children
from spawnkit.bootstrap.report import BootstrapReport
from spawnkit.errors import ConfigError, ImportGuardError
from spawnkit.launch import _here
from spawnkit.launch._checks import check_preload, check_seconds
from spawnkit.launch._selection import parent_selection, workers_started_by
from spawnkit.namespace import Namespace, get_namespace
from spawnkit.protocol import context_process
from spawnkit.protocol.popen import CONTEXTS
from spawnkit.spec import NamespaceConfig, ProcessSpec

__all__ = ["METHODS", "BootstrapPool", "bootstrap_here", "context_spec", "get_context"]

METHODS = ("spawn", "forkserver", "fork")

#: The ``entry`` of a context's spec, as its children's reports show it.
CONTEXT_ENTRY = "spawnkit.protocol.context_process:run_target"

_here_lock = threading.Lock()


def context_spec(ns: Namespace, *, applies_here: bool = False) -> ProcessSpec:
    """What every child of a context of ``ns`` bootstraps with: the parent's selection, frozen
    (``applies_here``: this process's own bootstrap, ``bootstrap_here()``)."""
    platform, plugins, rows = parent_selection(ns, {}, applies_here=applies_here)
    return ProcessSpec(
        # Never resolved (the child calls its Process target); the report names who runs it.
        entry=CONTEXT_ENTRY,
        namespace=ns.config,
        platform=platform,
        plugins=plugins,
        entry_points=rows,
    )


def get_context(
    method: str = "spawn",
    *,
    context: str = "multiprocessing",
    namespace: Namespace | NamespaceConfig | str | None = None,
    preload: Sequence[str] = (),
    timeout: float | None = None,
) -> Any:
    """A ``multiprocessing``-style context whose processes bootstrap ``namespace`` first."""
    ns = get_namespace(namespace)
    preload = check_preload(preload, "get_context")
    _check(method, context, preload)
    _check_timeout(method, timeout)
    boot_in_server = True
    if method == "forkserver":
        from spawnkit.protocol import warm

        # "worker": the server only preloads and each child bootstraps itself, with its own
        # spec; read first, so that a bad value is refused before anything is decided
        boot_in_server = warm.bootstrap_mode() == "server"
    with workers_started_by(method):
        spec = context_spec(ns)
    if method == "fork":  # its children inherit this process's bootstrap, if it has one
        _here.check_fork_context(ns, spec)
    # this launcher's other, plain children that run the engine's code go without them
    _plain_children.arm_launcher(ns.name, spec.plugins or (), {ns.name.partition(".")[0]})
    server = lease = None
    if method == "forkserver":
        boot = spec if boot_in_server else None
        lease = warm.Lease()  # held by its Process class: it may start more workers any time
        server = warm.get_server(context, preload, ns.config, boot, timeout, holder=lease)
    base = context_process.variant(context, method)
    process = type(
        "Process",
        (base,),
        {
            "__module__": __name__,
            "__qualname__": f"get_context({ns.name!r}, {method!r}).Process",
            "_spawnkit_spec": spec,
            "_spawnkit_server": server,
            "_spawnkit_lease": lease,
        },
    )
    ctx_base = getattr(importlib.import_module(f"{context}.context"), _CONTEXT_CLASS[method])
    ctx_cls = type("BootstrapContext", (_BootstrapContextMixin, ctx_base), {})
    ctx: Any = ctx_cls()
    ctx.Process = process
    ctx.namespace = ns
    ctx.spec = spec
    ctx._spawnkit_package = context
    return ctx


_CONTEXT_CLASS = {"spawn": "SpawnContext", "forkserver": "ForkServerContext", "fork": "ForkContext"}


class _BootstrapContextMixin:
    """What a bootstrapping context adds to the package's own: a pool that fails, a repr."""

    namespace: Namespace
    spec: ProcessSpec
    _spawnkit_package: str  # multiprocessing or multiprocess

    def Pool(
        self,
        processes: int | None = None,
        initializer: Any = None,
        initargs: tuple[Any, ...] = (),
        maxtasksperchild: int | None = None,
    ) -> BootstrapPool:
        """A pool of bootstrapped workers that fails on a failed bootstrap (never respawns)."""
        return BootstrapPool(processes, initializer, initargs, maxtasksperchild, context=self)

    def set_forkserver_preload(self, module_names: Sequence[str]) -> None:
        """Refused: the stdlib's preload list is its own fork server's, which this context's
        processes never use (they fork from spawnkit's warm server), so the call did nothing."""
        raise ConfigError(
            f"ctx.set_forkserver_preload({list(module_names)!r}) on a spawnkit context would "
            "preload into the standard library's fork server, which its processes never use. "
            "Pass preload= when making the context: spawnkit.get_context('forkserver', "
            f"namespace={self.namespace.name!r}, preload=[...]).",
            setting="preload",
        )

    def get_context(self, method: str | None = None) -> Any:
        """This context, or the same namespace's for ``method``: the stdlib's answer (its own
        context, whose processes load no plugin) left spawnkit unsaid."""
        if method is None or method == getattr(self, "_name", None):
            return self
        return get_context(method, context=self._spawnkit_package, namespace=self.namespace)

    def __repr__(self) -> str:
        method = getattr(self, "_name", "?")
        return f"<spawnkit bootstrapping context {method!r} for namespace {self.namespace.name!r}>"


def _check(method: str, context: str, preload: tuple[str, ...]) -> None:
    if method not in METHODS:
        raise ConfigError(f"get_context(method={method!r}): use one of {METHODS}", setting="method")
    if context not in CONTEXTS:
        raise ConfigError(
            f"get_context(context={context!r}): use one of {CONTEXTS}", setting="context"
        )
    if preload and method != "forkserver":
        raise ConfigError(
            f"get_context(preload={list(preload)}) needs method='forkserver' (only a fork "
            "server has a process to preload into)",
            setting="preload",
        )
    try:
        importlib.import_module(f"{context}.context")
    except ImportError as exc:
        raise ConfigError(
            "context='multiprocess' needs the multiprocess package: pip install multiprocess",
            setting="context",
        ) from exc


def _check_timeout(method: str, timeout: object) -> None:
    """``timeout=`` bounds the fork server's start: with ``spawn``/``fork``, which have no
    server, it was dropped unsaid (a caller meaning each child's bootstrap got no bound);
    ``-1`` made the server "stuck starting up", ``"5"`` was a bare ``TypeError``."""
    check_seconds("timeout", timeout, none="the fork server's default, 120 s", call="get_context")
    if timeout is not None and method != "forkserver":
        raise ConfigError(
            f"get_context({method!r}, timeout={timeout!r}): timeout= bounds the fork server's "
            f"start, and method={method!r} has no server: it would bound nothing (not a "
            "child's bootstrap). Drop timeout=, or use method='forkserver'.",
            setting="timeout",
        )


class BootstrapPool(_mp_pool.Pool):
    """``multiprocessing.Pool`` on a bootstrapping context; a failed bootstrap breaks it.

    The standard pool replaces an exited worker forever, so a plugin that fails to load would
    make ``map()`` wait while workers die one after the other.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._spawnkit_started: list[Any] = []
        self._spawnkit_broken: Exception | None = None
        self.Process = self._new_worker  # type: ignore[method-assign]
        super().__init__(*args, **kwargs)

    def _new_worker(self, ctx: Any, *args: Any, **kwargs: Any) -> Any:
        if self._spawnkit_broken is None:
            self._spawnkit_broken = self._failed_bootstrap()
        if self._spawnkit_broken is not None:
            self._fail_pending(self._spawnkit_broken)
            return _NoWorker()
        worker = ctx.Process(*args, **kwargs)
        worker.__dict__["_spawnkit_pooled"] = True  # this pool stops itself: not a plain one
        self._spawnkit_started.append(worker)
        return _Starting(worker, self)

    def _failed_bootstrap(self) -> Exception | None:
        for worker in self._spawnkit_started:
            err: Exception | None = worker.bootstrap_error()
            if err is not None:
                return err
        return None

    def _fail_pending(self, err: Exception) -> None:
        """Every task still waiting gets ``err`` (the pool's result objects, by their protocol)."""
        cache: Any = self.__dict__["_cache"]
        result: Any
        for result in list(cache.values()):
            if hasattr(result, "_number_left"):  # MapResult: ready once every chunk is set
                while result._number_left > 0 and not result.ready():
                    result._set(0, (False, err))
            elif hasattr(result, "_items"):  # IMapIterator: its next() raises the error
                result._set(result._index, (False, err))
                cache.pop(result._job, None)
            elif not result.ready():
                result._set(0, (False, err))

    def _check_running(self) -> None:
        if self._spawnkit_broken is not None:
            raise self._spawnkit_broken
        _mp_pool.Pool._check_running(self)  # type: ignore[attr-defined]


class _Starting:
    """A pool's worker whose start may fail: that breaks the pool, as a failed bootstrap does.
    The pool's handler thread starts it, and died of the error (a warm server gone: killed,
    or let go by a later launch), so ``map()`` and ``terminate()`` waited forever.  The
    process itself is what is pickled and started; this object is the pool's handle on it,
    and answers as one that never started once its start failed."""

    def __init__(self, process: Any, pool: BootstrapPool) -> None:
        object.__setattr__(self, "_process", process)
        object.__setattr__(self, "_pool", pool)
        object.__setattr__(self, "_failed", False)

    def start(self) -> None:
        try:
            self._process.start()
        except Exception as exc:
            object.__setattr__(self, "_failed", True)
            self._pool._spawnkit_broken = exc
            self._pool._fail_pending(exc)

    def __getattr__(self, name: str) -> Any:
        if self._failed and name in ("join", "is_alive", "terminate", "kill", "close"):
            return getattr(_NoWorker(), name)
        if self._failed and name in ("exitcode", "pid"):
            return None
        if self._failed and name == "sentinel":  # the pool waits on none (hasattr: False)
            raise AttributeError(name)
        return getattr(self._process, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._process, name, value)  # name, daemon: the pool's, on the process


class _NoWorker:
    """Stands where a worker would be once the pool is broken: never started, never exits."""

    name = "spawnkit-no-worker"
    daemon = True
    exitcode = None
    pid = None

    def start(self) -> None:
        return None

    def join(self, timeout: float | None = None) -> None:
        return None

    def is_alive(self) -> bool:
        return False

    def terminate(self) -> None:
        return None

    def kill(self) -> None:
        return None

    def close(self) -> None:
        return None


def bootstrap_here(namespace: Namespace | NamespaceConfig | str | None = None) -> BootstrapReport:
    """Run guard check, platform, plugins and hooks in this process; return its report."""
    ns = get_namespace(namespace)
    report = bootstrap_ns(ns)
    # Called from the entry script's own body: its plain spawn children re-run it (no warning)
    _plain_children.note_bootstrap_here(ns.name, sys._getframe(1))
    return report


def bootstrap_ns(ns: Namespace, *, decide: bool = True) -> BootstrapReport:
    """``bootstrap_here()``; ``decide=False``: a repeated call does not decide the platform
    afresh (``spawn_with_plugins(bootstrap_parent=True)``, whose launch decides it and holds
    its workers to this process's, with its own message: ``_here.Applied.check_launch``)."""
    with _here_lock:
        applied = _here.applied_here(ns)
        if applied is not None:  # here before: nothing new to do, unless asked for another
            _here.check_same_selection(ns, applied, decide=decide)
            return applied.report
        found = context_process.bootstrapped_report(ns.name)
        if found is not None:  # a worker of this namespace: nothing new to do
            report: BootstrapReport = found
            return report
        from spawnkit.bootstrap import process
        from spawnkit.spec import _phase

        # A worker of another namespace (an engine's rank importing a library that bootstraps
        # its own namespace as it loads, as README's pattern has it): it stays that worker.
        # The bootstrap enters this namespace's worker phase and sets its spec (rank 0 of 1),
        # which became the rank's own current_spec(), current_report(), default namespace
        # and default context, unsaid; both are put back once this one's hooks are applied.
        outer = _phase.worker_namespace()
        kept = None if outer is None or outer.name == ns.name else _phase.snapshot()
        current = process._current_spec, process._current_report
        try:
            boot = process.Bootstrapper(context_spec(ns, applies_here=True))
            # This process ran code of its own before the call: instances, closures and
            # callbacks made then may hold originals the sweep cannot rebind, so a target
            # imported before it is refused even when every global holder is repairable.
            boot.sweep_repairs_guard = False
            report = boot.through_hooks()
        except ImportGuardError as exc:
            raise _too_late(ns, exc) from exc
        finally:
            if kept is not None:
                _phase.restore(kept)
                process._set_current(*current)
        from spawnkit.bootstrap import _script_copy

        _script_copy.check_process(ns, boot.spec, "apply_hooks")
        _here.record(ns, report, boot.spec)
        return report


def _too_late(ns: Namespace, exc: ImportGuardError) -> ImportGuardError:
    modules = sorted({str(f.get("module", "")) for f in exc.findings if isinstance(f, dict)})
    others = sorted({str(f["imported_by"]) for f in exc.findings if f.get("imported_by")})
    if others and all(f.get("imported_by") for f in exc.findings):  # not too late: between
        # a stale holder's finding names where it is held, not what both hook: its target
        targets = sorted({str(f["target"]) for f in exc.findings if f.get("target")})
        named = ", ".join(repr(m) for m in targets or modules)
        what = f"{named}, which the other namespace's hooks" + (" wrapped" if targets else "")
        return ImportGuardError(
            f"spawnkit.bootstrap_here({ns.name!r}) after bootstrap_here("
            f"{', '.join(map(repr, others))}): both hook "
            f"{'' if targets else 'module(s) '}{what}{'' if targets else ' imported'}, and code "
            f"that ran in between holds its hooked objects "
            f"where {ns.name!r}'s hooks cannot reach them. To run anyway with these hooks "
            f"ineffective there, set {ns.config.guard_var}=warn.\n{exc}",
            findings=exc.findings,
            stage=exc.stage,
        )
    err = ImportGuardError(
        f"spawnkit.bootstrap_here({ns.name!r}) came too late: hook target module"
        f"{'s' if len(modules) > 1 else ''} {', '.join(repr(m) for m in modules)} "
        "was already imported in this process, so code bound to the originals there would "
        "never run the hooks. Fix: call bootstrap_here() at the top of the entry module, "
        "before any import that reaches those modules (or import them lazily, with "
        f"spawnkit.lazy). To run anyway with these hooks ineffective, set "
        f"{ns.config.guard_var}=warn.\n{exc}",
        findings=exc.findings,
        stage=exc.stage,
    )
    return err
