"""The model behind the seam: any OpenAI-compatible chat-completions endpoint.

Retries are ours (tenacity), not the client's: a 429 waits what ``retry-after`` says,
498 / 5xx / connection errors back off with full jitter, and every wait fits inside the
run's remaining time or the retries stop. ``tool_use_failed`` is surfaced as
:class:`ToolUseFailed` for the loop's repair round; other 4xx are final.

The request body is serialized once (orjson) and the response parsed once, into plain
values, by :mod:`sidecar.llm.wire` (which lets nothing malformed through);
:mod:`sidecar.llm.transport` carries the bytes.
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
from sidecar.llm.wire import StreamReader, parse_completion

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
        api_key: str | None,
        model: str,
        retry: RetryPolicy,
        timeout: float,
        temperature: float | None = None,
        max_tokens: int | None = None,
        parallel_tool_calls: bool = True,
        transport: str = "direct",
        on_error: Callable[[ModelError], None] | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self.name = model
        self._redact = redact
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
                if self._redact is not None:
                    # A provider's error body may echo the key, or another secret.
                    exc.message = self._redact(exc.message)
                    exc.args = (exc.message,)
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
        body = self._body(request, False)
        content = await self._transport.complete(body, timeout)
        response = parse_completion(content)
        response.request_bytes = len(body)
        return response

    async def _stream(
        self,
        request: ModelRequest,
        timeout: float,
        sink: TextSink,
        on_tool_call: ToolCallSink | None,
    ) -> ModelResponse:
        reader = StreamReader(sink, on_tool_call)
        body = self._body(request, True)
        lines = self._transport.stream(body, timeout)
        try:
            async for line in lines:
                reader.feed(line)
                if reader.done:
                    break
        finally:
            await lines.aclose()
        response = reader.response()
        response.request_bytes = len(body)
        return response


def _error(state: RetryCallState) -> BaseException | None:
    return state.outcome.exception() if state.outcome else None
