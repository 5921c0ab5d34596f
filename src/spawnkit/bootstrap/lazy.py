"""``lazy("pkg.mod:Name")``: bind an engine's class at module scope without importing it.

A proxy imports on first use (attribute, call, ``isinstance``, subclassing).  Used in a spawnkit
worker before hooks are applied it raises ``LazyProxyError`` naming the user's line, whatever the
guard policy.  See README "The import guard and the lazy proxy".
"""

from __future__ import annotations

import importlib
import threading

from spawnkit._compat import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

__all__ = ["LazyObject", "lazy"]

_UNSET: Any = object()


_phase: Any = None  # ``spawnkit.spec._phase``, kept by the first proxy that resolved


def _keep_phase(phase: Any) -> None:
    global _phase
    _phase = phase


def _split(reference: str) -> tuple[str, str]:
    if not isinstance(reference, str):
        raise TypeError(f"lazy() takes a 'pkg.mod:Name' string, got {type(reference).__name__}")
    from spawnkit import _reference

    try:
        return _reference.parse(reference, module_only=True)
    except _reference.BadReference as exc:
        raise ValueError(
            f"lazy() reference {reference!r}: {exc.why}; it must look like 'pkg.mod:Name' (or "
            "'pkg.mod' for the module itself), for example 'sglang.multimodal_gen:DiffGenerator'"
        ) from None


class LazyObject:
    """The stand-in ``lazy`` returns; forwards everything to the object once resolved."""

    __slots__ = (
        "__weakref__", "_lazy_lock", "_lazy_module", "_lazy_qualname", "_lazy_seen", "_lazy_target"
    )  # fmt: skip

    def __init__(self, reference: str) -> None:
        module, qualname = _split(reference)
        object.__setattr__(self, "_lazy_module", module)
        object.__setattr__(self, "_lazy_qualname", qualname)
        object.__setattr__(self, "_lazy_target", _UNSET)
        object.__setattr__(self, "_lazy_seen", -1)
        object.__setattr__(self, "_lazy_lock", threading.Lock())

    # ----------------------------------------------------------- resolution
    @property
    def _lazy_reference(self) -> str:
        qual = object.__getattribute__(self, "_lazy_qualname")
        mod = object.__getattribute__(self, "_lazy_module")
        return f"{mod}:{qual}" if qual else mod

    def _lazy_resolve(self) -> Any:
        target = object.__getattribute__(self, "_lazy_target")
        # The object is kept while no hook target changed since it was looked up (a proxy
        # holding one has kept the phase module, below); a patch installed or undone since (a
        # launcher's bootstrap_here(), a test's hooks) is followed, as the module's own
        # attribute is: a proxy bound to the unpatched original ran none of the hooks.
        if target is not _UNSET and object.__getattribute__(self, "_lazy_seen") == _phase.patches:
            return target
        reference = object.__getattribute__(self, "_lazy_reference")
        # Imported here, not at module level: ``spawnkit.bootstrap`` imports this module
        # eagerly and must stay nearly free for the child's command line.
        from spawnkit import _reference
        from spawnkit.spec import _phase as phase

        if phase.too_early():
            raise _too_early(reference)
        with object.__getattribute__(self, "_lazy_lock"):
            seen = phase.patches
            target = object.__getattribute__(self, "_lazy_target")
            if target is not _UNSET and object.__getattribute__(self, "_lazy_seen") == seen:
                return target
            module = object.__getattribute__(self, "_lazy_module")
            try:
                obj = _reference.walk(
                    importlib.import_module(module),
                    object.__getattribute__(self, "_lazy_qualname"),
                    module,
                )
            except _reference.MissingAttribute as exc:
                raise AttributeError(f"lazy proxy {reference!r}: {exc}") from exc
            object.__setattr__(self, "_lazy_target", obj)
            object.__setattr__(self, "_lazy_seen", seen)
            _keep_phase(phase)
            return obj

    # ------------------------------------------------------------ forwarding
    def __getattr__(self, name: str) -> Any:
        # Only reached for names not found on the proxy itself.
        return getattr(object.__getattribute__(self, "_lazy_resolve")(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._lazy_resolve(), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._lazy_resolve(), name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._lazy_resolve()(*args, **kwargs)

    def __dir__(self) -> list[str]:
        return dir(self._lazy_resolve())

    def __instancecheck__(self, instance: Any) -> bool:
        return isinstance(instance, self._lazy_resolve())

    def __subclasscheck__(self, subclass: Any) -> bool:
        return issubclass(subclass, self._lazy_resolve())

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[Any, ...]:
        return (self._lazy_resolve(),)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyObject):
            other = other._lazy_resolve()
        return bool(self._lazy_resolve() == other)

    def __hash__(self) -> int:
        return hash(self._lazy_resolve())

    def __bool__(self) -> bool:
        return bool(self._lazy_resolve())

    def __repr__(self) -> str:
        reference = object.__getattribute__(self, "_lazy_reference")
        target = object.__getattribute__(self, "_lazy_target")
        if target is _UNSET:
            return f"<lazy {reference!r} (not imported yet)>"
        return f"<lazy {reference!r} -> {target!r}>"

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles as the reference, so sending a proxy to a worker imports nothing there.
        return (lazy, (object.__getattribute__(self, "_lazy_reference"),))


def _user_frame() -> Any:
    """The first frame outside this module: the user's code that touched the proxy."""
    import sys

    frame: Any = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    return frame


def _too_early(reference: str) -> Exception:
    """``LazyProxyError`` naming the user's line and the part of the worker's start it ran in."""
    from spawnkit.bootstrap import guard
    from spawnkit.bootstrap.stages import Stage
    from spawnkit.errors import LazyProxyError

    frame = _user_frame()
    if frame is None:
        where, filename, lineno = "<unknown>", "", 0
    else:
        filename, lineno = frame.f_code.co_filename, frame.f_lineno
        where = f"{filename}:{lineno} (in {frame.f_code.co_name})"
    step = guard.current_step()
    window = guard.frame_window(frame, step)
    context, fix = {
        guard.MAIN: (
            "at module scope of the launching script (spawn re-runs it in every worker before "
            "hooks exist)",
            'use it inside a function (the entry runs after hooks) or under `if __name__ == "'
            '__main__":`',
        ),
        guard.UNPICKLING: (
            "while the worker unpickled its Process arguments (before hooks exist)",
            "do not use it while unpickling (e.g. in __setstate__); send plain data or a "
            "spawnkit.Payload and use the proxy in the entry",
        ),
        guard.PRELOAD: (
            "in the warm-start server's preload (no hook ever reaches it)",
            "drop that module from preload=, or use the proxy inside a function",
        ),
        guard.PLUGIN: (
            f"by the code of {step[7:]} while it loaded (before hooks exist)",
            "use it inside the hook or the function that needs it, not at the plugin's import",
        ),
    }.get(
        window,
        (
            f"in a worker's bootstrap stage {step!r}, before the bootstrap applied hooks"
            if window == guard.STAGE
            else "in a worker before the bootstrap applied hooks",
            "use it inside the entry function (or after apply_plugin_hooks()), not at import "
            "time of a module the worker imports early",
        ),
    )
    return LazyProxyError(
        f"lazy proxy {reference!r} used at {where} {context}, where it would bind the "
        f"unpatched original. Fix: {fix}.",
        stage=(
            Stage.PLUGINS.value if window == guard.PLUGIN else step if window == guard.STAGE else ""
        ),
        reference=reference,
        filename=filename,
        lineno=lineno,
    )


def lazy(reference: str) -> Any:
    """A proxy for ``"pkg.mod:Name"`` that imports nothing until used; typed ``Any`` on purpose."""
    return LazyObject(reference)
