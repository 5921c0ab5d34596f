"""``spawnkit trace FILE --plot OUT``: ranks (rows) against time, one colored bar per stage.

matplotlib is the optional ``plot`` extra; it is imported here only, with the
non-interactive Agg backend, so drawing works on a headless machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Track", "plot_tracks"]


@dataclass
class Track:
    """One process of the trace: its name and its complete events, ms after the launch began."""

    pid: int
    name: str
    order: int
    spans: list[tuple[str, str, float, float]] = field(default_factory=list)  # cat, name, t0, t1
    marks: list[tuple[str, float]] = field(default_factory=list)  # instant events
    #: its stages are the launcher's reading of its messages (it failed before its report)
    seen_by_launcher: bool = False

    def stages(self) -> list[tuple[str, str, float, float]]:
        return [s for s in self.spans if s[0] in ("stage", "launch") or s[1] == "process start"]


def plot_tracks(tracks: list[Track], path: str, *, title: str) -> None:
    """The Gantt chart: a row per track, a bar per stage (same stage, same color), ready marks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    names = list(dict.fromkeys(_key(n) for t in tracks for _, n, _, _ in t.stages() if _bar(n)))
    cmap = plt.get_cmap("tab20")
    colors = {n: cmap(i % 20) for i, n in enumerate(names)}
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig, ax = plt.subplots(figsize=(11, 1.2 + 0.7 * len(tracks)))
        try:
            _draw(ax, tracks, colors)
            ax.set_title(f"start-up timeline ({title})")
            handles = [Patch(color=c) for c in colors.values()]
            ax.legend(
                handles,
                list(colors),
                loc="upper center",
                bbox_to_anchor=(0.5, -0.25),
                ncol=min(5, len(colors)),
                fontsize=8,
                frameon=False,
            )
            fig.tight_layout()
            fig.savefig(path)
        finally:
            plt.close(fig)


def _key(name: str) -> str:
    """The legend entry of a bar: every rank's start is one color."""
    return "start rank" if name.startswith("start rank") else name


def _bar(name: str) -> bool:
    """Bars are the stages; the launcher's all-enclosing call and a rank's life are not."""
    return name != "spawn_with_plugins" and not name.startswith("rank ")


def _draw(ax: Any, tracks: list[Track], colors: dict[str, Any]) -> None:
    for row, track in enumerate(tracks):
        for _, name, t0, t1 in track.stages():
            if _bar(name):
                bar = [(t0, max(t1 - t0, 0.05))]
                ax.broken_barh(bar, (row - 0.35, 0.7), color=colors[_key(name)])
        for label, at in track.marks:
            if label.endswith("ready"):
                ax.plot([at], [row], marker="|", markersize=16, color="black")
    ax.set_yticks(range(len(tracks)), [t.name for t in tracks], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms after the launch began (| : rank seen ready by the launcher)")
    ax.grid(axis="x", alpha=0.3)
