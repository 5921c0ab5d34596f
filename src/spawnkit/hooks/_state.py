"""A registry's state and the ledger entry of one patched target (``_decide`` and ``_apply``)."""

from __future__ import annotations

import itertools
import sys
import threading
import types
import weakref

from spawnkit._compat import TYPE_CHECKING
from spawnkit._plain import Plain
from spawnkit.hooks import _on_import, _resolve
from spawnkit.hooks._provide import Provided, Provision
from spawnkit.hooks._stale import StaleHolder
from spawnkit.hooks.types import Registration

if TYPE_CHECKING:
    from typing import Any

__all__ = ["Record", "State"]


class Record(Plain):
    """The ledger entry of one patched target: what was there, what is there now.

    Plain, not a dataclass: its generated code would cost every cold worker ~1 ms
    (spawnkit._plain).  ``before``: the raw value in the owner's ``__dict__`` before we
    patched (``ABSENT``: none); ``original``: the object other modules may hold (the
    propagation source); ``installed_raw``: what is in the owner's ``__dict__`` now;
    ``installed``: the callable (or class) that replaced ``original``; ``bindings``:
    ``(module, container, key, label)``, a module's globals and the name, or a module-level
    dict/list and the key/index (``"TABLE['tok']"``).
    """

    _fields = (
        "key", "display", "res", "kind", "before", "original", "installed_raw", "installed",
        "regs", "hooks", "hook_modules", "bindings", "others",
    )  # fmt: skip
    __slots__ = _fields  # a holder of originals the reference search stops at (hooks/_hidden)

    def __init__(
        self,
        key: str,
        display: str,
        res: _resolve.Resolved,
        kind: str,
        before: Any,
        original: Any,
        installed_raw: Any,
        installed: Any,
        regs: tuple[Registration, ...],
        hooks: tuple[Any, ...],
        hook_modules: frozenset[str],
        bindings: list[tuple[str, Any, Any, str]] | None = None,
        others: int | None = None,
    ) -> None:
        self.key, self.display, self.res, self.kind = key, display, res, kind
        self.before, self.original = before, original
        self.installed_raw, self.installed = installed_raw, installed
        self.regs, self.hooks, self.hook_modules = regs, hooks, hook_modules
        self.bindings: list[tuple[str, Any, Any, str]] = [] if bindings is None else bindings
        # references to the original besides its home when resolved (None: not counted)
        self.others = others

    @property
    def alone(self) -> bool:
        """Nothing but its home referenced the original when it was resolved."""
        return self.others == 0

    @property
    def seqs(self) -> tuple[int, ...]:
        return tuple(r.seq for r in self.regs)

    @property
    def propagates(self) -> bool:
        """Other modules may hold copies of the original: a module's attribute, or a function
        its class defines (``run = Engine.run``, ``class Sub(Engine): go = Engine.run``).

        Not a function assigned into the class from elsewhere (``act = F.gelu``): it has a
        home of its own, where rebinding it would hook every other caller of it, and an
        inherited method is its base class's (hooking ``Derived.run`` leaves ``Base.run``).
        """
        owner = self.res.owner
        if isinstance(owner, types.ModuleType):
            return True
        held = self.held
        return (
            isinstance(owner, type)
            and getattr(held, "__module__", None) == owner.__module__
            and str(getattr(held, "__qualname__", "")).rpartition(".")[0] == owner.__qualname__
        )

    @property
    def held(self) -> Any:
        """What a holder elsewhere has in place of this target: the original, or for a
        ``staticmethod``/``classmethod`` the function inside it (``Engine.helper`` reads
        as that function)."""
        raw = self.original
        return raw.__func__ if type(raw) in (staticmethod, classmethod) else raw


def _seq(reg: Registration) -> int:
    return reg.seq


#: Every registry of this process, weakly: a target two namespaces hook holds one's chain
#: inside the other's, and undoing or rebuilding the inner one rebuilds the outer one on what
#: stands there then (``hooks/_layers``).
REGISTRIES: weakref.WeakSet[Any] = weakref.WeakSet()

#: The one lock of every registry.  Rebuilding an outer registry's chain takes its lock while
#: the inner one's is held (``_apply.rebase_layers``), so with a lock each, ``A.unapply()`` and
#: ``B.unapply()`` in two threads, each inner to the other on some target, took them in two
#: orders and hung both threads for good.  One lock cannot be taken in two orders.
LOCK = threading.RLock()

#: module -> (registry name, id of the module): the target modules an ``apply_hooks()`` of
#: that registry imported.  Another namespace's import guard must not take them for an early
#: import of the user's code (``RegistryQueries.imported_by_other``).
APPLY_IMPORTS: dict[str, tuple[str, int]] = {}


def note_imports(registry: str, modules: list[str]) -> None:
    for name in modules:
        module = sys.modules.get(name)
        found = APPLY_IMPORTS.get(name)
        if module is not None and (found is None or found[1] != id(module)):
            APPLY_IMPORTS[name] = (registry, id(module))


#: Every state's version comes from here: one process-wide count, so that a new state (after
#: ``reset()``) never repeats an old one's number, even at the same address.
_VERSIONS = itertools.count(1)


class State:
    """Everything a registry knows; swapped wholesale by ``HookRegistry.isolated()``."""

    def __init__(self) -> None:
        # Changed by every registry call that may change what ``status()`` reports (all of
        # them take the registry's lock): a warm worker reuses its fork server's hook report
        # while it is unchanged (spawnkit.bootstrap.report).
        self.version = next(_VERSIONS)
        self.regs: dict[str, list[Registration]] = {}
        self.paths: dict[str, _resolve.TargetPath] = {}
        self.display: dict[str, str] = {}
        self.applied: dict[str, Record] = {}
        # one object hooked under several names (a package's re-export, an alias): each other
        # name's key -> the key whose record holds the one chain of them all, and back
        self.aliases: dict[str, str] = {}
        self.spellings: dict[str, list[str]] = {}
        self.hook_objects: dict[int, Any] = {}  # seq -> imported "module:qualname" hook
        # seq -> (__main__, its file, the line of its body) that registered a plugin-less hook
        self.main_lines: dict[int, tuple[object, str, int]] = {}
        self.seq = 0
        # references to originals the sweep found and could not rebind, by (module, label)
        self.stale: dict[tuple[str, str], StaleHolder] = {}
        # seq -> (state, reason) of registrations left out for good: optional target
        # missing, condition false (until unapply(), which re-decides them)
        self.dropped: dict[int, tuple[str, str]] = {}
        self.cond_ok: set[int] = set()  # seqs whose condition returned true
        # conditions asked during the running apply_hooks(), asked again once it has patched
        # (_decide.recheck_conditions); and how often each answer turned since it was first given
        self.asked: list[Registration] = []
        self.turned: dict[int, int] = {}
        # on_import targets waiting for their module: key -> (strict, watch token)
        self.waiting: dict[str, tuple[bool, int]] = {}
        self.on_import_of: dict[str, str] = {}  # key -> module whose import applied it
        self.failed: dict[str, str] = {}  # key (or provided name) -> why it failed last
        # (module, start, end) of each target module an apply imported, until a bootstrap
        # takes them for its report and trace (one per module: a module imports once)
        self.import_spans: list[tuple[str, float, float]] = []
        self.provides: dict[str, Provision] = {}
        self.provided: dict[str, Provided] = {}
        self.conflicts_reported: set[str] = set()  # hook conflict messages already reported
        # target_modules()'s guesses and what they depend on (the version, sys.modules)
        self.guessed: tuple[Any, dict[str, str]] = (None, {})
        self.strict = True  # the last apply_hooks() call's: a reloaded module's is the same
        # distributions (normalised) whose hooks fail a call even when it is not strict: the
        # selected platform's own, which lenient mode does not cover (PluginManager.apply)
        self.strict_dists: frozenset[str] = frozenset()
        self.conflicts = ("warn", "")  # ... and its conflict policy and the variable naming it

    def touch(self) -> None:
        """Something that ``status()`` reads may change now."""
        self.version = next(_VERSIONS)

    def live(self, key: str) -> list[Registration]:
        """The registrations of ``key`` still in play (not skipped for good); a key whose object
        is hooked under other names too has theirs, in registration order, and they none."""
        regs = self.regs.get(key, [])
        if self.aliases:  # rare: one object hooked under several names
            regs = self.spelled(key, regs)
        if not self.dropped:
            return regs
        return [r for r in regs if r.seq not in self.dropped]

    def spelled(self, key: str, regs: list[Registration]) -> list[Registration]:
        if key in self.aliases:
            return []
        more = self.spellings.get(key)
        if not more:
            return regs
        return sorted([*regs, *(r for k in more for r in self.regs.get(k, []))], key=_seq)

    def record(self, key: str) -> Record | None:
        """The record that holds ``key``'s hooks: its own, or its object's under another name."""
        return self.applied.get(self.aliases.get(key, key))

    def unalias(self, key: str) -> list[str]:
        """Forget ``key``'s other names (its record goes); returns them."""
        freed = self.spellings.pop(key, [])
        for other in freed:
            self.aliases.pop(other, None)
        return freed

    def stop_waiting(self, key: str) -> None:
        found = self.waiting.pop(key, None)
        if found is not None:
            _on_import.unwatch(found[1])
