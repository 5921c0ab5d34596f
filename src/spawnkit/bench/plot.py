"""Spawn latency against the number of workers, one line per variant (``spawnkit bench --plot``).

matplotlib is an optional extra (``pip install "spawnkit[plot]"``); it is
imported only here, with the non-interactive Agg backend, so plotting works
on a headless machine and nothing else in spawnkit pays for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["FORMATS", "INSTALL_HINT", "plot_spawn_latency"]

#: File suffixes the plot can be written as (matplotlib picks the format from it).
FORMATS = (".svg", ".png")
INSTALL_HINT = 'pip install "spawnkit[plot]"'


def plot_spawn_latency(results: dict[str, Any], path: str | Path) -> Path:
    """Draw ``spawn_latency.run()``'s rows: one panel per worker kind, ms (log) against n."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = Path(path)
    rows = results["rows"]
    workers = list(dict.fromkeys(r["worker"] for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    # Text stays text in an SVG (searchable, smaller) instead of glyph outlines.
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig, axes = plt.subplots(1, len(workers), figsize=(6 * len(workers), 4.5), squeeze=False)
        try:
            _draw(axes[0], workers, variants, rows, results["sizes"])
            fig.suptitle(f"spawn latency (median of {results['repeats']})")
            fig.tight_layout()
            fig.savefig(target)
        finally:
            plt.close(fig)
    return target


def _draw(
    axes: Any, workers: list[str], variants: list[str], rows: list[dict[str, Any]], sizes: Any
) -> None:
    """One panel per worker kind; one line per variant, in the order they were measured."""
    for ax, worker in zip(axes, workers, strict=True):
        for variant in variants:
            mine = sorted(
                (r["n"], r["mean_ms"])
                for r in rows
                if r["worker"] == worker and r["variant"] == variant
            )
            if mine:
                ax.plot([n for n, _ in mine], [ms for _, ms in mine], marker="o", label=variant)
        ax.set_title(f"{worker} worker")
        ax.set_xlabel("workers started together")
        ax.set_ylabel("call -> entry running, mean per worker (ms)")
        ax.set_yscale("log")
        ax.set_xticks(sizes)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
