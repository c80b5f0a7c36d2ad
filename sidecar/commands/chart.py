"""The latency bill as a PNG: where each label's time goes, and its latency percentiles.

Top: one stacked bar per label, the share of total latency of each stage (they add up
to the whole run). Below: P50, P95 and P99 of the run and of its main stages, one group
of bars per label, each stage on its own scale.

Needs matplotlib (``pip install 'agent-sidecar[report]'``), imported only here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a window

import matplotlib.pyplot as plt

from sidecar.commands.report import STAGES, Bill, Row

__all__ = ["write_chart"]

_STAGE_COLOURS = {
    "queue": "#9e9e9e",
    "context_build": "#8e6bbf",
    "model_pacing": "#7fb3e8",
    "model_call": "#3b7dd8",
    "tools": "#e0913a",
    "persistence": "#4caf50",
    "overhead": "#d64541",
}
_PERCENTILES = ((50, 0.95), (95, 0.65), (99, 0.35))  # percentile, bar opacity
_PANELS = ("run", "model_call", "tools", "overhead")


def _row(bill: Bill, name: str) -> Row:
    if name == "run":
        return bill.run
    return next(r for r in bill.stages if r.name == name)


def write_chart(bills: Sequence[Bill], path: str | Path) -> None:
    """Write the chart of ``bills`` to ``path`` (PNG)."""
    labels = [b.label for b in bills]
    figure = plt.figure(figsize=(12, 3.2 + 0.45 * len(bills) + 3.4), dpi=110)
    grid = figure.add_gridspec(2, len(_PANELS), height_ratios=[0.6 + 0.3 * len(bills), 2.2])

    shares = figure.add_subplot(grid[0, :])
    lefts = [0.0] * len(bills)
    for stage in STAGES:
        widths = [(_row(b, stage).share or 0.0) * 100 for b in bills]
        bars = shares.barh(
            labels, widths, left=lefts, color=_STAGE_COLOURS[stage], label=stage, height=0.6
        )
        for bar, width in zip(bars, widths, strict=True):
            if width >= 6:
                shares.text(
                    bar.get_x() + width / 2,
                    bar.get_y() + bar.get_height() / 2,
                    f"{width:.0f}%",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white",
                )
        lefts = [a + b for a, b in zip(lefts, widths, strict=True)]
    shares.set_xlim(0, 100)
    shares.invert_yaxis()
    shares.set_xlabel("share of total latency (%)")
    shares.set_title("Where the time goes")
    shares.legend(ncol=len(STAGES), loc="upper center", bbox_to_anchor=(0.5, -0.35), fontsize=8)

    width = 0.8 / max(1, len(_PERCENTILES))
    for column, name in enumerate(_PANELS):
        axes = figure.add_subplot(grid[1, column])
        colour = _STAGE_COLOURS.get(name, "#455a64")
        for offset, (q, alpha) in enumerate(_PERCENTILES):
            values = [_row(b, name).p(q) * 1e3 for b in bills]
            positions = [i + (offset - 1) * width for i in range(len(bills))]
            axes.bar(positions, values, width=width, color=colour, alpha=alpha, label=f"P{q}")
        axes.set_xticks(range(len(bills)), labels, rotation=20, ha="right", fontsize=8)
        axes.set_title(f"{name} (ms)", fontsize=10)
        axes.tick_params(axis="y", labelsize=8)
        axes.grid(axis="y", alpha=0.3)
        if column == 0:
            axes.legend(fontsize=8)
    figure.suptitle("Latency bill", fontsize=13)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
