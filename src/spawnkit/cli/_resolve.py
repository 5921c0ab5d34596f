"""Turning command-line strings into namespaces, entries, payloads and preloads, or a UsageError.

Every check runs in the parent before any worker starts, and imports no entry module (finding
its spec and reading its source suffice; the import belongs in the worker, after its hooks).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import pickletools
import re
from pathlib import Path
from typing import Any

from spawnkit import _reference
from spawnkit.cli._errors import UsageError
from spawnkit.namespace import Namespace
from spawnkit.spec import Payload

__all__ = [
    "build_payload",
    "check_entry",
    "check_preload",
    "load_payload_file",
    "resolve_namespace",
]

_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def _unregistered_groups(name: str) -> str:
    """For the refusal: distributions that ship plugins for ``name`` although none registers it."""
    from spawnkit import _metadata

    dists = sorted(
        {ep.dist for group in (f"{name}.platforms", f"{name}.plugins") for ep in
         _metadata.entry_points(group)}
    )  # fmt: skip
    if not dists:
        return ""
    return (
        f" (installed plugins for it come from {', '.join(dists)}, but without the engine's "
        "registration its variable names are unknown, so spawnkit will not guess them)"
    )


def resolve_namespace(spec: str | None) -> Namespace:
    """``None`` -> ``spawnkit``; a name an installed engine registers (``spawnkit.namespaces``
    entry points) or declared in this process; or ``module:attr`` of a Namespace."""
    from spawnkit._namespace_registry import describe_unknown, load_registered, registration_hint
    from spawnkit.errors import NamespaceError
    from spawnkit.namespace import DEFAULT_NAMESPACE_NAME, get_namespace

    if spec is None:
        return get_namespace(None)
    if not spec.strip():  # `--namespace "$ENGINE_NS"`, the variable unset: not the default
        raise UsageError(
            f"--namespace {spec!r} names no namespace (an unset shell variable?); spawnkit's "
            "default would run without the engine's plugins and variables",
            "pass the engine's namespace name (e.g. 'spawnkit.demo') or module:attr, or leave "
            "--namespace out for spawnkit's default",
        )
    if ":" in spec:
        fix = "pass 'module:attr' naming an importable module that declares the Namespace"
        try:
            obj: Any = _reference.resolve(*_reference.parse(spec))
        except _reference.BadReference as exc:
            raise UsageError(f"namespace {spec!r}: {exc.why}", fix) from None
        except _reference.ImportFailed as exc:
            raise UsageError(
                f"namespace {spec!r}: cannot import module {exc.module!r} ({exc.cause})", fix
            ) from exc.cause
        except _reference.MissingAttribute as exc:
            raise UsageError(f"namespace {spec!r}: {exc}", fix) from None
        if callable(obj) and not isinstance(obj, Namespace):
            obj = obj()
        if not isinstance(obj, Namespace):
            raise UsageError(
                f"namespace {spec!r} is not a spawnkit.Namespace (got {type(obj).__name__})",
                "point at the engine's Namespace object or a function returning it",
            )
        return obj
    if not _DOTTED.match(spec):
        raise UsageError(
            f"namespace {spec!r} is not a dotted name",
            "use a name such as 'spawnkit.demo' or 'module:attr' of a Namespace",
        )
    if spec == DEFAULT_NAMESPACE_NAME or spec in Namespace._registry:
        return get_namespace(spec)
    try:
        found = load_registered(spec)
    except NamespaceError as exc:
        raise UsageError(str(exc)) from exc  # a broken registration: the message has the fix
    if found is None:
        raise UsageError(
            describe_unknown(spec, sorted(Namespace._registry)) + _unregistered_groups(spec),
            f"register it with {registration_hint(spec)}; or pass --namespace module:attr "
            "naming the engine's Namespace object",
        )
    ns: Namespace = found
    return ns


def _top_level_names(tree: ast.Module) -> tuple[set[str], bool]:
    """Names bound at a module's top level, and whether it binds names dynamically."""
    names: set[str] = set()
    dynamic = False

    def visit(body: list[ast.stmt]) -> None:
        nonlocal dynamic
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for sub in ast.walk(target):
                        if isinstance(sub, ast.Name):
                            names.add(sub.id)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                for alias in node.names:
                    if alias.name == "*":
                        dynamic = True
                    else:
                        names.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, ast.If | ast.Try | ast.With | ast.For | ast.While):
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(node, field, []) or [])
                for handler in getattr(node, "handlers", []) or []:
                    visit(handler.body)
            elif isinstance(node, ast.Expr | ast.Pass):
                continue
            else:
                # Anything unusual (match, global tricks): do not claim a name is missing.
                dynamic = dynamic or isinstance(node, ast.Match)

    visit(tree.body)
    if "__getattr__" in names or "id='globals'" in ast.dump(tree):
        dynamic = True
    return names, dynamic


def check_entry(entry: str) -> str:
    """``module:qualname`` whose module exists and (as far as its source shows) defines the name."""
    try:
        module_name, qualname = _reference.parse(entry)
    except _reference.BadReference as exc:
        raise UsageError(
            f"entry {entry!r} is not 'module:function': {exc.why}",
            "name the worker function as module:function, for example 'mypkg.worker:main'",
        ) from None
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError) as exc:
        spec = None
        reason = f"{type(exc).__name__}: {exc}"
    else:
        reason = "no such module on sys.path"
    if spec is None:
        raise UsageError(
            f"unknown entry {entry!r}: module {module_name!r} cannot be found ({reason})",
            "install the package that provides it, or run from the directory that contains it",
        )
    origin = spec.origin
    if origin and origin.endswith(".py") and Path(origin).is_file():
        try:
            tree = ast.parse(Path(origin).read_text(encoding="utf-8"), filename=origin)
        except (SyntaxError, UnicodeDecodeError, OSError) as exc:
            raise UsageError(
                f"entry {entry!r}: module {module_name!r} ({origin}) does not parse: {exc}",
                "fix the syntax error in the entry's module",
            ) from exc
        names, dynamic = _top_level_names(tree)
        head = qualname.split(".")[0]
        if head not in names and not dynamic:
            close = sorted(n for n in names if not n.startswith("_"))[:8]
            raise UsageError(
                f"unknown entry {entry!r}: module {module_name!r} defines no {head!r} "
                f"(top-level names: {', '.join(close) or 'none'})",
                "check the spelling of the function after the colon",
            )
    return entry


def build_payload(reference: str) -> Payload:
    """``--payload-factory MOD:FN``: ``FN()`` called here, its object captured once."""
    fix = "name a function that takes no argument and returns the payload, as module:function"
    try:
        module_name, qualname = _reference.parse(reference)
    except _reference.BadReference as exc:
        raise UsageError(f"--payload-factory {reference!r}: {exc.why}", fix) from None
    try:
        factory = _reference.resolve(module_name, qualname)
    except (_reference.ImportFailed, _reference.MissingAttribute, ImportError) as exc:
        raise UsageError(f"--payload-factory {reference!r} cannot be loaded: {exc}", fix) from exc
    if not callable(factory):
        raise UsageError(f"--payload-factory {reference!r} is not callable", fix)
    try:
        obj = factory()
    except Exception as exc:
        raise UsageError(
            f"--payload-factory {reference!r} raised {type(exc).__name__}: {exc}",
            "fix the factory, or run it by hand to see its traceback (--debug shows it here)",
        ) from exc
    try:
        return Payload.capture(obj)
    except Exception as exc:
        raise UsageError(
            f"--payload-factory {reference!r} returned a {type(obj).__name__} that cannot be "
            f"pickled for the workers: {exc}",
            "return plain data or a picklable object (a module-level dataclass)",
        ) from exc


def load_payload_file(path_text: str) -> Payload:
    """A ``.json`` document, or pickle bytes checked by :mod:`pickletools` and passed unopened."""
    path = Path(path_text)
    fix = "pass a .json file or a file written with pickle.dump(obj, f)"
    if not path.exists():
        raise UsageError(f"payload file {path_text!r} does not exist", fix)
    if not path.is_file():
        raise UsageError(f"payload file {path_text!r} is not a regular file", fix)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"payload file {path_text!r} cannot be read: {exc.strerror}", fix) from exc
    if not data:
        raise UsageError(f"payload file {path_text!r} is empty", fix)
    if path.suffix.lower() == ".json":
        try:
            obj = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UsageError(f"payload file {path_text!r} is not valid JSON: {exc}", fix) from exc
        return Payload.capture(obj)
    try:
        ops = list(pickletools.genops(data))
    except Exception as exc:
        raise UsageError(
            f"payload file {path_text!r} is not a pickle ({type(exc).__name__}: {exc})", fix
        ) from exc
    end = ops[-1][2] if ops else -1
    if not ops or ops[-1][0].name != "STOP" or end is None or end + 1 != len(data):
        raise UsageError(
            f"payload file {path_text!r} holds trailing bytes after its pickle or is truncated", fix
        )
    return Payload.from_pickled(data, f"pickle file {path.name}")


def check_preload(modules: list[str]) -> list[str]:
    """Forkserver preload modules must be importable dotted names (found, not imported)."""
    for module in modules:
        if not _DOTTED.match(module):
            raise UsageError(
                f"--preload {module!r} is not a module name",
                "pass dotted module names such as 'numpy' or 'torch'",
            )
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise UsageError(
                f"--preload module {module!r} cannot be found",
                "install it or drop it from --preload",
            )
    return modules
