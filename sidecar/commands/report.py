"""``agent-sidecar report``: the latency bill of one or more timeline logs.

Runs are grouped by their config/version label (``telemetry.label``), in the order the
labels first appear, so two releases logged to one file (or two files) compare side by
side. For each label the bill has one row per stage kind and one per tool: count, mean,
P50, P95, P99 (milliseconds) and share of total latency (the row's summed time over the
runs' summed wall time).

The stage rows add up to the whole run: a step's concurrent tool calls count as the wall
time they cover (``tools``), every other stage runs alone. Tool rows are per call and
overlap each other, so their shares can add up to more than the ``tools`` row.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

__all__ = ["STAGES", "Bill", "Row", "bills", "load", "percentile", "render"]

# Stage rows in the order of a run; "tools" is each step's wall time of tool calls.
STAGES = (
    "queue",
    "context_build",
    "model_pacing",
    "model_call",
    "tools",
    "persistence",
    "overhead",
)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of sorted ``values``, linearly interpolated."""
    if not values:
        return math.nan
    rank = (len(values) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (rank - low)


@dataclass(frozen=True)
class Row:
    """One line of the bill; times in seconds."""

    name: str
    values: tuple[float, ...]
    """Sorted samples."""
    share: float | None
    """Summed time over the runs' summed wall time; None where it means nothing."""

    @property
    def count(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values) if self.values else math.nan

    def p(self, q: float) -> float:
        return percentile(self.values, q)


@dataclass
class Bill:
    """The latency bill of one label."""

    label: str
    run: Row
    stages: list[Row]
    tools: list[Row]
    ttft: Row
    stop_reasons: Counter[str] = field(default_factory=Counter)
    tokens: dict[str, float] = field(default_factory=dict)
    """Mean tokens per run by kind."""
    cost_per_run: float | None = None


def load(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Read timeline-log records; blank lines are skipped.

    Raises:
        OSError: a file cannot be read.
        ValueError: a line is not a JSON object (the message names file and line).
    """
    records: list[dict[str, Any]] = []
    for path in paths:
        with Path(path).open("rb") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    record = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{number}: not JSON: {exc}") from None
                if not isinstance(record, dict):
                    raise ValueError(f"{path}:{number}: not a timeline record")
                records.append(record)
    return records


class _Samples:
    def __init__(self) -> None:
        self.stages: dict[str, list[float]] = defaultdict(list)
        self.tools: dict[str, list[float]] = defaultdict(list)
        self.totals: list[float] = []
        self.ttft: list[float] = []
        self.stop_reasons: Counter[str] = Counter()
        self.tokens: Counter[str] = Counter()
        self.costs: list[float] = []

    def add(self, record: dict[str, Any]) -> None:
        self.stop_reasons[str(record.get("stop_reason", "unknown"))] += 1
        stages = record.get("stages") or []
        if not stages:  # cancelled before it had a timeline
            return
        self.totals.append(float(record["total"]))
        steps: dict[int, list[float]] = {}
        for stage in stages:
            kind, duration = stage["kind"], float(stage["duration"])
            if kind == "tool_call":
                self.tools[stage["name"]].append(duration)
                start = float(stage["start"])
                span = steps.setdefault(int(stage["step"]), [start, start + duration])
                span[0] = min(span[0], start)
                span[1] = max(span[1], start + duration)
                continue
            if stage.get("name") == "model_pacing":
                kind = "model_pacing"  # the provider's wait, apart from the sidecar's queue
            self.stages[kind].append(duration)
            if kind == "model_call" and stage.get("ttft") is not None:
                self.ttft.append(float(stage["ttft"]))
        for start, end in steps.values():
            self.stages["tools"].append(end - start)
        for kind, count in (record.get("usage") or {}).items():
            self.tokens[kind] += count
        cost = record.get("cost")
        if cost is not None:
            self.costs.append(float(cost["total_usd"]))

    def bill(self, label: str) -> Bill:
        wall = sum(self.totals)

        def row(name: str, values: list[float], shared: bool = True) -> Row:
            share = sum(values) / wall if shared and wall > 0 else None
            return Row(name, tuple(sorted(values)), share)

        runs = len(self.totals)
        return Bill(
            label=label,
            run=row("run", self.totals),
            stages=[row(kind, self.stages.get(kind, [])) for kind in STAGES],
            tools=[row(name, values) for name, values in sorted(self.tools.items())],
            ttft=row("time to first token", self.ttft, shared=False),
            stop_reasons=self.stop_reasons,
            tokens={k: v / runs for k, v in self.tokens.items()} if runs else {},
            cost_per_run=sum(self.costs) / len(self.costs) if self.costs else None,
        )


def bills(records: Iterable[dict[str, Any]]) -> list[Bill]:
    """One bill per label, in the order the labels first appear."""
    samples: dict[str, _Samples] = {}
    for record in records:
        label = str(record.get("label") or "(unlabelled)")
        samples.setdefault(label, _Samples()).add(record)
    return [s.bill(label) for label, s in samples.items()]


def _line(name: str, row: Row) -> str:
    if not row.count:
        return f"  {name:<28}{0:>7}"
    share = f"{row.share * 100:>7.1f}%" if row.share is not None else f"{'':>8}"
    figures = [row.mean, row.p(50), row.p(95), row.p(99)]
    cells = "".join(f"{v * 1e3:>10.2f}" for v in figures)
    return f"  {name[:28]:<28}{row.count:>7}{cells}{share}"


def render(bills: Sequence[Bill]) -> str:
    """The bills as fixed-width text tables."""
    out: list[str] = []
    header = f"  {'':<28}{'count':>7}" + "".join(
        f"{h:>10}" for h in ("mean ms", "p50 ms", "p95 ms", "p99 ms")
    )
    for bill in bills:
        runs = sum(bill.stop_reasons.values())
        out.append(f"== {bill.label}: {runs} runs")
        out.append(header + f"{'share':>8}")
        out.append(_line("run", bill.run))
        out.extend(_line(f"  {row.name}", row) for row in bill.stages)
        out.append(_line("time to first token", bill.ttft))
        out.extend(_line(f"tool {row.name}", row) for row in bill.tools)
        reasons = ", ".join(f"{r} {n}" for r, n in bill.stop_reasons.most_common())
        out.append(f"  stop reasons: {reasons}")
        if bill.tokens:
            tokens = ", ".join(
                f"{k.removesuffix('_tokens')} {v:.0f}" for k, v in bill.tokens.items()
            )
            out.append(f"  tokens per run: {tokens}")
        if bill.cost_per_run is not None:
            out.append(f"  cost per run: ${bill.cost_per_run:.6f}")
        out.append("")
    return "\n".join(out)
