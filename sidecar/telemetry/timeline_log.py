"""The timeline log: one JSON line per finished run, for ``agent-sidecar report``.

A record holds what the run's final event holds (timeline, usage, cost, budget overruns)
in plain JSON, plus the config/version ``label`` that the report groups by. Durations
and offsets are seconds. A record looks like::

    {"time": 1767225600.12, "label": "agent-sidecar 0.1.0", "run_id": "…",
     "session_id": "…", "profile": "default", "model": "openai/gpt-oss-120b",
     "stop_reason": "answered", "total": 0.0512, "steps": 2, "tool_calls": 2,
     "usage": {"prompt_tokens": 1786, "completion_tokens": 137, "cached_prompt_tokens": 768},
     "cost": {"prompt_usd": 0.00083, "completion_usd": 0.00011,
              "cached_prompt_usd": 0.00023, "total_usd": 0.00094},
     "overruns": [],
     "stages": [
       {"kind": "queue", "name": "queue", "step": 0, "start": 0.0, "duration": 0.00004},
       {"kind": "model_call", "name": "openai/gpt-oss-120b", "step": 1,
        "start": 0.0002, "duration": 0.0044, "attempts": 1, "ttft": 0.0031,
        "provider": {"queue": 0.0004, "prompt": 0.0011, "completion": 0.0021},
        "usage": {"prompt_tokens": 771, "completion_tokens": 23, "cached_prompt_tokens": 0}},
       {"kind": "tool_call", "name": "get_order_status", "step": 1, "start": 0.0047,
        "duration": 0.033, "call_id": "call_1", "status": "ok", "attempts": 1,
        "handler": 0.0306, "wait": 0.0, "backoff": 0.0, "breaker_rejected": false,
        "allowed": 10.0},
       …]}

The file is opened once, in append mode, and each record is written and flushed whole,
so a reader (or ``report`` on a live file) only ever sees complete lines, and log
rotation by copy-and-truncate works.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson

from sidecar.types import (
    ModelCallDetail,
    RunOutcome,
    RunPath,
    Stage,
    StopReason,
    ToolOutcome,
    Usage,
)

__all__ = ["TimelineLog", "run_record", "stage_record"]


def _usage(u: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "cached_prompt_tokens": u.cached_prompt_tokens,
    }


def stage_record(stage: Stage) -> dict[str, Any]:
    """One stage as a JSON-ready dict."""
    record: dict[str, Any] = {
        "kind": stage.kind.name.lower(),
        "name": stage.name,
        "step": stage.step,
        "start": stage.start,
        "duration": stage.duration,
    }
    detail = stage.detail
    if isinstance(detail, ModelCallDetail):
        record["attempts"] = detail.attempts
        record["ttft"] = detail.time_to_first_token
        p = detail.provider
        if p.queue_time is not None or p.prompt_time is not None or p.completion_time is not None:
            record["provider"] = {
                "queue": p.queue_time,
                "prompt": p.prompt_time,
                "completion": p.completion_time,
            }
        record["usage"] = _usage(detail.usage)
        if detail.error is not None:
            record["error"] = detail.error
        if detail.time_allowed is not None:
            record["allowed"] = detail.time_allowed
    elif isinstance(detail, ToolOutcome):
        record["call_id"] = detail.call_id
        record["status"] = detail.status.name.lower()
        record["attempts"] = detail.attempts
        record["handler"] = detail.handler_duration
        record["wait"] = detail.wait_duration
        record["backoff"] = detail.backoff
        record["breaker_rejected"] = detail.breaker_rejected
        if detail.time_allowed is not None:
            record["allowed"] = detail.time_allowed
        if detail.hedge:
            record["hedge"] = detail.hedge.name.lower()
            record["hedge_delay"] = detail.hedge_delay
        if detail.speculated:
            record["speculated"] = True
    return record


def run_record(
    *,
    label: str,
    run_id: str,
    session_id: str,
    profile: str,
    model: str,
    outcome: RunOutcome | None,
    reason: StopReason,
    now: float | None = None,
) -> dict[str, Any]:
    """A finished run as a JSON-ready dict; ``outcome`` is None for a run cancelled early."""
    record: dict[str, Any] = {
        "time": time.time() if now is None else now,
        "label": label,
        "run_id": run_id,
        "session_id": session_id,
        "profile": profile,
        "model": model,
        "stop_reason": reason.name.lower(),
    }
    if outcome is None:
        record.update(total=0.0, steps=0, tool_calls=0, stages=[])
        return record
    cost = outcome.cost
    record.update(
        total=outcome.total,
        steps=outcome.steps,
        tool_calls=outcome.tool_calls,
        usage=_usage(outcome.usage),
        cost=None
        if cost is None
        else {
            "prompt_usd": cost.prompt_usd,
            "completion_usd": cost.completion_usd,
            "cached_prompt_usd": cost.cached_prompt_usd,
            "total_usd": cost.total_usd,
        },
        overruns=[
            {
                "stage": o.stage.name.lower(),
                "budget": o.budget,
                "spent": o.spent,
                "policy": o.policy.name.lower(),
                "step": o.step,
            }
            for o in outcome.overruns
        ],
        stages=[stage_record(s) for s in outcome.stages],
    )
    if outcome.error is not None:
        record["error"] = outcome.error.code
    if outcome.path is RunPath.LIGHT:
        record["path"] = "light"
    if outcome.speculated:
        record["speculated"] = outcome.speculated
    return record


class TimelineLog:
    """Appends run records to a JSON-lines file.

    Args:
        path: The file; created with its parent directories when missing.

    Raises:
        OSError: the file cannot be opened for appending.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("ab")

    def write(self, record: dict[str, Any]) -> None:
        """Append one record as one line, flushed (a page-cache write, no fsync)."""
        self._file.write(orjson.dumps(record) + b"\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()
