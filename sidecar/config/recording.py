"""``recording`` and ``replay``: recorded turns and how a replay compares them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
)

from sidecar.config.base import _Strict


class RecordingConfig(_Strict):
    """Where recorded turns are written (``profiles.NAME.record``, shadow variants) and how
    much room they may take: JSON lines files, one turn a line (``docs/replay.md``)."""

    path: str | None = None
    """The directory of the recording files; unset: nothing is recorded."""
    max_turn_bytes: int = Field(256 * 1024, ge=4096)
    """The largest document one turn may write: past it, the longest texts (tool results,
    messages) are cut and the turn says ``truncated``."""
    max_file_bytes: int = Field(64 * 1024 * 1024, ge=64 * 1024)
    """A file that has grown past this is closed and the next turn starts a new one."""
    max_files: int = Field(16, ge=1)
    """Files kept; the oldest is deleted when one more would be: the recordings take at
    most about ``max_files`` x ``max_file_bytes``."""


class ReplayThresholds(_Strict):
    """When ``agent-sidecar replay`` fails (exit 1): any measure past its threshold."""

    min_same_tool_calls: float = Field(0.9, ge=0, le=1)
    """The share of turns whose tool calls (names and arguments) must be the recording's."""
    min_same_answers: float = Field(0.0, ge=0, le=1)
    """The share of turns whose answers must compare the same (``replay.answers``).
    Default 0: a model's wording varies; raise it with a structured or judged comparison."""
    max_new_failures: int = Field(0, ge=0)
    """Turns that ended well in the recording and fail in the replay (a model error, an
    invalid answer, a refusal, a limit)."""
    max_latency_ratio: float | None = Field(None, gt=0)
    """The median of each turn's replayed duration over its recorded one; unset: not
    checked (tool calls answered from a recording take no time)."""
    max_token_ratio: float | None = Field(None, gt=0)
    """All replayed tokens over all recorded ones; unset: not checked."""
    max_cost_ratio: float | None = Field(None, gt=0)
    """All replayed cost over all recorded cost; unset: not checked."""


class ReplayConfig(_Strict):
    """How a replay, and a shadow variant, compare a run with its recording."""

    answers: Literal["exact", "structured", "judge"] = "exact"
    """``exact``: the same text; ``structured``: the same JSON value (or the same
    ``fields`` of it); ``judge``: the ``judge`` model says they mean the same (replay
    only: a shadow variant compares structured answers as ``structured``, others exactly)."""
    fields: list[str] = Field(default_factory=list)
    """With ``structured``: the answer fields compared, as dotted paths (``order.status``);
    empty: the whole value."""
    judge: dict[str, Any] | None = None
    """With ``judge``: the judging model, as keys of the top-level ``model`` section that
    differ (``{model: openai/gpt-oss-120b}``)."""
    fail: ReplayThresholds = ReplayThresholds()
    """When a replay exits 1."""
