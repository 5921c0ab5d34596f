"""What TorchScript does with a hooked function: it compiles source, and a chain's is the
original's.

``torch.jit.script`` reads a function's source with ``inspect.getsourcelines``, which follows
the chain's ``__wrapped__`` to the original: scripting a hooked function, or code that calls
it by its global name (``torch.jit.script(block)``, an ``nn.Module`` whose forward calls it),
compiled the original, and the scripted copy ran without the hooks while ``status()`` said
applied.  Each chain is therefore marked (``mark``), as it is built while torch is loaded,
else as ``torch._jit_internal`` is imported (``_chain._mark_later``: this module is never
imported where torch is not): scripted code calls it as Python (``FunctionModifiers.IGNORE``,
torch's own object: TorchScript compares with ``is``), and scripting the chain itself raises,
with this module's message (``__script_unsupported``, which torch's own ``autocast``
decorator sets the same way).  Such scripted code cannot be ``torch.jit.save``'d: torch
refuses ("Could not export Python function call"), which is loud.

What no mark can reach: scripted code compiled before the hooks (``@torch.jit.script`` as the
engine's module was imported) holds the original's compiled copy.  Those callers are found in
TorchScript's compilation unit, by the original's qualified name in their graphs, and named
(``callers``: ``HookRegistry.bypassing()``, a hook conflict in each worker).
"""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["callers", "fix", "mark", "reason", "split"]

#: how a scripted caller is named among a target's bypasses (``_torch_ops`` names kernels)
_SUFFIX = " (TorchScript, compiled before the hooks)"


#: what ``mark`` says, by whether the original is itself a TorchScript function
_REFUSED = (
    "hooked, and TorchScript compiles a function from its source, which is the original's "
    "(the hooks are Python): its scripted copy would run without them. Script the code that "
    "calls it instead (that code calls the hooked function as Python, and cannot be "
    "torch.jit.save'd), or call it unscripted (torch.compile and torch.jit.trace run the hooks)",
    # torch asks the signature of an ignored function of what its ``__wrapped__`` leads to, a
    # ScriptFunction here, and fails ("unsupported callable"): refused instead
    "a TorchScript function with hooks, and the hooks are Python: scripted code cannot call "
    "the hooked function, and compiling against the original would skip them. Call it from "
    "Python, or hook the Python code that calls the scripted code",
)

#: torch's objects ``mark`` uses, read once: (``torch._jit_internal``, ``IGNORE``, the
#: modifiers an original may have that TorchScript compiles from source, ``ScriptFunction``)
_TORCH: list[tuple[Any, Any, tuple[Any, ...], Any]] = []


def mark(chain: Any, original: Any, display: str, jit: types.ModuleType) -> None:
    """Make TorchScript call ``chain`` as Python, and refuse to compile it (torch is loaded:
    ``jit`` is ``torch._jit_internal``).  Every chain pays it, at its build or torch's import:
    torch's objects are read once, and the message is one format (half a microsecond)."""
    if not _TORCH or _TORCH[0][0] is not jit or _TORCH[0][1] is None:
        # read again while ``FunctionModifiers`` is missing: a chain built as a module
        # ``torch._jit_internal`` imports first finishes (an on_import target in
        # ``torch.distributed.rpc``) sees it half run, and the chains marked as it ends need it
        _TORCH[:] = [_torch_objects(jit)]
    _, ignore, compiled_from_source, script_function = _TORCH[0]
    scripted = isinstance(original, script_function)
    # an original TorchScript already ignores (or drops) keeps its own choice
    if not scripted and chain.__dict__.get("_torchscript_modifier") in compiled_from_source:
        chain._torchscript_modifier = ignore
    setattr(
        chain,
        "__script_unsupported",
        f"spawnkit.hooks: target {display!r} is {_REFUSED[scripted]}.",
    )


def _torch_objects(jit: types.ModuleType) -> tuple[Any, Any, tuple[Any, ...], Any]:
    modifiers = getattr(jit, "FunctionModifiers", None)  # torch's private API: absent, unmarked
    if modifiers is None:
        return jit, None, (), _script_function()
    compiled = (None, modifiers.DEFAULT, modifiers.EXPORT)
    return jit, modifiers.IGNORE, compiled, _script_function()


def _script_function() -> type | tuple[type, ...]:
    found = getattr(sys.modules.get("torch._C"), "ScriptFunction", None)
    return found if isinstance(found, type) else ()


def callers(rec: Any) -> list[str]:
    """The scripted functions and methods, compiled before the hooks, that call ``rec``'s
    original: a TorchScript function, or a Python function compiled as their callee.

    Read from their graphs (``prim::CallFunction`` of the original's qualified name); a caller
    compiled with ``torch.jit`` inlining everything has no such call, and is not found.  Only
    callers that can still run are named (``_live``): a graph whose Python function is gone
    (and no module holds its ScriptFunction) is not, even where a scripted module compiled
    with it still calls it (a local function its method reached through a closure: rare).

    Torch's private TorchScript state is read (``torch.jit._state``): where a torch version
    lays it out otherwise, nothing is named rather than the worker failing.
    """
    state = sys.modules.get("torch.jit._state")
    if state is None:
        return []
    try:
        name = _compiled_name(state, rec.original)
        return [] if name is None else _calling(state, name)
    except Exception:
        return []


def _compiled_name(state: types.ModuleType, original: Any) -> str | None:
    """The qualified name TorchScript compiled ``original`` under, if it did."""
    if isinstance(original, _script_function()):
        name = getattr(original, "qualified_name", None)
    else:
        try:
            name = state._jit_caching_layer.get(original)
        except TypeError:  # not weakly referenceable: never compiled
            return None
    return name if isinstance(name, str) else None


def _calling(state: types.ModuleType, name: str) -> list[str]:
    found: list[str] = []
    live = _live(state)
    for fn in state._python_cu.get_functions():
        qualified = fn.qualified_name
        if qualified not in live and not _held_by_module(qualified):
            continue  # compiled, and no one can run it again
        for node in fn.graph.findAllNodes("prim::CallFunction"):
            if str(node.inputsAt(0).type()) == name:
                found.append(qualified.removeprefix("__torch__.") + _SUFFIX)
                break
    return sorted(found)


def _live(state: types.ModuleType) -> set[str]:
    """The compiled functions whose Python function is alive: TorchScript's compilation unit
    keeps every graph it ever compiled, so one there may be a caller no one can run (a
    function scripted once to probe TorchScript at import, ``def _ts_ok(): def probe(x):
    return act(x); torch.jit.script(probe)``), and naming it is a false conflict, which stops
    the worker under ``<PREFIX>_HOOK_CONFLICTS=error``.  TorchScript's caches map a Python
    function to its compiled name, weakly: the entry goes with the function, and while it
    lives the compiled copy is what scripting it (or code calling it) reuses.  A
    ``ScriptFunction`` holds its Python function (``_torchdynamo_inline``), so its entry
    stays as long as it does."""
    live = set(state._jit_caching_layer.values())
    for names in getattr(state, "_jit_function_overload_caching", {}).values():
        live.update(names)
    return live


def _held_by_module(qualified: str) -> bool:
    """Whether a module's global of that name is that ScriptFunction (``@torch.jit.script``
    on a module-level function), for a torch whose ScriptFunction keeps no Python function."""
    module, _, attr = qualified.removeprefix("__torch__.").rpartition(".")
    found = getattr(sys.modules.get(module), attr, None)
    return getattr(found, "qualified_name", None) == qualified


def split(names: list[str]) -> tuple[list[str], list[str]]:
    """A function target's bypasses: (torch operator kernels, scripted callers)."""
    scripted = [n for n in names if n.endswith(_SUFFIX)]
    return [n for n in names if not n.endswith(_SUFFIX)], scripted


def reason(names: list[str]) -> str:
    return (
        "TorchScript compiled the original, before the hooks (as its module was imported), "
        "into scripted code that calls it, which runs that compiled copy and skips the hook: "
        f"{', '.join(n.removesuffix(_SUFFIX) for n in names)}"
    )


def fix(names: list[str]) -> str:
    first = names[0].removesuffix(_SUFFIX)
    return (
        f"Fix: hook the scripted caller (e.g. {first!r}) where Python calls it, or the Python "
        "code that calls it, so the hook runs around the compiled code; scripted code "
        "compiled after apply_hooks() calls the hooked function."
    )
