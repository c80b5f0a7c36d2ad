"""Turns to stored bytes and back: one orjson document per turn, written once.

A turn's messages are serialised once, and their size gives the turn's token estimate,
so the context window never has to serialise stored history again.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from sidecar.tokens import tokens_of_size
from sidecar.types import StopReason, Turn, Usage


def encode_turn(turn: Turn) -> bytes:
    """The stored form of a turn; fills in ``turn.tokens`` when it is still 0."""
    messages = orjson.dumps(turn.messages)
    if not turn.tokens and turn.messages:
        turn.tokens = tokens_of_size(len(messages))
    u = turn.usage
    return orjson.dumps(
        {
            "run_id": turn.run_id,
            "input": turn.input,
            "answer": turn.answer,
            "stop_reason": int(turn.stop_reason),
            "start_time": turn.start_time,
            "end_time": turn.end_time,
            "usage": [u.prompt_tokens, u.completion_tokens, u.cached_prompt_tokens],
            "tokens": turn.tokens,
            "variant": turn.variant,
            "messages": orjson.Fragment(messages),
        }
    )


def decode_turn(data: bytes) -> Turn:
    """A turn from its stored form.

    Never raises: a session must stay readable whatever one record holds (a record from an
    older sidecar that stored what it should not have, a disk error). A field of the wrong
    type or range is read as its empty value; a record that is not JSON at all becomes an
    interrupted turn with no content.
    """
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        return Turn(
            run_id="",
            input="",
            answer="",
            stop_reason=StopReason.INTERRUPTED,
            start_time=0.0,
            end_time=0.0,
        )
    usage = doc.get("usage")
    counts = usage if isinstance(usage, list) and len(usage) == 3 else [0, 0, 0]
    messages = doc.get("messages")
    reason = doc.get("stop_reason")
    return Turn(
        run_id=_text(doc.get("run_id")),
        input=_text(doc.get("input")),
        answer=_text(doc.get("answer")),
        stop_reason=StopReason(reason)
        if isinstance(reason, int) and reason in _REASONS
        else StopReason.INTERRUPTED,
        start_time=_time(doc.get("start_time")),
        end_time=_time(doc.get("end_time")),
        usage=Usage(*(_count(c) for c in counts)),
        messages=[m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else [],
        tokens=_count(doc.get("tokens")),
        variant=_text(doc.get("variant")),
    )


_REASONS = frozenset(int(r) for r in StopReason)
_MAX_COUNT = 2**63 - 1


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _count(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_COUNT:
        return value
    return 0


def _time(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
        if math.isfinite(seconds) and 0 <= seconds < 1e11:
            return seconds
    return 0.0


def encode_labels(labels: dict[str, str]) -> bytes:
    """A session's labels as stored."""
    return orjson.dumps(labels)


def decode_labels(data: bytes) -> dict[str, str]:
    """A session's labels from their stored form (never raises; see :func:`decode_turn`)."""
    try:
        labels = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(labels, dict):
        return {}
    return {k: v for k, v in labels.items() if isinstance(v, str)}
