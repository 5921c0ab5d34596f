"""Whether a process about to be started through ``subprocess`` runs the engine's code unhooked.

Imported by ``_plain_children``'s stand-in for ``Popen.__init__`` only as a process is
started (and by its stand-ins for ``os.posix_spawn``/``os.posix_spawnp`` and for
``os.execv``/``os.execve``, which every ``os.exec*`` and ``os.spawn*`` reaches: ``check_os``;
an exec's warning is written and never raised, since between a fork and its exec a raise
would leave a copy of the worker running in the child).  Named (``PlainChildWarning``, once
per module or script): a Python interpreter (the
``executable=``, else ``argv[0]``, is ``sys.executable`` or called ``python``, ``python3``,
``python3.11``...) running ``-m X`` or a script that belongs to a top-level package one of
this process's hook targets is in, when neither its source nor its packages' ``__init__``
calls ``bootstrap_here`` or ``spawnkit.run``.  ``-c`` code is named only for what it surely
runs: an ``import`` statement at its top level (not in a ``def``, ``class``, ``if``, loop or
``try``) of a module of the engine's own package that this process hooks (``-c "import
eng.server; eng.server.main()"``), when the code does not mention ``bootstrap_here`` or
``spawnkit.run``; a library's probe (``-c "import torch; print(torch.__version__)"``) is left
alone.  Not named: another program; stdin (``-``); a module outside every hooked package (``-m
pip``); ``shell=True``, whose command line is the shell's to read.  The module is located
without importing it: a package of it not imported here is found by its top-level's spec and
walked through ``submodule_search_locations``.
"""

from __future__ import annotations

import os
import re
import sys
import types
import warnings
from collections.abc import Sequence
from typing import Any

from spawnkit._reference import top_packages
from spawnkit.errors import PlainChildWarning

__all__ = ["check"]

_PYTHON = re.compile(r"python(\d+(\.\d+)?t?)?(\.exe)?\Z", re.IGNORECASE)
# A child that bootstraps itself (README's engine entry module), or is spawnkit's torchrun rank
_BOOTS = re.compile(r"\bbootstrap_here\b|\bspawnkit\.run\b|from\s+spawnkit\s+import\s[^\n]*\brun\b")
_told: set[str] = set()  # the modules and scripts named already (once each)


def check(
    args: tuple[Any, ...], kwargs: dict[str, Any], namespaces: Sequence[tuple[Any, str]]
) -> None:
    """``Popen.__init__``'s arguments (``args, bufsize, executable, ..., shell, cwd``);
    ``namespaces``: each armed namespace and its entry's module (the engine's)."""
    command = args[0] if args else kwargs.get("args")
    executable = args[2] if len(args) > 2 else kwargs.get("executable")
    shell = args[8] if len(args) > 8 else kwargs.get("shell", False)
    cwd = args[9] if len(args) > 9 else kwargs.get("cwd")
    if shell or command is None:
        return
    if isinstance(command, (str, bytes, os.PathLike)):
        argv = [os.fsdecode(command)]
    else:
        argv = [os.fsdecode(a) for a in command]
    program = os.fsdecode(executable) if executable else (argv[0] if argv else "")
    _check_argv(argv, program, os.fsdecode(cwd) if cwd else "", namespaces, "subprocess")


def check_os(via: str, path: Any, command: Any, namespaces: Sequence[tuple[Any, str]]) -> None:
    """``os.posix_spawn(path, argv, ...)`` and ``os.execv(path, argv)`` (``via``: which): the
    same check; an exec's warning is written, never raised (``_warn``)."""
    if isinstance(command, (str, bytes)):
        return  # the call itself refuses it
    argv = [os.fsdecode(a) for a in command]
    _check_argv(argv, os.fsdecode(path), "", namespaces, via)


def _check_argv(
    argv: list[str], program: str, cwd: str, namespaces: Sequence[tuple[Any, str]], via: str
) -> None:
    if not argv or not program or not _is_python(program):
        return
    runs = _runs(argv[1:])
    if runs is None or runs in _told:
        return
    for namespace, entry in namespaces:
        tops = top_packages(namespace.hooks.registered_targets())
        if runs.startswith("-c "):
            found = _code(runs[3:], tops & _engine_packages(namespace, entry))
        elif runs.startswith("-m "):
            found = _module(runs[3:], tops)
        else:
            found = _script(os.path.join(cwd or os.getcwd(), runs), tops)
        if found is None:
            continue
        what, texts, top = found
        if any(text is None or _BOOTS.search(text) for text in texts):
            return  # it bootstraps itself (or its source cannot be read: nothing is said)
        told = f"-c {what}" if runs.startswith("-c ") else runs  # code: once per module
        level, starter = _starter()
        own = top in _engine_packages(namespace, entry)
        if told in _told or (starter == top and not own):
            return  # a library starting its own helper (torch's compile workers): no fix
        edit = ("that code" if told != runs else "that module") if own else ""
        _warn(argv, what, namespace, (level, via), edit)
        _told.add(told)
        return


def _is_python(program: str) -> bool:
    if _PYTHON.match(os.path.basename(program)):
        return True
    path = program if os.sep in program else _which(program)
    return path is not None and os.path.realpath(path) == os.path.realpath(sys.executable)


def _which(name: str) -> str | None:
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _runs(options: list[str]) -> str | None:
    """``"-m X"``, ``"-c CODE"``, the script, or None (stdin, ``--help``, an interactive
    session)."""
    i = 0
    while i < len(options):
        arg = options[i]
        if arg == "--":
            return options[i + 1] if i + 1 < len(options) else None
        if arg == "--check-hash-based-pycs":
            i += 2
            continue
        if arg == "-" or arg.startswith("--"):
            return None  # stdin, --help, --version
        if not arg.startswith("-"):
            return arg
        for j, flag in enumerate(arg[1:], 2):  # a cluster: -u, -um X, -mX, -Wignore, -X dev
            if flag in "cm":
                value = arg[j:] or (options[i + 1] if i + 1 < len(options) else "")
                return f"-{flag} {value}" if value else None
            if flag in "WX":
                i += 0 if arg[j:] else 1  # its value is the next argument
                break
            if flag in "hV?":
                return None
        i += 1
    return None


def _engine_packages(namespace: Any, entry: str) -> set[str]:
    """The engine's own packages, as the launcher takes them (``arm_launcher``): the
    namespace's and the entry's (a worker's spec; a script run as ``-m``: ``__main__``'s).
    A library's module started by that library's own code is its helper, not the engine's."""
    tops = {namespace.name.partition(".")[0], entry.partition(".")[0]}
    main = getattr(sys.modules.get("__main__"), "__spec__", None)
    if main is not None:
        tops.add(str(main.name).partition(".")[0])
    return tops - {""}


def _module(
    name: str, tops: set[str], main: bool = True
) -> tuple[str, list[str | None], str] | None:
    """``-m name``: its source and each of its packages' (run first), as this process finds
    them: the child's ``env=`` (another ``PYTHONPATH``) or ``cwd=`` may find another copy, but
    guessing at that would be no better.  ``main``: a package runs its ``__main__`` (``-m``),
    not when imported."""
    from importlib import machinery, util

    parts = name.split(".")
    if parts[0] not in tops:
        return None
    texts: list[str | None] = []
    locations: Any = None
    for i in range(len(parts) + 1):
        full = ".".join(parts[: i + 1]) if i < len(parts) else f"{name}.__main__"
        if i == len(parts) and (locations is None or not main):
            break  # a module, not a package (or imported): no __main__ to run
        module = sys.modules.get(full)
        if module is not None:
            spec = getattr(module, "__spec__", None)
            locations = getattr(module, "__path__", None)
        else:  # not imported here: found without importing it (or its packages)
            find = machinery.PathFinder.find_spec
            spec = util.find_spec(full) if i == 0 else find(full, list(locations or ()))
            locations = None if spec is None else spec.submodule_search_locations
        if spec is None:
            return None  # the child fails to find it too (or finds what this process cannot)
        texts.append(_source(spec))
    return f"module {name} (package {parts[0]!r}, which this process hooks)", texts, parts[0]


def _code(code: str, own: set[str]) -> tuple[str, list[str | None], str] | None:
    """``-c code``: the first module of ``own`` (the engine's hooked packages) that a top-level
    ``import`` of the code imports, with the sources of every such module the code imports
    (one may bootstrap before the next runs).  Only top-level statements: one in a ``def`` or
    under an ``if`` may never run, and naming it would be a guess."""
    import ast  # only for a Python child started with -c

    if not own or _BOOTS.search(code):
        return None  # it bootstraps itself
    try:
        body = ast.parse(code).body
    except (SyntaxError, ValueError):
        return None  # the child fails before it runs anything
    found: list[tuple[str, list[str | None], str]] = []
    for stmt in body:
        if isinstance(stmt, ast.Import):
            names = [[alias.name] for alias in stmt.names]
        elif isinstance(stmt, ast.ImportFrom) and not stmt.level and stmt.module:
            names = [[f"{stmt.module}.{alias.name}", stmt.module] for alias in stmt.names]
        else:
            continue
        for choices in names:  # from eng import server: eng.server if a module, else eng
            if choices[0].partition(".")[0] in own:
                module = next(filter(None, (_module(c, own, main=False) for c in choices)), None)
                found.extend([module] if module is not None else [])
    if not found:
        return None
    what, _texts, top = found[0]
    texts = [text for _what, more, _top in found for text in more]
    return f"code importing {what.removeprefix('module ')}", texts, top


def _source(spec: Any) -> str | None:
    get = getattr(spec.loader, "get_source", None)
    if get is None:
        return "" if spec.submodule_search_locations is not None else None  # a namespace pkg
    text: str | None = get(spec.name)
    return text


def _script(path: str, tops: set[str]) -> tuple[str, list[str | None], str] | None:
    """A script inside a hooked package, found under an entry of this process's ``sys.path``;
    its packages' ``__init__`` run once it imports their modules."""
    full = os.path.realpath(path)
    if not full.endswith(".py") or not os.path.isfile(full):
        return None  # a directory or a zip application: not looked into
    for entry in sys.path:
        root = os.path.realpath(entry or os.getcwd())
        parts = os.path.relpath(full, root)[:-3].split(os.sep)
        if len(parts) < 2 or parts[0] not in tops:
            continue
        if not os.path.isdir(os.path.join(root, parts[0])):
            continue
        texts = [_read(os.path.join(root, *parts[:k], "__init__.py")) for k in range(1, len(parts))]
        what = f"script {path} ({'.'.join(parts)}, package {parts[0]!r}, which this process hooks)"
        return what, [t or "" for t in texts] + [_read(full)], parts[0]
    return None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _warn(argv: list[str], what: str, namespace: Any, where: tuple[int, str], edit: str) -> None:
    """``edit``: where ``bootstrap_here()`` can go first (the engine's module, ``-c`` code); a
    library's module (``-m torch.utils.collect_env``) cannot be edited: ``""``.  ``where``:
    the ``stacklevel`` and what started it (``subprocess``, ``os.posix_spawn``, ``os.execv``)."""
    level, via = where
    name = namespace.name
    targets, plugins = namespace.hooks.applied_targets(), namespace.plugins.report.loaded
    if not (targets or plugins):
        return
    command = " ".join(argv)
    first = (
        f"Call spawnkit.bootstrap_here(<namespace {name!r}>) first in {edit}, before it "
        "imports the engine's code, or: "
        if edit
        else ""
    )
    replaces = " (it replaces the process that calls it)" if via.startswith("os.exec") else ""
    message = (
        f"a Python child ({command[:200]}) was started through {via}{replaces}: it runs "
        f"{what} without the plugins of namespace {name!r} "
        f"({', '.join(p.name for p in plugins)}) and the hooks on {len(targets)} target(s) of "
        f"this process, so none of those hooks runs there. {first}Start it from ctx = "
        f"spawnkit.get_context('spawn', namespace={name!r}) (ctx.Process), or silence this "
        "with -W ignore::spawnkit.PlainChildWarning where the child needs no plugin."
    )
    if not replaces:
        warnings.warn(message, PlainChildWarning, stacklevel=level)
        return
    try:  # an exec, maybe in a forked child: raised, it would leave a copy of this process
        warnings.warn(message, PlainChildWarning, stacklevel=level)
    except PlainChildWarning:  # -W error: said all the same, and the exec goes on
        frame = sys._getframe(level - 1)
        text = warnings.formatwarning(
            message, PlainChildWarning, frame.f_code.co_filename, frame.f_lineno
        )
        sys.stderr.write(text)
    sys.stderr.flush()  # the exec drops what Python still buffers


def _starter() -> tuple[int, str]:
    """``stacklevel`` for ``_warn`` (called from ``_check_argv``, as this is): the first frame
    outside subprocess, os, asyncio and spawnkit, the line that started the child; and the top
    package of that frame's module."""
    import subprocess

    stdlib = os.path.dirname(os.path.abspath(subprocess.__file__))
    skipped = (
        os.path.abspath(subprocess.__file__),
        os.path.abspath(os.__file__),  # os.execl* and os.spawn* call os.execv/execve
        os.path.join(stdlib, "asyncio") + os.sep,
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
    )
    frame: types.FrameType | None = sys._getframe(1)  # check (spawnkit's): _warn's caller
    level = 2
    while frame is not None and (
        frame.f_code.co_filename == "<frozen os>"  # os is frozen in CPython 3.11+
        or os.path.abspath(frame.f_code.co_filename).startswith(skipped)
    ):
        frame = frame.f_back
        level += 1
    if frame is None:
        return 1, ""
    return level, str(frame.f_globals.get("__name__") or "").partition(".")[0]
