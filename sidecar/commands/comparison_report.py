"""A comparison of new runs with their recordings, as people and programs read it.

The same report serves ``agent-sidecar replay`` and ``agent-sidecar shadow report``: a
table (one line per turn, then the totals and what breached a threshold), a JSON document
(:data:`REPORT_FORMAT`, documented in ``docs/replay.md``) and a plot (PNG, with
matplotlib: each turn's latency and tokens, recorded beside new, mismatches marked).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sidecar.recording.compare import Summary, TurnComparison

__all__ = ["REPORT_FORMAT", "render", "report_document", "write_plot"]

REPORT_FORMAT = "agent-sidecar-comparison-report"
"""The ``format`` of a report's JSON document (``version`` 1)."""

_INPUT_WIDTH = 32


def _same(value: bool | None) -> str:
    return "-" if value is None else ("same" if value else "DIFFERENT")


def _cost(value: float | None) -> str:
    return "-" if value is None else f"${value:.6f}"


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def render(comparisons: Sequence[TurnComparison], summary: Summary, *, title: str) -> str:
    """The readable report: a table of turns, the totals, the verdict."""
    rows = [("#", "input", "tool calls", "answer", "stop (was → now)", "ms (was → now)", "tokens")]
    for i, c in enumerate(comparisons, 1):
        calls = "same" if c.same_tool_calls else ("ARGS" if c.same_tool_names else "DIFFERENT")
        stop = (
            c.recorded_stop
            if c.recorded_stop == c.replayed_stop
            else (f"{c.recorded_stop} → {c.replayed_stop}")
        )
        rows.append(
            (
                str(i),
                _cut(c.input, _INPUT_WIDTH),
                calls,
                _same(c.same_answer),
                stop,
                f"{c.recorded_duration * 1000:.0f} → {c.replayed_duration * 1000:.0f}",
                f"{c.recorded_tokens} → {c.replayed_tokens}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [title, ""]
    for row in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    lines.append("")
    for i, c in enumerate(comparisons, 1):
        if not c.same_tool_calls:
            lines.append(f"turn {i} tool calls: was {c.recorded_calls}, now {c.replayed_calls}")
    answers = "-" if summary.same_answers is None else f"{summary.same_answers:.0%}"
    ratio = "-" if summary.latency_ratio is None else f"{summary.latency_ratio:.2f}x"
    tokens = "-" if summary.token_ratio is None else f"{summary.token_ratio:.2f}x"
    cost = "-" if summary.cost_ratio is None else f"{summary.cost_ratio:.2f}x"
    lines += [
        f"turns: {summary.turns}",
        f"same tool calls: {summary.same_tool_calls:.0%} (names: {summary.same_tool_names:.0%})",
        f"same answers: {answers}",
        f"new failures: {summary.new_failures}",
        f"latency (median ratio): {ratio}; tokens: {tokens}; cost: {cost} "
        f"({_cost(summary.recorded_cost)} → {_cost(summary.replayed_cost)})",
    ]
    if summary.breaches:
        lines += ["", "REGRESSIONS:", *(f"  - {b}" for b in summary.breaches), "", "verdict: FAIL"]
    else:
        lines += ["", "verdict: pass"]
    return "\n".join(lines) + "\n"


def report_document(
    comparisons: Sequence[TurnComparison], summary: Summary, **about: Any
) -> dict[str, Any]:
    """The machine-readable report; ``about`` says what was compared (config, sources)."""
    return {
        "format": REPORT_FORMAT,
        "version": 1,
        **about,
        "turns": [c.to_json() for c in comparisons],
        "summary": summary.to_json(),
    }


def write_plot(comparisons: Sequence[TurnComparison], path: str | Path, *, title: str) -> None:
    """Each turn's latency and tokens, recorded beside new; a turn whose tool calls or
    answer differ is marked in red. Needs matplotlib.

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only; never a window
    import matplotlib.pyplot as plt

    turns = list(range(1, len(comparisons) + 1))
    figure, (latency, tokens) = plt.subplots(2, 1, figsize=(max(6, len(turns) * 0.5), 6))
    width = 0.4
    for axis, was, now, label in (
        (
            latency,
            [c.recorded_duration * 1000 for c in comparisons],
            [c.replayed_duration * 1000 for c in comparisons],
            "run time (ms)",
        ),
        (
            tokens,
            [c.recorded_tokens for c in comparisons],
            [c.replayed_tokens for c in comparisons],
            "tokens",
        ),
    ):
        axis.bar([t - width / 2 for t in turns], was, width, label="recorded", color="#9e9e9e")
        axis.bar([t + width / 2 for t in turns], now, width, label="new", color="#3b7dd8")
        axis.set_ylabel(label)
        axis.set_xticks(turns)
        for t, c in zip(turns, comparisons, strict=True):
            if not c.same_tool_calls or c.same_answer is False or c.new_failure:
                axis.get_xticklabels()[t - 1].set_color("#d64541")
        axis.legend(loc="upper right")
    tokens.set_xlabel("turn (red: tool calls, answer or outcome differ)")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
