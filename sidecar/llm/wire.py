"""The chat-completions wire format, read defensively: one boundary for what servers send.

Whatever an OpenAI-compatible server sends (OpenAI, Groq, vLLM, llama.cpp, Ollama, a
proxy gone wrong) becomes either a valid :class:`~sidecar.llm.model.ModelResponse` or a
:class:`~sidecar.errors.ModelUnavailable` with the one code ``model_bad_response``:
nothing malformed passes this module, so nothing malformed is ever stored. Normalised on
the way in:

- token counts are integers from 0 to 2**31-1 (a negative, fractional, huge or non-numeric
  count counts as 0); provider timings are finite, non-negative seconds or absent;
- ``content`` is text: a string, or the text parts of a list of content parts;
- tool calls get ids of the sidecar's own, unique in the process, whatever id the server
  sent (none, empty, repeated, a number): a call id the caller approves names exactly one
  call, and results never go to the wrong call;
- ``function.arguments`` sent as a JSON object (llama.cpp) becomes its JSON text;
- streamed fragments are assembled by id first, then by index: a new id starts a new call
  (servers that send ``index: 0`` for every call, or no index at all), a name on a call
  whose arguments have begun starts a new call too;
- a refusal (``message.refusal`` / ``delta.refusal``) is kept as such;
- a reasoning model's reasoning (Groq's ``message.reasoning`` / ``delta.reasoning``, and
  ``reasoning_content`` as vLLM and others name it) is kept apart: never the answer, never
  a tool call, whatever it holds (gpt-oss reasons in JSON and in call-like text); its
  token count is ``usage.completion_tokens_details.reasoning_tokens``;
- ``service_tier`` says which of the provider's tiers answered;
- Groq's ``x_groq.id`` is the request id, its ``usage.total_time`` (under ``x_groq.usage``
  when streaming) the provider's total;
- an error inside a 200 stream (Groq's ``event: error``) is an error, and Groq's
  ``tool_use_failed`` there is :class:`~sidecar.errors.ToolUseFailed`, as its HTTP 400 form.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable
from typing import Any

import orjson

from sidecar.errors import ModelError, ModelUnavailable, ToolUseFailed
from sidecar.llm.model import ModelResponse
from sidecar.types import ProviderTiming, ToolCall, Usage

__all__ = ["BAD_RESPONSE", "StreamReader", "new_call_id", "parse_completion"]

BAD_RESPONSE = "model_bad_response"
"""The one code of every malformed answer (``RunError.code``)."""
_MAX_COUNT = 2**31 - 1
_MAX_SECONDS = 86_400.0


def new_call_id() -> str:
    """A tool-call id of the sidecar's own: 96 random bits, never repeated in practice."""
    return "call_" + secrets.token_hex(12)


def _bad(what: str) -> ModelUnavailable:
    return ModelUnavailable(
        BAD_RESPONSE, f"the model endpoint sent a malformed response: {what}", retryable=True
    )


def _count(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 0 <= value <= _MAX_COUNT:
        return value
    return 0


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    seconds = float(value)
    return seconds if math.isfinite(seconds) and 0 <= seconds <= _MAX_SECONDS else None


def usage(value: Any) -> Usage:
    """Token counts from a ``usage`` object (anything else counts as none)."""
    if not isinstance(value, dict):
        return Usage()
    details = value.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    prompt = _count(value.get("prompt_tokens"))
    completion = _count(value.get("completion_tokens"))
    output = value.get("completion_tokens_details")
    reasoning = output.get("reasoning_tokens") if isinstance(output, dict) else None
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_prompt_tokens=min(_count(cached), prompt),
        reasoning_tokens=min(_count(reasoning), completion),
    )


def provider_timing(value: Any) -> ProviderTiming:
    """Groq's ``queue_time`` / ``prompt_time`` / ``completion_time`` (seconds) in ``usage``."""
    if not isinstance(value, dict):
        return ProviderTiming()
    return ProviderTiming(
        queue_time=_seconds(value.get("queue_time")),
        prompt_time=_seconds(value.get("prompt_time")),
        completion_time=_seconds(value.get("completion_time")),
    )


def _text(value: Any, where: str) -> str:
    """``content`` or ``refusal``: a string, or a list of content parts."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for part in value:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict) and isinstance(part.get("refusal"), str):
                parts.append(part["refusal"])
            else:
                raise _bad(f"{where} has a part that is not text")
        return "".join(parts)
    raise _bad(f"{where} is a {type(value).__name__}, not text")


def _arguments(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()  # llama.cpp sends the object itself
    raise _bad(f"tool-call arguments are a {type(value).__name__}")


def _stream_error(error: Any) -> ModelError:
    if isinstance(error, dict) and isinstance(error.get("error"), dict):
        error = error["error"]  # some servers nest it once more
    message = error.get("message") if isinstance(error, dict) else error
    message = str(message) if message is not None else "no message"
    if isinstance(error, dict) and error.get("code") == "tool_use_failed":
        generation = error.get("failed_generation")
        return ToolUseFailed(message, generation if isinstance(generation, str) else "")
    return ModelUnavailable(
        "model_stream_error", f"the model stream failed: {message}", retryable=True
    )


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(f"{what} is a {type(value).__name__}, not an object")
    return value


def parse_completion(content: bytes) -> ModelResponse:
    """A non-streamed ``chat.completion`` body.

    Raises:
        ModelUnavailable: ``model_bad_response``, with what was wrong.
    """
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError as exc:
        raise _bad(f"the body is not JSON ({exc})") from None
    body = _object(body, "the body")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _bad("no choices")
    choice = _object(choices[0], "a choice")
    message = _object(choice.get("message"), "the message")
    calls = []
    raw_calls = message.get("tool_calls")
    if raw_calls is not None and not isinstance(raw_calls, list):
        raise _bad("tool_calls is not a list")
    for raw in raw_calls or ():
        raw = _object(raw, "a tool call")
        if raw.get("type", "function") != "function":
            continue
        function = _object(raw.get("function"), "a tool call's function")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise _bad("a tool call has no function name")
        calls.append(ToolCall(new_call_id(), name, _arguments(function.get("arguments"))))
    finish = choice.get("finish_reason")
    raw_usage = body.get("usage")
    reasoning = _reasoning(message)
    return ModelResponse(
        text=_text(message.get("content"), "content"),
        tool_calls=calls,
        finish_reason=finish if isinstance(finish, str) else "stop",
        usage=usage(raw_usage),
        provider=provider_timing(raw_usage),
        refusal=_text(message.get("refusal"), "refusal") or None,
        request_id=_groq_id(body.get("x_groq")),
        completion_id=_string(body.get("id")),
        total_time=_total_time(raw_usage),
        reasoning=reasoning or None,
        service_tier=_string(body.get("service_tier")),
    )


def _reasoning(part: dict[str, Any]) -> str:
    """A message's or a delta's reasoning text (Groq: ``reasoning``; vLLM, DeepSeek:
    ``reasoning_content``); anything but text counts as none."""
    value = part.get("reasoning")
    if value is None:
        value = part.get("reasoning_content")
    return value if isinstance(value, str) else ""


def _groq_id(x_groq: Any) -> str | None:
    return _string(x_groq.get("id")) if isinstance(x_groq, dict) else None


def _string(value: Any) -> str | None:
    return value[:200] if isinstance(value, str) and value else None


def _total_time(value: Any) -> float | None:
    """Groq's ``usage.total_time`` (seconds)."""
    return _seconds(value.get("total_time")) if isinstance(value, dict) else None


class _Call:
    __slots__ = ("arguments", "id", "index", "name", "provider_id")

    def __init__(self, provider_id: str | None) -> None:
        self.id = new_call_id()
        self.provider_id = provider_id
        self.index: int | None = None
        self.name = ""
        self.arguments: list[str] = []

    def complete(self) -> bool:
        """Whether the arguments so far are one whole JSON value (so a name that follows
        starts another call rather than repeating this one's)."""
        if not self.name or not self.arguments:
            return False
        try:
            orjson.loads("".join(self.arguments))
        except orjson.JSONDecodeError:
            return False
        return True

    def done(self) -> ToolCall:
        if not self.name:
            raise _bad("a streamed tool call has no function name")
        return ToolCall(self.id, self.name, "".join(self.arguments))


class StreamReader:
    """Assembles one streamed answer from its server-sent-event lines.

    Args:
        on_text: Called with each piece of answer text.
        on_tool_call: Called with each tool call once it is complete (the stream moved on
            to the next call), before the answer ends.
        on_reasoning: Called with each piece of reasoning text; None: it is kept only.
        started: When the request left (``time.perf_counter``); default: now.
    """

    def __init__(
        self,
        on_text: Callable[[str], None],
        on_tool_call: Callable[[ToolCall], None] | None = None,
        *,
        on_reasoning: Callable[[str], None] | None = None,
        started: float | None = None,
    ) -> None:
        self._on_text = on_text
        self._on_tool_call = on_tool_call
        self._on_reasoning = on_reasoning
        self._reasoning: list[str] = []
        self._service_tier: str | None = None
        # When the request left (time.perf_counter): the time to the first token includes
        # connecting, sending and the wait for the headers.
        self._started = time.perf_counter() if started is None else started
        self.first_token: float | None = None
        self._parts: list[str] = []
        self._refusal: list[str] = []
        self._calls: list[_Call] = []
        self._by_index: dict[int, _Call] = {}
        self._by_id: dict[str, _Call] = {}
        self._announced = 0
        self._finish = "stop"
        self._usage: Any = None
        self._groq_usage: Any = None
        self._request_id: str | None = None
        self._completion_id: str | None = None
        self._answered = False  # a choice arrived
        self.done = False

    def feed(self, line: bytes) -> None:
        """One line of the stream.

        Raises:
            ModelError: the server reported an error in the stream, or sent a malformed
                chunk (``model_bad_response``).
        """
        if not line.startswith(b"data:"):
            return  # blank separators, comments, event names
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise _bad(f"a chunk is not JSON ({exc})") from None
        chunk = _object(chunk, "a chunk")
        if "error" in chunk:
            raise _stream_error(chunk["error"])
        if self._request_id is None:
            self._request_id = _groq_id(chunk.get("x_groq"))
        if self._completion_id is None:
            self._completion_id = _string(chunk.get("id"))
        if self._service_tier is None:
            self._service_tier = _string(chunk.get("service_tier"))
        if "usage" in chunk and chunk["usage"] is not None:
            self._usage = _object(chunk["usage"], "usage")
        x_groq = chunk.get("x_groq")
        if isinstance(x_groq, dict) and isinstance(x_groq.get("usage"), dict):
            # Groq's streamed usage carries its timing even when the standard one does not.
            self._groq_usage = x_groq["usage"]
        choices = chunk.get("choices")
        if choices is None:
            return
        if not isinstance(choices, list):
            raise _bad("choices is not a list")
        if not choices:
            return  # the usage chunk
        self._answered = True
        choice = _object(choices[0], "a choice")
        delta = choice.get("delta")
        delta = {} if delta is None else _object(delta, "a delta")
        content = _text(delta.get("content"), "a content delta")
        refusal = _text(delta.get("refusal"), "a refusal delta")
        fragments = delta.get("tool_calls")
        if fragments is not None and not isinstance(fragments, list):
            raise _bad("a delta's tool_calls is not a list")
        reasoning = _reasoning(delta)
        if reasoning:
            # Not the first token: the answer's first token is what the caller waits for.
            self._reasoning.append(reasoning)
            if self._on_reasoning is not None:
                self._on_reasoning(reasoning)
        if self.first_token is None and (content or refusal or fragments):
            self.first_token = time.perf_counter() - self._started
        if content:
            self._parts.append(content)
            self._on_text(content)
        if refusal:
            self._refusal.append(refusal)
        for fragment in fragments or ():
            self._fragment(_object(fragment, "a tool-call fragment"))
        finish = choice.get("finish_reason")
        if isinstance(finish, str) and finish:
            self._finish = finish

    def _fragment(self, fragment: dict[str, Any]) -> None:
        raw_id = fragment.get("id")
        provider_id = raw_id if isinstance(raw_id, str) and raw_id else None
        if raw_id is not None and not isinstance(raw_id, str | int):
            raise _bad("a tool call's id is neither text nor a number")
        if isinstance(raw_id, int) and not isinstance(raw_id, bool):
            provider_id = str(raw_id)
        raw_index = fragment.get("index")
        index = (
            raw_index if isinstance(raw_index, int) and not isinstance(raw_index, bool) else None
        )
        function = fragment.get("function")
        function = {} if function is None else _object(function, "a tool call's function")
        name = function.get("name")
        if name is not None and not isinstance(name, str):
            raise _bad("a tool call's name is not text")
        call = self._call_for(provider_id, index, name)
        if name and name != call.name and not call.arguments:
            call.name += name  # a name may stream in pieces before the arguments
        arguments = _arguments(function.get("arguments"))
        if arguments:
            call.arguments.append(arguments)

    def _call_for(self, provider_id: str | None, index: int | None, name: str | None) -> _Call:
        """The call a fragment continues, or a new one (see the module docs)."""
        current = self._calls[-1] if self._calls else None
        if provider_id is not None:
            # The same id continues a call, unless the fragment says otherwise: another
            # index, or a name after whole arguments (a server repeating one id, or a
            # model sending two calls under one id).
            call = self._by_id.get(provider_id)
            if (
                call is None
                or (index is not None and call.index is not None and index != call.index)
                or (name and call.complete())
            ):
                call = self._new(provider_id)
        elif index is not None and index in self._by_index:
            call = self._by_index[index]
            if name and call.complete():
                call = self._new(None)  # index 0 for every call: a second call begins
        elif index is not None or current is None:
            call = self._new(None)
        elif name and current.complete():
            call = self._new(None)  # no index and no id: a name after whole arguments
        else:
            call = current
        if index is not None:
            self._by_index[index] = call
            if call.index is None:
                call.index = index
        return call

    def _new(self, provider_id: str | None) -> _Call:
        if self._on_tool_call is not None and self._calls:
            # Calls stream one after another: those before this one are complete.
            while self._announced < len(self._calls):
                self._on_tool_call(self._calls[self._announced].done())
                self._announced += 1
        call = _Call(provider_id)
        self._calls.append(call)
        if provider_id is not None:
            self._by_id[provider_id] = call
        return call

    def response(self) -> ModelResponse:
        """The assembled answer.

        Raises:
            ModelUnavailable: ``model_bad_response`` when the stream carried no answer or
                a call without a name.
        """
        if not self._answered:
            raise _bad("the stream ended without an answer")
        usage_doc = self._usage or self._groq_usage
        timing_doc = self._groq_usage or self._usage
        return ModelResponse(
            text="".join(self._parts),
            tool_calls=[c.done() for c in self._calls],
            finish_reason=self._finish,
            usage=usage(usage_doc),
            provider=provider_timing(timing_doc),
            time_to_first_token=self.first_token,
            refusal="".join(self._refusal) or None,
            request_id=self._request_id,
            completion_id=self._completion_id,
            total_time=_total_time(timing_doc),
            reasoning="".join(self._reasoning) or None,
            service_tier=self._service_tier,
        )
