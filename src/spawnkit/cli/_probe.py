"""The entry ``spawnkit doctor`` runs in a clean spawned child: what a real worker would see.

Only a fresh child can say whether the import guard would pass; the doctor's process has
imported things a worker would not have.
"""

from __future__ import annotations

from typing import Any

__all__ = ["find_conflicts", "probe", "registration_rows"]


def _hook_name(hook: Any) -> str:
    if isinstance(hook, str):
        return hook
    module = getattr(hook, "__module__", None) or "?"
    qualname = getattr(hook, "__qualname__", None) or type(hook).__qualname__
    return f"{module}:{qualname}"


def registration_rows(registry: Any) -> list[dict[str, Any]]:
    """Every registration of ``registry`` as plain dicts (a provided module is type ``PROVIDE``)."""
    rows: list[dict[str, Any]] = []
    status = registry.status()
    hooks = [s for s in status if s.hook_type != "PROVIDE"]  # registrations' order: seq
    for reg, st in zip(registry.registrations(), hooks, strict=True):
        hook_type = getattr(reg.hook_type, "name", str(reg.hook_type))
        rows.append(
            {
                "target": reg.target,
                "type": hook_type,
                "hook": _hook_name(reg.hook),
                "source": str(reg.source),
                "seq": int(getattr(reg, "seq", 0)),
                "state": st.state,
                "reason": st.reason,
            }
        )
    for st in status:
        if st.hook_type == "PROVIDE":
            row = {"target": st.target, "type": "PROVIDE", "hook": st.hook, "seq": 0}
            rows.append(row | {"source": str(st.source), "state": st.state, "reason": st.reason})
    rows.sort(key=lambda r: (r["target"], r["seq"]))
    return rows


def find_conflicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Registrations that interfere: several REPLACEs (only the last counts), stacked AROUNDs."""
    by_target: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_target.setdefault(row["target"], []).append(row)
    found: list[dict[str, Any]] = []
    for target, regs in sorted(by_target.items()):
        replaces = [r for r in regs if r["type"] == "REPLACE"]
        if len(replaces) > 1:
            winner = max(replaces, key=lambda r: r["seq"])
            losers = [r for r in replaces if r is not winner]
            found.append(
                {
                    "target": target,
                    "severity": "conflict",
                    "message": (
                        f"{len(replaces)} REPLACE hooks on {target}; only the last registered "
                        f"({winner['hook']} from {winner['source']}) takes effect, "
                        + ", ".join(f"{r['hook']} from {r['source']}" for r in losers)
                        + " never runs"
                    ),
                }
            )
        arounds = [r for r in regs if r["type"] == "AROUND"]
        if len({r["source"] for r in arounds}) > 1:
            found.append(
                {
                    "target": target,
                    "severity": "note",
                    "message": (
                        f"{len(arounds)} AROUND hooks on {target} from "
                        + ", ".join(sorted({r["source"] for r in arounds}))
                        + "; each must call original_fn, or the hooks inside it are bypassed"
                    ),
                }
            )
    return found


def probe() -> dict[str, Any]:
    """Entry of the doctor's child: its bootstrap report and every hook registration."""
    from spawnkit.bootstrap import current_report, current_spec
    from spawnkit.namespace import get_namespace

    spec = current_spec()
    namespace = get_namespace(spec.namespace if spec is not None else None)
    report = current_report()
    rows = registration_rows(namespace.hooks)
    return {
        "report": report.to_dict() if report is not None else None,
        "report_text": report.format() if report is not None else "",
        "registrations": rows,
        "conflicts": find_conflicts(rows),
        # The messages a worker's apply_hooks() issues as HookConflictWarning, for doctor to
        # issue once in its own process.
        "hook_conflicts": [*namespace.hooks.conflicts(), *_platform_left_behind(namespace)],
    }


def _platform_left_behind(namespace: Any) -> list[str]:
    """A class REPLACE of the platform class this worker built before plugins loaded, as the
    worker's ``apply_hooks`` warns about it (doctor's child is told to ignore conflicts)."""
    replaced = namespace.hooks._replaced_classes()
    if not replaced:
        return []
    from spawnkit.bootstrap._platform_replaced import left_behind

    lines, fix = left_behind(namespace, replaced)
    return [f"{line}\n{fix.rstrip('.')}" for line in lines]
