"""Every error spawnkit raises, in one standard-library-only module.

Why one module: errors cross process boundaries (a child's failure is
re-raised in the parent), so the parent must be able to unpickle any of them
without importing torch, a platform or a plugin.  Keeping the whole hierarchy
here, importing nothing but the standard library, makes that true by
construction; ``spawnkit.spec`` imports it for the same reason.

Every class pickles through :meth:`SpawnkitError.__reduce__`, which rebuilds
the instance from its message and its attribute dictionary instead of calling
``__init__`` again, so an error survives a round trip with every field intact
(including a combined ``StageError[...]``, built without it).  Fields are the annotated
attributes of a class, with their defaults; :class:`SpawnkitError`'s one ``__init__``
takes each as a keyword (an unknown keyword is a ``TypeError``) and gives every
error its own copy of a list or dict field.

Cases that differ only in wording are one class with a ``kind`` (``"init"``,
``"payload"``...), not a class each: :data:`KINDS` lists them, and
docs/errors.md is the one table of every class, its fields and kinds.  The
former classes stay importable as deprecated aliases of their parent (module
``__getattr__``), so ``except PayloadError`` still works and catches every
``BootstrapError``: test ``.kind`` to tell the cases apart.
"""

from __future__ import annotations

import warnings

from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "BootstrapError",
    "BootstrapOrderError",
    "BootstrapTimeoutError",
    "ChildError",
    "ChildExitedError",
    "ChildRaisedError",
    "ConfigError",
    "CustomOpError",
    "CustomOpWarning",
    "EntryResolutionError",
    "EntryTimeoutError",
    "EnvVariableWarning",
    "ForkSafetyError",
    "ForkServerError",
    "HookApplyError",
    "HookConflictError",
    "GroupExitWarning",
    "HookConflictWarning",
    "HookError",
    "HookRegistrationError",
    "HookTargetError",
    "ImportGuardError",
    "ImportGuardWarning",
    "ImportWaitError",
    "LauncherUnavailableError",
    "LazyProxyError",
    "MissingExtraError",
    "NamespaceError",
    "NodeLostError",
    "PlatformConflictError",
    "PlatformContractError",
    "PlatformError",
    "PlatformNotFoundError",
    "PlatformPluginError",
    "PlatformUnavailableError",
    "PlainChildWarning",
    "PluginDriftError",
    "PluginError",
    "PluginSelectionWarning",
    "ProgressCallbackError",
    "SpawnkitError",
    "SpecError",
    "SpecTypeError",
    "SpecValueError",
    "StageError",
    "WarmServerWarning",
]


def _rebuild(cls: type[SpawnkitError], message: str, state: dict[str, Any]) -> SpawnkitError:
    """Recreate an error without re-running ``__init__`` (see module docstring)."""
    obj = cls.__new__(cls)
    Exception.__init__(obj, message)
    obj.__dict__.update(state)
    return obj


#: The cases a class tells apart by ``kind`` instead of by subclass ("" is its general case).
KINDS: dict[str, tuple[str, ...]] = {
    "BootstrapError": ("payload", "worker_reuse"),
    "ForkServerError": ("preload",),
    "PlatformError": ("init",),
    "SpecError": ("signature", "version"),
}

#: Former classes, now a kind of their parent: name -> (parent, kind).
_DEPRECATED: dict[str, tuple[str, str]] = {
    "PayloadError": ("BootstrapError", "payload"),
    "PlatformInitError": ("PlatformError", "init"),
    "PreloadError": ("ForkServerError", "preload"),
    "SpecSignatureError": ("SpecError", "signature"),
    "WorkerReuseError": ("BootstrapError", "worker_reuse"),
}


def __getattr__(name: str) -> Any:
    """A former class name: its parent, with a warning naming the parent and the kind."""
    if name not in _DEPRECATED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    parent, kind = _DEPRECATED[name]
    warnings.warn(
        f"spawnkit.errors.{name} is deprecated: it is {parent} with kind={kind!r} now. Catch "
        f"{parent} and test `err.kind == {kind!r}`; `except {name}` catches every {parent}.",
        DeprecationWarning,
        stacklevel=2,
    )
    return globals()[parent]


def _kinds_of(cls: type) -> tuple[str, ...]:
    return tuple(k for c in cls.__mro__ for k in KINDS.get(c.__name__, ()))


def _fields_of(cls: type) -> dict[str, Any]:
    """An error class's fields and their defaults: the annotated class attributes of its
    spawnkit bases (a combined ``StageError[...]`` type has both sides' fields)."""
    import inspect  # on a failure path only: a worker that succeeds never loads it

    return {
        name: getattr(cls, name)
        for c in reversed(cls.__mro__)
        if c.__module__ == __name__
        for name in inspect.get_annotations(c)
        if name != "kind"
    }


class SpawnkitError(Exception):
    """Root of every spawnkit error; catch this to catch them all."""

    kind: str = ""

    def __init__(self, *args: object, kind: str = "", **fields: Any) -> None:
        super().__init__(*args)
        if kind and kind not in _kinds_of(type(self)):
            raise ValueError(f"{type(self).__name__} has no kind {kind!r}: see errors.KINDS")
        if kind:
            self.kind = kind
        known = _fields_of(type(self))
        for name, value in fields.items():
            if name not in known:
                raise TypeError(f"{type(self).__name__} has no field {name!r}")
            setattr(self, name, value)
        for name, default in known.items():  # each error its own list or dict, copied
            if isinstance(default, list | dict):
                setattr(self, name, type(default)(fields.get(name) or default))

    def __repr__(self) -> str:
        if not self.kind:
            return super().__repr__()
        return f"{type(self).__name__}({', '.join(map(repr, self.args))}, kind={self.kind!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        message = str(self.args[0]) if self.args else ""
        return (_rebuild, (type(self), message, dict(self.__dict__)))


class NamespaceError(SpawnkitError, ValueError):
    """A namespace was declared twice with different settings, or is unknown."""


# --------------------------------------------------------------------- hooks
class HookError(SpawnkitError):
    """Base of the hook engine's errors."""


class HookRegistrationError(HookError, TypeError):
    """A hook cannot be registered as given (wrong kind, unknown type, not callable)."""


class HookTargetError(HookError, LookupError):
    """A dotted target does not resolve, or names something that cannot be wrapped."""

    target: str = ""
    missing: str = ""


class ImportWaitError(HookError, TimeoutError):
    """Applying hooks waited too long for a target module another thread is importing."""

    module: str = ""
    thread: str = ""
    waited_s: float = 0.0


class HookApplyError(HookError):
    """``apply_hooks()`` failed on one or more targets; nothing from that call stays patched."""

    failures: dict[str, tuple[list[str], str]] = {}


class HookConflictError(HookError):
    """Hooks on one target conflict (several REPLACEs, REPLACE mixed with others, stacked
    AROUNDs) and ``<PREFIX>_HOOK_CONFLICTS=error`` (or ``-W error::spawnkit.HookConflictWarning``)
    asked for that to stop the worker.  ``conflicts`` is every conflict's message."""

    conflicts: list[str] = []


class CustomOpWarning(UserWarning):
    """A kernel registered for a ``CustomOp`` under a key the platform's dispatch never looks up
    (its ``device_name`` or torch ``dispatch_key`` instead of ``get_dispatch_key_name()``), or an
    op's ``forward_<device_name>`` method, which dispatch never looks up either: the op runs
    another forward, while the registration was accepted."""


class EnvVariableWarning(UserWarning):
    """A variable with the namespace's prefix that nothing reads (a typo such as
    ``MINIENG_PLUGIN``), or another namespace's variable set beside a launch of this one."""


class GroupExitWarning(UserWarning):
    """A ``with`` block ended while ranks of its worker group were still running their entry
    functions, and nothing in it waited for them: the teardown stops them unfinished."""


class HookConflictWarning(UserWarning):
    """Hooks on one target combine in a way that may not be what their plugins meant."""


class ImportGuardWarning(RuntimeWarning):
    """A hook target was imported before its hooks could exist, and the guard policy is ``warn``
    (or the stale-binding sweep rebinds every reference it found): issued instead of
    ``ImportGuardError``.  Here, among the errors, so that ``-W error::spawnkit.ImportGuardWarning``
    given to Python resolves, and ``run_entry`` can forward a test's filter for it."""


class PlainChildWarning(UserWarning):
    """A process whose plugins are loaded and hooks applied started a ``spawn`` or
    ``forkserver`` child through plain multiprocessing: that child starts a fresh interpreter
    (or a fork of multiprocessing's own server) that loads no plugin and applies no hook."""


class PluginSelectionWarning(UserWarning):
    """What a launch will load is not what was meant: a selected plugin name matches no
    installed plugin, two distributions share one, an allow-list that names nothing, a group
    no namespace reads, a plugin registering into another namespace.  Here, among the errors,
    so that ``-W error::spawnkit.PluginSelectionWarning`` given to Python resolves."""


class WarmServerWarning(UserWarning):
    """A warm-start server ran code that asked for one rank's state (``current_spec()``) while
    it bootstrapped for every rank: it got ``None``, and what the code decided from that holds
    for every worker forked from the server.  Also, once per launcher, its warm starts are
    cold: servers keep being replaced because each launch's environment differs."""


# ----------------------------------------------------------------- platforms
class PlatformError(SpawnkitError, RuntimeError):
    """Base of platform resolution errors; ``explanation`` is ``explain_platform()``'s text."""

    explanation: str = ""
    namespace: str = ""

    def __str__(self) -> str:
        base = super().__str__()
        if self.explanation:
            return f"{base}\n\n{self.explanation}"
        return base


class PlatformNotFoundError(PlatformError):
    """The selected platform name matches no built-in and no installed plugin."""


class PlatformUnavailableError(PlatformError):
    """The selected platform is installed but its hardware is not present."""


class PlatformConflictError(PlatformError):
    """Several platform plugins activated and none was selected."""


class PlatformPluginError(PlatformError):
    """A platform plugin is invalid: duplicate or reserved name, bad return, bad class."""


class PlatformContractError(PlatformPluginError, TypeError):
    """A platform class breaks the device interface (unknown public name, bad override)."""


class CustomOpError(SpawnkitError, ValueError):
    """A ``CustomOp`` forward registration conflicts, or an op has no usable forward."""


# ------------------------------------------------------------------- plugins
class PluginError(SpawnkitError):
    """A general plugin failed to import or its callback raised."""

    plugin: str = ""
    value: str = ""
    dist: str = ""
    version: str = ""
    group: str = ""


class PluginDriftError(PluginError):
    """A rank's node has other plugins (or other versions) than the launcher selected."""

    node: str = ""
    rank: int | None = None
    node_version: str = ""
    stage: str = "plugin_check"


# ----------------------------------------------------------------- bootstrap
class BootstrapError(SpawnkitError):
    """A worker's staged bootstrap failed."""

    stage: str = ""
    rank: int | None = None
    pid: int | None = None
    host: str = ""
    traceback_text: str = ""


class BootstrapOrderError(BootstrapError):
    """A stage was called out of order or twice; ``expected`` names the stage that may run now."""

    expected: str = ""


class StageError(BootstrapError):
    """A bootstrap stage raised; the original exception is ``__cause__`` (in-process).

    A spawnkit cause makes it a subclass of both (:func:`stage_error_type`), so ``except
    PluginError`` still catches a plugin failure that surfaced through the bootstrap.
    """

    cause_type: str = ""
    cause: BaseException | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        message = str(self.args[0]) if self.args else ""
        cause_cls = getattr(type(self), "_cause_cls", None)
        if cause_cls is not None:
            return (_rebuild_dual, (cause_cls, message, dict(self.__dict__)))
        return (_rebuild, (type(self), message, dict(self.__dict__)))


_dual_types: dict[type[SpawnkitError], type[StageError]] = {}


def stage_error_type(cause_cls: type[BaseException]) -> type[StageError]:
    """``StageError`` combined with ``cause_cls`` when that is a spawnkit error, else itself."""
    if (
        not issubclass(cause_cls, SpawnkitError)
        or issubclass(cause_cls, StageError)
        or cause_cls is BootstrapError
    ):
        return StageError
    cls = _dual_types.get(cause_cls)
    if cls is None:
        cls = type(
            f"StageError[{cause_cls.__name__}]",
            (StageError, cause_cls),
            {"_cause_cls": cause_cls, "__module__": __name__},
        )
        cls.__qualname__ = f"StageError[{cause_cls.__qualname__}]"
        _dual_types[cause_cls] = cls
    return cls


def _rebuild_dual(
    cause_cls: type[SpawnkitError], message: str, state: dict[str, Any]
) -> SpawnkitError:
    return _rebuild(stage_error_type(cause_cls), message, state)


class EntryResolutionError(StageError):
    """The entry ``module:qualname`` does not import or does not resolve to a callable."""


class ImportGuardError(BootstrapError):
    """A hook target module was imported before plugins were loaded."""

    findings: list[dict[str, Any]] = []


class LazyProxyError(BootstrapError):
    """A lazy proxy was used in a worker before the bootstrap applied hooks."""

    reference: str = ""
    filename: str = ""
    lineno: int = 0


class ConfigError(SpawnkitError, ValueError):
    """A launcher argument or a namespace variable has a value spawnkit refuses."""

    setting: str = ""


class LauncherUnavailableError(SpawnkitError, RuntimeError):
    """An external launcher (Ray, torchrun) is not installed, not started or cannot place ranks."""


class MissingExtraError(SpawnkitError, ImportError):
    """A feature needs a package of a spawnkit extra (``spawnkit[torch]``) that is not installed."""

    extra: str = ""
    module: str = ""
    feature: str = ""


class ForkServerError(BootstrapError):
    """The warm-start fork server could not serve: a stage of its bootstrap failed, it died, or
    it stopped answering.  ``server_pid`` is the server; ``cause`` the server's exception, when
    one was raised and unpickled; ``stage`` the stage it was in.  Kind ``preload``: a preload
    module failed to import, hung, or created an accelerator context."""

    server_pid: int | None = None
    cause: BaseException | None = None


class ForkSafetyError(ForkServerError):
    """Forking workers from the warm-start server would be unsafe: a thread is running in it, or
    an accelerator context was created in it.  ``culprit`` names the plugin, platform or preload
    responsible (``""`` where it could not be known)."""

    culprit: str = ""


class SpecError(SpawnkitError):
    """A ``ProcessSpec`` field is wrong; ``field``, ``expected`` and ``value`` (a repr) name it."""

    field: str = ""
    expected: str = ""
    value: str = ""


class SpecTypeError(SpecError, TypeError):
    """A ``ProcessSpec`` field has the wrong type (``plugins="ab"``, ``env={"X": 1}``)."""


class SpecValueError(SpecError, ValueError):
    """A ``ProcessSpec`` field has the right type but an impossible value (``rank=-1``)."""


# ------------------------------------------------------------------ launcher
class ChildError(SpawnkitError):
    """A worker of a group failed; raised in the parent.  ``other_failures``: by rank, the
    failures other ranks of a group (local or Ray) reported on their own while it was torn
    down for this one (each its own ``ChildError``); the message lists them in brief."""

    rank: int | None = None
    pid: int | None = None
    host: str = ""
    stage: str = ""
    unreaped_pids: list[int] = []
    other_failures: dict[int, ChildError] = {}


class ChildRaisedError(ChildError):
    """A worker raised.  ``child_exception`` is the original when it unpickled, else None;
    ``exc_type`` is its qualified type name; ``traceback_text`` the child's traceback."""

    exc_type: str = ""
    traceback_text: str = ""
    child_exception: BaseException | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        state = dict(self.__dict__)
        exc = state.get("child_exception")
        if exc is not None:
            import pickle

            try:
                pickle.loads(pickle.dumps(exc))
            except Exception:
                state["child_exception"] = None
        return (_rebuild, (type(self), str(self.args[0]) if self.args else "", state))


class ChildExitedError(ChildError):
    """A worker exited (non-zero code or signal) without reporting an exception."""

    exit_code: int | None = None
    signal_name: str = ""
    fault_text: str = ""


class NodeLostError(ChildExitedError):
    """A rank died with its cluster node (Ray marked the node dead); ``node`` is the node's id."""

    node: str = ""


class BootstrapTimeoutError(ChildError):
    """A worker did not finish its bootstrap in time: a startup deadline, or a run's deadline
    that passed while the rank named was still in a bootstrap stage (an entry that overruns is
    an ``EntryTimeoutError``)."""

    waited_s: float = 0.0
    stacks: dict[int, str] = {}
    not_ready: dict[int, str] = {}


class EntryTimeoutError(ChildError, TimeoutError):
    """A rank's entry function was still running when a limit on the run expired."""

    setting: str = ""
    timeout_s: float | None = None
    waited_s: float = 0.0
    stacks: dict[int, str] = {}


class ProgressCallbackError(SpawnkitError):
    """The ``progress=`` callback of ``spawn_with_plugins`` raised; the group was torn down."""

    rank: int | None = None
    stage: str = ""
