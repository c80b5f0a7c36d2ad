"""Turns to stored bytes and back: one orjson document per turn, written once.

A turn's messages are serialised once, and their size gives the turn's token estimate,
so the context window never has to serialise stored history again.
"""

from __future__ import annotations

from typing import Any

import orjson

from sidecar.types import StopReason, Turn, Usage, tokens_of_size


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
            "messages": orjson.Fragment(messages),
        }
    )


def decode_turn(data: bytes) -> Turn:
    """A turn from its stored form."""
    doc: dict[str, Any] = orjson.loads(data)
    prompt, completion, cached = doc["usage"]
    return Turn(
        run_id=doc["run_id"],
        input=doc["input"],
        answer=doc["answer"],
        stop_reason=StopReason(doc["stop_reason"]),
        start_time=doc["start_time"],
        end_time=doc["end_time"],
        usage=Usage(prompt, completion, cached),
        messages=doc["messages"],
        tokens=doc["tokens"],
    )


def encode_labels(labels: dict[str, str]) -> bytes:
    """A session's labels as stored."""
    return orjson.dumps(labels)


def decode_labels(data: bytes) -> dict[str, str]:
    """A session's labels from their stored form."""
    labels: dict[str, str] = orjson.loads(data)
    return labels
