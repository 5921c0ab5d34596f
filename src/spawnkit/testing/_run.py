"""``run_entry``: one real spawned worker, the full staged bootstrap, the entry's result back.

A real process because only a fresh interpreter shows import-order mistakes, unpicklable payloads
and patched-too-late bindings.  A thin layer over ``spawn_with_plugins(nprocs=1)``: the child's
exception is re-raised with its traceback as ``__cause__`` (:class:`ChildTraceback`), or as the
launcher's ``ChildRaisedError`` when it cannot be unpickled here or is no ``Exception`` (a
``KeyboardInterrupt`` raised as itself would stop the whole test run).  An entry importable by
name in a fresh interpreter travels as ``"module:qualname"``, otherwise by value (cloudpickle).
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

from spawnkit.bootstrap.stages import Stage
from spawnkit.errors import (
    BootstrapTimeoutError,
    ChildRaisedError,
    ConfigError,
    EntryResolutionError,
    EntryTimeoutError,
)
from spawnkit.namespace import get_namespace
from spawnkit.spec import Payload
from spawnkit.testing._env import EnvOverlay

if TYPE_CHECKING:
    from spawnkit.bootstrap.report import BootstrapReport
    from spawnkit.launch.group import WorkerGroup
    from spawnkit.namespace import Namespace
    from spawnkit.spec import NamespaceConfig

__all__ = ["ChildTraceback", "EntryRun", "run_entry"]

DEFAULT_TIMEOUT = 60.0


class ChildTraceback(Exception):
    """The worker's formatted traceback, the ``__cause__`` of an exception re-raised here.

    Where it was raised (rank, pid, stage) is said here, in the cause pytest prints, and not
    as a note on the exception itself: ``pytest.raises(match=)`` reads the notes too, so a
    note made ``match="^failed with code 7$"`` fail for the exact message the test expects.
    """

    def __init__(self, text: str, where: str = "") -> None:
        super().__init__(text)
        self.text = text
        self.where = where

    def __str__(self) -> str:
        where = f" ({self.where})" if self.where else ""
        return f"traceback in the spawned worker{where}:\n\n" + self.text.rstrip()


ChildTraceback.__module__ = "spawnkit.testing"


@dataclass(frozen=True)
class EntryRun:
    """What :func:`run_entry` returns; unpacks as ``result, report = run_entry(...)``."""

    result: Any
    report: BootstrapReport | None
    pid: int | None = None
    exit_code: int | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Any]:
        yield self.result
        yield self.report


def _find_spec_fresh(name: str) -> importlib.machinery.ModuleSpec | None:
    """The spec a fresh interpreter would find, ignoring ``sys.modules`` (pytest importlib mode)."""
    parts = name.split(".")
    path: Sequence[str] | None = None
    spec: importlib.machinery.ModuleSpec | None = None
    for i in range(len(parts)):
        spec = importlib.machinery.PathFinder.find_spec(
            ".".join(parts[: i + 1]), list(path) if path is not None else None
        )
        if spec is None:
            return None
        if i < len(parts) - 1:
            locations = spec.submodule_search_locations
            if locations is None:
                return None
            path = list(locations)
    return spec


def _same_file(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return False
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def by_reference_name(entry: Callable[..., Any]) -> str | None:
    """``"module:qualname"`` when a fresh spawned child can import ``entry`` by name, else None.

    The launcher's own naming (``launcher._by_name``): a classmethod and a method of a
    module-level instance (``ENGINE.run``) are new objects at each attribute read, so an
    identity test sent them by value, and the copied instance ran unhooked here while a real
    launch of the same callable ran the hook.
    """
    from spawnkit.launch.launcher import _by_name

    ref = _by_name(entry)
    module = sys.modules.get(ref.partition(":")[0]) if ref else None
    return ref if module is not None and _importable_fresh(module) else None


def _importable_fresh(module: ModuleType) -> bool:
    if module.__name__ in ("__main__", "__mp_main__"):
        return False
    spec = _find_spec_fresh(module.__name__)
    if spec is None:
        return False
    if spec.origin in ("built-in", "frozen"):
        return True
    return _same_file(spec.origin, getattr(module, "__file__", None))


@contextlib.contextmanager
def _pickled_by_value(modules: Sequence[ModuleType]) -> Iterator[None]:
    """Make cloudpickle copy these modules' functions by value while the payload is captured."""
    if not modules:
        yield
        return
    import cloudpickle

    registered: list[ModuleType] = []
    try:
        for module in modules:
            try:
                cloudpickle.register_pickle_by_value(module)
            except ValueError:  # already registered, or not importable by name: leave it
                continue
            registered.append(module)
        yield
    finally:
        for module in registered:
            with contextlib.suppress(ValueError):
                cloudpickle.unregister_pickle_by_value(module)


def _wrap_by_value(entry: Callable[..., Any]) -> Callable[..., Any]:
    """A closure around ``entry``: the launcher sends closures by value (cloudpickle)."""

    def entry_by_value(*args: Any, **kwargs: Any) -> Any:
        return entry(*args, **kwargs)

    entry_by_value.__qualname__ = f"run_entry.<locals>.{getattr(entry, '__qualname__', 'entry')}"
    entry_by_value.__name__ = getattr(entry, "__name__", "entry")
    entry_by_value.__doc__ = getattr(entry, "__doc__", None)
    return entry_by_value


def _reraise_child(err: ChildRaisedError) -> None:
    child = err.child_exception
    where = f"rank {err.rank}, pid {err.pid}" + (f", stage {err.stage}" if err.stage else "")
    if child is None:
        raise err
    remote = ChildTraceback(err.traceback_text or str(err), where)
    if not isinstance(child, Exception):
        _raise_wrapped(err, child, remote)
    child.__traceback__ = None
    # A bootstrap stage wraps a foreign error (a plugin's PluginError) in StageError and
    # carries the original as ``.cause``; rebuild that chain: StageError <- cause <- traceback.
    carried = getattr(child, "cause", None)
    if isinstance(carried, BaseException) and carried is not child:
        carried.__cause__ = remote
        carried.__traceback__ = None
        raise child from carried
    raise child from remote


def _raise_wrapped(
    err: ChildRaisedError, child: BaseException, remote: ChildTraceback
) -> NoReturn:
    """A ``KeyboardInterrupt`` (``GeneratorExit``, any ``BaseException`` that is no
    ``Exception``) raised as itself in the test would be pytest's Ctrl-C, ending the whole
    session, not this test's failure: it stays inside the launcher's ``ChildRaisedError``."""
    kind = type(child).__name__
    if err.args and isinstance(err.args[0], str):
        err.args = (
            f"{err.args[0]}\n[spawnkit.testing.run_entry] the entry's {kind} is a "
            f"BaseException that is no Exception: raised as itself here it would not fail "
            f"this test but stop the test run (pytest takes a KeyboardInterrupt for Ctrl-C), "
            f"so it arrives as this ChildRaisedError; the original is .child_exception "
            f"(and the __cause__).",
            *err.args[1:],
        )
    child.__cause__ = remote
    child.__traceback__ = None
    raise err from child


def _selection(
    config: NamespaceConfig,
    platform: str | None,
    plugins: Sequence[str] | None,
    env: Mapping[str, str] | None,
) -> tuple[EnvOverlay, dict[str, str]]:
    """The namespace's selection variables, set here (undone by the caller) and for the child."""
    child_env = dict(env or {})
    if isinstance(plugins, str):
        raise TypeError("plugins must be a sequence of entry-point names, not a string")
    allow = None if plugins is None else ",".join(plugins)
    _same_as_env(config.platform_var, f"platform={platform!r}", platform, child_env)
    _same_as_env(config.plugins_var, f"plugins={list(plugins or ())!r}", allow, child_env)
    overlay = EnvOverlay()
    if platform is not None:
        overlay.set(config.platform_var, platform)
        child_env[config.platform_var] = platform
    if allow is not None:
        overlay.set(config.plugins_var, allow)
        child_env[config.plugins_var] = allow
    return overlay, child_env


def _same_as_env(var: str, shown: str, value: str | None, env: Mapping[str, str]) -> None:
    """``platform=`` / ``plugins=`` (``shown``) and ``env=``'s variable for it choose the same,
    or neither would be kept silently: the parent resolved with the argument, the worker read
    ``env=``."""
    in_env = env.get(var)
    if value is None or in_env is None:
        return
    argument = shown.partition("=")[0]
    if argument == "plugins":
        same = _names(in_env) == _names(value)  # an allow-list: order and spaces say nothing
    else:
        same = in_env.strip() == value.strip()
    if same:
        return
    raise ConfigError(
        f"run_entry({shown}, env={{{var!r}: {in_env!r}}}): both choose the worker's "
        f"{argument}, and they disagree; the worker would read env='s {var}={in_env!r} while "
        f"this process resolved the launch with {shown}. Fix: pass one of them ({argument}= "
        f"sets {var} for the call and its worker), or make them agree.",
        setting=argument,
    )


def _names(allow: str) -> set[str]:
    return {name.strip() for name in allow.split(",") if name.strip()}


def _with_warning_filters(child_env: dict[str, str], env: Mapping[str, str] | None) -> None:
    """The test's filters for spawnkit's warnings, as the worker's ``PYTHONWARNINGS``
    (``_warnfilters``): between this process's own entries and ``env=``'s, which win."""
    from spawnkit.testing._warnfilters import forwarded

    entries = forwarded()
    if entries:
        own, given = os.environ.get("PYTHONWARNINGS"), (env or {}).get("PYTHONWARNINGS")
        child_env["PYTHONWARNINGS"] = ",".join(e for e in (own, *entries, given) if e)


def _how_to_send(
    entry: str | Callable[..., Any], payload: Any
) -> tuple[str | Callable[..., Any], list[ModuleType]]:
    """What to launch (a reference or a by-value wrapper) and the modules to pickle by value."""
    launched: str | Callable[..., Any] = entry
    by_value: list[ModuleType] = []
    payload_module = sys.modules.get(type(payload).__module__)
    if (
        payload is not None
        and not isinstance(payload, Payload)
        and payload_module is not None
        and not _importable_fresh(payload_module)
    ):
        by_value.append(payload_module)
    if not isinstance(entry, str):
        if not callable(entry):
            raise EntryResolutionError(
                f"entry {entry!r} (type {type(entry).__name__}) is not callable; pass "
                "'module:qualname' or a callable",
                stage=Stage.RESOLVE_ENTRY.value,
            )
        _refuse_unrun(entry)
        ref = by_reference_name(entry)
        if ref is not None:
            launched = ref
        else:
            module = sys.modules.get(getattr(entry, "__module__", "") or "")
            if module is not None and not _importable_fresh(module):
                by_value.append(module)
            launched = _wrap_by_value(entry)
    return launched, by_value


def _refuse_unrun(entry: Callable[..., Any]) -> None:
    """An ``async def`` or generator entry, refused here as ``spawn_with_plugins`` refuses it:
    the by-value wrapper (a plain function) hid it from the launcher's check, so the worker
    ran the bootstrap and the test got ``ChildRaisedError`` about a coroutine nothing awaited
    (or a generator that could not be pickled) where a launch raises ``EntryResolutionError``
    before any worker starts."""
    from spawnkit.bootstrap import _entry

    what = f"entry {getattr(entry, '__module__', '?')}:{getattr(entry, '__qualname__', entry)}"
    _entry.refuse_unrun(entry, what, stage=Stage.RESOLVE_ENTRY.value)


@contextlib.contextmanager
def _none_meant(plugins: Sequence[str] | None) -> Iterator[None]:
    """``plugins=[]`` asks for no plugin in so many words: the launcher's warning about a blank
    allow-list variable (one that may have meant "all") is not for this call."""
    if plugins is None or any(p.strip() for p in plugins):
        yield
        return
    from spawnkit.hooks.plugins import PluginSelectionWarning

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r".* is set but blank", PluginSelectionWarning)
        yield


def run_entry(
    entry: str | Callable[..., Any],
    payload: Any = None,
    *,
    namespace: Namespace | str | NamespaceConfig | None = None,
    platform: str | None = None,
    plugins: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    **launch: Any,
) -> EntryRun:
    """Run ``entry`` in one real spawned worker after the full staged bootstrap.

    ``entry``: ``"module:qualname"`` or a callable; it is called with the materialized ``payload``
    (or nothing when ``None``).  ``platform``/``plugins`` set the namespace's variables for the call
    (``plugins=[]``: none); ``env`` is for the child only.  ``timeout`` bounds the bootstrap and,
    separately, the entry.  Extra keyword arguments go to ``spawn_with_plugins``.
    """
    from spawnkit.launch import spawn_with_plugins
    from spawnkit.launch._checks import check_env_form, check_seconds

    check_env_form(env)  # env=pairs: dict() took them, then .get() failed
    # named as the caller wrote it: the launcher's check said "ready_timeout='5'"
    check_seconds("timeout", timeout, none="no limit", call="run_entry")
    ns = get_namespace(namespace)
    overlay, child_env = _selection(ns.config, platform, plugins, env)
    _with_warning_filters(child_env, env)
    launched, by_value = _how_to_send(entry, payload)
    start = time.monotonic()
    try:
        with _pickled_by_value(by_value), _none_meant(plugins):
            if by_value and payload is not None and not isinstance(payload, Payload):
                # Plain pickle would refer to the unimportable module by name.
                payload = Payload.capture(payload, by_value=True)
            group = spawn_with_plugins(
                launched,
                payload,
                nprocs=1,
                namespace=ns,
                env=child_env or None,
                ready_timeout=timeout,
                # No join_timeout: the launcher's counts from launch, bootstrap included, and
                # its error says "join_timeout=". The entry's own bound is the join below.
                **launch,
            )
        with group:
            done = _wait(group, entry, timeout)
    except ChildRaisedError as err:
        _reraise_child(err)
        raise  # pragma: no cover - _reraise_child always raises
    except BootstrapTimeoutError as err:
        _name_our_timeout(err)
        raise
    finally:
        overlay.undo()
    return replace(done, seconds=time.monotonic() - start)


def _name_our_timeout(err: BootstrapTimeoutError) -> None:
    """The launcher's fix names its own ready_timeout=, which run_entry sets from timeout=."""
    if err.args and isinstance(err.args[0], str):
        text = err.args[0].replace("larger ready_timeout=", "larger run_entry(timeout=)")
        err.args = (text.replace("ready_timeout=", "run_entry timeout="), *err.args[1:])


def _wait(group: WorkerGroup, entry: str | Callable[..., Any], timeout: float) -> EntryRun:
    """The worker's report and result (``seconds`` left to the caller); bounded by ``timeout``."""
    # The group's own ready_timeout (= timeout) bounds this, so its error names it.
    reports = group.wait_ready()
    if not group.join(timeout):
        late = [r for r in group._ranks if r.exitcode is None]
        stacks = group._dump_stacks(late)
        if any(r.result is not None for r in late):
            text = _held_text(entry, timeout, stacks)
        else:
            text = (
                f"run_entry: the entry {_describe(entry)} did not return within {timeout} s "
                f"of the worker becoming ready; the worker was terminated. Raise "
                f"run_entry(timeout=) if it is merely slow; otherwise the stack below shows "
                f"where it hangs.{_hung_stack(stacks)}"
            )
        raise EntryTimeoutError(
            text,
            rank=0,
            stage=Stage.ENTRY.value,
            setting="run_entry(timeout=)",
            timeout_s=timeout,
            waited_s=timeout,
            stacks=stacks,
        )
    results = group.results()
    pids = list(getattr(group, "pids", []) or [])
    codes = list(getattr(group, "exit_codes", []) or [])
    return EntryRun(
        result=results[0] if results else None,
        report=reports[0] if reports else None,
        pid=pids[0] if pids else None,
        exit_code=codes[0] if codes else None,
        seconds=0.0,
    )


def _held_text(entry: str | Callable[..., Any], timeout: float, stacks: dict[int, str]) -> str:
    """The entry returned (its result arrived) and the worker did not end: "did not return"
    would send the reader into an entry that is done, so say what holds the process, in the
    group's words (``results_late``), naming a non-daemon thread where the stack shows one."""
    main = stacks.get(0, "").split("\n\n", 1)[0]
    if "in _shutdown" in main and "threading.py" in main:
        holder = (
            "a non-daemon thread holds it (its main thread waits in threading._shutdown for "
            "a thread the entry started; the stacks are below)"
        )
    elif "<no Python frame>" in main:
        holder = (
            "an exit handler (atexit) holds it (its main thread has left Python code: the "
            "interpreter is running its exit handlers)"
        )
    else:
        holder = "an exit handler (atexit) or a non-daemon thread holds it"
    return (
        f"run_entry: the entry {_describe(entry)} returned, but its worker had not exited "
        f"{timeout} s after becoming ready: {holder}; the worker was terminated and its "
        f"result dropped. Fix: join the threads the entry starts (or make them daemon=True) "
        f"and keep its exit handlers short; run_entry(timeout=) bounds the entry and the "
        f"worker's exit together.{_hung_stack(stacks)}"
    )


def _hung_stack(stacks: dict[int, str]) -> str:
    """The still-running worker's stack (its faulthandler, a bounded wait), for the timeout."""
    text = stacks.get(0, "").rstrip()
    return f"\nStack of the worker at the deadline:\n{text}" if text else ""


def _describe(entry: str | Callable[..., Any]) -> str:
    if isinstance(entry, str):
        return repr(entry)
    return f"{getattr(entry, '__module__', '?')}:{getattr(entry, '__qualname__', repr(entry))}"
