"""How a run compares with its recording: the measures of a replay and of a shadow variant.

Per turn: the same tool calls or not (names, then names and arguments, step by step, in
any order within a step), the same answer or not (exactly, as the same JSON value or the
same fields of it, or as a judge said), whether a turn that ended well now fails, and
the duration, tokens and cost of each side. Over all turns (:func:`summarize`): the share
of turns with the same calls and answers, the new failures, the median latency ratio and
the token and cost ratios, and which configured thresholds they breach.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from sidecar.config import ReplayThresholds
from sidecar.recording.format import RecordedTurn
from sidecar.types import StopReason

__all__ = ["Summary", "TurnComparison", "compare_turn", "same_answer", "summarize"]

_SOUND = frozenset({StopReason.ANSWERED, StopReason.BUDGET_ANSWERED})
_MISSING = object()


@dataclass(slots=True)
class TurnComparison:
    """One turn: its recording against its new run."""

    run_id: str
    """The recorded run's id."""
    profile: str
    input: str
    same_tool_names: bool
    same_tool_calls: bool
    """Names and arguments."""
    recorded_calls: list[str]
    replayed_calls: list[str]
    same_answer: bool | None
    """None: not compared (a judge that gave no verdict)."""
    recorded_stop: str
    replayed_stop: str
    new_failure: bool
    """It ended well when recorded and does not now."""
    recorded_duration: float
    replayed_duration: float
    recorded_tokens: int
    replayed_tokens: int
    recorded_cost: float | None
    replayed_cost: float | None
    error: str | None = None
    """The new run's error code, when it failed."""

    @property
    def latency_ratio(self) -> float | None:
        if self.recorded_duration <= 0:
            return None
        return self.replayed_duration / self.recorded_duration

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "latency_ratio": self.latency_ratio}


def _canonical(arguments: str) -> str:
    try:
        return orjson.dumps(orjson.loads(arguments), option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONDecodeError:
        return arguments


def _steps(turn: RecordedTurn, *, arguments: bool) -> list[list[str]]:
    by_step: dict[int, list[str]] = {}
    for call in turn.calls:
        shown = f"{call.name}({_canonical(call.arguments)})" if arguments else call.name
        by_step.setdefault(call.step, []).append(shown)
    return [sorted(by_step[s]) for s in sorted(by_step)]


def _field(value: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def same_answer(recorded: str, replayed: str, how: str, fields: Sequence[str] = ()) -> bool:
    """Whether two answers are the same: ``exact`` text, or ``structured``: the same JSON
    value (only ``fields`` of it, when named); text that is not JSON compares exactly."""
    if recorded == replayed:
        return True
    if how != "structured":
        return False
    try:
        ours, theirs = orjson.loads(recorded), orjson.loads(replayed)
    except orjson.JSONDecodeError:
        return False
    if not fields:
        return bool(ours == theirs)
    return all(_field(ours, f) == _field(theirs, f) for f in fields)


def compare_turn(
    recorded: RecordedTurn,
    replayed: RecordedTurn,
    *,
    answers: str = "exact",
    fields: Sequence[str] = (),
    judged: bool | None = None,
) -> TurnComparison:
    """Compare a turn's new run with its recording; ``judged`` is a judge's verdict on
    the answers (with ``answers="judge"``)."""
    recorded_calls = _steps(recorded, arguments=True)
    replayed_calls = _steps(replayed, arguments=True)
    if answers == "judge":
        answer: bool | None = True if recorded.answer == replayed.answer else judged
    else:
        answer = same_answer(recorded.answer, replayed.answer, answers, fields)
    error = replayed.document.get("error")
    return TurnComparison(
        run_id=recorded.run_id,
        profile=recorded.profile,
        input=recorded.input,
        same_tool_names=_steps(recorded, arguments=False) == _steps(replayed, arguments=False),
        same_tool_calls=recorded_calls == replayed_calls,
        recorded_calls=[c for step in recorded_calls for c in step],
        replayed_calls=[c for step in replayed_calls for c in step],
        same_answer=answer,
        recorded_stop=recorded.stop_reason.name,
        replayed_stop=replayed.stop_reason.name,
        new_failure=recorded.stop_reason in _SOUND and replayed.stop_reason not in _SOUND,
        recorded_duration=recorded.duration,
        replayed_duration=replayed.duration,
        recorded_tokens=_tokens(recorded),
        replayed_tokens=_tokens(replayed),
        recorded_cost=recorded.cost_usd,
        replayed_cost=replayed.cost_usd,
        error=error.get("code") if isinstance(error, dict) else None,
    )


def _tokens(turn: RecordedTurn) -> int:
    usage = turn.usage
    return usage.prompt_tokens + usage.completion_tokens


@dataclass(slots=True)
class Summary:
    """Every turn's comparison, added up, and the thresholds it breaches."""

    turns: int
    same_tool_calls: float
    """Share of turns."""
    same_tool_names: float
    same_answers: float | None
    """Share of the turns compared; None when none was."""
    new_failures: int
    latency_ratio: float | None
    """Median of the turns' ratios."""
    token_ratio: float | None
    cost_ratio: float | None
    """None when a side has no price."""
    recorded_cost: float | None
    replayed_cost: float | None
    breaches: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.breaches

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


def _ratio(new: float, old: float) -> float | None:
    return new / old if old > 0 else None


def summarize(comparisons: Sequence[TurnComparison], fail: ReplayThresholds) -> Summary:
    """Add the turns up and check them against ``fail`` (no turns: nothing breached)."""
    count = len(comparisons)
    judged = [c.same_answer for c in comparisons if c.same_answer is not None]
    ratios = [r for c in comparisons if (r := c.latency_ratio) is not None]
    costs_known = all(
        c.recorded_cost is not None and c.replayed_cost is not None for c in comparisons
    )
    recorded_cost = sum(c.recorded_cost or 0.0 for c in comparisons) if costs_known else None
    replayed_cost = sum(c.replayed_cost or 0.0 for c in comparisons) if costs_known else None
    summary = Summary(
        turns=count,
        same_tool_calls=sum(c.same_tool_calls for c in comparisons) / count if count else 1.0,
        same_tool_names=sum(c.same_tool_names for c in comparisons) / count if count else 1.0,
        same_answers=sum(judged) / len(judged) if judged else None,
        new_failures=sum(c.new_failure for c in comparisons),
        latency_ratio=statistics.median(ratios) if ratios else None,
        token_ratio=_ratio(
            sum(c.replayed_tokens for c in comparisons),
            sum(c.recorded_tokens for c in comparisons),
        ),
        cost_ratio=_ratio(replayed_cost, recorded_cost)
        if recorded_cost is not None and replayed_cost is not None
        else None,
        recorded_cost=recorded_cost,
        replayed_cost=replayed_cost,
    )
    if not count:
        return summary
    found = summary.breaches
    if summary.same_tool_calls < fail.min_same_tool_calls:
        found.append(
            f"same tool calls in {summary.same_tool_calls:.0%} of turns, below "
            f"{fail.min_same_tool_calls:.0%} (replay.fail.min_same_tool_calls)"
        )
    if fail.min_same_answers > 0 and (summary.same_answers or 0.0) < fail.min_same_answers:
        found.append(
            f"same answers in {summary.same_answers or 0.0:.0%} of turns, below "
            f"{fail.min_same_answers:.0%} (replay.fail.min_same_answers)"
        )
    if summary.new_failures > fail.max_new_failures:
        found.append(
            f"{summary.new_failures} turn(s) that ended well now fail, more than "
            f"{fail.max_new_failures} (replay.fail.max_new_failures)"
        )
    for name, value, limit in (
        ("latency", summary.latency_ratio, fail.max_latency_ratio),
        ("token", summary.token_ratio, fail.max_token_ratio),
        ("cost", summary.cost_ratio, fail.max_cost_ratio),
    ):
        if limit is not None and value is not None and value > limit:
            found.append(
                f"{name} ratio {value:.2f}x, above {limit:g}x (replay.fail.max_{name}_ratio)"
            )
    return summary
