"""A Ray task or actor submitted from a process whose hooks are applied runs without them.

An engine's process that calls ``ray.init()`` and submits work (vLLM's Ray executor: its
engine-core process, a spawnkit worker or a process after ``bootstrap_here()``, creates its
worker actors) has that work run in a Ray worker process, a raylet's child that loads no
plugin: each hook works in the submitting process and silently not there.  spawnkit's own
way to run ranks on Ray is ``spawnkit.ray.spawn_on_ray``, whose actors run the bootstrap.

Imported by ``_plain_children`` only once Ray's ``ray.remote_function`` or ``ray.actor`` is
imported in an armed process (the on-import watch: Ray is imported late, by the entry), never
the other way: a worker that does not use Ray imports neither.  ``RemoteFunction._remote``
and ``ActorClass._remote`` are stood in for: every ``.remote()`` (a decorated function's,
``.options(...).remote()``, an actor class's) passes through them in Ray 2.x.

Named once per remote function or actor class, at the user's line, when its module's
top-level package is one this process's hook targets are in (a data-loading task of another
library, or spawnkit's own ``RankActor``, is not), the call's ``runtime_env`` (its options',
else the job's ``ray.init(runtime_env=...)``) has no ``worker_process_setup_hook`` (the user
bootstraps Ray's workers themselves), and the function's code (an actor class's methods)
does not call ``bootstrap_here``.  A check that fails says nothing and submits the work.

A function or class of the launching script (``__main__``) travels by value (cloudpickle), and
the Ray worker does not re-run the script, so a ``bootstrap_here()`` in its body does not run
there: it is named when its code (or a ``__main__`` function it calls, which travels with it)
imports a module of a hooked package or uses a global of one (a module, function, class or
instance, which the worker imports to unpickle it), read from its bytecode once per function;
a script's task that touches no hooked package is not.
"""

from __future__ import annotations

import sys
import types
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from spawnkit._reference import top_packages
from spawnkit._warnopts import user_stacklevel
from spawnkit.errors import PlainChildWarning

__all__ = ["stand_in"]

# (module, class, what its ``_remote`` submits)
_CLASSES = (("ray.remote_function", "RemoteFunction", "task"), ("ray.actor", "ActorClass", "actor"))
_SETUP_VAR = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"  # ray.init's form of the setup hook
_told: set[str] = set()  # the functions and classes named already (once each)
_by_value_quiet: Any = weakref.WeakSet()  # __main__'s, read and found to touch no hooked package
# What a Ray worker goes without as things stand now, and the namespaces armed: the caller's
_armed: list[tuple[Callable[[], tuple[str, str]], Mapping[str, Any]]] = []


def stand_in(loss: Callable[[], tuple[str, str]], namespaces: Mapping[str, Any]) -> None:
    """Stand in for the ``_remote`` of each class whose module has run by now; ``loss()``
    says what this process's Ray workers go without (and the namespace) at each call."""
    _armed[:] = [(loss, namespaces)]
    for module, cls_name, kind in _CLASSES:
        cls = getattr(sys.modules.get(module), cls_name, None)
        own = None if cls is None else cls.__dict__.get("_remote")
        if not callable(own) or getattr(own, "_spawnkit_ray", False):
            continue
        setattr(cls, "_remote", _stand_in(own, kind))


def _stand_in(own: Callable[..., Any], kind: str) -> Callable[..., Any]:
    def _remote(remote: Any, *args: Any, **options: Any) -> Any:
        try:
            _check(remote, kind, options)
        except PlainChildWarning:
            raise  # -W error::spawnkit.PlainChildWarning: the submission raises, as asked
        except Exception:  # a check that fails says nothing: the work is submitted
            pass
        return own(remote, *args, **options)

    _remote.__wrapped__ = own  # type: ignore[attr-defined]
    _remote._spawnkit_ray = True  # type: ignore[attr-defined]
    return _remote


def _check(remote: Any, kind: str, options: dict[str, Any]) -> None:
    loss, namespaces = _armed[0]
    lost, name = loss()
    if not lost:
        return  # the process left its worker phase, or holds no plugin and no hook
    if kind == "task":
        code = remote._function
    else:  # Ray's subclass of the user's class, which it keeps
        modified = remote.__ray_metadata__.modified_class
        code = getattr(modified, "__ray_actor_class__", modified)
    while hasattr(code, "__wrapped__"):  # Ray's tracing wrapper, once tracing is on
        code = code.__wrapped__
    what = f"{getattr(code, '__module__', '') or ''}.{getattr(code, '__qualname__', '')}"
    top = str(getattr(code, "__module__", "") or "").partition(".")[0]
    hooked = top_packages(t for ns in namespaces.values() for t in ns.hooks.registered_targets())
    uses = ""
    if what in _told:
        return
    if top == "__main__":  # the script's own, pickled by value: what its code reaches
        uses = "" if code in _by_value_quiet else _by_value_uses(code, hooked)
        if not uses:
            _by_value_quiet.add(code)
            return
    elif top not in hooked:
        return
    if _sets_up(options.get("runtime_env")) or _sets_up(_job_runtime_env()):
        return  # the user's worker_process_setup_hook runs in each Ray worker first
    if any("bootstrap_here" in c.co_names for c in _codes(code)):
        return  # it bootstraps itself as it runs
    _told.add(what)
    short = what.rpartition(".")[2]
    warnings.warn(
        f"a Ray {'task of' if kind == 'task' else 'actor of class'} {what} was submitted "
        f"({short}.remote()) from a process whose hooks are applied: the Ray worker process "
        f"runs it{_uses_said(uses)} without {lost}, so none of those hooks runs there unless it "
        f"bootstraps itself. Run ranks with spawnkit.ray.spawn_on_ray(entry, payload, nprocs=N, "
        f"namespace={name!r}), whose actors bootstrap before the entry; or call "
        f"spawnkit.bootstrap_here(<namespace {name!r}>) first in "
        f"{'the remote function' if kind == 'task' else 'the actor class' + chr(39) + 's __init__'}"
        " (the engine's imports after it, not at its module's top); or give ray.init() a "
        "runtime_env with a worker_process_setup_hook that does; or silence this with "
        "-W ignore::spawnkit.PlainChildWarning where it needs no plugin.",
        PlainChildWarning,
        stacklevel=user_stacklevel(("ray",)),  # the user's line, past Ray's wrappers
    )


def _uses_said(uses: str) -> str:
    if not uses:
        return ""
    return (
        f" (it uses {uses}, which this process hooks: Ray pickles a function of the launching "
        "script by value, and its worker imports that, not the script)"
    )


def _by_value_uses(code: Any, hooked: set[str]) -> str:
    """The first module of a hooked package that ``code`` (a ``__main__`` function or class,
    and the ``__main__`` functions it calls) imports or takes from its globals; ``""`` for
    none, or where one of them calls ``bootstrap_here`` (it bootstraps itself)."""
    import dis  # loaded already: Ray imports inspect

    found, seen, stack = "", set(), [code]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        for function in _functions(obj):
            module_globals = getattr(function, "__globals__", {})
            for current in _codes(function):
                if "bootstrap_here" in current.co_names:
                    return ""
                for op in dis.get_instructions(current):
                    if op.opname == "IMPORT_NAME":
                        name = str(op.argval)
                    elif op.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                        value = module_globals.get(op.argval)
                        if _by_value(value):
                            stack.append(value)  # travels with it: read too
                        name = _module_of(value)
                    else:
                        continue
                    if not found and name.partition(".")[0] in hooked:
                        found = name
    return found


def _functions(obj: Any) -> list[Any]:
    if isinstance(obj, type):
        return [getattr(v, "__func__", v) for v in vars(obj).values()]
    return [obj]


def _by_value(value: Any) -> bool:
    return isinstance(value, (types.FunctionType, type)) and value.__module__ == "__main__"


def _module_of(value: Any) -> str:
    """Where the worker imports ``value`` from to unpickle it; an instance's class's module,
    read off its type (a proxy's own attributes could resolve or import what it stands for)."""
    if isinstance(value, types.ModuleType):
        return value.__name__
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        return str(value.__module__ or "")
    return str(type(value).__module__) if value is not None else ""


def _sets_up(runtime_env: Any) -> bool:
    if not runtime_env:
        return False
    env_vars = runtime_env.get("env_vars") or {}
    return bool(runtime_env.get("worker_process_setup_hook") or env_vars.get(_SETUP_VAR))


def _job_runtime_env() -> Any:
    import ray  # imported already: its .remote() is running

    if not ray.is_initialized():
        return None  # .remote() starts one with no runtime_env of the user's
    return ray.get_runtime_context().runtime_env


def _codes(code: Any) -> Iterator[types.CodeType]:
    """The code a function (or each method of a class) runs, nested functions included."""
    found = _functions(code)
    stack = [c.__code__ for c in found if isinstance(getattr(c, "__code__", None), types.CodeType)]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
