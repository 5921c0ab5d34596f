"""What still holds a hooked original where no sweep looks: an attribute of some object.

The sweep (``_propagate``) reads module globals, their containers, classes, and the
module-level objects of the targets' own packages.  Deeper than that, an object keeps the
original it was handed as the target's module ran, before any hook existed: a web route
(``@app.post("/generate")`` stores the endpoint in a FastAPI ``APIRoute``, whose handler
calls it), a thread's ``target``, a validator in a pydantic model, another library's
registry object.  Every call through it runs the original while ``status()`` says applied.

Looked for only where counting says so.  As a target is resolved,
``_propagate.other_references`` counts the references to its original besides its home;
the holders the sweep found (rebound or reported) and the hook modules' own copies explain
some (``_apply._hidden_holders``).  Only originals with references left over are looked for:
``gc.get_referrers`` climbs from them towards a module's globals, one pass over the heap
per level for all of them together (11-14 ms a level with torch loaded; a FastAPI route is
eight levels below its module).  A worker whose originals are all explained never imports
this module.  A class a REPLACE swapped out is looked for whenever it is replaced: its
instances, subclasses and annotations refer to it, so no count vouches for it; only a
registry's hold on it is named (``_trail``).

Named: a path through an attribute of an object (its ``__dict__`` or a slot) that starts
in a module other than spawnkit's and the hooks' own; and, for an original no such path
names, one that starts in a local of the code another live thread runs now (a pool's task
a module submitted as it ran, ``_POOL.submit(_poll, collect)``: its work item is held by
the worker thread's frames only, which do not end; ``RUNNING``).  A running frame is no
referrer ``gc`` knows of: each other thread's frames (``sys._current_frames()``) are read
once, their locals copied into roots.  Read there too: a call of an original another
thread began before the hooks (a frame running its code: a serve loop a module started as
it ran; or a pool's initializer that ran), which never runs the hook; it is named instead
of that thread's locals (``BEGUN``: ``_WorkItem.run``'s ``self.fn`` calls nothing more).
Not a path: a started thread's ``_target``, ``_args`` and ``_kwargs`` once ``Thread.run``
called the target with them (``_target_called``).  Not named: a frame of the applying
thread (a local of running code: it ends as the apply returns), spawnkit's own records,
dict keys and set members (lookup tables: torch keeps sets of its functions, FastAPI caches
predicates keyed by the endpoint; a membership test calls nothing), and paths through
functions and cells (a decorator's ``__wrapped__``: the sweep names the wrapper itself).
A reference from C code (an ``atexit`` callback, a torch kernel) has no referrer to climb
to, and stays unnamed.

Rebound too: a ``functools.singledispatch`` registry's entry (``process.registry[Blob]``,
filled through ``@ser.to_bytes.register(Blob)`` by a module of another package), which lives
in the function's cells; looked for (``_dispatch_tables``) once the climb met a plain dict
with ``object`` as a key.

Rebound, not named: a path of containers only from a module's global, which the sweep's
one level of exact ``dict``/``list`` did not reach: an engine's registry that subclasses
``dict`` (``@OPS.register("tok")`` into ``class OpRegistry(dict)``), a list of records
(``REG = [{"fn": tokenize}]``), a table of tables, a ``deque``, a ``MappingProxyType``'s
dict.  The container holding the original is mutable, so its item is set to the hooked
object, as the sweep sets a global's.  A decorator's wrapper kept in such a table (its
closure holds the original) is named, as the sweep names one kept by a global.  A tuple
inside a table is neither (torch pairs its functions with their op names in one, a lookup
by identity that calls nothing).

A weak reference is no count's: a callback registry that keeps one (blinker's signals keep
a ``weakref.ref`` of each receiver, a ``weakref.WeakMethod`` of a bound method) calls the
original while every strong reference is explained.  ``_apply._build`` notes an original
with any (``weakref.getweakrefcount``, one C-level read; spawnkit makes none), and the
climb starts from its weak references too.  One points at the original itself, so nothing
can be set in its place: every path to one is named (``WEAK``), containers only too (a
``WeakValueDictionary``'s value: a lookup there hands the original to its caller).  So is a
``weakref.WeakSet``'s member: the originals climbed from here are functions, and a set of
functions held weakly is a listener list (``_listeners.add(on_step)`` as the module ran, then
``for cb in _listeners: cb()``), not a membership table (a library that only asks whether it
knows an object keeps it strongly or by key; the ``WeakSet`` s of the standard library, torch
and the other libraries installed with it hold classes, threads, tasks, handlers).  Only a
``WeakSet``'s own set: a plain set of weak references is left to be a lookup.  Not a
``weakref.finalize``'s (it calls its own function), nor a ``WeakKeyDictionary``'s key
(a lookup, as above); a class's weak references (its subclasses, ``abc`` registries) are
never climbed from.
"""

from __future__ import annotations

import functools
import gc
import os
import re
import sys
import threading
import types
from collections import deque
from collections.abc import Collection, Sequence
from itertools import islice
from operator import itemgetter, methodcaller
from typing import Any
from weakref import ReferenceType, WeakSet

from spawnkit.hooks._stale import BEGUN, HIDDEN, RUNNING, WEAK, ClassAttrs, StaleHolder

__all__ = ["HIDDEN", "Found", "hidden_holders"]

_LEVELS = 12  # a FastAPI route: module -> app -> router -> routes -> route -> endpoint, each
#               object with its __dict__ one level more
_WIDTH = 512  # objects climbed from at once: a bound on one level's work
_SHOWN = 3  # paths named per target (the shortest: found first)

_HOME = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # spawnkit/
_LRU = type(functools.lru_cache(None)(len))

#: Objects whose attributes are not "an object's": what the sweep reads itself (a class, a
#: module, a class's staticmethod or property) and a function's parts, which a path passes
#: through on its way to whatever holds the function.  A partial, a bound method or an
#: lru_cache wrapper is an object: one in a dict or list (``ACTS = {"s": partial(scale, 2)}``,
#: ``HANDLERS = [ENGINE.run]``) calls the original, and the sweep names only one held by a
#: module's global itself.
_NOT_OBJECTS = (
    type, types.ModuleType, types.FunctionType, types.CellType, staticmethod, classmethod,
    property,
)  # fmt: skip

# Per object on a path: original's id -> (steps below it down to the original, whether one
# of them is an attribute of an object, the id of the object holding the original itself).
_Trail = dict[int, tuple[tuple[str, ...], bool, int]]
#: A container path's steps: an item, or a ``MappingProxyType``'s own mapping
_ITEM_STEPS = ("[", "<mappingproxy>")
#: What a started thread's ``Thread.run`` calls its target with, once: spent after that call
_CONSUMED = ("._target", "._args", "._kwargs")
_first = itemgetter(0)
#: A ``WeakSet`` member's step (``_listeners.data{on_step}``): extended only by the
#: ``WeakSet`` whose ``data`` the set is (``_trail``), never a path's end (``_reached``)
_MEMBER = "{"
_ABSENT = object()


class Found:
    """What the climb found: paths to name, and container items to set (module, label, the
    container that holds the original, the target's key)."""

    def __init__(self) -> None:
        self.named: dict[int, list[tuple[str, str]]] = {}
        self.items: dict[int, list[tuple[str, str, int, int]]] = {}  # ..., holder, depth
        self.holders: dict[int, Any] = {}  # a direct holder's id -> the container itself
        self.wrapped: list[tuple[str, str, int]] = []  # a function in items: its closure's
        # a running thread's locals (a copy's id) -> (function, thread id, its name,
        # file:line), and per original the path from them to name, one per thread: (module,
        # label) by thread id
        self.frames: dict[int, tuple[str, int, str, str]] = {}
        self.running: dict[int, dict[int, tuple[str, str]]] = {}
        # per original, a call of it another thread began before the hooks, one per thread
        # (``BEGUN``): (module, label) by thread id; it stands for that thread's paths
        self.calls: dict[int, dict[int, tuple[str, str]]] = {}
        self.spent: set[int] = set()  # started Threads whose run() has called their target
        # the class a class decorator copied (``_superseded``) that holds an original as its
        # own attribute: (module, label, the class, attribute, original's id), to be set
        self.copies: list[tuple[str, str, type, str, int]] = []
        self.originals: set[int] = set()  # the ids of the originals looked for (not weak)
        # a plain dict with ``object`` as a key met on the way: perhaps a singledispatch
        # registry, which lives in a function's cells, where no path is named
        self.tables = False


def hidden_holders(
    originals: list[tuple[Any, str, Any]],
    ignored: Collection[str],
    known: Collection[StaleHolder],
    weak: Sequence[tuple[Any, str]] = (),
) -> tuple[list[StaleHolder], list[tuple[str, str, Any, Any, str]]]:
    """Holders of ``originals`` (``(original, target key, what was installed)``) that are
    an object's attribute, as a path from their module; none from a module in ``ignored``
    (the hook modules) or spawnkit's, none where ``known`` already names that module's
    global.  Second: the container items to rebind, ``(module, label, container, key,
    target key)`` (see the module docstring).  And the holders of the weak references to
    the functions of ``weak`` (``(original, target key)``), each path named (``WEAK``)."""
    roots: dict[int, str] = {}
    skip = _chain_parts([installed for _, _, installed in originals])
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if type(namespace) is dict:
            if name.partition(".")[0] == "spawnkit" or name in ignored:
                skip.add(id(namespace))
            else:
                roots[id(namespace)] = name
    keys = {id(original): key for original, key, _ in originals}
    frontier: dict[int, Any] = {id(original): original for original, _, _ in originals}
    classes = {i for i, original in frontier.items() if isinstance(original, type)}
    refs = _callable_refs(weak)
    keys.update((id(ref), key) for ref, key in refs)
    frontier.update((id(ref), ref) for ref, _ in refs)
    for held in (originals, weak, refs):
        skip.add(id(held))
        skip.update(map(id, held))
    # a weak reference's every path is named: nothing can be set in its place
    weakly = set(map(id, map(_first, refs)))
    trails: dict[int, _Trail] = {i: {i: ((), i in weakly, i)} for i in frontier}
    found = Found()
    found.originals = {id(original) for original, _, _ in originals}
    calls = _Calls([*map(_first, originals), *map(_first, weak)])
    keys.update((id(original), key) for original, key in weak)
    kept = _running_locals(roots, found, skip, ignored, calls)  # (alive until the climb ends)
    for _ in range(_LEVELS):
        if not frontier:
            break
        frontier = _climb(frontier, trails, roots, skip, found, classes, weakly)
    named = {(h.target, h.module, _first_name(h.label)) for h in known}
    out = []
    for origin, paths in found.named.items():
        key, kind = keys[origin], WEAK if origin in weakly else HIDDEN
        fresh = [(m, label) for m, label in paths if (key, m, _first_name(label)) not in named]
        out += [StaleHolder(m, label, kind, key) for m, label in fresh[:_SHOWN]]
    out += [StaleHolder(m, label, "closure variable", keys[o]) for m, label, o in found.wrapped]
    out += _in_threads(found, keys, weakly)
    del kept
    items = _items(found, originals, out, named)
    if found.tables:  # registries are looked for only then: a heap pass (_dispatch_tables)
        from spawnkit.hooks._dispatch_tables import registered

        items += registered(originals, ignored)
    return out, items


def _in_threads(found: Found, keys: dict[int, str], weakly: set[int]) -> list[StaleHolder]:
    """What other threads hold: a local of running code, one path per thread, where no
    module's path names the original (which outlives code); and a call of it a thread
    began before the hooks, which stands for that thread's locals (the one that made the
    call, ``_WorkItem.run``'s ``self.fn``, calls nothing more)."""
    out = []
    for origin, threads in found.running.items():
        began = found.calls.get(origin, {})
        left = [path for ident, path in threads.items() if ident not in began]
        if origin not in found.named:
            kind = WEAK if origin in weakly else RUNNING
            out += [StaleHolder(m, label, kind, keys[origin]) for m, label in left[:_SHOWN]]
    for origin, began in found.calls.items():
        shown = list(began.values())[:_SHOWN]
        out += [StaleHolder(m, label, BEGUN, keys[origin]) for m, label in shown]
    return out


def _callable_refs(weak: Sequence[tuple[Any, str]]) -> list[tuple[Any, str]]:
    """``(weak reference, target key)`` for each weak reference to a function of ``weak``
    that can hand it to a caller: not a ``weakref.finalize``'s (it calls its own function
    when the original dies).  A ``WeakKeyDictionary``'s keys are dropped by the climb, as a
    dict's keys are (lookups); a ``WeakSet``'s members are not (``_links``)."""
    from weakref import finalize, getweakrefs, ref

    out = []
    for original, key in weak:
        for each in getweakrefs(original):
            kind = type(each)  # never asked: a proxy forwards to the original
            if not (issubclass(kind, ref) and issubclass(type(each.__callback__), finalize)):
                out.append((each, key))
    return out


def _wrapper_in_items(steps: tuple[str, ...]) -> bool:
    """``H['h'].__closure__[0].cell_contents``: a function made at import (a decorator's
    wrapper) kept in a table, whose closure holds the original, as the sweep names one kept
    by a global."""
    head, tail = steps[:-3], steps[-3:]
    return (
        len(tail) == 3
        and tail[0] == ".__closure__"
        and tail[2] == ".cell_contents"
        and bool(head)
        and all(map(methodcaller("startswith", _ITEM_STEPS), head))
    )


def _items(
    found: Found,
    originals: list[tuple[Any, str, Any]],
    out: list[StaleHolder],
    named: set[tuple[str, str, str]],
) -> list[tuple[str, str, Any, Any, str]]:
    """The container paths: each item of a dict, list or deque to set.  A module global that
    is a tuple of a subclass (a ``NamedTuple``: ``NTI = Pair(tokenize)``) is named into
    ``out``, as the sweep names a plain tuple global's items."""
    by_id = {id(original): (original, key) for original, key, _ in originals}
    items = []
    for module, label, cls, name, origin in found.copies:
        shown = f"{label} (the class before a class decorator copied it)"
        items.append((module, shown, ClassAttrs(cls), name, by_id[origin][1]))
    for origin, paths in found.items.items():
        original, key = by_id[origin]
        for module, label, holder, depth in paths:
            container = found.holders.get(holder)
            label = label.replace("<mappingproxy>", "")
            if isinstance(container, tuple):
                # a plain tuple global is the sweep's to name (or not: a clean module's)
                subclass = type(container) is not tuple
                if depth == 1 and subclass and (key, module, _first_name(label)) not in named:
                    out.append(StaleHolder(module, label, "tuple item", key))
                # a tuple inside a table cannot be set and is not named: torch's own
                # ``_builtin_ops`` pairs each function with its op name, a lookup by identity
                continue
            if container is not None:
                places = _places(container, original)
                items += [(module, label, container, at, key) for at in places]
    return items


def _places(container: Any, original: Any) -> list[Any]:
    """The keys (a dict's) or indexes (a list's, a deque's) where ``container`` holds
    ``original``, read through the built-in types' own methods (see ``_links``)."""
    if isinstance(container, dict):
        return [k for k, v in list(dict.items(container)) if v is original]
    values = list.__iter__(container) if isinstance(container, list) else iter(container)
    return [i for i, v in enumerate(list(values)) if v is original]


def _chain_parts(installed: list[Any]) -> set[int]:
    """The ids of what the installed chains are made of (their layers' closures, cells,
    ``__dict__`` with ``__wrapped__``, an AROUND hook's ``partial`` and its arguments): they
    hold the originals by design, and climbing through them would cost a heap pass a level."""
    parts: set[int] = set()
    todo = list(installed)
    while todo:
        obj = todo.pop()
        if id(obj) in parts:
            continue
        if type(obj) is types.FunctionType and _ours(obj):
            parts.update((id(obj), id(obj.__dict__), id(obj.__closure__)))
            for cell in obj.__closure__ or ():
                parts.add(id(cell))
                todo += gc.get_referents(cell)
        elif type(obj) is functools.partial:
            parts.update((id(obj), id(obj.args)))
            todo += [obj.func, *obj.args]
        elif type(obj) in (staticmethod, classmethod):
            parts.add(id(obj))
            todo.append(obj.__func__)
    return parts


def _plumbing(step: str) -> bool:
    """A step through the interpreter's or a library's own parts (``<function>``,
    ``.__objclass__``, ``.__annotations__``): a class met there is a type named, not kept to
    be made (a function's annotations, a descriptor's owner)."""
    return step.startswith("<") or (step.startswith(".__") and step.endswith("__"))


def _first_name(label: str) -> str:
    """The module global a label starts from: ``app`` of ``app.router.routes[4].endpoint``."""
    return re.split(r"[.\[( ]", label, maxsplit=1)[0]


def _climb(
    frontier: dict[int, Any],
    trails: dict[int, _Trail],
    roots: dict[int, str],
    skip: set[int],
    found: Found,
    classes: set[int],
    members: set[int],
) -> dict[int, Any]:
    """One level up from ``frontier``: the objects that refer to it, with their trails; a
    module's globals end a path, kept in ``found`` when it passed through an object, or
    through containers only (to be rebound).  ``members``: the weak references a ``WeakSet``
    may hold (``_links``)."""
    above: dict[int, Any] = {}
    objs = tuple(frontier.values())
    referrers = gc.get_referrers(*objs)
    own = {id(objs), id(referrers), id(frontier), id(above), id(trails), id(roots), id(found)}
    own.update(map(id, (found.named, found.items, found.holders, found.wrapped)))
    spent = found.spent  # a started thread's target and arguments: called once already
    for ref in referrers:
        rid = id(ref)
        if rid in own or rid in skip or type(ref) is types.FrameType:
            continue
        if rid in trails:  # met before (a class, from its own attribute): climb again only
            known = trails[rid]  # for what it learns, a path through an object
            for origin, step in _trail(ref, frontier, trails, classes, members, spent).items():
                if step[2] == rid:
                    found.holders[rid] = ref
                if origin not in known or (step[1] and not known[origin][1]):
                    known[origin] = step
                    above[rid] = ref
            continue
        if type(ref) is dict and object in ref:
            found.tables = True
        module = roots.get(rid)
        if module is not None:
            _reached(ref, module, frontier, trails, found, classes)
        elif issubclass(type(ref), type) and _superseded(ref, found):
            skip.add(rid)  # its attributes are set once, and nothing climbs through it
        elif not _ours(ref):
            mine = _trail(ref, frontier, trails, classes, members, spent)
            if mine:
                trails[rid] = mine
                above[rid] = ref
                if any(holder == rid for _, _, holder in mine.values()):
                    found.holders[rid] = ref  # it holds an original itself: kept to be set
    return dict(islice(above.items(), _WIDTH))


def _superseded(cls: type, found: Found) -> bool:
    """Whether ``cls`` is a class a class decorator copied, whose home now holds the copy
    under its name (``@dataclass(slots=True)`` makes a new class with the same functions, and
    the first one stays referred to: a frozen one's ``__setattr__`` closure, 3.10's
    ``__weakref__`` descriptor); the originals it holds as its own attributes go into
    ``found.copies``.  Named, it read as a holder no sweep reads, the hook ``partial``; set
    instead, an instance a registry made from it before the copy (``@dataclass(slots=True)``
    over ``@OPS.register``) runs the hook too."""
    qualname = type.__dict__["__qualname__"].__get__(cls, type)
    module = vars(cls).get("__module__")
    if type(module) is not str or "<" in qualname:
        return False
    namespace = getattr(sys.modules.get(module), "__dict__", None)
    home: Any = _ABSENT
    for part in qualname.split("."):  # read as stored: no module's or class's __getattr__
        if type(namespace) is not dict and type(namespace) is not types.MappingProxyType:
            return False
        home = namespace.get(part, _ABSENT)
        namespace = vars(home) if issubclass(type(home), type) else None
    if home is cls or not issubclass(type(home), type) or vars(home).get("__module__") != module:
        return False
    if type.__dict__["__qualname__"].__get__(home, type) != qualname:
        return False
    # Not climbed through: what else it holds, its copy holds too (the decorator copied its
    # namespace), where the sweep reads it.
    own = [(name, value) for name, value in list(vars(cls).items()) if type(name) is str]
    for name, value in own:
        held = value.__func__ if type(value) in (staticmethod, classmethod) else value
        for original in (value, held):
            if id(original) in found.originals:
                found.copies.append((module, f"{qualname}.{name}", cls, name, id(original)))
                break
    return True


def _once(paths: list[Any], path: Any) -> None:
    """Keep ``path`` unless kept already: an object met again at a later level climbs again
    for what it learned there (``Act``, with ``Act.TANH._value_`` known, learns
    ``Act.RELU._value_.func`` a level deeper), and its module then reads every path it has."""
    if path not in paths:
        paths.append(path)


def _reached(
    namespace: dict[str, Any],
    module: str,
    frontier: dict[int, Any],
    trails: dict[int, _Trail],
    found: Found,
    classes: set[int],
) -> None:
    """A path's end, into ``found``: a module's globals (named when it passed through an
    object, kept to be set when through containers only) or a running thread's locals
    (named, a class's never: a method's ``cls``)."""
    running = found.frames.get(id(namespace))
    for key, value in list(dict.items(namespace)):
        if id(value) not in frontier:
            continue
        for origin, (steps, through, holder) in trails[id(value)].items():
            if steps and steps[0].startswith(_MEMBER):
                continue  # a plain set of weak references, a lookup (see _links)
            label = f"{key}{''.join(steps)}"
            if running is not None:
                if origin not in classes:  # the first path found in each thread: its shortest
                    function, ident, thread, where = running
                    shown = f"{function}() local {label}, in thread {thread!r} at {where}"
                    found.running.setdefault(origin, {}).setdefault(ident, (module, shown))
            elif through and (origin not in classes or not any(map(_plumbing, steps))):
                _once(found.named.setdefault(origin, []), (module, label))
            elif steps and all(map(methodcaller("startswith", _ITEM_STEPS), steps)):
                item = (module, label, holder, len(steps))
                _once(found.items.setdefault(origin, []), item)
            elif _wrapper_in_items(steps):  # a decorator's wrapper kept in a table
                items = "".join(steps[:-3])
                _once(found.wrapped, (module, f"{key}{items}() closure", origin))


class _Calls:
    """The originals' functions, to tell a frame that runs one: by its code, and the values
    of its closure (a decorator's wrapper's code is every function it wraps')."""

    def __init__(self, originals: list[Any]) -> None:
        self.codes: dict[int, list[tuple[int, tuple[tuple[str, Any], ...]]]] = {}
        self.functions: dict[int, int] = {}  # a function's id -> its original's (a pool's
        for original in originals:  # initializer is the function itself)
            func = original
            if type(original) in (staticmethod, classmethod):
                func = original.__func__
            if type(func) is types.FunctionType:
                free = zip(func.__code__.co_freevars, func.__closure__ or (), strict=False)
                cells = tuple(free)
                self.codes.setdefault(id(func.__code__), []).append((id(original), cells))
                self.functions[id(func)] = id(original)


def _running_locals(
    roots: dict[int, str], found: Found, skip: set[int], ignored: Collection[str], calls: _Calls
) -> list[Any]:
    """Copies of the locals of the code each other live thread runs now, made roots (the
    frame's module) and kept in ``found.frames``: a running frame is no referrer ``gc``
    knows of, and the frame does not end (a pool's worker running the task a module
    submitted as it ran).  Neither the applying thread's frames (its locals end as the
    apply returns) nor spawnkit's or the hook modules'; each frame's own ``f_locals`` dict
    (3.11, 3.12) is skipped, the copy stands for it.  Read on the way: a call of an original
    in progress there (``_began``), a pool's initializer that ran (``_initialized``), and
    the started threads whose target and arguments are spent (``_target_called``)."""
    me = threading.get_ident()
    threads = {thread.ident: thread for thread in threading.enumerate()}
    kept: list[Any] = []  # the copies, and each frame's own dict (skipped: its id kept)
    for ident, top in sys._current_frames().items():
        thread, frames = threads.get(ident), _stack(top)
        if thread is not None and _target_called(frames):
            found.spent.add(id(thread))
        if ident == me:
            continue
        named = (ident, thread.name if thread is not None else "?")
        for frame in frames:
            if id(frame.f_code) in calls.codes:
                _began(frame, named, calls, found)
            module = frame.f_globals.get("__name__")
            if type(module) is not str or module.partition(".")[0] == "spawnkit":
                continue
            local = frame.f_locals
            if module in ignored or local is frame.f_globals:  # a module's body: its root
                continue
            if type(local) is dict:
                skip.add(id(local))
                kept.append(local)
            copy = dict(local.items())  # (item by item: tracked if it holds anything)
            _initialized(frame, copy, named, calls, found)
            kept.append(copy)
            roots[id(copy)] = module
            where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
            found.frames[id(copy)] = (frame.f_code.co_name, *named, where)
    return kept


def _began(frame: types.FrameType, thread: tuple[int, str], calls: _Calls, found: Found) -> None:
    """A frame that runs an original: a call another thread began before the hooks (a serve
    loop a module started as it ran), which never runs the hook, whatever its caller holds.
    The outermost such frame of a thread is kept (frames come innermost first)."""
    code = frame.f_code
    for origin, cells in calls.codes[id(code)]:
        if all(_holds(frame, name, cell) for name, cell in cells):
            ident, name = thread
            module = frame.f_globals.get("__name__")
            label = (
                f"{_qualname(code)}() call in progress in thread {name!r} at "
                f"{code.co_filename}:{frame.f_lineno}"
            )
            found.calls.setdefault(origin, {})[ident] = (str(module), label)


def _holds(frame: types.FrameType, name: str, cell: types.CellType) -> bool:
    """Whether the frame's free variable ``name`` is the cell's value: the same closure."""
    try:
        return frame.f_locals.get(name, _ABSENT) is cell.cell_contents
    except ValueError:  # an empty cell
        return False


def _initialized(
    frame: types.FrameType,
    copy: dict[str, Any],
    thread: tuple[int, str],
    calls: _Calls,
    found: Found,
) -> None:
    """A ``concurrent.futures`` pool's worker past its call of the pool's initializer: the
    ``initializer`` and ``initargs`` it keeps are spent (taken out of ``copy``), and an
    initializer that is an original ran in that thread before the hooks (``BEGUN``).  The
    pool's own ``_initializer``, which a worker it starts later calls, is another path."""
    pool = sys.modules.get("concurrent.futures.thread")
    worker = getattr(pool, "_worker", None)
    if type(worker) is not types.FunctionType or frame.f_code is not worker.__code__:
        return
    called = _initializer_call(worker.__code__)
    if called is None or frame.f_lasti <= called:  # not yet, or now: its own frame says so
        return
    init = copy.pop("initializer", None)
    copy.pop("initargs", None)
    func = init.func if type(init) is functools.partial else init
    origin = calls.functions.get(id(func))
    if origin is not None:
        ident, name = thread
        label = f"{_qualname(func.__code__)}() run as the initializer of thread {name!r}"
        found.calls.setdefault(origin, {})[ident] = (str(func.__module__), label)


@functools.cache
def _initializer_call(code: types.CodeType) -> int | None:
    """The offset of ``_worker``'s call of the initializer (the first call once ``initargs``
    is loaded: ``initializer(*initargs)``, 3.10 to 3.13); None where none is found."""
    import dis  # only where a pool's worker holds an original

    loaded = False
    for ins in dis.get_instructions(code):
        names = ins.argval if type(ins.argval) is tuple else (ins.argval,)
        loaded = loaded or (ins.opname.startswith("LOAD_FAST") and "initargs" in names)
        if loaded and ins.opname.startswith("CALL"):
            return ins.offset
    return None


def _target_called(frames: list[types.FrameType]) -> bool:
    """Whether ``Thread.run`` has called the thread's target (a frame above it): it calls it
    once, so the ``_target``, ``_args`` and ``_kwargs`` it keeps until the target returns
    are spent; what the target still holds is in its own frames."""
    run = threading.Thread.run.__code__
    return any(frame.f_code is run for frame in islice(frames, 1, None))


def _qualname(code: types.CodeType) -> str:
    return str(getattr(code, "co_qualname", code.co_name))  # (3.11+)


def _stack(frame: types.FrameType | None) -> list[types.FrameType]:
    """A thread's frames, innermost first."""
    out = []
    while frame is not None:
        out.append(frame)
        frame = frame.f_back
    return out


def _ours(ref: Any) -> bool:
    """spawnkit's own objects: its records and journal, and the chains it installed (whose
    ``__wrapped__`` and closures hold the original by design)."""
    if type(ref) is types.FunctionType:
        return ref.__code__.co_filename.startswith(_HOME)
    return str(getattr(type(ref), "__module__", "")).partition(".")[0] == "spawnkit"


def _trail(
    ref: Any,
    frontier: dict[int, Any],
    trails: dict[int, _Trail],
    classes: set[int],
    members: set[int],
    spent: Collection[int] = (),
) -> _Trail:
    """``ref``'s trail: its links to the objects of ``frontier``, each trail extended; none
    through the target and arguments of a started thread in ``spent`` (see ``_target_called``).

    A replaced class is held as a registry holds it, a dict's value or a list's item
    (``_models["llama"] = Llama``), or not at all: an attribute or a tuple holding a class
    is a type named (a dataclass field's ``type``, ``list[Llama].__args__``, a subclass's
    ``__bases__``), which nothing calls to make an instance."""
    out: _Trail = {}
    rid = id(ref)
    registry = issubclass(type(ref), (dict, list))
    weak_set = issubclass(type(ref), WeakSet) or _weak_set_attributes(ref)
    for child, step, attribute in _links(ref, frontier, members):
        for origin, (steps, through, holder) in trails[child].items():
            if (
                steps
                and steps[0].startswith(_MEMBER)
                and not (weak_set and step in (".data", "['data']"))
            ):
                continue  # a plain set of weak references: a lookup (see _links)
            if origin in classes and (
                not (steps or registry) or (step is None and len(steps) == 1)
            ):
                continue  # the class's holder is an attribute or a tuple (or an object's __dict__)
            if step is None:  # ref's own __dict__: the dict's key is ref's attribute
                first = steps[0] if steps else ""
                if not (first.startswith("['") and first.endswith("']")):
                    continue
                steps = ("." + first[2:-2], *steps[1:])
            else:
                steps = (step, *steps)
            if rid in spent and steps[0] in _CONSUMED:
                continue
            if origin in classes and _plumbing(steps[0]):
                continue  # never named (see _plumbing): not worth a heap pass a level
            holder = rid if child == origin else holder  # the object holding it itself
            out.setdefault(origin, (steps, through or attribute, holder))
    return out


def _weak_set_attributes(ref: Any) -> bool:
    """Whether ``ref`` is a ``WeakSet``'s own ``__dict__``: 3.10 keeps an object's attributes
    in a dict the climb meets before the object (3.11 on, the object itself refers to its
    ``data``), so the member path must pass it to reach the ``WeakSet``."""
    return type(ref) is dict and "_pending_removals" in ref and "_iterating" in ref


def _links(
    ref: Any, frontier: dict[int, Any], members: set[int]
) -> list[tuple[int, str | None, bool]]:
    """``(child id, step, an object's attribute)`` for each object of ``frontier`` that
    ``ref`` holds; step None: the child is ``ref``'s own ``__dict__``.  A set's members are
    lookups, but for the weak references of ``members`` (to a function), which a
    ``WeakSet``'s set holds for a listener list that calls them (``_trail`` keeps that path
    only as the ``WeakSet``'s ``data``)."""
    # Only the type is asked, never the object: isinstance() reads a proxy's __class__, which
    # may load what it stands for; and the built-in types' own iteration, which a subclass
    # may override to import or call out.
    kind = type(ref)
    if issubclass(kind, dict):  # values only: a key is looked up, not called
        pairs = list(dict.items(ref))
        return [(id(v), f"[{_shown(k)}]", False) for k, v in pairs if id(v) in frontier]
    if issubclass(kind, (list, tuple)):
        items = list(list.__iter__(ref) if issubclass(kind, list) else tuple.__iter__(ref))
        return [(id(v), f"[{i}]", False) for i, v in enumerate(items) if id(v) in frontier]
    if issubclass(kind, (set, frozenset)):  # a membership table, or a WeakSet's own set
        if not (members and issubclass(kind, set)):
            return []
        held = [v for v in list(set.__iter__(ref)) if id(v) in members and id(v) in frontier]
        return [(id(v), _member(v), False) for v in held]
    if issubclass(kind, deque):
        items = list(deque.__iter__(ref))
        return [(id(v), f"[{i}]", False) for i, v in enumerate(items) if id(v) in frontier]
    held = [c for c in gc.get_referents(ref) if id(c) in frontier and c is not kind]
    if type(ref) is _LRU:  # its cache's keys are arguments it was called with, not callers
        keys = {id(k) for c in gc.get_referents(ref) if type(c) is dict for k in dict.keys(c)}
        held = [c for c in held if id(c) not in keys]
    if issubclass(kind, type):  # its attributes' dict (a class's __dict__ is a proxy of it)
        return [(id(c), None, False) for c in held if type(c) is dict]
    if type(ref) is types.CellType:
        return [(id(c), ".cell_contents", False) for c in held]
    attribute = not issubclass(kind, _NOT_OBJECTS)
    namespace = _namespace(ref, kind)
    if type(namespace) is dict and id(namespace) in frontier:
        return [(id(namespace), None, attribute)]
    links: list[tuple[int, str | None, bool]] = []
    if type(namespace) is dict:  # values kept in the object itself (3.11+) until it is read
        links = [
            (id(v), f".{k}", attribute) for k, v in list(namespace.items()) if id(v) in frontier
        ]
    links += [(id(v), f".{name}", attribute) for name, v in _slots(ref) if id(v) in frontier]
    if not links:  # C-level fields: a partial's func, a bound method's __func__
        links = [(id(c), f"<{type(ref).__name__}>", False) for c in held]
    return links


def _member(ref: Any) -> str:
    """A ``WeakSet`` member's step, by the function its weak reference points at (read
    through the built-in type's own call: a subclass may override it)."""
    target = ReferenceType.__call__(ref)
    return f"{_MEMBER}{getattr(target, '__qualname__', '?')}}}"


def _namespace(ref: Any, kind: type) -> Any:
    """``ref``'s own ``__dict__``, read only through the interpreter's own descriptor: a
    proxy's ``__dict__`` property or ``__getattr__`` may load what it stands for."""
    for klass in kind.__mro__:
        desc = vars(klass).get("__dict__")
        if desc is not None:
            if type(desc) is not types.GetSetDescriptorType:
                return None
            try:
                return desc.__get__(ref, kind)
            except Exception:
                return None
    return None


def _shown(key: Any) -> str:
    """A dict key as a path shows it; a key whose repr fails is shown by its type."""
    if type(key) in (str, int):
        return repr(key)
    try:
        return repr(key)
    except Exception:
        return f"<{type(key).__name__} key>"


def _slots(ref: Any) -> list[tuple[str, Any]]:
    out = []
    for cls in type(ref).__mro__:
        for name, desc in list(vars(cls).items()):
            if type(desc) is types.MemberDescriptorType:
                try:
                    out.append((name, desc.__get__(ref, type(ref))))
                except AttributeError:
                    pass
    return out
