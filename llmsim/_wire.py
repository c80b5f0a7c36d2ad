"""The simulator's bytes on the wire: completion bodies, SSE chunks, usage, error bodies.

Shaped like Groq's OpenAI-compatible API, so the official ``openai`` client parses them.
Streamed chunks share one precomputed prefix per response; only the delta is serialised
per chunk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

import orjson

from llmsim._options import SYSTEM_FINGERPRINT
from llmsim._planner import Reply

CHARS_PER_TOKEN: Final = 4
"""Token counts are estimates: about four characters (request bytes) per token."""

DONE: Final = b"data: [DONE]\n\n"

_WORDS_RE = re.compile(r"\s*\S+")
_ARGUMENT_FRAGMENT = 8
"""Characters of tool-call arguments per streamed fragment."""

_ERROR_TYPES: Final = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", "permission_denied"),
    404: ("invalid_request_error", "model_not_found"),
    413: ("invalid_request_error", "request_too_large"),
    422: ("invalid_request_error", "unprocessable_entity"),
    429: ("tokens", "rate_limit_exceeded"),
    498: ("capacity_exceeded", "capacity_exceeded"),
    500: ("internal_server_error", "internal_server_error"),
    502: ("bad_gateway", "bad_gateway"),
    503: ("service_unavailable", "service_unavailable"),
    504: ("gateway_timeout", "gateway_timeout"),
}
_DEFAULT_MESSAGES: Final = {
    429: "Rate limit reached for model; please try again later.",
    498: "Capacity exceeded for this model tier; please try again.",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


def estimate_tokens(chars: int) -> int:
    """Estimated tokens of ``chars`` characters (at least 1)."""
    return max(1, (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN)


def tokens_of_text(raw: bytes) -> int:
    """Tokens of UTF-8 text the way real tokenizers roughly count them: about 4 ASCII
    characters a token, and a token for each other character (CJK, emoji), which take
    2 to 4 bytes each (at least 1)."""
    chars = len(raw.decode("utf-8", "replace"))
    ascii_chars = len(raw.decode("ascii", "ignore"))
    wide = chars - ascii_chars
    return max(1, (ascii_chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN + wide)


def completion_tokens(reply: Reply) -> int:
    """Estimated tokens the reply "generated"."""
    text = reply.text or ""
    for call in reply.tool_calls:
        text += call.name + call.arguments + " " * 8  # call framing costs tokens too
    return tokens_of_text(text.encode())


def text_pieces(text: str) -> list[str]:
    """Word-ish streaming pieces (each word with the whitespace before it)."""
    pieces: list[str] = _WORDS_RE.findall(text)
    tail = len("".join(pieces))
    if tail < len(text):
        pieces.append(text[tail:])  # trailing whitespace must reach the client too
    return pieces or [text]


def argument_pieces(arguments: str) -> list[str]:
    """Fragments of a call's argument text, as providers stream them."""
    step = _ARGUMENT_FRAGMENT
    return [arguments[i : i + step] for i in range(0, len(arguments), step)] or [""]


def chunk_count(reply: Reply) -> int:
    """How many content/argument chunks streaming the reply takes (for latency)."""
    if reply.text is not None and not reply.tool_calls:
        return len(text_pieces(reply.text))
    return sum(1 + len(argument_pieces(call.arguments)) for call in reply.tool_calls)


@dataclass(frozen=True, slots=True)
class Thinking:
    """The reasoning an answer shows: ``where`` is ``parsed`` (its own field) or ``raw``
    (inside ``<think>`` tags in the content)."""

    text: str
    where: str


@dataclass(frozen=True, slots=True)
class Timing:
    """Groq's per-response timing, in seconds."""

    queue: float
    prompt: float
    completion: float


def usage(
    prompt: int, completion: int, cached: int, timing: Timing, reasoning: int = 0
) -> dict[str, Any]:
    """The ``usage`` object, with Groq's timing fields; ``reasoning`` tokens are part of
    ``completion`` (``completion_tokens_details.reasoning_tokens``)."""
    completion += reasoning
    doc: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "queue_time": timing.queue,
        "prompt_time": timing.prompt,
        "completion_time": timing.completion,
        "total_time": timing.queue + timing.prompt + timing.completion,
    }
    if reasoning:
        doc["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return doc


def message(reply: Reply, ids: list[str], thinking: Thinking | None = None) -> dict[str, Any]:
    """The assistant ``message`` of a non-streamed completion; ``ids`` are the call ids."""
    shown: dict[str, Any] = {}
    if thinking is not None and thinking.where == "parsed":
        shown["reasoning"] = thinking.text
    if not reply.tool_calls:
        content = reply.text
        if thinking is not None and thinking.where == "raw":
            content = f"<think>{thinking.text}</think>{content or ''}"
        return {"role": "assistant", "content": content, **shown}
    return {
        "role": "assistant",
        "content": None,
        **shown,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call_id, call in zip(ids, reply.tool_calls, strict=True)
        ],
    }


def completion(
    completion_id: str,
    created: int,
    model: str,
    reply: Reply,
    ids: list[str],
    usage_doc: dict[str, Any],
    *,
    thinking: Thinking | None = None,
    service_tier: str = "on_demand",
) -> bytes:
    """A whole ``chat.completion`` body."""
    return orjson.dumps(
        {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "service_tier": service_tier,
            "choices": [
                {
                    "index": 0,
                    "message": message(reply, ids, thinking),
                    "logprobs": None,
                    "finish_reason": reply.finish_reason,
                }
            ],
            "usage": usage_doc,
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }
    )


class ChunkWriter:
    """Serialises the SSE chunks of one streamed completion."""

    __slots__ = ("_envelope", "_head")

    def __init__(
        self, completion_id: str, created: int, model: str, service_tier: str = "on_demand"
    ) -> None:
        envelope = (
            b'{"id":"' + completion_id.encode() + b'","object":"chat.completion.chunk",'
            b'"created":' + str(created).encode() + b',"model":' + orjson.dumps(model) + b","
            b'"service_tier":' + orjson.dumps(service_tier) + b","
            b'"system_fingerprint":"' + SYSTEM_FINGERPRINT.encode() + b'",'
        )
        self._envelope = b"data: " + envelope
        self._head = self._envelope + b'"choices":[{"index":0,"delta":'

    def delta(self, delta: dict[str, Any]) -> bytes:
        """A chunk carrying ``delta`` and no finish reason."""
        return self._head + orjson.dumps(delta) + b',"logprobs":null,"finish_reason":null}]}\n\n'

    def finish(self, reason: str) -> bytes:
        """The last choice chunk: an empty delta and the finish reason."""
        return self._head + b'{},"logprobs":null,"finish_reason":"' + reason.encode() + b'"}]}\n\n'

    def usage(self, usage_doc: dict[str, Any]) -> bytes:
        """The trailing ``choices: []`` chunk that carries usage (``include_usage``)."""
        return self._envelope + b'"choices":[],"usage":' + orjson.dumps(usage_doc) + b"}\n\n"


def stream_deltas(
    reply: Reply, ids: list[str], thinking: Thinking | None = None
) -> list[dict[str, Any]]:
    """The deltas that stream the reply after the role chunk: reasoning first."""
    deltas: list[dict[str, Any]] = []
    if thinking is not None and thinking.where == "parsed":
        deltas += [{"reasoning": piece} for piece in text_pieces(thinking.text)]
    if not reply.tool_calls:
        text = reply.text or ""
        if thinking is not None and thinking.where == "raw":
            text = f"<think>{thinking.text}</think>{text}"
        return deltas + [{"content": piece} for piece in text_pieces(text)]
    for index, (call_id, call) in enumerate(zip(ids, reply.tool_calls, strict=True)):
        deltas.append(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                ]
            }
        )
        deltas.extend(
            {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
            for piece in argument_pieces(call.arguments)
            if piece
        )
    return deltas


ROLE_DELTA: Final = {"role": "assistant", "content": ""}


def error_body(status: int, message: str, **extra: Any) -> bytes:
    """A Groq/OpenAI-style ``{"error": {...}}`` body for ``status``."""
    kind, code = _ERROR_TYPES.get(status, ("api_error", None))
    error: dict[str, Any] = {"message": message, "type": kind}
    if code is not None:
        error["code"] = code
    error.update(extra)
    return orjson.dumps({"error": error})


def default_message(status: int) -> str:
    """The message a ``status`` fault sends when it names none."""
    return _DEFAULT_MESSAGES.get(status, f"Simulated error {status}")
