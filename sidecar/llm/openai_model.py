"""The model behind the seam: any OpenAI-compatible endpoint through ``openai.AsyncOpenAI``.

Retries are ours, not the client's (``max_retries=0``): a 429 waits what ``retry-after``
says, 498 / 5xx / connection errors back off with full jitter, and every wait fits inside
the run's remaining time or the retries stop. ``tool_use_failed`` is surfaced as
:class:`ToolUseFailed` for the loop's repair round; other 4xx are final.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import openai
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from sidecar.config import ModelRetryPolicy
from sidecar.llm.model import (
    ModelError,
    ModelRequest,
    ModelRequestRejected,
    ModelResponse,
    ModelUnavailable,
    ProviderTiming,
    TextSink,
    ToolCall,
    ToolUseFailed,
    Usage,
)

log = logging.getLogger(__name__)

_RETRYABLE_STATUS = frozenset({408, 409, 429, 498, 500, 502, 503, 504})
_REJECTED_CODES = {
    401: "model_unauthenticated",
    403: "model_permission_denied",
    404: "model_not_found",
}


class OpenAICompatibleModel:
    """A :class:`~sidecar.llm.model.Model` over one shared ``AsyncOpenAI`` client.

    ``on_error``, when given, is called with every failed attempt, retried or not (metrics).
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        retry: ModelRetryPolicy,
        timeout: float,
        temperature: float | None = None,
        max_tokens: int | None = None,
        parallel_tool_calls: bool = True,
        on_error: Callable[[ModelError], None] | None = None,
    ) -> None:
        self.name = model
        self._on_error = on_error
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key,
            max_retries=0,
            timeout=timeout,
            http_client=openai.DefaultAioHttpClient(),
        )
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
        await self._client.close()

    async def complete(
        self, request: ModelRequest, on_text: TextSink | None = None
    ) -> ModelResponse:
        deadline = time.monotonic() + min(request.timeout, self._timeout)
        emitted = False

        def sink(text: str) -> None:
            nonlocal emitted
            emitted = True
            if on_text is not None:
                on_text(text)

        def retryable(exc: BaseException) -> bool:
            # Text already streamed to the caller cannot be taken back: no retry then.
            return isinstance(exc, ModelUnavailable) and exc.retryable and not emitted

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._retry.max_attempts),
            wait=self._wait_strategy(deadline),
            retry=retry_if_exception(retryable),
            reraise=True,
        )
        attempts = 0
        async for attempt in retrying:
            with attempt:
                attempts += 1
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ModelUnavailable(
                        "model_timeout",
                        "the run's time ran out before the model answered",
                        retryable=False,
                    )
                try:
                    if request.stream:
                        response = await self._stream(request, remaining, sink)
                    else:
                        response = await self._create(request, remaining)
                except ModelError as exc:
                    if self._on_error is not None:
                        self._on_error(exc)
                    raise
                response.attempts = attempts
                return response
        raise AssertionError("unreachable: tenacity reraises the last error")

    def _wait_strategy(self, deadline: float) -> Any:
        policy = self._retry

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            retry_after = exc.retry_after if isinstance(exc, ModelError) else None
            if retry_after is not None:
                delay = float(retry_after)
            else:
                cap = min(
                    policy.max_backoff, policy.initial_backoff * 2 ** (state.attempt_number - 1)
                )
                delay = random.uniform(0, cap)  # full jitter
            if time.monotonic() + delay >= deadline:
                # Waiting would outlive the run: stop now with the error we have.
                if isinstance(exc, ModelError):
                    exc.retryable = False
                raise (
                    exc
                    if exc is not None
                    else ModelUnavailable("model_timeout", "no time left to retry", retryable=False)
                )
            return delay

        return wait

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

    async def _create(self, request: ModelRequest, timeout: float) -> ModelResponse:
        try:
            completion = await self._client.chat.completions.create(
                **self._params(request), timeout=timeout
            )
        except openai.APIError as exc:
            raise _translate(exc) from exc
        choice = completion.choices[0]
        message = choice.message
        calls = [
            ToolCall(c.id, c.function.name, c.function.arguments or "")
            for c in (message.tool_calls or ())
            if c.type == "function"
        ]
        return ModelResponse(
            text=message.content or "",
            tool_calls=calls,
            finish_reason=choice.finish_reason or "stop",
            usage=_usage(completion.usage),
            provider=_provider_timing(completion.usage),
        )

    async def _stream(self, request: ModelRequest, timeout: float, sink: TextSink) -> ModelResponse:
        started = time.perf_counter()
        first_token: float | None = None
        parts: list[str] = []
        calls: dict[int, list[str]] = {}  # index -> [id, name, arguments...]
        finish_reason = "stop"
        usage_obj: Any = None
        groq_usage: Any = None
        try:
            stream = await self._client.chat.completions.create(
                **self._params(request),
                stream=True,
                stream_options={"include_usage": True},
                timeout=timeout,
            )
            async with stream:
                async for chunk in stream:
                    if chunk.usage is not None:
                        usage_obj = chunk.usage
                    extra = chunk.model_extra
                    if extra and "x_groq" in extra:
                        groq_usage = _groq_usage(extra["x_groq"]) or groq_usage
                    if not chunk.choices:
                        continue
                    choice = chunk.choices[0]
                    delta = choice.delta
                    if first_token is None and (delta.content or delta.tool_calls):
                        first_token = time.perf_counter() - started
                    if delta.content:
                        parts.append(delta.content)
                        sink(delta.content)
                    for frag in delta.tool_calls or ():
                        entry = calls.get(frag.index)
                        if entry is None:
                            entry = calls[frag.index] = ["", ""]
                        if frag.id:
                            entry[0] = frag.id
                        if frag.function is not None:
                            if frag.function.name:
                                entry[1] += frag.function.name
                            if frag.function.arguments:
                                entry.append(frag.function.arguments)
                    if choice.finish_reason:
                        finish_reason = choice.finish_reason
        except openai.APIError as exc:
            raise _translate(exc) from exc
        tool_calls = [
            ToolCall(entry[0], entry[1], "".join(entry[2:])) for _, entry in sorted(calls.items())
        ]
        return ModelResponse(
            text="".join(parts),
            tool_calls=tool_calls,
            finish_reason=finish_reason,
            usage=_usage(usage_obj if usage_obj is not None else groq_usage),
            provider=_provider_timing(usage_obj if groq_usage is None else groq_usage),
            time_to_first_token=first_token,
        )


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return Usage(
        prompt_tokens=usage.prompt_tokens or 0,
        completion_tokens=usage.completion_tokens or 0,
        cached_prompt_tokens=cached or 0,
    )


def _groq_usage(x_groq: Any) -> Any:
    """Groq's streamed usage (``x_groq.usage`` of the last chunk), which carries its
    timing even when the standard usage chunk does not; None when absent."""
    usage = x_groq.get("usage") if isinstance(x_groq, dict) else None
    return SimpleNamespace(**usage) if isinstance(usage, dict) else None


def _provider_timing(usage: Any) -> ProviderTiming:
    # Groq adds queue_time / prompt_time / completion_time (seconds) to the usage object.
    if usage is None:
        return ProviderTiming()
    return ProviderTiming(
        queue_time=getattr(usage, "queue_time", None),
        prompt_time=getattr(usage, "prompt_time", None),
        completion_time=getattr(usage, "completion_time", None),
    )


def _retry_after(headers: Any) -> float | None:
    for name in ("retry-after-ms", "retry-after"):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value)
        except ValueError:
            continue
        return seconds / 1000 if name.endswith("-ms") else seconds
    return None


def _translate(exc: openai.APIError) -> ModelError:
    """Map an ``openai`` error onto the seam's exception tree."""
    if isinstance(exc, openai.APITimeoutError):
        return ModelUnavailable("model_timeout", "the model request timed out", retryable=True)
    if isinstance(exc, openai.APIConnectionError):
        return ModelUnavailable(
            "model_unreachable", f"cannot reach the model endpoint: {exc}", retryable=True
        )
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        body = exc.body if isinstance(exc.body, dict) else {}
        error = body.get("error", body) if isinstance(body, dict) else {}
        if not isinstance(error, dict):
            error = {}
        message = str(error.get("message") or exc.message)
        if status == 400 and error.get("code") == "tool_use_failed":
            return ToolUseFailed(message, str(error.get("failed_generation") or ""))
        if status in _RETRYABLE_STATUS:
            code = "model_rate_limited" if status == 429 else "model_unavailable"
            return ModelUnavailable(
                code,
                f"model endpoint answered {status}: {message}",
                retryable=True,
                status=status,
                retry_after=_retry_after(exc.response.headers),
            )
        return ModelRequestRejected(
            _REJECTED_CODES.get(status, "model_bad_request"),
            f"model endpoint rejected the request ({status}): {message}",
            retryable=False,
            status=status,
        )
    return ModelUnavailable("model_error", str(exc), retryable=False)
