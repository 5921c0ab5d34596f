"""What an ``apply_hooks()`` call decides for a registration before patching anything (skip,
wait for an import, provide a module first), recorded in the state ``status()`` reads."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable

from spawnkit.errors import HookRegistrationError
from spawnkit.hooks import _on_import, _resolve
from spawnkit.hooks._journal import Journal
from spawnkit.hooks._provide import Provided, place
from spawnkit.hooks._state import State
from spawnkit.hooks.types import Registration, describe_callable

__all__: list[str] = []


def check_conditions(st: State, key: str) -> Exception | None:
    """Call each untested condition of ``key``; a false one drops its hook, one that raises
    is returned (the target then fails as a whole)."""
    for reg in st.live(key):
        cond = reg.condition
        if cond is None or reg.seq in st.cond_ok:
            continue
        name = describe_callable(cond)
        try:
            ok = cond()
        except Exception as exc:
            err = HookRegistrationError(
                f"condition {name} of {reg.describe()} on target {reg.target!r} raised "
                f"{type(exc).__name__}: {exc}. A condition must return true or false; fix it, "
                "or register the hook without condition=."
            )
            err.__cause__ = exc
            return err
        if ok:
            st.cond_ok.add(reg.seq)
        else:
            st.dropped[reg.seq] = ("skipped", f"condition {name} is false")
    return None


def defer(st: State, key: str, strict: bool, callback: Callable[[str], None]) -> bool:
    """Whether ``key`` waits for its module's first import (only if every hook asks for it)."""
    if key in st.applied:
        return False
    regs = st.live(key)
    if not regs or not all(r.on_import for r in regs):
        return False
    path = st.paths[key]
    if _resolve.imported(path):
        return False
    top = path.parts[0]
    if all(r.optional for r in regs) and top not in sys.modules and _not_installed(top):
        for reg in regs:
            st.dropped[reg.seq] = ("skipped", f"module {top!r} is not installed")
        return True
    if key not in st.waiting:
        st.waiting[key] = (strict, _on_import.watch(_resolve.watch_names(path), callback))
    return True


def _not_installed(top: str) -> bool:
    try:
        return importlib.util.find_spec(top) is None
    except (ImportError, ValueError):
        return True


def provide(st: State, journal: Journal) -> tuple[list[str], dict[str, Exception]]:
    """Place every provided module not placed yet, parents first, each all or nothing."""
    done: list[str] = []
    failed: dict[str, Exception] = {}
    for name in sorted(st.provides):
        if name in st.provided:
            continue
        local = Journal()
        try:
            st.provided[name] = outcome = place(st.provides[name], local)
        except Exception as exc:
            local.rollback()
            failed[name] = exc
            continue
        journal.changes.extend(outcome.changes)
        done.append(name)
    return done, failed


def skip_optional(st: State, key: str, exc: Exception) -> bool:
    regs = st.live(key)
    if not isinstance(exc, _resolve.TargetMissing) or not regs:
        return False
    if not all(r.optional for r in regs):
        return False
    for reg in regs:
        st.dropped[reg.seq] = ("skipped", exc.reason)
    return True


def forget(st: State) -> list[Provided]:
    """Stop every watch and forget every decision (``unapply()``); returns what was provided."""
    for key in list(st.waiting):
        st.stop_waiting(key)
    st.dropped.clear()
    st.cond_ok.clear()
    st.failed.clear()
    st.on_import_of.clear()
    provided = list(st.provided.values())
    st.provided.clear()
    return provided


def state_of(st: State, key: str, reg: Registration) -> tuple[str, str]:
    dropped = st.dropped.get(reg.seq)
    if dropped is not None:
        return dropped
    rec = st.applied.get(key)
    if rec is not None and reg.seq in rec.seqs:
        where = [f"{h.module}.{h.label} ({h.kind})" for h in st.stale.values() if h.target == key]
        if where:
            return "partial", unrebound_reason(where)
        trigger = st.on_import_of.get(key)
        return "applied", f"applied when {trigger!r} was first imported" if trigger else ""
    failed = st.failed.get(key)
    if failed is not None:
        return "failed", failed
    if key in st.waiting:
        module = _resolve.guess_module(st.paths[key])
        return "pending", f"on_import: waiting for the first import of {module!r}"
    return "pending", "registered after the last apply_hooks() call; applied by the next one"


def unrebound_reason(where: list[str]) -> str:
    return (
        f"not in effect through {len(where)} reference(s) the stale-binding sweep could "
        f"not rebind, which still call the original: {'; '.join(where)}"
    )


def provision_state(st: State, name: str) -> tuple[str, str]:
    done = st.provided.get(name)
    if done is not None:
        return done.state, done.reason
    failed = st.failed.get(name)
    if failed is not None:
        return "failed", failed
    return "pending", "placed by the next apply_hooks() call"
