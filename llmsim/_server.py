"""The simulator's HTTP server: chat completions, models, and the control API.

``LLMSimulator`` wires the planner, faults, rate limits and wire format to aiohttp routes.
Import it from :mod:`llmsim`, the public entry point.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import random
import ssl
import time
import zlib
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson
from aiohttp import web

from llmsim._errors import FaultSpecError
from llmsim._faults import Fault, FaultQueue, OnceGate, parse_fault, parse_faults
from llmsim._models import SERVED, model_problem, reasoning_plan, reasoning_text
from llmsim._options import SYSTEM_FINGERPRINT, TEXT_PREFIX, SimulatorOptions
from llmsim._planner import Planner, Reply
from llmsim._prompt_cache import PromptCache
from llmsim._ratelimit import RateLimits
from llmsim._validation import request_problem
from llmsim._wire import (
    DONE,
    ROLE_DELTA,
    ChunkWriter,
    Thinking,
    Timing,
    chunk_count,
    completion,
    completion_tokens,
    default_message,
    error_body,
    stream_deltas,
    tokens_of_text,
    usage,
)

__all__ = ["MODELS", "TOOL_USE_FAILED_MESSAGE", "LLMSimulator"]

logger = logging.getLogger(__name__)

TOOL_USE_FAILED_MESSAGE: Final = (
    "Failed to call a function. Please adjust your prompt. "
    "See 'failed_generation' for more details."
)
MODELS: Final = tuple(SERVED)
"""Model ids ``GET /models`` lists (and ``SimulatorOptions.extra_models``); a request
naming another is answered ``404 model_not_found``, as Groq answers a retired model."""
FLEX_FULL_MESSAGE: Final = (
    "The flex tier is at capacity: the request was not processed. Retry later, or send it "
    "on another service_tier."
)

_SSE_HEADERS: Final = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


_MAX_PEERS = 100_000  # connections counted at most (the count stops there)
RECENT_REQUESTS = 32
"""Request bodies kept for ``GET /sim/stats`` (``recent_requests``), newest last."""


class _Stats:
    """Counters behind ``GET /sim/stats``."""

    __slots__ = (
        "by_status",
        "connections",
        "last_client_cert",
        "last_headers",
        "last_request",
        "recent_requests",
        "requests",
        "seen",
        "streamed",
    )

    def __init__(self) -> None:
        self.last_headers: dict[str, str] = {}
        self.last_client_cert: str | None = None
        self.connections = 0
        self.seen: set[Any] = set()  # client addresses seen: one per connection
        self.requests = 0
        self.streamed = 0
        self.by_status: Counter[str] = Counter()
        self.last_request: Any = None
        self.recent_requests: deque[Any] = deque(maxlen=RECENT_REQUESTS)


class LLMSimulator:
    """An OpenAI-compatible chat-completions server that plans instead of thinking.

    Routes: ``POST {/openai/v1,/v1}/chat/completions``, ``GET {/openai/v1,/v1}/models``,
    and the control API ``POST|DELETE /sim/faults``, ``GET /sim/stats``, ``POST /sim/reset``,
    ``GET /healthz``.
    """

    def __init__(self, options: SimulatorOptions | None = None) -> None:
        """Prepare a simulator; nothing listens until :meth:`start`."""
        self._options = opts = options or SimulatorOptions()
        self._rng = random.Random(opts.seed)
        self._ids = random.Random()  # ids are random even in seeded runs, as a provider's
        self._planner = Planner(opts.scenario)
        self._faults = FaultQueue(
            rate_429=opts.fault_rate_429,
            rate_500=opts.fault_rate_500,
            rate_hang=opts.fault_rate_hang,
            rng=self._rng,
        )
        self._step_faults = OnceGate()
        self._limits = RateLimits(
            opts.ratelimit_requests,
            opts.ratelimit_tokens,
            opts.ratelimit_window_s,
            opts.ratelimit_output_tokens,
        )
        self._prompt_cache = PromptCache()
        self._served: dict[str, tuple[str, ...] | None] = dict(SERVED)
        self._served.update({name: None for name in opts.extra_models if name not in SERVED})
        self.flex_full = opts.flex_full
        """Answer every ``service_tier: flex`` request ``498 capacity_exceeded``."""
        self._stats = _Stats()
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._host = "127.0.0.1"
        self._port = 0

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen on ``host:port`` (0 picks a free port); return the bound port.

        Raises:
            RuntimeError: the simulator is already running.
            OSError: the address cannot be bound.
        """
        if self._runner is not None:
            raise RuntimeError("the LLM simulator is already running")
        self._closing = asyncio.Event()
        # handler_cancellation: a client that gives up (timeout, disconnect) must cancel a
        # hanging or slowly streaming handler instead of leaving it to run out.
        runner = web.AppRunner(
            self._app(), access_log=None, handler_cancellation=True, shutdown_timeout=5.0
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port, backlog=1024, ssl_context=self._tls())
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._host = host
        self._port = int(runner.addresses[0][1])
        logger.info("LLM simulator (not a model) listening on %s:%d", host, self._port)
        return self._port

    def _tls(self) -> ssl.SSLContext | None:
        opts = self._options
        if opts.tls_cert is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(opts.tls_cert, opts.tls_key)
        if opts.tls_client_ca is not None:
            context.load_verify_locations(opts.tls_client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    async def stop(self) -> None:
        """Stop listening; requests held by ``hang`` faults are released first."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self._closing.set()
        await runner.cleanup()

    async def __aenter__(self) -> LLMSimulator:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        """The bound port (0 before :meth:`start`)."""
        return self._port

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, e.g. ``http://127.0.0.1:PORT/openai/v1``
        (``https`` when serving TLS)."""
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self._host, self._host)
        if ":" in host:
            host = f"[{host}]"
        scheme = "https" if self._options.tls_cert is not None else "http"
        return f"{scheme}://{host}:{self._port}/openai/v1"

    # -- control, in process -----------------------------------------------------------

    def add_faults(self, faults: Iterable[Fault | Mapping[str, Any]]) -> int:
        """Queue faults (FIFO); return the fault units now pending.

        Raises:
            FaultSpecError: a fault is malformed (nothing is queued then).
        """
        return self._faults.extend([parse_fault(fault) for fault in faults])

    def clear_faults(self) -> int:
        """Drop queued faults; return how many units were pending."""
        return self._faults.clear()

    def stats(self) -> dict[str, Any]:
        """Request counters and the last request body, as ``GET /sim/stats`` returns them."""
        stats = self._stats
        return {
            "requests": stats.requests,
            "connections": stats.connections,
            "by_status": dict(stats.by_status),
            "streamed": stats.streamed,
            "faults_pending": self._faults.pending(),
            "last_request": stats.last_request,
            "last_headers": stats.last_headers,
            "last_client_cert": stats.last_client_cert,
            "recent_requests": list(stats.recent_requests),
        }

    def reset(self) -> None:
        """Zero the counters, drop queued faults and scripted-fault counts, refill budgets,
        and give the flex tier back the capacity the options gave it."""
        self._stats = _Stats()
        self.flex_full = self._options.flex_full
        self._faults.clear()
        self._step_faults.clear()
        self._limits.reset()
        self._prompt_cache.clear()

    # -- HTTP --------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        for prefix in ("/openai/v1", "/v1"):
            app.router.add_post(f"{prefix}/chat/completions", self._chat)
            app.router.add_get(f"{prefix}/models", self._models)
        app.router.add_post("/sim/faults", self._post_faults)
        app.router.add_delete("/sim/faults", self._delete_faults)
        app.router.add_get("/sim/stats", self._get_stats)
        app.router.add_post("/sim/reset", self._post_reset)
        app.router.add_post("/sim/flex", self._post_flex)
        app.router.add_get("/healthz", self._healthz)
        return app

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        arrived = time.perf_counter()
        raw = await request.read()
        stats = self._stats
        stats.requests += 1
        stats.last_headers = {
            k.lower(): v for k, v in request.headers.items() if k.lower() != "authorization"
        }
        stats.last_headers["authorization"] = (
            "present" if "Authorization" in request.headers else ""
        )
        transport = request.transport
        if transport is not None:
            peer = transport.get_extra_info("peername")
            if peer not in stats.seen and len(stats.seen) < _MAX_PEERS:
                stats.seen.add(peer)
                stats.connections += 1
            if self._options.tls_cert is not None:
                stats.last_client_cert = _subject(transport.get_extra_info("peercert"))
        request_id = f"req_{self._ids.getrandbits(104):026x}"
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
            stats.last_request = raw.decode("utf-8", "replace")
        else:
            stats.last_request = body
            stats.recent_requests.append(body)
        problem = request_problem(body)
        if problem is not None:
            return self._error(
                400, problem, {"x-request-id": request_id, "x-simulator": SYSTEM_FINGERPRINT}
            )
        refused = model_problem(body, self._served)
        if refused is not None:
            return self._error(
                refused[0],
                refused[1],
                {"x-request-id": request_id, "x-simulator": SYSTEM_FINGERPRINT},
                prefix="",
            )
        tier = body.get("service_tier")
        answered_tier = "on_demand" if tier in (None, "auto") else str(tier)
        stream = body.get("stream") is True
        if stream:
            stats.streamed += 1
        prompt_tokens = tokens_of_text(raw)
        budget = self._limits.admit(prompt_tokens)
        headers = self._limits.headers(budget)
        headers["x-request-id"] = request_id
        headers["x-simulator"] = SYSTEM_FINGERPRINT
        if self._options.enforce_ratelimits and budget.exhausted:
            headers["retry-after"] = str(max(1, math.ceil(budget.reset_s)))
            message = "Rate limit reached: the simulated budget for this window is spent."
            if budget.output_spent:
                message = (
                    f"Rate limit reached for model `{body['model']}` on output tokens per "
                    f"minute (OTPM): Limit {self._limits.limit_output}, Used "
                    f"{self._limits.output}."
                )
            return self._error(429, message, headers)

        if tier == "flex" and self.flex_full:
            return self._error(498, FLEX_FULL_MESSAGE, headers, prefix="")
        fault = self._faults.take()
        reply = self._planner.plan(body)
        step = reply.step
        if fault is None and step is not None and step.step.fault is not None:
            key = (step.rule_index, step.step_index, _digest(body["messages"]))
            if self._step_faults.allow(key, step.step.fault.times):
                fault = step.step.fault
        disconnect = False
        if fault is not None:
            kind = fault.kind
            if kind == "status":
                if fault.retry_after is not None:
                    headers["retry-after"] = _seconds_text(fault.retry_after)
                message = fault.message or default_message(fault.status)
                return self._error(fault.status, message, headers)
            if kind == "hang":
                return await self._hang(fault, headers)
            if kind == "raw":
                return await self._raw(request, fault, headers, stream)
            if kind == "tool_use_failed":
                generation = self._planner.failed_generation(body, reply)
                return self._error(
                    400,
                    TOOL_USE_FAILED_MESSAGE,
                    headers,
                    code="tool_use_failed",
                    failed_generation=generation,
                    prefix="",
                )
            if kind == "disconnect":
                if not stream:
                    _drop_connection(request)
                    return web.Response()
                disconnect = True
            else:
                reply = self._planner.corrupt(body, reply, kind)

        ids = [f"call_{self._ids.getrandbits(96):024x}" for _ in reply.tool_calls]
        cached = self._prompt_cache.cached_tokens(body, prompt_tokens)
        plan = reasoning_plan(body, self._served)
        reasoning = plan.tokens if plan is not None else 0
        self._limits.generated(completion_tokens(reply) + reasoning)
        thinking = None
        if plan is not None and plan.shown is not None:
            thinking = Thinking(reasoning_text(plan, _last_user_text(body)), plan.shown)
        if stream:
            return await self._stream(
                request,
                body,
                reply,
                ids,
                headers,
                arrived,
                (prompt_tokens, cached, reasoning),
                disconnect,
                thinking,
                answered_tier,
            )
        planned = time.perf_counter()
        await _until(arrived + self._ttft_s(reply) + self._prefill_s(prompt_tokens - cached))
        first = time.perf_counter()
        token_s = self._options.token_ms / 1000
        if token_s > 0:
            await asyncio.sleep(self._jittered(token_s * chunk_count(reply)))
        done = time.perf_counter()
        usage_doc = usage(
            prompt_tokens,
            completion_tokens(reply),
            cached,
            Timing(planned - arrived, first - planned, done - first),
            reasoning,
        )
        stats.by_status["200"] += 1
        payload = completion(
            f"chatcmpl-{self._ids.getrandbits(96):024x}",
            int(time.time()),
            body["model"],
            reply,
            ids,
            usage_doc,
            thinking=thinking,
            service_tier=answered_tier,
        )
        return web.Response(body=payload, headers=headers, content_type="application/json")

    async def _stream(
        self,
        request: web.Request,
        body: Mapping[str, Any],
        reply: Reply,
        ids: list[str],
        headers: dict[str, str],
        arrived: float,
        tokens: tuple[int, int, int],
        disconnect: bool,
        thinking: Thinking | None,
        service_tier: str,
    ) -> web.StreamResponse:
        prompt_tokens, cached, reasoning = tokens
        writer = ChunkWriter(
            f"chatcmpl-{self._ids.getrandbits(96):024x}",
            int(time.time()),
            body["model"],
            service_tier,
        )
        planned = time.perf_counter()
        await _until(arrived + self._ttft_s(reply) + self._prefill_s(prompt_tokens - cached))
        response = web.StreamResponse(headers={**headers, **_SSE_HEADERS})
        try:
            await response.prepare(request)
            self._stats.by_status["200"] += 1
            first = time.perf_counter()
            frames = [
                writer.delta(ROLE_DELTA),
                *map(writer.delta, stream_deltas(reply, ids, thinking)),
            ]
            if disconnect:
                # Half the answer, then the connection goes: a stream cut mid-way.
                await response.write(b"".join(frames[: max(1, len(frames) // 2)]))
                _drop_connection(request)
                return response
            token_s = self._options.token_ms / 1000
            if token_s > 0:
                await response.write(frames[0])
                for frame in frames[1:]:
                    await asyncio.sleep(self._jittered(token_s))
                    await response.write(frame)
                frames = []
            frames.append(writer.finish(reply.finish_reason))
            options = body.get("stream_options")
            if isinstance(options, Mapping) and options.get("include_usage") is True:
                timing = Timing(planned - arrived, first - planned, time.perf_counter() - first)
                usage_doc = usage(
                    prompt_tokens, completion_tokens(reply), cached, timing, reasoning
                )
                frames.append(writer.usage(usage_doc))
            frames.append(DONE)
            # Zero-latency streams go out in one write: cheap for benchmarks, same bytes.
            await response.write(b"".join(frames))
            await response.write_eof()
            return response
        except ConnectionResetError:
            # The client left mid-stream (its deadline, a cancel): nothing more to send.
            return response

    async def _hang(self, fault: Fault, headers: dict[str, str]) -> web.Response:
        cap = fault.hang_s if fault.hang_s is not None else self._options.hang_cap_s
        # A client that gives up cancels this handler (handler_cancellation); stop() ends
        # the wait through _closing; otherwise the cap does.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(cap):
                await self._closing.wait()
        if self._closing.is_set():
            return self._error(503, "The simulator is shutting down.", headers)
        return self._error(504, f"The hang fault held this request for {cap:g} s.", headers)

    async def _models(self, request: web.Request) -> web.Response:
        created = 1_700_000_000
        data = [
            {"id": name, "object": "model", "created": created, "owned_by": SYSTEM_FINGERPRINT}
            for name in self._served
        ]
        return _json({"object": "list", "data": data})

    async def _post_faults(self, request: web.Request) -> web.Response:
        try:
            faults = parse_faults(orjson.loads(await request.read()))
        except (orjson.JSONDecodeError, FaultSpecError) as exc:
            return _json({"error": {"message": str(exc), "type": "invalid_request_error"}}, 400)
        return _json({"queued": len(faults), "pending": self._faults.extend(faults)})

    async def _delete_faults(self, request: web.Request) -> web.Response:
        return _json({"cleared": self._faults.clear()})

    async def _get_stats(self, request: web.Request) -> web.Response:
        return _json(self.stats())

    async def _post_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return _json({"reset": True})

    async def _post_flex(self, request: web.Request) -> web.Response:
        """``{"full": true}``: every ``flex`` request is answered 498 until ``false``."""
        try:
            full = orjson.loads(await request.read()).get("full")
        except (orjson.JSONDecodeError, AttributeError):
            full = None
        if not isinstance(full, bool):
            return _json({"error": {"message": 'send {"full": true|false}'}}, 400)
        self.flex_full = full
        return _json({"full": full})

    async def _healthz(self, request: web.Request) -> web.Response:
        return _json({"status": "ok", "simulator": SYSTEM_FINGERPRINT})

    # -- helpers -----------------------------------------------------------------------

    async def _raw(
        self, request: web.Request, fault: Fault, headers: dict[str, str], stream: bool
    ) -> web.StreamResponse:
        """Send a ``raw`` fault's bytes exactly as given: a server gone wrong or odd."""
        self._stats.by_status[str(fault.status)] += 1
        headers = {**headers, **dict(fault.headers)}
        gzip = zlib.compressobj(wbits=31) if fault.encoding == "gzip" else None
        if gzip is not None:
            # Compressed whether or not the request asked for it (Accept-Encoding).
            headers["Content-Encoding"] = "gzip"
        if not stream or not fault.frames:
            body = (fault.body or "").encode()
            if gzip is not None:
                body = gzip.compress(body) + gzip.flush()
            return web.Response(
                status=fault.status,
                body=body,
                headers={"Content-Type": "application/json", **headers},
            )
        response = web.StreamResponse(status=fault.status, headers={**_SSE_HEADERS, **headers})
        await response.prepare(request)

        def encoded(data: bytes, last: bool = False) -> bytes:
            if gzip is None:
                return data
            # Each frame leaves in a flushed gzip block, as a compressing proxy sends it.
            return gzip.compress(data) + gzip.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)

        repeated = [frame.encode() for frame in fault.frames]
        for _ in range(fault.repeat):
            for chunk in repeated:
                await response.write(encoded(chunk))
        for frame in fault.then:
            await response.write(encoded(frame.encode()))
        if gzip is not None:
            await response.write(encoded(b"", last=True))
        await response.write_eof()
        return response

    def _error(
        self,
        status: int,
        message: str,
        headers: dict[str, str],
        *,
        prefix: str = TEXT_PREFIX,
        **extra: Any,
    ) -> web.Response:
        self._stats.by_status[str(status)] += 1
        return web.Response(
            status=status,
            body=error_body(status, prefix + message, **extra),
            headers=headers,
            content_type="application/json",
        )

    def _ttft_s(self, reply: Reply) -> float:
        ttft_ms = reply.latency_ms if reply.latency_ms is not None else self._options.ttft_ms
        return self._jittered(ttft_ms / 1000) if ttft_ms > 0 else 0.0

    def _prefill_s(self, uncached_tokens: int) -> float:
        per_1k = self._options.prefill_ms_per_1k
        return per_1k * max(0, uncached_tokens) / 1_000_000 if per_1k > 0 else 0.0

    def _jittered(self, seconds: float) -> float:
        jitter = self._options.jitter_ms / 1000
        if jitter <= 0:
            return seconds
        return max(0.0, seconds + self._rng.uniform(-jitter, jitter))


def _last_user_text(body: Mapping[str, Any]) -> str:
    for message in reversed(body["messages"]):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""


def _subject(cert: Any) -> str | None:
    """A client certificate's subject common name, or None when it sent none."""
    if not isinstance(cert, dict):
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return "(no common name)"


def _digest(messages: Any) -> bytes:
    return hashlib.blake2b(orjson.dumps(messages), digest_size=16).digest()


def _seconds_text(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


def _drop_connection(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.close()


def _json(document: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(document), status=status, content_type="application/json")


async def _until(moment: float) -> None:
    """Sleep until ``moment`` (``time.perf_counter``): a delay counts from the request's
    arrival, so the simulator's own work is inside it, not added on top."""
    remaining = moment - time.perf_counter()
    if remaining > 0:
        await asyncio.sleep(remaining)
