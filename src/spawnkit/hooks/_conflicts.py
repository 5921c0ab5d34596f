"""Hooks that combine in a way their plugins may not mean, reported as ``HookConflictWarning``.

Reported when hooks are applied, not per registration: only then is the whole set known, and an
escalation (``-W error``, ``<PREFIX>_HOOK_CONFLICTS=error``) raises before anything is patched.
Once per process; the parent never loads plugins, so every rank reports its own.
"""

from __future__ import annotations

import warnings

from spawnkit._compat import TYPE_CHECKING
from spawnkit._warnopts import user_stacklevel
from spawnkit.errors import ConfigError, HookConflictError, HookConflictWarning
from spawnkit.hooks.types import HookType, Registration

if TYPE_CHECKING:
    from spawnkit.hooks._state import State

__all__ = ["POLICIES", "messages", "parse_policy", "report"]

POLICIES = ("warn", "error", "ignore")


def parse_policy(var: str, raw: str | None) -> str:
    """``<PREFIX>_HOOK_CONFLICTS`` as a policy; unset is ``warn``, a bad value a ``ConfigError``."""
    value = (raw or "").strip().lower() or "warn"
    if value not in POLICIES:
        raise ConfigError(
            f"{var}={raw!r} is not a hook conflict policy; use one of {', '.join(POLICIES)}.",
            setting=var,
        )
    return value


def _for_target(target: str, regs: list[Registration]) -> list[str]:
    kinds = [r.hook_type for r in regs]
    n_replace = kinds.count(HookType.REPLACE)
    if kinds.count(HookType.AROUND) < 2 and (n_replace == 0 or len(kinds) == 1):
        return []  # the common case, checked at every apply: no lists, no message
    replaces = [r for r in regs if r.hook_type is HookType.REPLACE]
    others = [r for r in regs if r.hook_type is not HookType.REPLACE]
    arounds = [r for r in regs if r.hook_type is HookType.AROUND]
    out: list[str] = []
    if len(replaces) > 1:
        out.append(
            f"target {target!r} has {len(replaces)} REPLACE hooks: {replaces[-1].describe()} "
            f"takes effect and {', '.join(r.describe() for r in replaces[:-1])} never runs "
            "(the last registered REPLACE wins)"
        )
    if replaces and others:
        out.append(
            f"target {target!r} mixes REPLACE ({replaces[-1].describe()}) with other hooks "
            f"({', '.join(r.describe() for r in others)}): BEFORE/AFTER/AROUND hooks wrap the "
            "replacement, not the original"
        )
    if len(arounds) > 1:
        out.append(
            f"target {target!r} has {len(arounds)} AROUND hooks "
            f"({', '.join(r.describe() for r in arounds)}); they nest in registration order, "
            "the last outermost, and one that does not call original_fn bypasses every hook "
            "inside it"
        )
    return out


def messages(st: State) -> list[str]:
    """Every conflict among the registrations of ``st``, one message each."""
    out: list[str] = []
    for key, regs in st.regs.items():
        if len(regs) > 1:  # one hook alone conflicts with nothing: most targets, every apply
            out.extend(_for_target(st.display.get(key, key), regs))
    for key in st.spellings:  # rare: one object hooked under several names
        out.extend(spelled(st, key))
    return out


def spelled(st: State, key: str) -> list[str]:
    """The conflicts of the hooks on one object under all its names (``key`` and its other
    spellings, ``State.spellings``): they form one chain, judged as one target's."""
    names = [key, *st.spellings.get(key, ())]
    regs = sorted((r for k in names for r in st.regs.get(k, [])), key=lambda r: r.seq)
    display = st.display.get(key, key)
    others = ", ".join(repr(st.display.get(k, k)) for k in names[1:])
    said = f"target {display!r} (hooked as {others} too, the same object under another name)"
    return [m.replace(f"target {display!r}", said, 1) for m in _for_target(display, regs)]


def report(st: State, policy: str = "warn", var: str = "", found: list[str] | None = None) -> None:
    """Report the conflicts not reported yet in this process, per ``policy``; ``found``: those
    only the built chains tell (an AROUND hook dropping the result), else the registrations'."""
    fresh = [
        m for m in (messages(st) if found is None else found) if m not in st.conflicts_reported
    ]
    if not fresh:
        return
    knob = f"{var}=ignore" if var else "-W ignore::spawnkit.HookConflictWarning"
    if policy == "error":  # apply_hooks(conflicts="error") names no variable: "because =error"
        said, warn = (f"{var}=error", f"set {var}=warn") if var else ("conflicts='error'", "")
        raise HookConflictError(
            f"{len(fresh)} hook conflict(s), refused because {said}:\n"
            + "\n".join(f"  - {m}" for m in fresh)
            + "\nFix: remove or reorder the conflicting plugins' hooks; or "
            f"{warn or 'pass conflicts=' + repr('warn')} to run with them.",
            conflicts=fresh,
        )
    st.conflicts_reported.update(fresh)
    if policy == "ignore":
        return
    level = user_stacklevel()
    for message in fresh:
        try:
            warnings.warn(
                f"{message}. Silence with {knob}; refuse with "
                f"{f'{var}=error' if var else '-W error::spawnkit.HookConflictWarning'}.",
                HookConflictWarning,
                stacklevel=level,
            )
        except HookConflictWarning as escalated:  # -W error::spawnkit.HookConflictWarning
            st.conflicts_reported.difference_update(fresh)
            raise HookConflictError(
                f"hook conflict escalated to an error by the warnings filter "
                f"(-W / PYTHONWARNINGS error::spawnkit.HookConflictWarning): {message}.\n"
                "Fix: remove or reorder the conflicting plugins' hooks; or drop that -W / "
                f"PYTHONWARNINGS entry{f', or set {var}=ignore' if var else ''}.",
                conflicts=fresh,
            ) from escalated
