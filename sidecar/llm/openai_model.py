"""The model behind the seam: any OpenAI-compatible chat-completions endpoint.

Retries are ours (tenacity), not the client's: a 429 waits what ``retry-after`` says,
498 / 5xx / connection errors back off with full jitter, and every wait fits inside the
run's remaining time or the retries stop; each retry is logged with the failed request's
id, status and the wait. ``tool_use_failed`` is surfaced as :class:`ToolUseFailed` for
the loop's repair round; other 4xx are final.

A reasoning model (one :mod:`sidecar.catalog` marks so) gets its ``reasoning_effort``
and, when nothing takes its reasoning text, the parameter that leaves it out of the
response (``include_reasoning: false`` or ``reasoning_format: hidden``, as the model
takes it); ``reasoning_format: raw``, which Groq refuses with tools or JSON mode, is
never sent. A request carrying more tools than ``max_tools_per_request`` fails before it
is sent. A ``flex`` request answered ``498`` after its retries goes once more on the
fallback tier, when one is configured.

Before each attempt the endpoint's :class:`~sidecar.llm.pacing.Pacer` may hold the
request back while the rate limits its responses report have no room for it; every
response, failed or not, reports its headers back to it.

The request body is serialized once (orjson) and the response parsed once, into plain
values, by :mod:`sidecar.llm.wire` (which lets nothing malformed through);
:mod:`sidecar.llm.transport` carries the bytes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import orjson
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from agentsidecar.addresses import is_loopback
from sidecar import catalog
from sidecar.config import RetryPolicy
from sidecar.errors import (
    DEADLINE_EXCEEDED,
    MODEL_TIMEOUT,
    FlexTierFull,
    ModelError,
    ModelRequestRejected,
    ModelUnavailable,
)
from sidecar.llm.model import ModelRequest, ModelResponse, TextSink, ToolCallSink
from sidecar.llm.pacing import (
    DEFAULT_MAX_WAIT,
    PROBE_EVERY,
    PROCESS_PACERS,
    Pacer,
    Pacers,
    Ticket,
    rate_limits,
)
from sidecar.llm.served import ServedModels, parse_model_list
from sidecar.llm.transport import (
    Endpoint,
    Response,
    Transport,
    body_json,
    open_transport,
    proxy_for,
    retry_after,
    status_error,
    tls_context,
)
from sidecar.llm.wire import StreamReader, parse_completion

log = logging.getLogger(__name__)

_INCLUDE_USAGE = {"include_usage": True}
_BYTES_PER_TOKEN = 4  # a request's prompt tokens, estimated from its size for pacing


class OpenAICompatibleModel:
    """A :class:`~sidecar.llm.model.Model` over one shared HTTP transport.

    Args:
        base_url: The endpoint's OpenAI-compatible base URL.
        api_key: Sent as a bearer token; None sends no ``Authorization`` header.
        model: The model name sent with each request.
        retry: Retries of failed requests.
        timeout: Seconds one attempt may take (the call's own time caps it).
        transport: ``direct`` (aiohttp) or ``sdk`` (``openai.AsyncOpenAI``).
        on_error: Called with every failed attempt, retried or not (metrics).
        redact: Applied to error messages (a provider may echo a secret).
        ca_file: PEM bundle of the CAs trusted for an ``https`` endpoint instead of the
            system's.
        cert_file: PEM client certificate to present (with its key unless ``key_file``).
        key_file: PEM key of ``cert_file``.
        pacing: Hold requests back while the endpoint's rate limits have no room.
        max_rate_limit_wait: The longest wait taken from a response's ``retry-after`` or
            rate-limit reset, pacing and retries alike.
        environ: Where ``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``NO_PROXY`` are read; None reads
            the process's environment.
        pacers: The pacers shared by model clients; None: the process's.
        reasoning_effort: Sent as ``reasoning_effort`` to a reasoning model; None: not sent.
        service_tier: Sent as ``service_tier`` unless a request names its own; None: not.
        flex_fallback: The tier a ``flex`` request is sent on once more after a 498;
            ``light``: raise :class:`FlexTierFull` for the run to send it to its light path.
        max_tools: The most tools a request may carry.
        input_tokens_per_minute: The account's input-token limit (ITPM), paced by.
        output_tokens_per_minute: Its output-token limit (OTPM), paced by.
        token_window: Seconds those two count over (Groq's: a minute).

    Raises:
        StartupError: a TLS file cannot be loaded.
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
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        pacing: bool = True,
        max_rate_limit_wait: float = DEFAULT_MAX_WAIT,
        environ: Mapping[str, str] | None = None,
        pacers: Pacers | None = None,
        reasoning_effort: str | None = None,
        service_tier: str | None = None,
        flex_fallback: str | None = None,
        max_tools: int = 128,
        input_tokens_per_minute: int | None = None,
        output_tokens_per_minute: int | None = None,
        token_window: float = 60.0,
    ) -> None:
        self.name = model
        self._redact = redact
        self._on_error = on_error
        endpoint = Endpoint(
            base_url=base_url,
            api_key=api_key,
            tls=tls_context(ca_file, cert_file, key_file),
            proxy=proxy_for(base_url, os.environ if environ is None else environ),
        )
        parts = urlsplit(base_url)
        if (
            api_key
            and parts.scheme == "http"
            and (endpoint.proxy or not is_loopback(parts.hostname))
        ):
            log.warning(
                "the model's API key goes in plaintext to %s%s: use an https endpoint",
                parts.hostname,
                " through the proxy" if endpoint.proxy else "",
            )
        self._transport: Transport = open_transport(transport, endpoint)
        self._max_wait = max_rate_limit_wait
        self._pacer: Pacer | None = (
            (pacers or PROCESS_PACERS).get(
                base_url,
                model,
                api_key,
                max_rate_limit_wait,
                input_limit=input_tokens_per_minute,
                output_limit=output_tokens_per_minute,
                window=token_window,
            )
            if pacing
            else None
        )
        self._retry = retry
        self._timeout = timeout
        # Parameters that never change between calls are built once.
        self._fixed: dict[str, Any] = {"model": model, "n": 1}
        if temperature is not None:
            self._fixed["temperature"] = temperature
        if max_tokens is not None:
            self._fixed["max_completion_tokens"] = max_tokens
        known = catalog.facts(model)
        reasoning = known.reasoning if known is not None else None
        if reasoning_effort is not None:
            self._fixed["reasoning_effort"] = reasoning_effort
        if service_tier is not None:
            self._fixed["service_tier"] = service_tier
        # What asks a reasoning model to leave its reasoning text out (nothing takes it).
        self._hide: tuple[str, Any] | None = None
        if reasoning is not None:
            self._hide = (
                ("include_reasoning", False)
                if reasoning.control == "include_reasoning"
                else ("reasoning_format", "hidden")
            )
        self._expected_output = 0
        self._flex_fallback = flex_fallback
        self._max_tools = max_tools
        self._parallel_tool_calls = parallel_tool_calls

    async def close(self) -> None:
        await self._transport.close()

    async def served(self, timeout: float = 10.0) -> ServedModels:
        """The endpoint's model list (``GET /models``), through the same proxy, trust and
        key as its requests."""
        try:
            status, body = await self._transport.get("/models", timeout)
        except ModelError as exc:
            return ServedModels(None, f"GET /models failed: {exc.message}")
        return parse_model_list(status, body)

    async def complete(
        self,
        request: ModelRequest,
        on_text: TextSink | None = None,
        on_tool_call: ToolCallSink | None = None,
    ) -> ModelResponse:
        if len(request.tools) > self._max_tools:
            raise ModelRequestRejected(
                "model_too_many_tools",
                f"the request carries {len(request.tools)} tools, more than the endpoint's "
                f"max_tools_per_request ({self._max_tools}): allow fewer tools in the profile",
                retryable=False,
            )
        try:
            return await self._complete(request, on_text, on_tool_call)
        except ModelUnavailable as exc:
            tier = request.service_tier or self._fixed.get("service_tier")
            if exc.status != 498 or tier != "flex" or self._flex_fallback is None:
                raise
            if self._flex_fallback == "light":  # the run sends it to its light path
                full = FlexTierFull(exc.code, str(exc), retryable=True, status=498)
                full.attempts = exc.attempts
                raise full from exc
            log.warning(
                "the flex tier is full (498) after %d attempt(s): sent once more on %s",
                exc.attempts,
                self._flex_fallback,
            )
        fallback = dataclasses.replace(request, service_tier=self._flex_fallback)
        return await self._complete(fallback, on_text, on_tool_call)

    async def _complete(
        self,
        request: ModelRequest,
        on_text: TextSink | None,
        on_tool_call: ToolCallSink | None,
    ) -> ModelResponse:
        # Retries stop with the run's time; each attempt also gets at most the
        # configured request timeout, so a hung request is abandoned and retried.
        deadline = time.monotonic() + request.timeout
        body = self._body(request)
        tokens = len(body) // _BYTES_PER_TOKEN
        emitted = False
        paced = 0.0
        request_id: str | None = None  # the latest attempt's, for the retry's log line

        def sink(text: str) -> None:
            nonlocal emitted
            emitted = True
            if on_text is not None:
                on_text(text)

        def retryable(exc: BaseException) -> bool:
            # Text already streamed to the caller cannot be taken back: no retry then.
            return isinstance(exc, ModelUnavailable) and exc.retryable and not emitted

        async def attempt() -> ModelResponse:
            nonlocal paced, request_id
            request_id = None
            ticket = None
            generated = 0  # output tokens of the answer, for the pacer's output limit
            try:
                if self._pacer is not None:
                    # A token budget counts what the answer generates too, its reasoning
                    # included: the recent answers' size (the largest, fading) is the
                    # estimate.
                    ticket = await self._pacer.acquire(tokens, deadline, self._expected_output)
                    paced += ticket.waited
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ModelUnavailable(
                        MODEL_TIMEOUT,
                        "the run's time ran out before the model answered",
                        retryable=False,
                    )
                timeout = min(remaining, self._timeout)
                try:
                    sent = time.perf_counter()  # the time to the first token counts from here
                    async with self._transport.post(body, timeout) as reply:
                        request_id = reply.headers.get("x-request-id")
                        response = await self._read(
                            reply,
                            request,
                            ticket=ticket,
                            sink=sink,
                            on_tool_call=on_tool_call,
                            sent=sent,
                        )
                        generated = response.usage.completion_tokens
                except ModelError as exc:
                    if exc.code == MODEL_TIMEOUT and timeout == remaining:
                        # The run's own deadline cut the request off, not a slow endpoint.
                        raise ModelError(
                            DEADLINE_EXCEEDED,
                            "the run's time ran out before the model answered",
                            retryable=False,
                        ) from None
                    raise
            except ModelError as exc:
                if self._redact is not None:
                    # A provider's error body may echo the key, or another secret.
                    exc.message = self._redact(exc.message)
                    exc.args = (exc.message,)
                if self._on_error is not None:
                    self._on_error(exc)
                raise exc from None
            finally:
                if ticket is not None:
                    ticket.settle(generated)
                    ticket.release()
            response.request_bytes = len(body)
            response.request_id = response.request_id or request_id or response.completion_id
            response.paced = paced
            self._expected_output = max(
                response.usage.completion_tokens, self._expected_output * 7 // 8
            )
            return response

        def announce(exc: BaseException | None, retry: int, delay: float) -> None:
            # Logged when the retry is certain (it is about to sleep), never for one the
            # deadline or the attempt limit then stops.
            log.warning(
                "model request failed (%s, status %s, request id %s); retry %d of %d in %.2f s",
                exc.code if isinstance(exc, ModelError) else type(exc).__name__,
                exc.status if isinstance(exc, ModelError) else None,
                request_id or "none",
                retry,
                self._retry.max_attempts - 1,
                delay,
            )

        # The first attempt runs bare: tenacity's bookkeeping is paid only on a retry.
        attempts = 1
        try:
            return await attempt()
        except ModelError as exc:
            if not retryable(exc) or self._retry.max_attempts < 2:
                raise
            first = exc
        try:
            delay = self._delay(first, 1, deadline)
            announce(first, 1, delay)
            await asyncio.sleep(delay)
            retrying = AsyncRetrying(
                stop=stop_after_attempt(self._retry.max_attempts - 1),
                wait=lambda state: self._delay(_error(state), state.attempt_number + 1, deadline),
                retry=retry_if_exception(retryable),
                before_sleep=lambda state: announce(
                    _error(state), state.attempt_number + 1, state.upcoming_sleep
                ),
                reraise=True,
            )
            async for retry in retrying:
                with retry:
                    attempts += 1
                    response = await attempt()
                    response.attempts = attempts
                    return response
        except ModelError as exc:
            exc.attempts = attempts  # the timeline shows every attempt made
            raise
        raise AssertionError("unreachable: tenacity reraises the last error")

    async def _read(
        self,
        reply: Response,
        request: ModelRequest,
        *,
        ticket: Ticket | None,
        sink: TextSink,
        on_tool_call: ToolCallSink | None,
        sent: float,
    ) -> ModelResponse:
        """The response of one attempt, from its status and headers on; ``sent`` is when
        its request left (``time.perf_counter``)."""
        status = reply.status
        headers = reply.headers
        limits = rate_limits(headers, retry_after(headers) if status in (429, 503) else None)
        if ticket is not None:
            ticket.report(limits, ok=status < 400)
        if status >= 400:
            raise status_error(status, headers, body_json(await reply.read()))
        if request.stream:
            reader = StreamReader(
                sink, on_tool_call, on_reasoning=request.on_reasoning, started=sent
            )
            backlog = request.backlog
            async for line in reply.lines():
                reader.feed(line)
                if reader.done:
                    break
                if backlog is not None and (behind := backlog()) is not None:
                    await behind
            response = reader.response()
        else:
            response = parse_completion(await reply.read())
        if not limits.empty:
            response.rate_limits = limits
        return response

    def _delay(self, exc: BaseException | None, attempt: int, deadline: float) -> float:
        """Seconds to wait before retry number ``attempt``; raise when the run can't wait."""
        policy = self._retry
        retry_after = exc.retry_after if isinstance(exc, ModelError) else None
        if retry_after is not None and self._pacer is not None and retry_after > PROBE_EVERY:
            # A long hold: the pacer learned it from the same answer and holds the retry in
            # its queue, which a probe that finds the limit gone ends for every waiter; a
            # sleep here would wait out the whole hold whatever the probe found.
            delay = 0.0
        elif retry_after is not None:
            delay = min(float(retry_after), self._max_wait)
        else:
            delay = policy.backoff(attempt)
        if time.monotonic() + delay >= deadline:
            # Waiting would outlive the run: stop now with the error we have.
            raise (
                exc
                if exc is not None
                else ModelUnavailable(MODEL_TIMEOUT, "no time left to retry", retryable=False)
            )
        return delay

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params = dict(self._fixed)
        params["messages"] = request.messages
        if self._hide is not None and request.on_reasoning is None and not request.keep_reasoning:
            params[self._hide[0]] = self._hide[1]
        if request.service_tier is not None:
            params["service_tier"] = request.service_tier
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

    def _body(self, request: ModelRequest) -> bytes:
        params = self._params(request)
        if request.stream:
            params["stream"] = True
            params["stream_options"] = _INCLUDE_USAGE
        return orjson.dumps(params)


def _error(state: RetryCallState) -> BaseException | None:
    return state.outcome.exception() if state.outcome else None
