"""``provide_module``: a stand-in for a module that is not installed, placed at apply time.

Unlike a plugin's own ``sys.modules`` write, every entry (parents too) is journaled, checked
when hooks are applied, and reported with its reason.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable

from spawnkit._compat import TYPE_CHECKING
from spawnkit._plain import FrozenPlain, Plain
from spawnkit.errors import HookRegistrationError, HookTargetError
from spawnkit.hooks._journal import Change, Journal
from spawnkit.hooks.types import HookSource, describe_callable

if TYPE_CHECKING:
    from typing import Any

__all__: list[str] = []


# Plain records, not dataclasses: a worker defining them would pay ~1 ms each of generated
# code (spawnkit._plain).
class Provision(FrozenPlain):
    """One ``provide_module()`` call."""

    _fields = ("name", "module", "factory", "only_if_missing", "source", "seq")
    name: str
    module: types.ModuleType | None
    factory: Callable[[str], Any] | None
    only_if_missing: bool
    source: HookSource
    seq: int

    def __init__(
        self,
        name: str,
        module: types.ModuleType | None,
        factory: Callable[[str], Any] | None,
        only_if_missing: bool,
        source: HookSource,
        seq: int,
    ) -> None:
        put = object.__setattr__  # frozen: as a frozen dataclass's __init__ does
        put(self, "name", name)
        put(self, "module", module)
        put(self, "factory", factory)
        put(self, "only_if_missing", only_if_missing)
        put(self, "source", source)
        put(self, "seq", seq)

    @property
    def what(self) -> str:
        if self.factory is not None:
            return describe_callable(self.factory)
        return self.module.__name__ if self.module is not None else "<empty module>"


class Provided(Plain):
    """What placing a provision did: ``state`` ``provided`` or ``skipped``, and its changes."""

    _fields = ("provision", "state", "reason", "changes")

    def __init__(
        self, provision: Provision, state: str, reason: str, changes: list[Change] | None = None
    ) -> None:
        self.provision, self.state, self.reason = provision, state, reason
        self.changes: list[Change] = [] if changes is None else changes

    def undo(self) -> None:
        for change in reversed(self.changes):
            change.undo()


def check(name: str, module: object, factory: object, what: str) -> None:
    """Validate a ``provide_module()`` call at registration (imports nothing)."""
    parts = name.split(".") if isinstance(name, str) else [""]
    if not all(p.isidentifier() for p in parts):
        raise HookRegistrationError(
            f"{what}: {name!r} is not a dotted module name such as 'aiter.ops.triton'"
        )
    if module is not None and factory is not None:
        raise HookRegistrationError(f"{what}: pass module= or factory=, not both")
    if module is not None and not isinstance(module, types.ModuleType):
        raise HookRegistrationError(
            f"{what}: module must be a module object (types.ModuleType), got "
            f"{type(module).__name__}; pass factory= to build one at apply time"
        )
    if factory is not None and not callable(factory):
        raise HookRegistrationError(f"{what}: factory must be callable, got {factory!r}")


def _absent(name: str) -> bool:
    """Whether ``name`` cannot be imported; a parent that raises is an error, not "absent"."""
    if name in sys.modules:
        return False
    try:
        return importlib.util.find_spec(name) is None
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (name == missing or name.startswith(missing + ".")):
            return True
        raise _parent_failed(name, exc) from exc
    except Exception as exc:
        raise _parent_failed(name, exc) from exc


def _installed(name: str) -> str:
    """Why a provision is skipped: where the module found is (it is not imported to see
    whether it imports: one that raises on this machine needs ``only_if_missing=False``)."""
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None) if module is not None else None
    if spec is None:
        try:
            spec = importlib.util.find_spec(name)
        except Exception:  # found a moment ago: a parent that raises now is said by the import
            spec = None
    origin = getattr(spec, "origin", None)
    where = f" ({origin})" if origin else ""
    return (
        f"module {name!r} is installed{where}; not replaced (only_if_missing: it is found, "
        "not imported to see whether it imports; pass only_if_missing=False to replace one "
        "that fails to import on this machine)"
    )


def _parent_failed(name: str, exc: BaseException) -> HookTargetError:
    return HookTargetError(
        f"provide_module({name!r}): importing its parent package raised "
        f"{type(exc).__name__}: {exc}. A module is provided only where it is missing, not "
        "where its package is broken; fix that package or uninstall it.",
        target=name,
        missing=name,
    )


def _package(name: str) -> types.ModuleType:
    """An empty package standing in for a missing parent (``__path__`` empty: no submodules)."""
    module = types.ModuleType(name)
    module.__path__ = []
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    return module


def _module_of(prov: Provision) -> types.ModuleType:
    if prov.factory is not None:
        made = prov.factory(prov.name)
        if not isinstance(made, types.ModuleType):
            raise HookRegistrationError(
                f"provide_module({prov.name!r}) from {prov.source}: factory {prov.what} "
                f"returned a {type(made).__name__}, not a module; return types.ModuleType(name) "
                "with the attributes the importers need"
            )
        return made
    return prov.module if prov.module is not None else types.ModuleType(prov.name)


def place(prov: Provision, journal: Journal) -> Provided:
    """Put ``prov``'s module in place if needed (journaled); parents missing are created."""
    name = prov.name
    absent = _absent(name)
    if not absent and prov.only_if_missing:
        return Provided(prov, "skipped", _installed(name))
    start = len(journal.changes)
    parts = name.split(".")
    parent: types.ModuleType | None = None
    created: list[str] = []
    for i in range(1, len(parts)):
        sub = ".".join(parts[:i])
        mod = sys.modules.get(sub)
        if mod is None and not _absent(sub):
            mod = importlib.import_module(sub)
        if mod is None:
            mod = _package(sub)
            journal.put_module(sub, mod)
            if parent is not None:
                journal.put(parent, parts[i - 1], mod)
            created.append(sub)
        parent = mod
    module = _module_of(prov)
    journal.put_module(name, module)
    if parent is not None:
        journal.put(parent, parts[-1], module)
    if absent:
        reason = f"module {name!r} is not installed; placed {prov.what}"
    else:
        reason = f"replaced the installed module {name!r} with {prov.what} (only_if_missing=False)"
    if created:
        reason += f"; created parent package(s) {', '.join(created)}"
    return Provided(prov, "provided", reason, journal.changes[start:])
