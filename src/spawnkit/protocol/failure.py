"""A worker's failure, from the ``except`` block in the worker to the typed error in the parent.

One record for every launcher.  The worker builds :class:`Failed` from the
exception it caught (:func:`record`): the stage, the type name, the message,
the formatted traceback and, separately, the pickled exception (when it loads
back as the same one: ``_pickled``).  It travels as plain builtins because
the exception object may not unpickle where it lands (its type lives in a
plugin the parent lacks): the parent falls back to the text when the bytes
do not load.  A local worker sends it over its report
pipe, a Ray actor returns it from ``run``, a torchrun rank writes it to
torchelastic's error file.

The parent's half turns that record, or what it saw instead of one (a signal,
an exit code, text on the early-error pipe, a Ray actor or node that died),
into a :class:`~spawnkit.errors.ChildError` whose message leads with the root
cause: which rank, where, which stage, what; then what the failure affects,
and the child's own traceback.  Every launcher names a worker the same way
(:class:`Worker`).

This module is on every worker's import path (the record is one of the report
messages), so it imports only what a worker has already imported; the
``traceback`` module is imported on the failure path only.
"""

from __future__ import annotations

import builtins
import os
import pickle
import signal
import socket
from collections.abc import Callable, Sequence

from spawnkit._compat import TYPE_CHECKING
from spawnkit._namedtuple import NamedTuple
from spawnkit._names import qualified_name
from spawnkit.bootstrap.stages import Stage
from spawnkit.errors import (
    ChildError,
    ChildExitedError,
    ChildRaisedError,
    ForkSafetyError,
    NodeLostError,
)
from spawnkit.protocol._failed import PRE_BOOTSTRAP, Exited, Failed

if TYPE_CHECKING:
    from typing import Any, Protocol

__all__ = [
    "PRE_BOOTSTRAP",
    "Exited",
    "Failed",
    "Worker",
    "actor_died_error",
    "also_failed",
    "child_error",
    "current_thread_first",
    "effect_line",
    "failing_stage",
    "load_exception",
    "node_lost_error",
    "raised_error",
    "raised_message",
    "record",
    "stopped_error",
]

def exited(stage: str, exc: SystemExit, traceback_text: str) -> Exited:
    """The record of a ``sys.exit()``: its exit code as the interpreter turns it into one, and
    what it was given when that was a message (which the headline shows, not a bare 1)."""
    code = exc.code
    if code is None or isinstance(code, int):
        return Exited(stage, code or 0, traceback_text)
    return Exited(stage, 1, traceback_text, repr(code)[:200])


def failing_stage(exc: BaseException, current: str, ready: bool) -> str:
    """The stage to blame: an exception's own ``stage`` until the worker is ready, else where it is.

    Once the entry runs, a spawnkit error the entry let through still failed the entry.
    """
    stage = getattr(exc, "stage", "")
    if isinstance(stage, str) and stage and not ready:
        return stage
    return current or (Stage.ENTRY.value if ready else PRE_BOOTSTRAP)


def _format(exc: BaseException) -> str:
    """``exc``'s traceback as text, its notes after its last line as 3.11 prints them: 3.10's
    ``traceback`` omits them (``_compat.add_note`` sets them there), and the note naming the
    hook and plugin that raised (``hooks/_chain``) was missing from a child's traceback."""
    import traceback  # only on this failure path: a worker that succeeds never needs it

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    notes = getattr(exc, "__notes__", None)
    if hasattr(BaseException, "add_note") or not isinstance(notes, list):
        return text
    # (the exceptiongroup backport, pytest's on 3.10, patches ``traceback`` to print them)
    return text + "".join(
        f"{note}\n" for note in notes if isinstance(note, str) and f"{note}\n" not in text
    )


def record(
    stage: str,
    exc: BaseException,
    dumps: Callable[[Any], bytes] | None = None,
    loads: Callable[[bytes], Any] | None = None,
    *,
    rank: int | None = None,
    node: str = "",
) -> Failed:
    """The record of ``exc``, caught in this worker; pickling is tried and round-tripped, never
    assumed (``dumps``/``loads``: the launch's pickler, dill for ``multiprocess``)."""
    text = _format(exc)
    message = _text(exc)
    _, exc_bytes, why = _pickled(exc, message, dumps or pickle.dumps, loads or pickle.loads)
    return Failed(
        stage,
        qualified_name(type(exc), getattr(exc, "kind", "")),
        message,
        text,
        exc_bytes,
        rank=rank,
        pid=os.getpid(),
        host=socket.gethostname(),
        node=node,
        unsent=why if _is_group(exc) else "",
    )


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception as str_exc:  # a broken __str__ must not hide the failure itself
        return f"<str() of the exception raised {type(str_exc).__name__}>"


def _pickled(
    exc: BaseException,
    message: str,
    dumps: Callable[[Any], bytes],
    loads: Callable[[bytes], Any],
) -> tuple[object, bytes | None, str]:
    """``exc`` pickled, only if what loads is the same exception: its type, ``str()`` and args
    (for a class that pickles itself, type and ``str()``: see ``_same``); with what was
    pickled (``exc`` or a stand-in), and why nothing was where nothing loads as ``exc``.

    The default pickle of an exception calls its class with ``args``: one whose ``__init__``
    builds its message from its own arguments (``CodeError(7)`` -> ``"failed with code 7"``)
    came back as ``"failed with code failed with code 7"``, and ``run_entry`` re-raised that.
    Then it travels rebuilt without calling ``__init__`` (``_Rebuilt``), unless its class has
    a ``__reduce__`` of its own; what still differs is not sent (the text is).  An exception
    group's members are pickled inside it the default way, so one such member made the
    whole group unsendable: its ``_Rebuilt`` carries each member as that member travels alone.
    """
    own = _own_reduce(type(exc))
    tries: list[object] = [exc]
    member = why = ""  # member: a group's that cannot travel, which says why the group cannot
    if not own:
        rebuilt, member = _rebuilt(exc, dumps, loads)
        tries += [rebuilt] if rebuilt is not None else []
    for obj in tries:
        try:
            data = dumps(obj)
        except Exception as failed:
            why = f"does not pickle ({_said(failed)})"
            continue
        try:
            if _same(exc, message, loads(data), args=not own):
                return obj, data, ""
            why = "loads back as another exception (its type, str() or args differ)"
        except Exception as failed:
            why = f"does not load back ({_said(failed)})"
    if own and _is_group(exc):  # its members travel its way, not each as it would alone
        member = _first_unsent(exc, dumps, loads)
        held = f"holds {member}" if member else why
        why = f"pickles itself (its class's own __reduce__) and {held}"
    return None, None, f"holds {member}" if member and not own else why


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {_text(exc)[:200]}"


def _is_group(exc: BaseException) -> bool:
    """An exception group (3.11+; 3.10 has none built in, and its backport travels as any
    exception does)."""
    return _GROUP is not None and isinstance(exc, _GROUP)


_GROUP: type | None = getattr(builtins, "BaseExceptionGroup", None)


def _rebuilt(
    exc: BaseException, dumps: Callable[[Any], bytes], loads: Callable[[bytes], Any]
) -> tuple[_Rebuilt | None, str]:
    """``exc``'s ``_Rebuilt``; a group's with each member as it travels alone (None, and
    which member and why, where one cannot)."""
    if not _is_group(exc):
        return _Rebuilt(exc), ""
    members = []
    for i, member in enumerate(getattr(exc, "exceptions", ()), 1):
        form, _, why = _pickled(member, _text(member), dumps, loads)
        if form is None:
            return None, _member_unsent(i, member, why)
        members.append(form)
    return _Rebuilt(exc, members), ""


def _first_unsent(
    group: BaseException, dumps: Callable[[Any], bytes], loads: Callable[[bytes], Any]
) -> str:
    """The first member of ``group`` that would not travel alone, said; "" if none."""
    for i, member in enumerate(getattr(group, "exceptions", ()), 1):
        form, _, why = _pickled(member, _text(member), dumps, loads)
        if form is None:
            return _member_unsent(i, member, why)
    return ""


def _member_unsent(i: int, member: BaseException, why: str) -> str:
    first = _text(member).strip().partition("\n")[0][:200]
    name = qualified_name(type(member), getattr(member, "kind", ""))
    return f"sub-exception {i} ({name}: {first}), which {why}"


def _same(exc: BaseException, message: str, back: Any, args: bool = True) -> bool:
    """Same type and text, and (``args``) same ``args``.  A class that pickles itself says
    what its state is: its reload's ``args`` may differ from the instance's (pydantic's
    ``ValidationError`` is made with none and reloaded from what it was made of).  A group's
    members are each the same, as a single exception is."""
    if type(back) is not type(exc) or _text(back) != message:
        return False
    if _is_group(exc):  # its args hold its members: compared as members, one by one
        return _same_members(exc, back) and (not args or back.args[:1] == exc.args[:1])
    if not args:
        return True
    try:
        if bool(back.args == exc.args):
            return True
    except Exception:  # an argument whose == does not give a bool (an array)
        pass
    try:
        return repr(back.args) == repr(exc.args)
    except Exception:
        return False


def _same_members(exc: Any, back: Any) -> bool:
    mine, theirs = tuple(exc.exceptions), tuple(back.exceptions)
    if len(mine) != len(theirs):
        return False
    pairs = zip(mine, theirs, strict=True)
    return all(_same(m, _text(m), b, args=not _own_reduce(type(m))) for m, b in pairs)


def _builtin_base(cls: type) -> type:
    """The nearest built-in exception class ``cls`` derives from: its ``__init__`` and
    ``__reduce__`` are the ones a rebuilt instance gets (``OSError``'s parse its errno)."""
    return next(k for k in cls.__mro__ if k.__module__ == "builtins")


def _own_reduce(cls: type) -> bool:
    """Whether ``cls`` pickles itself (a ``__reduce__`` or ``__reduce_ex__`` of its own, above
    the built-in base's): that is respected, never replaced by ``_Rebuilt``."""
    for klass in cls.__mro__:
        if klass.__module__ == "builtins":
            return False
        if "__reduce__" in vars(klass) or "__reduce_ex__" in vars(klass):
            return True
    return False


class _Rebuilt:
    """Pickles as ``exc`` made without its class's ``__init__``: the built-in base's
    ``__new__`` and ``__init__`` with the same ``args``, then its state (``__dict__``: its
    attributes, its notes), as the default pickle restores it; a group with ``members`` (each
    as it travels) for its own."""

    def __init__(self, exc: BaseException, members: list[object] | None = None) -> None:
        self.exc = exc
        self.members = members

    def __reduce__(self) -> tuple[Any, ...]:
        base: Any = _builtin_base(type(self.exc))
        reduced = base.__reduce__(self.exc)
        args = reduced[1]
        if self.members is not None:  # a group's args: (message, its exceptions)
            args = (args[0], self.members)
        state = reduced[2] if len(reduced) > 2 else None
        return (_rebuild, (type(self.exc), args), state)


def _rebuild(cls: type[BaseException], args: tuple[Any, ...]) -> BaseException:
    """An exception of ``cls`` with ``args``, its own ``__new__`` and ``__init__`` not called
    (see ``_Rebuilt``): a group subclass's ``__new__`` takes other arguments than its base's."""
    base: Any = _builtin_base(cls)
    exc: BaseException = base.__new__(cls, *args)
    base.__init__(exc, *args)
    return exc


def load_exception(
    data: bytes | None, loads: Callable[[bytes], Any] | None = None
) -> BaseException | None:
    """The child's exception if its type imports and unpickles here; ``None`` otherwise."""
    if data is None:
        return None
    try:
        obj = (loads or pickle.loads)(data)
    except Exception:
        return None
    return obj if isinstance(obj, BaseException) else None


# ------------------------------------------------------------ the parent side
class Worker(NamedTuple):
    """Which worker, as every message names it: ``rank 1 (ray, pid 42, host a, node n)``."""

    rank: int
    pid: int | None
    host: str = ""
    node: str = ""
    launcher: str = ""

    @property
    def label(self) -> str:
        parts = [self.launcher] if self.launcher else []
        parts.append(f"pid {self.pid}")
        if self.host:
            parts.append(f"host {self.host}")
        if self.node:
            parts.append(f"node {self.node}")
        return f"rank {self.rank} ({', '.join(parts)})"

    def fields(self) -> dict[str, Any]:
        """The ``ChildError`` keyword fields naming this worker."""
        return {"rank": self.rank, "pid": self.pid, "host": self.host}

    @classmethod
    def of(cls, failed: Failed, launcher: str) -> Worker:
        """The worker a record says it came from (Ray, torchrun)."""
        rank = failed.rank if failed.rank is not None else -1
        return cls(rank, failed.pid or None, failed.host, failed.node, launcher)


if TYPE_CHECKING:  # a worker never builds the parent's errors: no class to define there

    class ChildState(Protocol):
        """What a local launcher knows of a worker that failed (``launch._rank.Rank``); the
        records it sent are the group's and come beside it."""

        @property
        def worker(self) -> Worker: ...
        @property
        def stage(self) -> str: ...  # the stage it last reported starting
        @property
        def ready(self) -> bool: ...
        @property
        def exitcode(self) -> int | None: ...  # -N: killed by signal N
        @property
        def result_error(self) -> str: ...  # why its return value did not travel
        @property
        def result(self) -> Any: ...  # its RESULT message: None until its entry returned
        @property
        def fault_text(self) -> str: ...  # its faulthandler dump


def effect_line(group: str, others: Sequence[tuple[int, str]]) -> str:
    """What the failure does to the rest: ``group`` is torn down; where the other ranks were."""
    at = "; ".join(f"rank {rank}: {stage}" for rank, stage in others)
    return f"Effect: {group} is being torn down; the other ranks were at: {at or 'none'}."


def also_failed(others: dict[int, ChildError]) -> str:
    """The block after a failure's Effect line that names the other ranks' own failures in
    brief (one line each), for every launcher alike (``err.other_failures`` holds them)."""
    block = f"Also failed on their own, before the teardown stopped them ({len(others)} "
    block += "rank(s); err.other_failures holds each error, traceback included):"
    return block + "".join(f"\n  {str(other).splitlines()[0]}" for other in others.values())


def _failed_where(stage: str) -> str:
    """Where a record says it failed; a record without a stage is not blamed on the entry."""
    if stage == Stage.ENTRY:
        return f"stage {stage!r} failed (its entry function raised)"
    if stage == PRE_BOOTSTRAP:
        return f"it failed in {stage!r}, before its bootstrap began"
    if not stage:
        return (
            "it failed in an unknown stage (its failure record names none: it was written "
            "outside spawnkit's bootstrap, by a launcher or code that did not say where; the "
            "traceback below shows where it was raised)"
        )
    if stage in _STAGE_NAMES:
        return f"bootstrap stage {stage!r} failed"
    return f"it failed in {stage!r} (not a bootstrap stage: a step of its launcher)"


_STAGE_NAMES = frozenset(s.value for s in Stage)


def raised_message(failed: Failed, who: Worker, *, effect: str = "", hint: str = "") -> str:
    """Root cause first: which rank, where, which stage, what; then the effect and the traceback."""
    what = _failed_where(failed.stage)
    lines = [f"{who.label}: {what}: {failed.exc_type}: {failed.message}"]
    if failed.unsent:  # (a single exception that does not travel has only its text: as said)
        lines.append(
            "The exception group did not reach the launcher as an object (child_exception is "
            f"None): it {failed.unsent}. Its type, message and traceback below are the worker's."
        )
    lines += [part for part in (hint, effect) if part]
    lines.append(f"Child traceback ({who.label}):")
    lines.append(failed.traceback_text.rstrip())
    return "\n".join(lines)


def raised_error(
    failed: Failed,
    who: Worker,
    *,
    effect: str,
    loads: Callable[[bytes], Any] | None = None,
    preload: Sequence[str] = (),
) -> ChildRaisedError:
    """The parent's ``ChildRaisedError`` for a record; the original is its cause if it unpickles."""
    exc = load_exception(failed.exc_bytes, loads)
    err = ChildRaisedError(
        raised_message(failed, who, effect=effect, hint=_preload_hint(exc, preload)),
        stage=failed.stage,
        exc_type=failed.exc_type,
        traceback_text=failed.traceback_text,
        child_exception=exc,
        **who.fields(),
    )
    if exc is not None:
        err.__cause__ = exc
    return err


def child_error(
    state: ChildState,
    record: Failed | Exited | None,
    early: Failed | None,
    *,
    effect: str,
    loads: Callable[[bytes], Any] | None = None,
    preload: Sequence[str] = (),
) -> ChildError:
    """A local worker's failure: the record it sent (``early``: before its spec was
    unpickled), else what the parent saw of it (most telling first)."""
    who = state.worker
    if isinstance(record, Failed):
        return raised_error(record, who, effect=effect, loads=loads, preload=preload)
    if record is None and early is not None and not who.host:
        return _early_error(who, early, effect, loads)
    if state.result_error:
        return ChildRaisedError(
            f"{who.label} finished its entry function, but {state.result_error}\n{effect}",
            stage=Stage.ENTRY.value,
            exc_type="pickle.PicklingError",
            traceback_text="",
            **who.fields(),
        )
    code = record.code if record is not None else state.exitcode
    if state.exitcode is not None and state.exitcode < 0:
        code = state.exitcode  # a signal after sys.exit() began is what ended it
    if record is None and state.result is not None:  # its entry returned, then it ended so
        head, detail, signal_name = _exit_after_return(who, code)
    else:
        head, detail, signal_name = _exit_story(who, code, record, state.stage, state.ready)
    fault = current_thread_first(state.fault_text.strip())
    if fault:
        detail += f"\nFatal error report written by the worker (faulthandler):\n{fault}"
    return ChildExitedError(
        f"{head}\n{detail}\n{effect}",
        stage=record.stage if record is not None else state.stage,
        exit_code=code,
        signal_name=signal_name,
        fault_text=fault,
        **who.fields(),
    )


_SIGNAL_HINTS: dict[str, str] = {
    "SIGSEGV": "a crash in native code (a C extension, a device driver or ctypes) touched "
    "invalid memory",
    "SIGBUS": "native code touched unmapped or misaligned memory (often a truncated "
    "memory-mapped file or exhausted /dev/shm)",
    "SIGILL": "native code ran an instruction this CPU does not support (a binary built for "
    "another architecture)",
    "SIGFPE": "native code divided by zero or hit another arithmetic trap",
    "SIGABRT": "native code called abort(): a failed C/C++ assertion or an uncaught C++ "
    "exception (device runtimes and communication libraries do this)",
    "SIGKILL": "it was killed from outside: most often the kernel's out-of-memory killer "
    "(check `dmesg` or the container's memory limit), otherwise `kill -9` or a supervisor",
    "SIGTERM": "something outside the launcher asked it to stop (a supervisor, a scheduler "
    "or a user)",
    "SIGINT": "it was interrupted (Ctrl-C reached its process group)",
    "SIGHUP": "its controlling terminal went away",
    "SIGPIPE": "it wrote to a pipe or socket whose reader had gone",
}


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


#: How a rank that ends badly after its result arrived ended (``_exit_after_return``).
_WHILE_EXITING = (
    "after its entry returned (its result received), while exiting: an atexit handler, a "
    "finalizer or a native library's teardown (a device runtime or communication library "
    "shutting down)"
)


def _exit_after_return(who: Worker, code: int | None) -> tuple[str, str, str]:
    """A rank whose RESULT arrived, then whose exit failed: the entry is not to blame.  The
    group still fails (a worker that does not end cleanly is a failure); its result is not
    returned."""
    tail = (
        "Its result was received, but the rank did not exit cleanly, so the group fails; "
        "look at what runs at exit in that process (atexit.register, weakref.finalize, "
        "__del__, a C library's exit handlers)."
    )
    if code is not None and code < 0:
        name = _signal_name(code)
        hint = _SIGNAL_HINTS.get(name, "an uncaught signal ended it")
        head = f"{who.label} was killed by {name} {_WHILE_EXITING}."
        return head, f"Likely cause: {hint}. {tail}", name
    return (
        f"{who.label} exited with code {code} {_WHILE_EXITING}.",
        f"Likely cause: code run at exit called os._exit({code}) or a C library's "
        f"exit({code}). {tail}",
        "",
    )


def _exit_story(
    who: Worker, code: int | None, exited: Exited | None, stage: str, ready: bool
) -> tuple[str, str, str]:
    """``(headline, likely cause, signal name)`` of a worker that ended without a record."""
    phase = "after it reported ready" if ready else "before it reported ready"
    if code is not None and code < 0:
        name = _signal_name(code)
        hint = _SIGNAL_HINTS.get(name, "an uncaught signal ended it")
        head = f"{who.label} was killed by {name} in stage {stage!r}, {phase}."
        return head, f"Likely cause: {hint}.", name
    if exited is not None:
        given = f"{exited.said}), exit code {code}" if exited.said else f"{code})"
        head = f"{who.label} called sys.exit({given} in stage {exited.stage!r}, {phase}."
        return head, f"Where it exited:\n{exited.traceback_text.rstrip()}", ""
    if code == 0:
        lost = (
            "returning or raising: it has no result"
            if ready
            else "raising, so the bootstrap could not finish"
        )
        return (
            f"{who.label} exited with code 0 in stage {stage!r}, {phase}, {_NO_FINAL}.",
            "Likely cause: code in that stage ended the process (os._exit(0) or a C "
            f"library's exit()) instead of {lost}; {_PIPE_CLOSED}.",
            "",
        )
    if stage == PRE_BOOTSTRAP and not who.host:
        return (
            f"{who.label} exited with code {code} before its bootstrap began.",
            "Likely cause: the new interpreter failed while re-importing the launching "
            "script (__main__, as __mp_main__) or unpickling its spec: a script that starts "
            'workers at import time needs `if __name__ == "__main__":` around the launch; '
            "the worker printed that traceback to its stderr.",
            "",
        )
    return (
        f"{who.label} exited with code {code} in stage {stage!r}, {phase}, {_NO_FINAL}.",
        f"Likely cause: code in that stage called os._exit({code}) or a C library's "
        f"exit({code}), which skips Python's error handling (exit code {code} is "
        f"what that code chose); {_PIPE_CLOSED}.",
        "",
    )


#: A rank's report pipe ended without RESULT, FAILED or EXITED: it ended its process, or the
#: pipe was closed under it, and the parent cannot tell which (``child._unsent``).
_NO_FINAL = "and its report pipe closed with no exception, exit or result on it"
_PIPE_CLOSED = (
    "or the report pipe was closed under it (os.closerange(), or a library closing "
    "inherited descriptors): then the worker wrote how it ended (its exception and "
    "traceback) to its stderr"
)


def _early_error(
    who: Worker, early: Failed, effect: str, loads: Callable[[bytes], Any] | None = None
) -> ChildRaisedError:
    """A worker that failed before spawnkit's code ran, from its early-error pipe."""
    text = early.traceback_text.rstrip()
    exc = load_exception(early.exc_bytes, loads)
    if early.exc_type:
        first = early.message.strip().splitlines()[0] if early.message.strip() else ""
        last = f"{early.exc_type}: {first}" if first else early.exc_type
    else:
        last = _exception_summary(text)
    if "bootstrapping phase" in text or "freeze_support" in text:
        cause = (
            "Cause: the launching script starts workers when it is imported, and a spawned "
            "worker re-imports it (as __mp_main__). Put the code that calls "
            'spawn_with_plugins() under `if __name__ == "__main__":`.'
        )
    elif "spawn_main" not in text and 'File "<string>"' in text:
        # Raised by the command line's own imports (popen's prologue), before spawn_main.
        cause = (
            "It failed importing spawnkit itself, before anything of the launching script "
            "ran. A spawned worker is a new interpreter with this process's environment: "
            "check that `python -c 'import spawnkit'` works there (PYTHONPATH, the active "
            "virtual environment, a half-finished install)."
        )
    else:
        cause = (
            "It failed before its bootstrap began: while re-importing the launching "
            "script (__main__, as __mp_main__) or unpickling its spec. Code at the top "
            "level of the launching script runs again in every spawned worker."
        )
    exc_type = early.exc_type or (last.partition(": ")[0] if ": " in last else "")
    err = ChildRaisedError(
        f"{who.label} failed in stage {PRE_BOOTSTRAP!r}: {last}\n{cause}\n{effect}\n"
        f"Child traceback ({who.label}):\n{text}",
        stage=PRE_BOOTSTRAP,
        exc_type=exc_type,
        traceback_text=text,
        child_exception=exc,
        **who.fields(),
    )
    if exc is not None:
        err.__cause__ = exc
    return err


def _exception_summary(text: str) -> str:
    """``Type: message`` from a formatted traceback, joining a message spread over lines."""
    lines = text.splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    rest = lines[frames[-1] + 1 :] if frames else lines
    for i, line in enumerate(rest):
        if line and not line.startswith(" "):
            more = [x.strip() for x in rest[i + 1 : i + 4] if x.strip()]
            return " ".join([line.strip(), *more])[:400]
    return lines[-1].strip() if lines else "unknown error"


def _preload_hint(exc: BaseException | None, preload: Sequence[str]) -> str:
    """A guard finding whose import site is the warm-start server's preload: say so."""
    findings = getattr(exc, "findings", None) or []
    hits = sorted(
        {
            str(f.get("module", ""))
            for f in findings
            if isinstance(f, dict)
            and any(
                str(f.get("module", "")) == p
                or str(f.get("module", "")).startswith(p + ".")
                or "warm_main" in str(f.get("first_import", ""))
                or any("warm_main" in str(link) for link in f.get("chain") or [])
                for p in preload
            )
        }
    )
    if not hits:
        return ""
    return (
        f"Launcher: the warm-start server imported {', '.join(hits)} through "
        f"preload={list(preload)} before any hook was applied: with "
        "SPAWNKIT_WARM_BOOTSTRAP=worker each worker applies hooks itself, after the "
        "server's preloads. Unset it (the server then applies hooks before preloading), or "
        "remove the target (or the module that imports it) from preload=."
    )


def current_thread_first(dump: str) -> str:
    """Reorder a faulthandler dump so the crashing thread's stack comes first (root cause)."""
    blocks = dump.split("\n\n")
    current = [b for b in blocks if b.startswith("Current thread")]
    if not current:
        return dump
    header = [b for b in blocks if b.startswith("Fatal Python error")]
    rest = [b for b in blocks if b not in current and b not in header]
    return "\n\n".join([*header, *current, *rest])


# ------------------------------------------------ workers that ended without a record
def stopped_error(
    who: Worker, group: str, stage: str, exit_code: int | None, what: str
) -> ChildExitedError:
    """``who`` never did ``what`` (returned, became ready): ``terminate()`` stopped it first."""
    code = f"exit code {exit_code}, " if exit_code is not None else ""
    return ChildExitedError(
        f"{who.label} has no result: it never {what}, because {group} was stopped by "
        f"terminate() ({code}stage {stage!r}). Call wait_ready()/results() before "
        "terminate(), or join() to wait for the entry.",
        stage=stage,
        exit_code=exit_code,
        signal_name="",
        **who.fields(),
    )


def actor_died_error(who: Worker, stage: str, ray_says: str) -> ChildExitedError:
    """A Ray rank whose actor process went away without returning a record."""
    detail = " ".join(ray_says.strip().splitlines()[:6])
    return ChildExitedError(
        f"{who.label} died in stage {stage!r} without reporting an exception: its Ray actor "
        "process exited (killed, out of memory, or its node was lost). The other ranks were "
        f"stopped. Ray says: {detail}",
        stage=stage,
        exit_code=None,
        signal_name="",
        **who.fields(),
    )


def node_lost_error(who: Worker, stage: str, ip: str, effect: str) -> NodeLostError:
    """A Ray rank that is gone because Ray marked its node dead."""
    at = f" at {ip}" if ip else ""
    return NodeLostError(
        f"{who.label} was lost with its node: Ray marked node {who.node}{at} dead while the "
        f"rank was in stage {stage!r}.\n{effect}\nFix: the node left the cluster (removed, "
        "preempted, out of memory or unreachable); check it with `ray status` or its raylet "
        "log, then start the group again.",
        node=who.node,
        stage=stage,
        exit_code=None,
        signal_name="",
        **who.fields(),
    )


def fork_refusal(
    what: str, who: str, stage: str, verb: str, state: str, effect: str, fix: str
) -> ForkSafetyError:
    """A warm-start server's refusal to serve: ``what`` (a thread, a connection, a pool, a
    process) that ``who`` (a plugin, a preload; "" unknown) ``verb`` and left ``state`` past its
    bootstrap, which every forked worker would share or lack (``effect``); ``fix`` says where
    to make it instead."""
    by = f", {verb} by {who}," if who else f" ({verb} by an unknown step)"
    return ForkSafetyError(
        f"{what}{by} is still {state} in the warm-start fork server after its bootstrap. "
        f"{effect}, so the server refuses to serve. {fix}, or use start_method='spawn'.",
        stage=stage,
        culprit=who,
    )
