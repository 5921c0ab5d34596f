"""The launcher's ``__main__``, compiled once by the warm server, run by each worker.

Every worker re-runs the launching script's top level as ``__mp_main__``, so that what
the script defines unpickles there; the warm server never runs it itself (a worker runs
it after the server applied the hooks, see ``popen.get_launch_context``).  In a forked
worker, ``multiprocessing``'s ``prepare()`` does that through ``runpy``: find the module,
read and unmarshal (or compile) its code, and on the way touch enough of the server's
copy-on-write heap to cost 1.5 to 2.5 ms of a 10 ms warm start.  Here the server
compiles the code once, and ``prepare()`` in each worker only executes it, in the
globals, ``sys.argv[0]`` and ``sys.modules`` entries ``runpy`` would give it, so the
script cannot tell the difference (``tests/test_warm_main_code.py`` compares it with a
spawned worker's).  Anything this cannot compile is left to ``runpy``, as before.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import os
import sys
import types
from collections.abc import Callable
from typing import Any

from spawnkit._namedtuple import NamedTuple

__all__ = ["Compiled", "compile_main", "describe", "prepare_with"]

_NAME, _PATH = "init_main_from_name", "init_main_from_path"


def describe(package: str) -> tuple[str, str, str] | None:
    """The launcher's side: (the preparation-data key a worker re-runs ``__main__`` by, its
    value, the file it comes from); ``None`` when workers do not re-run it."""
    spawn = importlib.import_module(f"{package}.spawn")
    data = spawn.get_preparation_data("spawnkit-warm-server")
    if _NAME in data:
        origin = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "origin", None)
        return (_NAME, data[_NAME], origin) if isinstance(origin, str) else None
    if _PATH in data:
        return (_PATH, data[_PATH], data[_PATH])
    return None


class Compiled(NamedTuple):
    """The launcher's ``__main__`` as the server compiled it."""

    key: str
    value: str
    code: types.CodeType
    spec: Any  # the ModuleSpec runpy.run_module would find; None for a script path
    file: str


def compile_main(main: tuple[str, str, str] | None) -> Compiled | None:
    """The server's side: compile, never run.  ``None`` where ``runpy`` does more than run
    one file's code (a package's ``__main__``, a directory or zip, a sourceless module) or
    the file cannot be read now: each worker then goes through ``runpy`` and reports."""
    if main is None:
        return None
    key, value, origin = main
    try:
        if key == _NAME:
            if value == "__main__" or value.endswith(".__main__") or not origin.endswith(".py"):
                return None
            spec = importlib.util.spec_from_file_location(value, origin)
            if spec is None or spec.loader is None:
                return None
            code = spec.loader.get_code(value)  # type: ignore[attr-defined]
            return Compiled(key, value, code, spec, origin) if code is not None else None
        from pkgutil import get_importer

        base = os.path.splitext(os.path.basename(value))[0]
        if base == "ipython" or value.endswith((".pyc", ".pyo")) or get_importer(value):
            return None
        with io.open_code(value) as f:
            return Compiled(key, value, compile(f.read(), value, "exec"), None, value)
    except Exception:
        return None


def prepare_with(
    prepare: Callable[[dict[str, Any]], None], main: Compiled, spawn: types.ModuleType
) -> Callable[[dict[str, Any]], None]:
    """``spawn.prepare`` for the server's workers: all of it, with the ``__main__`` step
    running ``main``'s code when the worker's data names that ``__main__`` (its last step
    there too, after ``sys.path``, ``sys.argv`` and the working directory were set)."""

    def prepare_compiled(data: dict[str, Any]) -> None:
        if data.get(main.key) != main.value:
            prepare(data)
            return
        prepare({k: v for k, v in data.items() if k != main.key})
        current = sys.modules["__main__"]
        if main.spec is not None and getattr(current.__spec__, "name", None) == main.value:
            return  # already this module: multiprocessing would not run it again either
        if main.spec is None and getattr(current, "__file__", None) == main.value:
            return
        spawn.old_main_modules.append(current)  # as multiprocessing keeps the replaced one
        sys.modules["__main__"] = sys.modules["__mp_main__"] = _run(main)

    return prepare_compiled


def _run(main: Compiled) -> types.ModuleType:
    """``runpy.run_module``/``run_path`` of ``main`` as ``__mp_main__``, from compiled code.

    What runpy does, in its order: import the package first; run the code in a fresh
    module that is ``sys.modules["__mp_main__"]`` and with ``sys.argv[0]`` the file only
    while it runs; hand back a copy of its globals, which multiprocessing puts in a new
    module (so functions keep the first module's dict as their globals, as there).
    """
    spec = main.spec
    if spec is not None and spec.parent:
        importlib.import_module(spec.parent)
    temp = types.ModuleType("__mp_main__")
    temp.__dict__.update(
        __name__="__mp_main__",
        __file__=main.file,
        __cached__=spec.cached if spec is not None else None,
        __doc__=None,
        __loader__=spec.loader if spec is not None else None,
        __package__=spec.parent if spec is not None else "",
        __spec__=spec,
    )
    saved = sys.modules.get("__mp_main__")
    argv0 = sys.argv[0] if sys.argv else None
    sys.modules["__mp_main__"] = temp
    if sys.argv:
        sys.argv[0] = main.file
    try:
        exec(main.code, temp.__dict__)
    finally:
        if saved is not None:
            sys.modules["__mp_main__"] = saved
        else:
            sys.modules.pop("__mp_main__", None)
        if sys.argv and argv0 is not None:
            sys.argv[0] = argv0
    module = types.ModuleType("__mp_main__")
    module.__dict__.update(temp.__dict__.copy())
    return module
