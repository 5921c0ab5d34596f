"""A plain ``spawn``/``forkserver`` child of a bootstrapped process runs without its plugins
(and so does a Python child its ``subprocess`` starts: ``arm_subprocess``, at the end).

An engine whose scheduler (a spawnkit worker), own process (``bootstrap_here()``) or launcher
starts its detokenizer, a process pool or a ``DataLoader`` through ``get_context("spawn")``
gives that child a fresh interpreter that loads no plugin: each hook works in the scheduler
and silently not there (SGLang's detokenizer, vLLM's EngineCore, upstream).  ``fork`` children
inherit the hooks; Python 3.14 makes ``forkserver`` the default start method, so a plain
``Pool()`` is such a child there too.

Once a process applied its hooks, the stdlib's ``SpawnProcess._Popen`` and
``ForkServerProcess._Popen`` (and ``multiprocess``'s) are stood in for: starting one warns once
per start method and target with the fix, ``spawnkit.get_context(method, namespace=...)``,
whose ``Process`` overrides ``_Popen`` and so is never seen here.  The stand-in says nothing
once the hooks are gone (``unapply()``, a test leaving its worker phase), and nothing for
multiprocessing's own manager process serving the standard library's types only (one serving
an engine's callable runs engine code: named).

``multiprocess`` (dill's fork) is often imported only later, by the entry: ``datasets``
imports it inside ``map(num_proc=)``, whose children nothing stood in for, so they ran
without the hooks, unsaid.  Its classes do not exist when the hooks are applied, so its
``multiprocess.context`` import is watched instead and its classes are stood in for as that
module finishes, before the importing statement goes on.  The watch goes through the
on-import finder (``hooks/_on_import.py``), which a worker with a patched module already has
on ``sys.meta_path`` (one more name in its table; no second finder), and ends as it fires.
Importing ``multiprocess`` here instead would cost every worker ~20 ms (dill with it) for a
package most never use.

loky's reusable executor starts its workers as ``LokyProcess`` through its own ``_Popen``, no
multiprocessing class: those ran unhooked and unsaid, where a plain spawn
``ProcessPoolExecutor`` warned.  ``loky.backend.process`` is stood in for and watched the same
way, one watch per late module, each ended as it fires (the finder leaves once none is
left).  joblib's vendored copy (``joblib.externals.loky``: ``joblib.Parallel``'s default
backend) is the same class under another name, stood in for the same way; its fix differs,
since joblib's loky backend drops a ``context``: joblib takes one as ``Parallel(backend=ctx)``.

A Ray task or actor submitted from a process whose hooks are applied runs in a Ray worker,
a raylet's child that loads no plugin (vLLM's Ray executor creates its worker actors so).
``ray.remote_function`` and ``ray.actor`` are watched the same way (only after ``arm``, not
in a launcher) and their ``_remote`` stood in for by ``_ray_tasks``, imported only then.

An engine's entry script that calls ``bootstrap_here()`` in its own body (README's pattern 3)
is re-run by a plain spawn or forkserver child as ``__mp_main__`` before the target, so that
child bootstraps itself: no warning then.  Not for a call under ``if __name__ == "__main__":``
or in a function, which the child does not run; decided once, as ``bootstrap_here()`` runs,
from the calling frame and the script's syntax tree.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from types import FrameType

from spawnkit._compat import TYPE_CHECKING
from spawnkit._warnopts import user_stacklevel
from spawnkit.errors import PlainChildWarning
from spawnkit.spec import _phase

if TYPE_CHECKING:
    from typing import Any

__all__: list[str] = []

_PACKAGES = ("multiprocessing", "multiprocess")
_LOKY = ("loky.backend.process", "joblib.externals.loky.backend.process")  # joblib vendors it
# (module, class, start method): each class's own ``_Popen`` starts a child without the hooks
_CLASSES = (
    *(
        (f"{package}.context", cls_name, method)
        for package in _PACKAGES
        for cls_name, method in (("SpawnProcess", "spawn"), ("ForkServerProcess", "forkserver"))
    ),
    *((module, "LokyProcess", "loky") for module in _LOKY),
)
_QUIET_TARGETS = ("multiprocessing.managers", "multiprocess.managers")
_armed: set[tuple[str, str]] = set()  # (module, class): stood in for (its stand-in keeps it)
_LATE = ("multiprocess.context", *_LOKY)  # imported after arming: stood in for as it ends
_late_watch: dict[str, int] = {}  # the on-import watch for each, until it runs
# Where Ray defines RemoteFunction and ActorClass: a task or actor runs in a Ray worker with
# no plugin (``_ray_tasks``); watched like those, in a process whose hooks are applied only
_RAY = ("ray.remote_function", "ray.actor")


def _nothing() -> tuple[str, str]:
    return "", ""


# (what a plain child goes without as things stand now, the namespace): the last one armed
_loss: Callable[[], tuple[str, str]] = _nothing
_namespaces: dict[str, Any] = {}  # name -> each Namespace armed here (its hook targets)
# A launcher's (no hooks of its own): the namespace, its workers' plugins, the engine's packages
_launched: tuple[str, tuple[str, ...], frozenset[str]] | None = None
# (namespace, the __main__ module) whose own body called bootstrap_here(): a child re-runs it
_main_boots: tuple[str, object] | None = None


def arm(namespace: Any) -> None:
    """After this process applied ``namespace``'s hooks: a plain child warns what it lacks."""
    global _loss
    report = namespace.plugins.report
    if not (report.applied or report.loaded):
        return  # nothing a child would go without
    _loss = _loss_of(namespace)
    _namespaces[namespace.name] = namespace
    _stand_in_everywhere()


def arm_launcher(namespace: str, plugins: tuple[str, ...], packages: set[str]) -> None:
    """In a launcher that started workers with ``plugins``: a plain child whose target is the
    engine's own code (a module of ``packages``) warns that it runs without them.  SGLang's
    launcher starts its schedulers as workers and its detokenizer through plain
    multiprocessing (PR #38464): that process never loaded a plugin, and nothing said so."""
    global _launched
    packages.discard("")
    packages.discard("__main__")
    packages.discard("spawnkit")
    if not plugins or not packages:
        return
    _launched = (namespace, plugins, frozenset(packages))
    _stand_in_everywhere()


def note_bootstrap_here(namespace: str, caller: FrameType) -> None:
    """``bootstrap_here(namespace)`` ran, called from ``caller``: remember it when that is the
    ``__main__`` module's body outside an ``if`` on ``__name__``, which a plain spawn or
    forkserver child runs again as ``__mp_main__`` and so bootstraps itself."""
    global _main_boots
    main = sys.modules.get("__main__")
    if _main_boots is not None or main is None or caller.f_globals is not vars(main):
        return
    code = caller.f_code
    if code.co_name == "<module>" and _unguarded(code.co_filename, caller.f_lineno):
        _main_boots = (namespace, main)


_BLOCKS = ("body", "orelse", "handlers", "finalbody")  # where a statement nests others


def _unguarded(path: str, line: int) -> bool:
    """Whether the statement at ``line`` of ``path`` runs when the module is imported under
    another name: no enclosing ``if`` tests ``__name__``."""
    import ast  # only for a script that bootstraps itself, once

    try:
        with open(path, "rb") as source:
            body: list[Any] = ast.parse(source.read()).body
    except (OSError, SyntaxError, ValueError):
        return False  # no file to read (``-c``, stdin): a child re-runs no such body either
    while body:
        stmt = next((s for s in body if s.lineno <= line <= (s.end_lineno or s.lineno)), None)
        if stmt is None:
            return False
        if isinstance(stmt, ast.If) and any(
            isinstance(node, ast.Name) and node.id == "__name__" for node in ast.walk(stmt.test)
        ):
            return False
        body = [c for f in _BLOCKS for c in getattr(stmt, f, [])]
    return True


def _child_boots_itself(process_obj: Any, namespace: str) -> bool:
    """Its preparation re-runs the ``__main__`` body that bootstrapped ``namespace``
    (``_reruns``); loky does only when asked."""
    if _main_boots is None or _main_boots[0] != namespace:
        return False
    main = sys.modules.get("__main__")
    if main is not _main_boots[1] or not getattr(process_obj, "init_main_module", True):
        return False
    return _reruns(main)


def _reruns(main: object) -> bool:
    """Whether a spawn or forkserver child re-runs ``main``'s body as ``__mp_main__``: as
    ``multiprocessing.spawn.get_preparation_data`` decides (by module name unless that is a
    package's ``__main__``, else by file unless it is IPython's)."""
    spec_name = getattr(getattr(main, "__spec__", None), "name", None)
    if spec_name is not None:
        return spec_name != "__main__" and not str(spec_name).endswith(".__main__")
    path = getattr(main, "__file__", None)
    return path is not None and os.path.splitext(os.path.basename(path))[0] != "ipython"


def _stand_in_everywhere() -> None:
    for module, cls_name, method in _CLASSES:
        cls = getattr(sys.modules.get(module), cls_name, None)
        own = None if cls is None else cls.__dict__.get("_Popen")
        if not isinstance(own, staticmethod) or (module, cls_name) in _armed:
            continue
        _armed.add((module, cls_name))
        cls._Popen = staticmethod(_stand_in(own.__func__, method))  # type: ignore[union-attr]
    if _namespaces and any(name in sys.modules for name in _RAY):
        from spawnkit.bootstrap import _ray_tasks  # only in a process that imported Ray

        _ray_tasks.stand_in(lambda: _loss(), _namespaces)  # _loss as it is at each call
    _await_late()


def _await_late() -> None:
    """Not imported yet: stand in for their classes once an import has run them."""
    late = (*_LATE, *_RAY) if _namespaces else _LATE  # Ray: where hooks are applied only
    missing = [name for name in late if name not in sys.modules and name not in _late_watch]
    if not missing:
        return
    from spawnkit.hooks import _on_import  # loaded already: the hooks' and a Namespace's

    token = _on_import.watch(missing, _late_imported, hook=False)  # one for all: a worker's
    for name in missing:  # start pays one watch, not one per module
        _late_watch[name] = token


def _late_imported(name: str) -> None:
    """Before the importing statement goes on, so no class of it has started a child yet."""
    from spawnkit.hooks import _on_import

    token = _late_watch.pop(name, None)
    if token is not None and token not in _late_watch.values():  # its last module: done
        _on_import.unwatch(token)  # the finder leaves sys.meta_path if nothing else is watched
    _stand_in_everywhere()


def _loss_of(namespace: Any) -> Callable[[], tuple[str, str]]:
    """What a plain child of this process goes without, asked at each start: nothing once the
    process left its worker phase (a test's) or holds neither plugins nor hooks."""
    name = namespace.name

    def loss() -> tuple[str, str]:
        if not _phase.hooks_applied():
            return "", name
        targets, plugins = namespace.hooks.applied_targets(), namespace.plugins.report.loaded
        if not (targets or plugins):
            return "", name
        return (
            f"the plugins of namespace {name!r} ({', '.join(p.name for p in plugins)}) and "
            f"the hooks on {len(targets)} target(s) of this process"
        ), name

    return loss


def _runs_no_engine_code(process_obj: Any) -> bool:
    """A manager's server process (``BaseManager._run_server(registry, ..., initializer)``)
    that runs only the standard library's callables (``multiprocessing.Manager()``'s list,
    dict, lock).  One with a callable of the engine's (``EngManager.register("Tok",
    make_tok)``) or an initializer runs engine code there, without the plugins."""
    args: tuple[Any, ...] = tuple(getattr(process_obj, "_args", ()))
    registry = args[0] if args and isinstance(args[0], dict) else {}
    if len(args) > 5 and args[5] is not None:
        return False
    stdlib: frozenset[str] = getattr(sys, "stdlib_module_names", frozenset())
    for entry in registry.values():
        made = entry[0] if isinstance(entry, tuple) and entry else None
        top = str(getattr(made, "__module__", "") or "").partition(".")[0]
        if made is not None and top not in stdlib and top not in _PACKAGES:
            return False
    return True


def _stand_in(popen: Callable[[Any], Any], method: str) -> Callable[[Any], Any]:
    def _Popen(process_obj: Any) -> Any:
        lost, name = _loss()
        where, module, starter = _runs(process_obj)
        if not lost and _launched is not None:  # a launcher's, for the engine's own code
            name, plugins, packages = _launched
            if module.partition(".")[0] in packages:
                lost = f"the plugins its workers load ({', '.join(plugins)}, namespace {name!r})"
        if lost and _child_boots_itself(process_obj, name):
            lost = ""  # it re-runs the script's bootstrap_here() before its target
        if lost and not (where.startswith(_QUIET_TARGETS) and _runs_no_engine_code(process_obj)):
            warnings.warn(
                f"a {method!r} process {starter}{where} was started through "
                f"{_through(method, where)}: it starts without {lost}, "
                f"so none of those hooks runs there. {_fix(method, name, starter, where)}, or "
                "silence this with -W ignore::spawnkit.PlainChildWarning where the child "
                "needs no plugin.",
                PlainChildWarning,
                stacklevel=user_stacklevel(_STARTERS),  # the user's line, past the libraries
            )
        return popen(process_obj)

    return _Popen


_JOBLIB = "joblib."  # its vendored loky's targets (joblib.externals.loky.process_executor)


def _through(method: str, where: str) -> str:
    if method != "loky":
        return "plain multiprocessing"
    return (
        "joblib's loky executor (joblib.Parallel's default backend)"
        if where.startswith(_JOBLIB)
        else "loky's executor"
    )


# The libraries between a user's line and the start: multiprocessing's default Process
# (Process._Popen), executors, pools, DataLoader, torch's spawn, joblib's Parallel
_STARTERS = (
    *_PACKAGES, "concurrent.futures", "loky", "torch.utils.data", "torch.multiprocessing",
    "joblib",
)  # fmt: skip
_TORCH_SPAWN = "of torch.multiprocessing.spawn running "  # its _wrap(fn, i, args, error_file)


def _dotted(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '') or ''}.{getattr(obj, '__qualname__', '')}".strip(".")


def _runs(process_obj: Any) -> tuple[str, str, str]:
    """(what the child runs, that code's module, who starts it so): the user's function, not
    torch's ``_wrap`` around it; a subclass's own ``run()`` with its class."""
    target = getattr(process_obj, "_target", None)
    if target is None:
        cls = type(process_obj)
        owner = next((c for c in cls.__mro__ if "run" in vars(c)), None)
        if owner is None or owner.__name__ == "BaseProcess":
            return "run()", "", "with target "  # BaseProcess.run: no target, runs nothing
        return f"{_dotted(owner)}.run()", str(owner.__module__), "running "
    args = tuple(getattr(process_obj, "_args", ()) or ())
    if _dotted(target) == "torch.multiprocessing.spawn._wrap" and args and callable(args[0]):
        return _dotted(args[0]), str(getattr(args[0], "__module__", "")), _TORCH_SPAWN
    return _dotted(target), str(getattr(target, "__module__", "") or ""), "with target "


def _fix(method: str, name: str, starter: str, where: str) -> str:
    """What the user can change: loky takes a context object, torch's spawn a start method
    only (no context), so its processes come from spawnkit's launcher instead; joblib's loky
    backend drops a ``context=`` (its executor is made without it), its multiprocessing
    backend takes the context object as ``Parallel``'s ``backend``."""
    if method == "loky" and where.startswith(_JOBLIB):
        return (
            f"Give joblib a spawnkit context: ctx = spawnkit.get_context('spawn', namespace="
            f"{name!r}); joblib.Parallel(n_jobs=N, backend=ctx) (its multiprocessing backend "
            "on that context; the loky backend takes no context) or "
            "joblib.externals.loky.get_reusable_executor(context=ctx)"
        )
    if method == "loky":
        return (
            f"Give loky a spawnkit context: ctx = spawnkit.get_context('spawn', namespace="
            f"{name!r}); loky.get_reusable_executor(context=ctx) or "
            "loky.ProcessPoolExecutor(context=ctx) (or concurrent.futures' "
            "ProcessPoolExecutor(mp_context=ctx))"
        )
    if starter == _TORCH_SPAWN:
        return (
            f"Start them with spawnkit.spawn_with_plugins({where}, payload, nprocs=N, "
            f"namespace={name!r}, start_method={method!r}, entry_args=('local_rank', "
            "'payload')), which calls it as fn(i, payload), as torch.multiprocessing.spawn(fn, "
            "args=(payload,), nprocs=N) does"
        )
    return (
        f"Start it from ctx = spawnkit.get_context({method!r}, namespace={name!r}) "
        "(ctx.Process, ctx.Pool, ProcessPoolExecutor(mp_context=ctx), "
        "DataLoader(multiprocessing_context=ctx))"
    )


# ----------------------------------------------------------- Python children of subprocess
# An engine's worker (or its own process after ``bootstrap_here()``) that relaunches a server
# or a router as ``[sys.executable, "-m", "eng.server"]`` (or a script of the engine's) gives
# that child a fresh interpreter that loads no plugin.  Once a process applied its hooks,
# ``subprocess.Popen.__init__`` (so ``run``, ``call``, ``check_output`` and asyncio's
# subprocesses) is stood in for; what the child runs is looked at in ``_python_child_check``
# only as a ``Popen`` is made.  The warm-start server stands in for ``Popen.__init__`` too
# while it bootstraps (``protocol/_fork_children``), and its hooks apply inside that block:
# this stand-in calls through its ``__wrapped__``, which that block's end points past its own.
# name -> (a Namespace whose hooks this process applied, its entry's module: the engine's)
_popen_namespaces: dict[str, tuple[Any, str]] = {}
_popen_watch: int | None = None  # waiting for ``subprocess``'s import (``arm_subprocess``)


def arm_subprocess(namespace: Any, entry: str = "") -> None:
    """After this process applied ``namespace``'s hooks: a Python child of the engine's that
    ``subprocess`` starts warns (``_python_child_check``, imported only as a ``Popen`` is made)."""
    report = namespace.plugins.report
    if not (report.applied or report.loaded):
        return  # nothing a child would go without
    _popen_namespaces[namespace.name] = namespace, entry.partition(":")[0]
    _stand_in_os()
    if "subprocess" in sys.modules:  # a bootstrap has imported it by now: the common case
        _stand_in_popen()
        return
    global _popen_watch
    if _popen_watch is None:  # importing it here would cost a worker that never starts one
        from spawnkit.hooks import _on_import

        _popen_watch = _on_import.watch(("subprocess",), _subprocess_imported, hook=False)


def _subprocess_imported(_name: str) -> None:
    global _popen_watch
    from spawnkit.hooks import _on_import

    token, _popen_watch = _popen_watch, None
    if token is not None:
        _on_import.unwatch(token)
    _stand_in_popen()


def _stand_in_popen() -> None:
    import subprocess

    if getattr(subprocess.Popen.__init__, "_spawnkit_python_children", False):
        return

    def __init__(popen: Any, *args: Any, **kwargs: Any) -> None:
        if _phase.hooks_applied():  # not once a test left its worker phase
            try:
                from spawnkit.bootstrap import _python_child_check

                _python_child_check.check(args, kwargs, tuple(_popen_namespaces.values()))
            except PlainChildWarning:
                raise  # -W error::spawnkit.PlainChildWarning: the start raises, as asked
            except Exception:  # a check that fails says nothing: the child starts
                pass
        __init__.__wrapped__(popen, *args, **kwargs)  # type: ignore[attr-defined]

    __init__.__wrapped__ = subprocess.Popen.__init__  # type: ignore[attr-defined]
    __init__._spawnkit_python_children = True  # type: ignore[attr-defined]
    subprocess.Popen.__init__ = __init__  # type: ignore[method-assign,assignment]


# ``os.posix_spawn``/``os.posix_spawnp`` start such a child without ``subprocess``, and
# ``os.execv``/``os.execve`` (through which every ``os.exec*`` and ``os.spawn*`` goes) replace
# a process with it: the new interpreter holds no hook.  Stood in for beside ``Popen``.  An
# exec never raises (``-W error``): between a fork and its exec, a raise would leave a copy of
# the worker running on in the child; the warning is written instead and the exec goes on.
_OS_STARTS = ("posix_spawn", "posix_spawnp", "execv", "execve")


def _stand_in_os() -> None:
    for name in _OS_STARTS:
        real = getattr(os, name, None)
        if real is not None and not getattr(real, "_spawnkit_python_children", False):
            setattr(os, name, _os_stand_in(name, real))


def _os_stand_in(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
    def start(*args: Any, **kwargs: Any) -> Any:
        if _phase.hooks_applied() and len(args) > 1 and not _from_subprocess():
            try:
                from spawnkit.bootstrap import _python_child_check

                namespaces = tuple(_popen_namespaces.values())
                _python_child_check.check_os(f"os.{name}", args[0], args[1], namespaces)
            except PlainChildWarning:
                raise  # posix_spawn under -W error::spawnkit.PlainChildWarning (never exec)
            except Exception:  # a check that fails says nothing: the child starts
                pass
        return real(*args, **kwargs)

    start.__name__ = start.__qualname__ = name
    start.__doc__ = real.__doc__
    start.__wrapped__ = real  # type: ignore[attr-defined]
    start._spawnkit_python_children = True  # type: ignore[attr-defined]
    return start


def _from_subprocess() -> bool:
    """``subprocess`` itself calls ``os.posix_spawn`` (a ``Popen`` whose options allow it):
    its ``Popen.__init__`` stand-in has looked at that child already."""
    module = sys.modules.get("subprocess")
    where = getattr(module, "__file__", None)
    return where is not None and sys._getframe(2).f_code.co_filename == where
