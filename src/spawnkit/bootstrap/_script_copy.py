"""A hook target module that is also the launching script: the hooks patch one copy of the
file, the script's code runs the other.

``python -m myapp.serve`` (or ``python myapp/serve.py``) runs that file as ``__main__``;
resolving the target ``myapp.serve.handle`` imports the same file again as ``myapp.serve``, a
second module with functions of its own, and patches those.  The script's code calls its own
``handle``, without the hooks, and no stale-binding sweep can see it: the sweep follows the
original object, and the script's is another object.  Three places run the script's copy: a
worker whose entry the launcher sent by value from its script (spawn and forkserver re-run
the script there as ``__mp_main__``; cloudpickle rebuilds the entry's globals from it), a
``get_context()`` child whose target is the script's (pickled by reference to ``__main__``,
found in the re-run script), and the engine's own process after ``bootstrap_here()``.  Each
is reported per guard policy.
"""

from __future__ import annotations

import os
import sys
import types
import warnings
from typing import Any

from spawnkit.bootstrap.guard import ImportGuardWarning, resolve_policy
from spawnkit.errors import ImportGuardError

__all__: list[str] = []

_SCRIPT_NAMES = ("__main__", "__mp_main__")


def _file(module: object) -> str | None:
    path = getattr(module, "__file__", None)
    return os.path.realpath(path) if isinstance(path, str) else None


def copies(hooks: Any, script: types.ModuleType) -> list[tuple[str, str]]:
    """``(target, module)`` for each applied target whose module is ``script``'s file,
    imported apart from it under its own name."""
    file = _file(script)
    if file is None:
        return []
    same: dict[str, bool] = {}  # one realpath per module, not per target
    out = []
    for applied in hooks.applied_targets():
        name = applied.module
        if name not in same:
            module = sys.modules.get(name)
            same[name] = module is not None and module is not script and _file(module) == file
        if same[name]:
            out.append((applied.target, name))
    return out


def _policy(namespace: Any, spec: Any) -> str:
    var = namespace.config.guard_var
    return resolve_policy(
        namespace.config.guard_policy, os.environ.get(var), spec.guard_policy, var=var
    )


def check_entry(
    namespace: Any, spec: Any, entry: object, stage: str, what: str = "entry"
) -> None:
    """An entry (or a context child's target) from the launching script, in a process whose
    hooks patched the script's file under another name."""
    if getattr(entry, "__module__", None) not in _SCRIPT_NAMES:
        return
    policy = _policy(namespace, spec)
    if policy == "off":
        return
    script = sys.modules.get("__mp_main__") or sys.modules.get("__main__")
    found = copies(namespace.hooks, script) if script is not None else []
    if not found:
        return
    name = getattr(entry, "__qualname__", None) or repr(entry)
    module = found[0][1]
    head = (
        f"the {what} {name!r} comes from the launching script {_file(script)}, which is also "
        f"hook target module {module!r}; the hooks were applied to {module!r}, imported apart "
        f"from the script, and the {what} runs in the script's copy, where they are not"
    )
    fix = (
        f"Fix: pass {module + ':' + name!r} (spawn_with_plugins takes the string), or in the "
        f"script `from {module} import {name}` and pass that function: this process then "
        "imports it after the hooks are applied."
    )
    _report(namespace, found, policy, stage, head + ", so this process stops.", fix)


def check_process(namespace: Any, spec: Any, stage: str) -> None:
    """The engine's own process (``bootstrap_here()``) running a hooked module as its script."""
    script = sys.modules.get("__main__")
    if script is None or script.__name__ != "__main__":
        return  # a worker: its __main__ is the re-run script, whose entry check_entry reads
    policy = _policy(namespace, spec)
    if policy == "off":
        return
    found = copies(namespace.hooks, script)
    if not found:
        return
    module = found[0][1]
    head = (
        f"this process runs the file of hook target module {module!r} as its __main__ "
        f"script ({_file(script)}); the hooks were applied to {module!r}, imported apart from "
        "the script: the script's own functions and classes run without their hooks"
    )
    fix = (
        f"Fix: start the process through a module that imports {module!r} and calls it (a "
        f"console script, or python -c 'import {module}; ...'), not the file itself."
    )
    _report(namespace, found, policy, stage, head + ", so bootstrap_here() fails.", fix)


def _report(
    namespace: Any, found: list[tuple[str, str]], policy: str, stage: str, head: str, fix: str
) -> None:
    if policy != "error":
        head = head.rpartition(", so ")[0] + " (guard policy 'warn')."
    lines = [f"import guard ({namespace.name}): {head}"]
    lines += [f"- {target!r} (the script's copy is unhooked)" for target, _ in found]
    lines.append("  " + fix)
    findings = [
        {"module": module, "name": target.rpartition(".")[2], "kind": "launching script copy",
         "target": target}
        for target, module in found
    ]  # fmt: skip
    if policy == "error":
        var = namespace.config.guard_var
        lines.append(
            f"To run anyway with these hooks ineffective, set {var}=warn "
            "(or ProcessSpec.guard_policy='warn')."
        )
        raise ImportGuardError("\n".join(lines), findings=findings, stage=stage)
    warnings.warn("\n".join(lines), ImportGuardWarning, stacklevel=3)
