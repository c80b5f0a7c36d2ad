"""The model behind the seam: any OpenAI-compatible chat-completions endpoint.

Retries are ours (tenacity), not the client's: a 429 waits what ``retry-after`` says,
498 / 5xx / connection errors back off with full jitter, and every wait fits inside the
run's remaining time or the retries stop. ``tool_use_failed`` is surfaced as
:class:`ToolUseFailed` for the loop's repair round; other 4xx are final.

The request body is serialized once (orjson) and the response parsed once, into plain
values; :mod:`sidecar.llm.transport` carries the bytes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from sidecar.config import RetryPolicy
from sidecar.errors import ModelError, ModelUnavailable
from sidecar.llm.model import ModelRequest, ModelResponse, TextSink, ToolCallSink
from sidecar.llm.transport import DirectTransport, SdkTransport, Transport
from sidecar.types import ProviderTiming, ToolCall, Usage

log = logging.getLogger(__name__)

_INCLUDE_USAGE = {"include_usage": True}


class OpenAICompatibleModel:
    """A :class:`~sidecar.llm.model.Model` over one shared HTTP transport.

    ``on_error``, when given, is called with every failed attempt, retried or not (metrics).
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        retry: RetryPolicy,
        timeout: float,
        temperature: float | None = None,
        max_tokens: int | None = None,
        parallel_tool_calls: bool = True,
        transport: str = "direct",
        on_error: Callable[[ModelError], None] | None = None,
    ) -> None:
        self.name = model
        self._on_error = on_error
        kind = DirectTransport if transport == "direct" else SdkTransport
        self._transport: Transport = kind(base_url, api_key, timeout)
        self._retry = retry
        self._timeout = timeout
        # Parameters that never change between calls are built once.
        self._fixed: dict[str, Any] = {"model": model, "n": 1}
        if temperature is not None:
            self._fixed["temperature"] = temperature
        if max_tokens is not None:
            self._fixed["max_completion_tokens"] = max_tokens
        self._parallel_tool_calls = parallel_tool_calls

    async def close(self) -> None:
        await self._transport.close()

    async def complete(
        self,
        request: ModelRequest,
        on_text: TextSink | None = None,
        on_tool_call: ToolCallSink | None = None,
    ) -> ModelResponse:
        # Retries stop with the run's time; each attempt also gets at most the
        # configured request timeout, so a hung request is abandoned and retried.
        deadline = time.monotonic() + request.timeout
        emitted = False

        def sink(text: str) -> None:
            nonlocal emitted
            emitted = True
            if on_text is not None:
                on_text(text)

        def retryable(exc: BaseException) -> bool:
            # Text already streamed to the caller cannot be taken back: no retry then.
            return isinstance(exc, ModelUnavailable) and exc.retryable and not emitted

        async def attempt() -> ModelResponse:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ModelUnavailable(
                    "model_timeout",
                    "the run's time ran out before the model answered",
                    retryable=False,
                )
            timeout = min(remaining, self._timeout)
            try:
                if request.stream:
                    return await self._stream(request, timeout, sink, on_tool_call)
                return await self._create(request, timeout)
            except ModelError as exc:
                if exc.code == "model_timeout" and timeout == remaining:
                    # The run's own deadline cut the request off, not a slow endpoint.
                    exc = ModelError(
                        "deadline_exceeded",
                        "the run's time ran out before the model answered",
                        retryable=False,
                    )
                if self._on_error is not None:
                    self._on_error(exc)
                raise exc from None

        # The first attempt runs bare: tenacity's bookkeeping is paid only on a retry.
        try:
            return await attempt()
        except ModelError as exc:
            if not retryable(exc) or self._retry.max_attempts < 2:
                raise
            first = exc
        await asyncio.sleep(self._delay(first, 1, deadline))
        attempts = 1
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._retry.max_attempts - 1),
            wait=lambda state: self._delay(_error(state), state.attempt_number + 1, deadline),
            retry=retry_if_exception(retryable),
            reraise=True,
        )
        async for retry in retrying:
            with retry:
                attempts += 1
                response = await attempt()
                response.attempts = attempts
                return response
        raise AssertionError("unreachable: tenacity reraises the last error")

    def _delay(self, exc: BaseException | None, attempt: int, deadline: float) -> float:
        """Seconds to wait before retry number ``attempt``; raise when the run can't wait."""
        policy = self._retry
        retry_after = exc.retry_after if isinstance(exc, ModelError) else None
        if retry_after is not None:
            delay = float(retry_after)
        else:
            delay = policy.backoff(attempt)
        if time.monotonic() + delay >= deadline:
            # Waiting would outlive the run: stop now with the error we have.
            raise (
                exc
                if exc is not None
                else ModelUnavailable("model_timeout", "no time left to retry", retryable=False)
            )
        return delay

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params = dict(self._fixed)
        params["messages"] = request.messages
        if request.tools:
            params["tools"] = request.tools
            if request.tool_choice is not None:
                params["tool_choice"] = request.tool_choice
            else:
                params["parallel_tool_calls"] = self._parallel_tool_calls
        if request.response_schema is not None:
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": request.response_schema},
            }
        return params

    def _body(self, request: ModelRequest, stream: bool) -> bytes:
        params = self._params(request)
        if stream:
            params["stream"] = True
            params["stream_options"] = _INCLUDE_USAGE
        return orjson.dumps(params)

    async def _create(self, request: ModelRequest, timeout: float) -> ModelResponse:
        content = await self._transport.complete(self._body(request, False), timeout)
        try:
            body = orjson.loads(content)
            choice = body["choices"][0]
            message = choice["message"]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
            raise ModelUnavailable(
                "model_bad_response",
                f"the model endpoint sent an unreadable response: {exc}",
                retryable=True,
            ) from None
        calls = [
            ToolCall(c["id"], c["function"]["name"], c["function"].get("arguments") or "")
            for c in message.get("tool_calls") or ()
            if c.get("type", "function") == "function"
        ]
        usage = body.get("usage")
        return ModelResponse(
            text=message.get("content") or "",
            tool_calls=calls,
            finish_reason=choice.get("finish_reason") or "stop",
            usage=_usage(usage),
            provider=_provider_timing(usage),
        )

    async def _stream(
        self,
        request: ModelRequest,
        timeout: float,
        sink: TextSink,
        on_tool_call: ToolCallSink | None,
    ) -> ModelResponse:
        started = time.perf_counter()
        first_token: float | None = None
        parts: list[str] = []
        calls: dict[int, list[str]] = {}  # index -> [id, name, argument fragments...]
        announced: set[int] = set()
        finish_reason = "stop"
        usage: Any = None
        groq_usage: Any = None
        lines = self._transport.stream(self._body(request, True), timeout)
        try:
            async for line in lines:
                if not line.startswith(b"data:"):
                    continue  # blank separators, comments, event names
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                chunk = orjson.loads(data)
                if "error" in chunk:
                    raise _stream_error(chunk["error"])
                if chunk.get("usage"):
                    usage = chunk["usage"]
                x_groq = chunk.get("x_groq")
                if x_groq and x_groq.get("usage"):
                    # Groq's streamed usage carries its timing even when the standard
                    # usage chunk does not.
                    groq_usage = x_groq["usage"]
                choices = chunk.get("choices")
                if not choices:
                    continue
                choice = choices[0]
                delta = choice.get("delta") or {}
                content = delta.get("content")
                fragments = delta.get("tool_calls")
                if first_token is None and (content or fragments):
                    first_token = time.perf_counter() - started
                if content:
                    parts.append(content)
                    sink(content)
                for fragment in fragments or ():
                    index = fragment.get("index", 0)
                    entry = calls.get(index)
                    if entry is None:
                        if on_tool_call is not None and calls:
                            # Calls stream one after another: the one before is complete.
                            _announce(calls, announced, on_tool_call)
                        entry = calls[index] = ["", ""]
                    if fragment.get("id"):
                        entry[0] = fragment["id"]
                    function = fragment.get("function") or {}
                    if function.get("name"):
                        entry[1] += function["name"]
                    if function.get("arguments"):
                        entry.append(function["arguments"])
                if choice.get("finish_reason"):
                    finish_reason = choice["finish_reason"]
        except orjson.JSONDecodeError as exc:
            raise ModelUnavailable(
                "model_bad_response",
                f"the model endpoint sent an unreadable chunk: {exc}",
                retryable=True,
            ) from None
        finally:
            await lines.aclose()
        tool_calls = [
            ToolCall(entry[0], entry[1], "".join(entry[2:])) for _, entry in sorted(calls.items())
        ]
        return ModelResponse(
            text="".join(parts),
            tool_calls=tool_calls,
            finish_reason=finish_reason,
            usage=_usage(usage or groq_usage),
            provider=_provider_timing(groq_usage or usage),
            time_to_first_token=first_token,
        )


def _announce(calls: dict[int, list[str]], announced: set[int], on_tool_call: ToolCallSink) -> None:
    """Hand every complete call not yet announced to ``on_tool_call``."""
    for index, entry in calls.items():
        if index not in announced:
            announced.add(index)
            on_tool_call(ToolCall(entry[0], entry[1], "".join(entry[2:])))


def _error(state: RetryCallState) -> BaseException | None:
    return state.outcome.exception() if state.outcome else None


def _usage(usage: Any) -> Usage:
    if not usage:
        return Usage()
    details = usage.get("prompt_tokens_details") or {}
    return Usage(
        prompt_tokens=usage.get("prompt_tokens") or 0,
        completion_tokens=usage.get("completion_tokens") or 0,
        cached_prompt_tokens=details.get("cached_tokens") or 0,
    )


def _provider_timing(usage: Any) -> ProviderTiming:
    # Groq adds queue_time / prompt_time / completion_time (seconds) to the usage object.
    if not usage:
        return ProviderTiming()
    return ProviderTiming(
        queue_time=usage.get("queue_time"),
        prompt_time=usage.get("prompt_time"),
        completion_time=usage.get("completion_time"),
    )


def _stream_error(error: Any) -> ModelError:
    message = str(error.get("message") if isinstance(error, dict) else error)
    return ModelUnavailable(
        "model_stream_error", f"the model stream failed: {message}", retryable=True
    )
