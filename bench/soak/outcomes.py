"""How a run ended, from the caller's side: completed, degraded with a clear error, or lost.

- **completed**: a ``RunResult`` with ``STOP_REASON_ANSWERED`` whose tool calls all ended
  OK (or came from the cache).
- **degraded**: the caller learned clearly what went wrong. Either a ``RunResult`` that
  says it (a tool call UNAVAILABLE / TIMED_OUT / ERROR the model saw; ``MODEL_ERROR`` with
  an error code; ``BUDGET_EXHAUSTED``; an answer given without the tools because the
  sidecar hid them from the model), or a refusal with an actionable status before the run
  started (``UNAVAILABLE`` while the sidecar drains or is down; the session gone with a
  restarted sidecar's memory store).
- **lost**: no result and no actionable status: the deadline passed without an answer,
  INTERNAL / UNKNOWN / CANCELLED, a stream that ended or broke without ``run_finished``,
  a run that failed with the sidecar's ``internal`` error code, or a finished run whose
  turn is missing from its session.
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import grpc

from agentsidecar.v1 import agent_pb2

_OK_TOOL = frozenset({agent_pb2.TOOL_CALL_STATUS_OK, agent_pb2.TOOL_CALL_STATUS_CACHED})


class Verdict(enum.Enum):
    COMPLETED = "completed"
    DEGRADED = "degraded"
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class Outcome:
    """One run attempt as its caller saw it."""

    verdict: Verdict
    reason: str
    latency: float | None = None
    """Seconds from sending the request to the result; None when no result came."""
    run_id: str = ""


def tool_statuses(result: agent_pb2.RunResult) -> list[str]:
    """The status of every tool call of a run, short names (``ok``, ``timed_out``...)."""
    return [
        agent_pb2.ToolCallStatus.Name(stage.tool_call.status)
        .removeprefix("TOOL_CALL_STATUS_")
        .lower()
        for stage in result.timeline.stages
        if stage.kind == agent_pb2.STAGE_KIND_TOOL_CALL
    ]


def classify_result(
    result: agent_pb2.RunResult, *, expect_tools: bool = True
) -> tuple[Verdict, str]:
    """Judge a run that returned a ``RunResult``.

    Args:
        result: the run's result.
        expect_tools: the prompt always makes the model call tools, so an answer without
            any means the sidecar hid them (their server down or its breaker open).
    """
    reason = result.stop_reason
    statuses = [
        stage.tool_call.status
        for stage in result.timeline.stages
        if stage.kind == agent_pb2.STAGE_KIND_TOOL_CALL
    ]
    failed = sorted({s for s in tool_statuses(result) if s not in ("ok", "cached")})
    if reason == agent_pb2.STOP_REASON_ANSWERED:
        if failed:
            return Verdict.DEGRADED, "tool " + "+".join(failed)
        if expect_tools and not statuses:
            return Verdict.DEGRADED, "answered without tools (hidden: server down or breaker open)"
        return Verdict.COMPLETED, "answered"
    if reason == agent_pb2.STOP_REASON_MODEL_ERROR:
        code = result.error.code
        if not code or code == "internal":
            return Verdict.LOST, f"model_error with code {code!r}: {result.error.message[:120]}"
        return Verdict.DEGRADED, f"model_error {code}"
    if reason == agent_pb2.STOP_REASON_UNSPECIFIED:
        return Verdict.LOST, "result without a stop reason"
    name = agent_pb2.StopReason.Name(reason).removeprefix("STOP_REASON_").lower()
    return Verdict.DEGRADED, name


def classify_status(error: grpc.aio.AioRpcError, *, started: bool) -> tuple[Verdict, str]:
    """Judge a run that ended with a gRPC status instead of a result.

    Args:
        error: the status.
        started: the sidecar had already accepted the run (a stream sent events).
    """
    code = error.code()
    details = error.details() or ""
    if not started:
        if code == grpc.StatusCode.UNAVAILABLE and "shutting down" in details:
            return Verdict.DEGRADED, "refused: draining (UNAVAILABLE)"
        if code == grpc.StatusCode.UNAVAILABLE and "failed to connect" in details.lower():
            return Verdict.DEGRADED, "refused: sidecar not listening (UNAVAILABLE)"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return Verdict.LOST, "no answer before the deadline"
    where = "after the run started" if started else ""
    return Verdict.LOST, f"{code.name} {where}: {details[:120]}".replace("  ", " ")


@dataclass
class Tally:
    """Counts of one phase's outcomes, with their reasons and latencies."""

    counts: Counter[Verdict] = field(default_factory=Counter)
    reasons: dict[Verdict, Counter[str]] = field(
        default_factory=lambda: {v: Counter() for v in Verdict}
    )
    completed_latencies: list[float] = field(default_factory=list)
    result_latencies: list[float] = field(default_factory=list)

    def add(self, outcome: Outcome) -> None:
        self.counts[outcome.verdict] += 1
        self.reasons[outcome.verdict][outcome.reason] += 1
        if outcome.latency is not None:
            self.result_latencies.append(outcome.latency)
            if outcome.verdict is Verdict.COMPLETED:
                self.completed_latencies.append(outcome.latency)

    @property
    def completed(self) -> int:
        return self.counts[Verdict.COMPLETED]

    @property
    def degraded(self) -> int:
        return self.counts[Verdict.DEGRADED]

    @property
    def lost(self) -> int:
        return self.counts[Verdict.LOST]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary: counts, reasons, latency percentiles in milliseconds."""
        return {
            "runs": self.total,
            "completed": self.completed,
            "degraded": self.degraded,
            "lost": self.lost,
            "degraded_reasons": dict(self.reasons[Verdict.DEGRADED].most_common()),
            "lost_reasons": dict(self.reasons[Verdict.LOST].most_common()),
            "completed_ms": percentiles(self.completed_latencies),
            "all_results_ms": percentiles(self.result_latencies),
        }


def percentiles(seconds: list[float]) -> dict[str, float]:
    """P50 / P90 / P99 / max in milliseconds (nearest rank); empty when there are none."""
    if not seconds:
        return {}
    ordered = sorted(seconds)

    def rank(p: float) -> float:
        index = max(0, math.ceil(p * len(ordered)) - 1)
        return round(ordered[index] * 1000, 1)

    return {"p50": rank(0.50), "p90": rank(0.90), "p99": rank(0.99), "max": rank(1.0)}
