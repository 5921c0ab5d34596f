"""``CustomOp``: one module, the right kernel for the platform it runs on.

Order: a kernel registered for the exact class and dispatch key, ``forward_<key>`` where the key
is not the device type, then ``forward_<device_type>``, ``forward_oot`` on an out-of-tree
platform (as SGLang and vLLM run it), then ``forward_native``; on ROCm a kernel for
``rocm``/``hip`` and ``forward_hip`` come before the CUDA ones.
Decided at the first call, not construction, because models are often built before
``init_backend()`` registers the kernels; the choice is then kept on the instance (``_kernel``)
and the class's ``forward`` still runs at every call, so a hook on it runs every time (a first
call inside ``torch.compile``'s trace chooses at trace time and pins nothing); a hook applied
or removed later on the chosen kernel makes the op choose again (``_drop_pins``). Keyed by
exact class: a subclass does not inherit its parent's kernel, except the class that now stands
at its parent's home (a plugin's class REPLACE of the op) and a class made at run time with no
forward of its own (torch's ``parametrize``, FSDP2's ``fully_shard``).

Keys are compared stripped and case-folded (``"CPU"``, ``"cpu "`` and ``"cpu"`` are one key).
A kernel registered under another name of this platform (its ``device_name``, its torch
``dispatch_key``) never runs, nor a ``forward_<device_name>`` method: a ``CustomOpWarning`` says so
when the op chooses, once per op and key; a kernel under an unrelated key is another platform's.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import types
import warnings
import weakref
from collections.abc import Callable
from typing import Any, ClassVar

from spawnkit._extras import reraise_torch_import

try:
    import torch
    from torch.nn.modules import module as _torch_module
except ImportError as _exc:
    reraise_torch_import(_exc, "spawnkit.platforms.CustomOp")

from spawnkit._names import qualified_name
from spawnkit.errors import CustomOpError, CustomOpWarning
from spawnkit.spec import _phase

__all__ = ["CustomOp"]

logger = logging.getLogger("spawnkit.platforms")

_registry_lock = threading.Lock()
_oot_forwards: dict[tuple[type, str], Callable[..., Any]] = {}
_dispatched: set[tuple[type, str]] = set()
_warned: set[tuple[type, str]] = set()


# torch mutates its process-wide hook dicts in place, so references taken once stay valid.
_G_BWD_PRE = _torch_module._global_backward_pre_hooks
_G_BWD = _torch_module._global_backward_hooks
_G_FWD = _torch_module._global_forward_hooks
_G_FWD_PRE = _torch_module._global_forward_pre_hooks
_tracing_state = torch._C._get_tracing_state
_module_call = torch.nn.Module.__call__


def _fn_name(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _key(platform_key: str) -> str:
    """One spelling per key: platforms produce lower-case torch device types (``cpu``), while
    ``dispatch_key`` and habit spell them ``CPU``; a stray space never names another device."""
    return platform_key.strip().lower()


class CustomOp(torch.nn.Module):
    """Base of ops with per-platform kernels; ``namespace`` says whose platform decides."""

    namespace: ClassVar[Any] = None

    def __init__(self, *, namespace: Any = None) -> None:
        super().__init__()
        if namespace is not None:
            self._op_namespace = namespace
        self._dispatch_choice: str | None = None

    # ---------------------------------------------------------- registry
    @classmethod
    def register_oot_forward(
        cls,
        op_class: type[CustomOp],
        fn: Callable[..., Any],
        platform_key: str,
        *,
        replace: bool = False,
    ) -> None:
        """Use ``fn(op, *args, **kwargs)`` as ``op_class``'s forward on ``platform_key``.

        A second function for the same key is an error (two plugins fighting over one kernel)
        unless ``replace=True``.  The key is stripped and case-folded, as at dispatch.
        """
        if not (isinstance(op_class, type) and issubclass(op_class, CustomOp)):
            raise CustomOpError(
                f"register_oot_forward: op_class must be a CustomOp subclass, got {op_class!r}"
            )
        if not callable(fn):
            raise CustomOpError(
                f"register_oot_forward({op_class.__qualname__}): fn must be callable, got {fn!r}"
            )
        if not isinstance(platform_key, str) or not platform_key.strip():
            raise CustomOpError(
                f"register_oot_forward({op_class.__qualname__}): platform_key must be the "
                "platform's get_dispatch_key_name() (a non-empty string), got "
                f"{platform_key!r}"
            )
        platform_key = _key(platform_key)
        key = (op_class, platform_key)
        with _registry_lock:
            existing = _oot_forwards.get(key)
            if existing is not None and existing is not fn and not replace:
                raise CustomOpError(
                    f"{qualified_name(op_class)} already has an out-of-tree "
                    f"forward for platform key {platform_key!r}: {_fn_name(existing)}; "
                    f"refusing to replace it with {_fn_name(fn)}. Pass replace=True if "
                    "overriding it is intended, or register under another key."
                )
            _oot_forwards[key] = fn
            late = key in _dispatched
        if late:
            logger.warning(
                "out-of-tree forward %s for %s on %r registered after instances already "
                "dispatched; those instances keep their kernel (register in init_backend())",
                _fn_name(fn),
                op_class.__qualname__,
                platform_key,
            )

    @classmethod
    def unregister_oot_forward(cls, op_class: type[CustomOp], platform_key: str) -> None:
        """Remove a registration (tests, and plugins that unload); missing ones are ignored."""
        with _registry_lock:
            _oot_forwards.pop((op_class, _key(platform_key)), None)

    @classmethod
    def oot_forward(cls, op_class: type[CustomOp], platform_key: str) -> Callable[..., Any] | None:
        """The function registered for exactly ``op_class`` on ``platform_key``, if any."""
        return _oot_forwards.get((op_class, _key(platform_key)))

    # ---------------------------------------------------------- dispatch
    @property
    def dispatch_choice(self) -> str | None:
        """What ``forward`` resolved to (``oot:<key>``, ``forward_<type>``, ``forward_native``)."""
        return self._dispatch_choice

    def _platform(self) -> Any:
        from spawnkit.platforms._current import initialize_current_platform

        ns = self.__dict__.get("_op_namespace", type(self).namespace)
        return initialize_current_platform(ns)

    def _choose_forward(self) -> tuple[str, Callable[..., Any]]:
        platform = self._platform()
        cls = type(self)
        ops = _op_classes(cls)
        order = _dispatch_order(platform)
        keys = tuple(key for tier_keys, _ in order for key in tier_keys)
        for tier_keys, name in order:
            for key in tier_keys:
                with _registry_lock:
                    fn = _lookup(ops, key)
                if fn is not None:
                    return f"oot:{key}", types.MethodType(fn, self)
            method = getattr(self, name, None) if name else None
            if callable(method):
                _warn_unmatched(ops, platform, keys, name)
                _warn_unlooked_methods(cls, platform, order, name)
                return name, method
        if type(self).forward_native is CustomOp.forward_native:
            methods = " or ".join(name for _, name in order if name) or "forward_<device_type>"
            raise CustomOpError(
                f"{qualified_name(cls)} has no forward for platform "
                f"{type(platform).__qualname__} (dispatch keys {keys!r}, device type "
                f"{platform.device_type!r}): define forward_native (the portable fallback), a "
                f"{methods} method, or register one with CustomOp.register_oot_forward()."
            )
        _warn_unmatched(ops, platform, keys, "forward_native")
        _warn_unlooked_methods(cls, platform, order, "forward_native")
        return "forward_native", self.forward_native

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``nn.Module.__call__`` minus two frames, when no hook, tracing or compile is present."""
        d = self.__dict__
        impl = d.get("_kernel")
        try:
            # The class's forward, looked up at each call: a spawnkit hook on ``RMSNorm.forward``
            # (or a subclass's own forward) must run every time, not only at the first call.
            if impl is not None and type(self).forward is _forward and not (
                d["_forward_hooks"]
                or d["_forward_pre_hooks"]
                or d["_backward_hooks"]
                or d["_backward_pre_hooks"]
                or _G_FWD
                or _G_FWD_PRE
                or _G_BWD
                or _G_BWD_PRE
                or d.get("_compiled_call_impl") is not None
                or _tracing_state() is not None
            ):
                return impl(*args, **kwargs)
        except KeyError:  # a subclass skipped Module.__init__: let torch report it
            pass
        return _module_call(self, *args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the kernel chosen at this instance's first call (choosing it then)."""
        impl = self.__dict__.get("_kernel")
        if impl is None:
            if _is_compiling():
                return _run_compiled(self, args, kwargs)
            patches = _phase.patches
            choice, impl = self._choose_forward()
            self._dispatch_choice = choice
            _pin(self, impl, patches)
        return impl(*args, **kwargs)

    def forward_native(self, *args: Any, **kwargs: Any) -> Any:
        """The portable implementation in plain torch ops; every op should provide it."""
        raise NotImplementedError(f"{type(self).__qualname__}.forward_native")

    def reset_dispatch(self) -> None:
        """Choose again at the next call (after a registration made on purpose later)."""
        with _registry_lock:
            _unpin(self)
        self._dispatch_choice = None

    def _replicate_for_data_parallel(self) -> Any:
        # DataParallel copies __dict__: a replica must not keep a kernel bound to the original.
        replica = super()._replicate_for_data_parallel()  # type: ignore[no-untyped-call]
        replica.__dict__.pop("_kernel", None)
        replica.__dict__["_dispatch_choice"] = None
        return replica

    def __getstate__(self) -> dict[str, Any]:
        # A bound kernel does not pickle by reference; the copy dispatches afresh.
        state = dict(self.__dict__)
        state.pop("_kernel", None)
        state["_dispatch_choice"] = None
        return state


_forward = CustomOp.forward
_is_compiling = torch.compiler.is_compiling
#: (op class, ``oot:<key>``) -> the kernel a choice made while compiling found
_compiled_kernels: dict[tuple[type, str], Callable[..., Any]] = {}


def _choice_while_compiling(op: CustomOp) -> str:
    """Choose ``op``'s kernel as Python, outside dynamo's trace, and give the trace its name.

    ``torch.compile(model)`` before the model's first eager call made each op choose inside
    the trace, where the platform's initialization and the registry's locks cannot be traced:
    a graph break at every op, frozen into the compiled code (the model ran as pieces, each
    op outside the graph, unsaid), and ``fullgraph=True`` (vLLM's compile) failed inside
    spawnkit.  Marked as ``torch.compiler.assume_constant_result`` marks a function, without
    importing ``torch._dynamo`` (seconds) for every process that imports ``CustomOp``: dynamo
    runs it as Python at trace time and keeps the answer.  Nothing is pinned on the instance
    (``_kernel``), which the trace read as absent: a later eager call chooses again, the same.
    What the choice raises (``CustomOpError``, an escalated ``CustomOpWarning``) reaches the
    caller as the cause of dynamo's ``InternalTorchDynamoError``, whose message is its text.
    """
    choice, impl = op._choose_forward()
    op._dispatch_choice = choice
    if choice.startswith("oot:"):
        _compiled_kernels[(type(op), choice)] = impl.__func__  # type: ignore[attr-defined]
    return choice


_choice_while_compiling._dynamo_marked_constant = True  # type: ignore[attr-defined]

#: The instances holding a kernel in ``_kernel`` (weakly: ops die with their model), by
#: ``id()`` of the kernel's function and by the method name chosen, so that ``_drop_pins``
#: visits only those a change can concern (a late apply of many targets over a model of
#: thousands of ops).  Guarded by ``_registry_lock``.
_pinned: dict[int | str, weakref.WeakSet[CustomOp]] = {}


def _pin_keys(op: CustomOp) -> tuple[int | str, ...]:
    kernel = op.__dict__.get("_kernel")
    if kernel is None:
        return ()
    choice = op.__dict__.get("_dispatch_choice") or ""
    by_id = id(getattr(kernel, "__func__", kernel))
    return (by_id,) if choice.startswith("oot:") else (by_id, choice)


def _pin(op: CustomOp, impl: Callable[..., Any], patches: int) -> None:
    """Keep ``op``'s kernel, chosen at its first call, unless a hook target changed while it
    chose (``patches``, the engine's count, moved: another thread's apply, an apply the
    platform's initialization ran): what it chose may predate that change, so it is run this
    once and chosen again at the next call."""
    with _registry_lock:
        if _phase.patches != patches:
            return
        op.__dict__["_kernel"] = impl
        for key in _pin_keys(op):
            _pinned.setdefault(key, weakref.WeakSet()).add(op)


def _unpin(op: CustomOp) -> None:
    """Forget ``op``'s kernel: it chooses again at its next call.  Lock held."""
    for key in _pin_keys(op):
        ops = _pinned.get(key)
        if ops is not None:
            ops.discard(op)
            if not ops:
                del _pinned[key]
    op.__dict__.pop("_kernel", None)


def _drop_pins(owner: Any, attr: str, before: Any) -> None:
    """Forget each kernel chosen from what the hook engine just changed (``owner.attr`` was
    ``before``): that op chooses again at its next call, this time with the hook (or without
    the removed one).

    A kernel is pinned at an op's first call and the direct path runs it with no lookup, so a
    hook applied on an op's ``forward_cuda`` or its registered kernel after the model ran once
    (``bootstrap_here()``, a later ``apply_hooks()``) never ran, and one removed
    (``unapply()``, ``isolated_hooks``) kept running, while the report said otherwise.
    Checking at each call cost ~90 ns (the ``custom_op_overhead`` target is 1.05x); the
    engine says when a target changes instead (``spec._phase.watch_patches``).  Dropped: a
    pin whose function is ``before`` (a registered kernel, a method of the class or a base
    patched where it is defined), and one whose method is ``attr`` of a class the op is an
    instance of (a hook put on a subclass that inherited the method).  The choice itself
    (``dispatch_choice``) stays until the next call makes it again.
    """
    if not (_pinned or _compiled_kernels):
        return
    old = getattr(before, "__func__", before)  # through a staticmethod or classmethod
    with _registry_lock:
        ops = list(_pinned.get(id(old), ()))
        if isinstance(owner, type):
            ops += [op for op in _pinned.get(attr, ()) if owner in type(op).__mro__]
        for op in ops:
            kernel = op.__dict__.get("_kernel")
            if kernel is not None and (
                getattr(kernel, "__func__", kernel) is old  # not another function at its id
                or op.__dict__.get("_dispatch_choice") == attr
            ):
                _unpin(op)
        for key, fn in list(_compiled_kernels.items()):
            if fn is old:  # dynamo guards on the entry: the graph that traced it traces again
                del _compiled_kernels[key]


_phase.watch_patches(_drop_pins)


def _run_compiled(op: CustomOp, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The chosen kernel, as code dynamo traces into the graph, read where dynamo guards on it:
    a registered one from ``_compiled_kernels`` (which ``_drop_pins`` empties of a kernel a
    hook's apply or removal changes), a method off the op's class, as it is now (hooks
    included).  Read off the op, the method was not guarded: a hook applied on
    ``forward_cuda`` after the compiled op ran never ran in it."""
    choice = _choice_while_compiling(op)
    if choice.startswith("oot:"):
        return _compiled_kernels[(type(op), choice)](op, *args, **kwargs)
    method = getattr(type(op), choice)
    if isinstance(method, types.FunctionType):
        return method(op, *args, **kwargs)
    return getattr(op, choice)(*args, **kwargs)  # a staticmethod, a callable object


def _dispatch_order(platform: Any) -> tuple[tuple[tuple[str, ...], str], ...]:
    """The platform's (kernel keys, method) tiers, most specific first: its key, then
    ``forward_<device_type>``.

    ROCm runs torch's CUDA API (device type and key ``cuda``), so that rule alone ran
    ``forward_cuda`` on AMD (in SGLang ports a CUDA-only ``sgl_kernel`` call) and never an
    op's ``forward_hip`` or a kernel registered for ``rocm``.  There, as in SGLang (whose
    ``forward_hip`` defaults to ``forward_cuda``), AMD's own come first: kernels for ``rocm``
    and ``hip``, ``forward_hip``; then the CUDA ones, which HIP builds largely run.

    A key of the platform's own that is not its device type (the walkthrough's ``my_device``
    on torch's ``cpu``) has its ``forward_<key>`` first, and an out-of-tree platform ends with
    ``forward_oot``: SGLang's diffusion ``CustomOp`` runs the kernel for the key, then
    ``forward_<key>``, then ``forward_oot``, and vLLM ``forward_oot`` on any out-of-tree
    platform, so an op ported from either ran ``forward_native`` here instead.
    """
    key = _key(platform.get_dispatch_key_name() or "")
    device_type = platform.device_type or ""
    method = f"forward_{device_type}" if device_type else ""
    tiers: list[tuple[tuple[str, ...], str]] = []
    if key and key != _key(device_type) and key.isidentifier():
        tiers.append(((key,), f"forward_{key}"))
    own = () if tiers or not key else (key,)
    if platform.is_rocm():
        amd = tuple(dict.fromkeys(k for k in (*own, "rocm", "hip") if k != device_type))
        tiers += [(amd, "forward_hip"), ((device_type,) if device_type else (), method)]
    else:
        tiers.append((own, method))
    if platform.is_out_of_tree():
        tiers.append(((), "forward_oot"))
    return tuple(tiers)


def _op_classes(cls: type) -> tuple[type, ...]:
    """``cls``, then the ops it stands in for (see ``_stands_for``), whose kernels it takes."""
    ops = [cls]
    i = 0
    while i < len(ops):  # a parametrized replacement stands for what the replacement replaced
        ops.extend(base for base in _stands_for(ops[i]) if base not in ops)
        i += 1
    return tuple(ops)


def _stands_for(cls: type) -> list[type]:
    """The ops whose kernels ``cls`` runs although keyed by exact class.

    A base whose home (its module's attribute) now holds ``cls``, as a plugin's class REPLACE
    of ``eng.layers.RMSNorm`` leaves it: the platform registered its kernel for the original
    class (in ``init_backend()`` or its plugin, before the hooks), and the replacement fell
    back to ``forward_native`` while the report said applied.  And the op a class made at run
    time derives from, a class at no home of its own that defines no ``forward*``: torch's
    ``parametrize`` (``weight_norm``) re-classes a module as ``ParametrizedRMSNorm`` to add a
    property, FSDP2's ``fully_shard`` as ``FSDPRMSNorm``; each dropped the platform's kernel.
    A subclass at its home, or one with a forward of its own, is another op.
    """
    replaced = [base for base in cls.__mro__[1:] if _at_home(base) is cls]
    if replaced or _at_home(cls) is cls:
        return replaced
    for klass in cls.__mro__:
        if klass is not cls and issubclass(klass, CustomOp):
            return [] if klass is CustomOp else [klass]
        if any(name.startswith("forward") for name in vars(klass)):
            return []
    return []


def _lookup(ops: tuple[type, ...], key: str) -> Callable[..., Any] | None:
    """The first of ``ops``' kernels for ``key``; called with the registry lock held."""
    for op in ops:
        _dispatched.add((op, key))
        fn = _oot_forwards.get((op, key))
        if fn is not None:
            return fn
    return None


def _at_home(cls: type) -> Any:
    """What ``cls``'s module now holds under its qualified name (None: a local class)."""
    found: Any = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        found = getattr(found, part, None) if found is not None and part != "<locals>" else None
    return found


def _warn_unmatched(ops: tuple[type, ...], platform: Any, tried: tuple[str, ...], ran: str) -> None:
    """Warn about kernels registered for this platform under a key its dispatch never looks up.

    A platform plugin that registers under its ``device_name`` (``ascend``) or torch's
    ``dispatch_key`` (``PrivateUse1``) while ``get_dispatch_key_name()`` says ``npu`` saw its
    kernel accepted and every op run ``forward_native``.  A key that is none of this
    platform's names is another platform's kernel, and stays quiet.
    """
    with _registry_lock:
        unmatched = [
            (op, key, fn)
            for (op, key), fn in _oot_forwards.items()
            if op in ops and key not in tried and (op, key) not in _warned
        ]
    for op, key, fn in unmatched:
        why = _meant_here(key, platform)
        if why is None:
            continue
        with _registry_lock:
            if (op, key) in _warned:
                continue
        platform_cls = type(platform)
        named = f"{platform_cls.__qualname__}.get_dispatch_key_name()"
        # PrivateUse1 is every out-of-tree device's: no key to make a platform answer to.
        other = "" if "dispatch_key" in why else f", or make {named} return {key!r}"
        who = "it" if op is ops[0] else qualified_name(ops[0])
        warnings.warn(
            f"{qualified_name(op)} has a kernel registered for platform key {key!r} "
            f"({_fn_name(fn)}), {why}, but CustomOp dispatch on {platform_cls.__qualname__} "
            f"looks up {' then '.join(map(repr, tried)) or 'no key'} ({named}): {who} runs "
            f"{ran} instead of that kernel. Register the kernel with "
            f"platform_key={(tried or ('<the key>',))[0]!r}{other}.",
            CustomOpWarning,
            stacklevel=_caller_level(),
        )
        with _registry_lock:  # after: escalated by -W error, every first call raises again
            _warned.add((op, key))


def _warn_unlooked_methods(
    cls: type, platform: Any, order: tuple[tuple[tuple[str, ...], str], ...], ran: str
) -> None:
    """Warn about an op's ``forward_<name>`` named after this platform by a name dispatch does
    not look up (its ``device_name``, ``forward_ascend`` where the key is ``npu``), as for a
    kernel registered under it: the method never runs while the op looks ported."""
    tried = [name for _, name in order if name]
    for attr in ("device_name", "dispatch_key"):
        value = getattr(platform, attr, "")
        if not isinstance(value, str) or not value.strip():
            continue
        for name in dict.fromkeys((f"forward_{value.strip()}", f"forward_{_key(value)}")):
            if name in tried or name == ran or not callable(getattr(cls, name, None)):
                continue
            with _registry_lock:
                if (cls, name) in _warned:
                    continue
            named = f"{type(platform).__qualname__}.get_dispatch_key_name()"
            key = _key(platform.get_dispatch_key_name() or "") or "<the key>"
            warnings.warn(
                f"{qualified_name(cls)}.{name} is named after the platform's {attr} "
                f"{value!r}, but CustomOp dispatch on {type(platform).__qualname__} looks up "
                f"{' then '.join(tried) or 'no method'} "
                f"({named} is {key!r}): it runs {ran} instead. Name the method "
                f"forward_{key} (or forward_oot, for any out-of-tree platform).",
                CustomOpWarning,
                stacklevel=_caller_level(),
            )
            with _registry_lock:
                _warned.add((cls, name))


def _meant_here(key: str, platform: Any) -> str | None:
    """Why ``key`` looks meant for ``platform`` (None: it names another platform)."""
    dispatch_key = getattr(platform, "dispatch_key", "")
    if isinstance(dispatch_key, str) and dispatch_key and _key(dispatch_key) == key:
        return (
            f"the platform's dispatch_key {dispatch_key!r} (torch's dispatcher key, for "
            "torch.library operators; CustomOp does not read it)"
        )
    device_name = getattr(platform, "device_name", "")
    if isinstance(device_name, str) and device_name and _key(device_name) == key:
        return f"the platform's device_name {device_name!r}"
    return None


def _caller_level() -> int:
    """``stacklevel`` for the first frame outside spawnkit and torch: the op's caller."""
    skip = (os.path.dirname(os.path.dirname(__file__)), os.path.dirname(torch.nn.__file__))
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(skip):
        frame = frame.f_back
        level += 1
    return level
