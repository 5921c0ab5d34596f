"""What a function hook cannot reach: a torch operator whose Python kernel is the original.

An engine that registers a Python function as a torch operator's kernel as its module is
imported (vLLM's ``direct_register_custom_op("unified_attention", unified_attention)``:
``torch.library.Library.impl``) hands the original to torch's dispatcher.  A plugin's
hook on ``vllm.attention.layer.unified_attention`` then runs for direct Python calls only:
a model calling ``torch.ops.vllm.unified_attention`` (every compiled model and CUDA graph
does) runs the kernel, the original, while ``status()`` says applied.

The dispatcher keeps the kernel in C++, where no Python code can read it back, so the
kernel's identity cannot be checked.  What can: torch lists each Python kernel as
``"namespace/op/dispatch key"`` (``torch.library._impls``), and the original's reference
count said something besides its module holds it (``Record.alone`` false) while the
sweep rebinds what it can see.  A kernel under the function's own name, with such a
holder, is named; it is never re-registered (a kernel of that name that is another
function would be replaced).  A target that is itself an operator
(``@torch.library.custom_op``: the module attribute is its ``CustomOpDef``) is named
whatever holds it: calls through ``torch.ops`` never read the attribute.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["fix", "kernels", "reason"]


def kernels(rec: Any) -> list[str]:
    """``torch.ops.<ns>.<name> (<keys>)`` of each operator with a Python kernel under the
    name of ``rec``'s original function; nothing unless torch's library is loaded."""
    original = rec.original
    if type(original).__name__ == "CustomOpDef":  # @torch.library.custom_op: the op itself
        ns, name = getattr(original, "_namespace", None), getattr(original, "_name", None)
        if isinstance(ns, str) and isinstance(name, str):
            return [f"torch.ops.{ns}.{name} (a torch.library.custom_op)"]
    library = sys.modules.get("torch.library")
    impls = getattr(library, "_impls", None)
    name = getattr(original, "__name__", None)
    if rec.alone or not isinstance(impls, set) or not isinstance(name, str):
        return []
    keys: dict[str, list[str]] = {}
    for entry in list(impls):  # "tlibx/unified_attention/CUDA"
        parts = entry.split("/") if isinstance(entry, str) else []
        if len(parts) == 3 and parts[1] == name:
            keys.setdefault(parts[0], []).append(parts[2])
    return [f"torch.ops.{ns}.{name} ({', '.join(sorted(k))})" for ns, k in sorted(keys.items())]


def reason(names: list[str]) -> str:
    if names[0].endswith("(a torch.library.custom_op)"):
        return (
            f"the target is the operator {names[0].partition(' ')[0]}: the hook runs when the "
            "module attribute is called; calls through torch.ops (a compiled model, a CUDA "
            "graph) run the operator's kernel and skip it"
        )
    return (
        f"torch has a Python kernel under this function's name, registered with "
        f"torch.library before the hook (as its module was imported): {', '.join(names)}; "
        "calls through torch.ops (a compiled model, a CUDA graph) run that kernel, the "
        "original, and skip the hook"
    )


def fix(names: list[str]) -> str:
    op = names[0].partition(" ")[0]
    if names[0].endswith("(a torch.library.custom_op)"):
        return (
            f"Fix: give the operator your kernel instead of hooking it: "
            f"`<module>.{op.rpartition('.')[2]}.register_kernel('<device>', fn)`; or hook the "
            f"code that calls {op}."
        )
    return (
        f"Fix: hook the code that calls {op} (the layer's forward) instead, or register your "
        f"kernel for the operator itself (torch.library.Library(...).impl(..., "
        "allow_override=True)); or check that this function is not that kernel."
    )
