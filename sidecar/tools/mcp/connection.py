"""One MCP server as a tool server: the bridge, inside the sidecar (docs/adr/004).

:class:`McpServerConnection` has the surface of every tool link
(:mod:`sidecar.tools.link`), so the dispatcher calls an MCP tool as it calls any other:
behind the server's breaker, under the call's deadline, retried only when idempotent,
recorded in the audit record with who it served. Underneath it speaks MCP through the
official SDK's client, over stdio to a process it starts or Streamable HTTP to a URL, in
the revision the server speaks (2026-07-28, or the 2025 handshake).

A supervisor task owns the connection: it connects (starting the process), lists every
page of tools into the catalog, and then keeps three watches. A re-listing follows a
``list_changed`` notification (on the 2025 revisions as it arrives, on 2026-07-28 through
``subscriptions/listen``), the expiry of the list's ``ttlMs``, or ``health_interval``,
whichever comes first, never more often than ``min_relist_interval`` (a storm of
notifications costs one listing per interval). The re-listing doubles as the health
probe: unanswered within ``discovery_timeout``, the server is NOT_SERVING, its tools leave
the model's list, and the connection is dropped (a started process is stopped). A process
that exits does the same at once. Then it connects again after ``restart_backoff``,
doubling up to ``max_restart_backoff``. Calls in flight when a connection ends fail
UNAVAILABLE, which opens the breaker after ``failure_threshold`` of them.

A call maps MCP onto the tool protocol: ``isError`` is the call's error; the content is
rendered for the model (:mod:`sidecar.tools.mcp.render`); ``structuredContent`` is checked
against the output schema by the SDK, and a mismatch is the call's error; progress
notifications reach the caller's stream (ten at once, then ten a second); an elicitation is asked
of the caller through the approval flow, or declined (``elicitation: refuse``, or nobody
streams the run). The call's deadline cancels the request (``notifications/cancelled`` on
stdio, the response stream closed over HTTP). A tool that runs only as an MCP task is
polled within the deadline and cancelled with the call (:mod:`sidecar.tools.mcp.tasks`).
Who the call serves travels in ``_meta``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any, cast

import grpc
import mcp_types as types
import orjson
from mcp import Client
from mcp.client.extension import ClaimContext
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError

from agentsidecar.tool_identity import (
    ASSERTION_KEY,
    CALL_ID_KEY,
    LABELS_KEY,
    PRINCIPAL_KEY,
    RUN_ID_KEY,
    SESSION_ID_KEY,
    decode_labels,
    decode_text,
)
from agentsidecar.v1 import tool_pb2
from sidecar.config import McpServerConfig, RetryPolicy
from sidecar.schemas import compile_schema_safely
from sidecar.tools.breaker import CircuitBreaker
from sidecar.tools.call_stream import StreamedCallError
from sidecar.tools.hedging import Hedging
from sidecar.tools.link import CallHooks, InputRelay
from sidecar.tools.mcp.descriptors import ToolList, tool_list
from sidecar.tools.mcp.render import render
from sidecar.tools.mcp.tasks import (
    ASK,
    PROGRESS,
    CreatedTask,
    TaskCancelled,
    TasksExtension,
    call_as_task,
    follow_task,
)
from sidecar.tools.mcp.transport import (
    ANSWER_UNREADABLE,
    RESULT_TOO_LARGE,
    ServerExited,
    StdioTransport,
    child_environment,
    http_client,
)
from sidecar.types import BreakerState, ToolQuestion

__all__ = ["META_PREFIX", "McpServerConnection"]

log = logging.getLogger(__name__)

META_PREFIX = "dev.agentsidecar/"
"""The ``_meta`` keys of who a call serves: ``principal``, ``session-id``, ``run-id``,
``call-id``, ``labels`` (an object) and ``identity`` (the signed assertion)."""
_META_KEYS = {
    PRINCIPAL_KEY: "principal",
    SESSION_ID_KEY: "session-id",
    RUN_ID_KEY: "run-id",
    CALL_ID_KEY: "call-id",
}
_TRACE_KEYS = frozenset({"traceparent", "tracestate", "baggage"})
_MAX_PAGES = 100  # pages of one listing: a server that paginates forever is cut off
_PROGRESS_BURST = 10  # progress events of one call passed on at once at most ...
_PROGRESS_RATE = 10.0  # ... and per second after that
_MAX_ERROR_TEXT = 1000  # characters of a server's error message passed on
_CLIENT_INFO = types.Implementation(name="agent-sidecar", version="0.1.0")

_ASK = ASK
"""The running call's way to ask its caller (a 2026-07-28 elicitation, or a task's
question, arrives in the call's own task)."""
_MODERN = "2026-07-28"

DiscoveryListener = Callable[[str, tool_pb2.ListToolsResponse, Mapping[str, RetryPolicy]], Any]
StateListener = Callable[[str, BreakerState, BreakerState], None]


def _status(exc: MCPError) -> tuple[grpc.StatusCode, str]:
    """The tool protocol's status for an MCP error: what breakers and retries read."""
    code = exc.code
    message = exc.message[:_MAX_ERROR_TEXT]
    if code == types.CONNECTION_CLOSED:
        return grpc.StatusCode.UNAVAILABLE, f"the MCP server's connection closed: {message}"
    if code == types.REQUEST_TIMEOUT:
        return grpc.StatusCode.DEADLINE_EXCEEDED, message
    if code in (types.INVALID_PARAMS, types.INVALID_REQUEST, types.METHOD_NOT_FOUND):
        return grpc.StatusCode.INVALID_ARGUMENT, message
    if code == ANSWER_UNREADABLE or (
        code == types.PARSE_ERROR and exc.message.startswith("Failed to parse")
    ):
        # The SDK's own parse error (over HTTP) carries a validator's text: not for the model.
        return grpc.StatusCode.INTERNAL, (
            "the MCP server's answer could not be read (malformed JSON, a shape MCP does "
            "not have, or nested too deep)"
        )
    return grpc.StatusCode.INTERNAL, f"the MCP server failed ({code}): {message}"


class McpServerConnection:
    """An MCP server behind the bridge: its supervisor, its breaker, its calls.

    Args:
        config: The server's configuration.
        on_discovered: Takes each new listing into the catalog.
        on_breaker_change: Told of the breaker's changes (metrics).
        environ: The environment its secrets come from.

    Raises:
        StartupError: a secret's variable is unset, or a TLS file is unusable.
    """

    interactive = True
    hedging: Hedging | None = None  # an MCP server's calls are never hedged

    def __init__(
        self,
        config: McpServerConfig,
        *,
        on_discovered: DiscoveryListener,
        on_breaker_change: StateListener | None = None,
        environ: Mapping[str, str],
    ) -> None:
        self.config = config
        self.name = config.name
        self._on_discovered = on_discovered
        self._on_breaker_change = on_breaker_change
        # Checked now, so a missing secret stops the sidecar at start.
        self._env = child_environment(config, environ) if config.command is not None else {}
        self._http = http_client(config, environ) if config.url is not None else None
        self.breaker = CircuitBreaker(
            config.name, config.breaker, on_state_change=self._breaker_changed
        )
        self.serving = False
        self.discovered = asyncio.Event()
        self.last_error: str | None = None
        self._client: Client | None = None
        self._relist = asyncio.Event()
        self._ttl: float | None = None
        self._asking: dict[int, Callable[[ToolQuestion], Awaitable[Any]]] = {}
        self._next_call = 0
        self._task: asyncio.Task[None] | None = None
        self._stdio: StdioTransport | None = None
        self._tasks: frozenset[str] = frozenset()

    # -- the link's surface ------------------------------------------------------------------

    @property
    def where(self) -> str:
        return self.config.url or " ".join([self.config.command or "", *self.config.args])

    @property
    def available(self) -> bool:
        return self.serving and self.breaker.allows_calls()

    def _breaker_changed(self, name: str, old: BreakerState, new: BreakerState) -> None:
        if new is BreakerState.OPEN:
            log.warning(
                "MCP server %s: circuit breaker open (%s); its tools are hidden from the "
                "model for %g s",
                name,
                self.breaker.failure_summary(),
                self.breaker.policy.reset_timeout,
            )
        else:
            log.info("MCP server %s: circuit breaker %s", name, new.value)
        if self._on_breaker_change is not None:
            self._on_breaker_change(name, old, new)

    def start(self) -> None:
        """Connect in the background, and keep connected."""
        self._task = asyncio.get_running_loop().create_task(
            self._supervise(), name=f"mcp:{self.name}"
        )

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._http is not None:
            await self._http.aclose()

    # -- calls -------------------------------------------------------------------------------

    async def call(
        self,
        request: tool_pb2.CallToolRequest,
        timeout: float,
        metadata: Sequence[tuple[str, str | bytes]],
        hooks: CallHooks | None = None,
    ) -> tool_pb2.ToolResult:
        """Run one call on the server.

        Raises:
            StreamedCallError: the status the call failed with (UNAVAILABLE while the
                server is not connected, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED for a
                result over ``max_result_bytes``, INVALID_ARGUMENT, INTERNAL).
        """
        client = self._client
        if client is None or not self.serving:
            raise StreamedCallError(
                grpc.StatusCode.UNAVAILABLE,
                f"MCP server {self.name} is not serving"
                + (f": {self.last_error}" if self.last_error else ""),
            )
        arguments = orjson.loads(request.arguments or "{}")
        ask = hooks.ask if hooks is not None else None
        progress = _throttled(hooks.progress) if hooks is not None and hooks.progress else None
        self._next_call += 1
        number = self._next_call
        if ask is not None:
            self._asking[number] = ask
        token = _ASK.set(ask)
        progress_token = PROGRESS.set(progress)
        relay = hooks.relay if hooks is not None else None
        try:
            meta = cast(
                types.RequestParamsMeta | None,
                self._meta(metadata) if self.config.identity else _trace(metadata),
            )
            async with asyncio.timeout(timeout):
                if relay is not None and client.protocol_version == _MODERN:
                    relayed = await self._relayed(
                        client, request.tool_name, arguments, meta, relay, progress
                    )
                    if relayed is None:  # the server asked again: the host answers next round
                        return tool_pb2.ToolResult(call_id=request.call_id, output="")
                    result = relayed
                elif request.tool_name in self._tasks:
                    result = await call_as_task(
                        client,
                        request.tool_name,
                        arguments,
                        ttl=timeout,
                        meta=meta,
                        progress=progress,
                    )
                else:
                    result = await client.call_tool(
                        request.tool_name, arguments, progress_callback=progress, meta=meta
                    )
        except TimeoutError:
            raise StreamedCallError(
                grpc.StatusCode.DEADLINE_EXCEEDED, "the call's deadline passed"
            ) from None
        except MCPError as exc:
            if exc.code == RESULT_TOO_LARGE:
                raise StreamedCallError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED, exc.message, too_large=True
                ) from None
            if exc.code == types.CONNECTION_CLOSED:
                # Hidden from now on: the supervisor sees the end too, and reconnects.
                self.serving = False
            code, message = _status(exc)
            raise StreamedCallError(code, message) from None
        except TaskCancelled as exc:
            raise StreamedCallError(
                grpc.StatusCode.ABORTED, f"the MCP server cancelled the task: {exc}"
            ) from None
        except RuntimeError as exc:
            text = str(exc)[:_MAX_ERROR_TEXT]
            if "structured content" not in text and "schema" not in text:
                raise StreamedCallError(
                    grpc.StatusCode.UNAVAILABLE, f"the MCP call failed: {text}"
                ) from None
            # The SDK's check of the result against the tool's output schema.
            return tool_pb2.ToolResult(
                call_id=request.call_id,
                error=tool_pb2.ToolError(
                    kind=tool_pb2.TOOL_ERROR_KIND_EXECUTION_FAILED,
                    message=f"the tool's result broke its declared output schema: {text}",
                ),
            )
        except Exception as exc:
            # The connection broke under the call, or the server's answer was malformed:
            # however the SDK says so, it is this call's failure, never the run's.
            log.debug("MCP server %s: call failed", self.name, exc_info=True)
            raise StreamedCallError(
                grpc.StatusCode.UNAVAILABLE,
                f"the MCP server's answer was unusable ({type(exc).__name__}: "
                f"{str(exc)[:_MAX_ERROR_TEXT]})",
            ) from None
        finally:
            _ASK.reset(token)
            PROGRESS.reset(progress_token)
            self._asking.pop(number, None)
        try:
            is_error, text = render(result)
        except Exception as exc:  # a result no rule foresaw: the call's error, not the run's
            log.warning("MCP server %s: a result could not be rendered: %r", self.name, exc)
            is_error, text = True, "the tool's result could not be read"
        if len(text) > self.config.max_result_bytes:
            raise StreamedCallError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the result is {len(text)} characters; the caller accepts "
                f"{self.config.max_result_bytes} bytes",
                too_large=True,
            )
        if is_error:
            return tool_pb2.ToolResult(
                call_id=request.call_id,
                error=tool_pb2.ToolError(
                    kind=tool_pb2.TOOL_ERROR_KIND_EXECUTION_FAILED, message=text
                ),
            )
        return tool_pb2.ToolResult(call_id=request.call_id, output=text)

    async def _relayed(
        self,
        client: Client,
        name: str,
        arguments: dict[str, Any],
        meta: Any,
        relay: InputRelay,
        progress: ProgressFnT | None,
    ) -> types.CallToolResult | None:
        """One round of a host's multi-round call, passed through: the host's answers and
        the server's state in; None when the server asks again (``relay.required``)."""
        result = await client.session.call_tool(
            name,
            arguments,
            progress_callback=progress,
            meta=meta,
            input_responses=cast(types.InputResponses | None, relay.responses),
            request_state=relay.state,
            allow_input_required=True,
            allow_claimed=True,
        )
        if isinstance(result, types.InputRequiredResult):
            relay.required = result
            return None
        if isinstance(result, CreatedTask):
            context = ClaimContext(
                session=client.session, tool_name=name, read_timeout_seconds=None
            )
            result = await follow_task(result, context)
        if not isinstance(result, types.CallToolResult):
            raise RuntimeError(f"the server answered with {type(result).__name__}")
        if not result.is_error:
            await client.session.validate_tool_result(name, result)
        return result

    def _meta(self, metadata: Sequence[tuple[str, str | bytes]]) -> dict[str, Any] | None:
        """Who the call serves, and its trace context, as ``_meta`` entries."""
        meta: dict[str, Any] = {}
        for key, value in metadata:
            if key in _META_KEYS and isinstance(value, str):
                meta[META_PREFIX + _META_KEYS[key]] = decode_text(value)
            elif key == ASSERTION_KEY and isinstance(value, str):
                meta[META_PREFIX + "identity"] = value
            elif key == LABELS_KEY and isinstance(value, bytes):
                labels = decode_labels(value)
                if labels is not None:
                    meta[META_PREFIX + "labels"] = labels
            elif key in _TRACE_KEYS and isinstance(value, str):
                meta[key] = value
        return meta or None

    async def _elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        """A server's question: asked of the caller of the call it belongs to, or declined."""
        ask = _ASK.get()
        if ask is None and len(self._asking) == 1:
            # A 2025 server asks in a request of its own, outside the call's task: with one
            # call that can ask in flight, the question is that call's.
            ask = next(iter(self._asking.values()))
        if self.config.elicitation == "refuse" or ask is None:
            return types.ElicitResult(action="decline")
        if not isinstance(params, types.ElicitRequestFormParams):
            log.info("MCP server %s asked to open a URL; declined", self.name)
            return types.ElicitResult(action="decline")
        schema = dict(params.requested_schema)
        try:
            compile_schema_safely(schema)
        except ValueError:  # a schema no answer could be checked against: never asked
            log.info("MCP server %s asked with an unusable schema; declined", self.name)
            return types.ElicitResult(action="decline")
        try:
            decision = await ask(ToolQuestion(params.message[: _MAX_ERROR_TEXT * 4], schema))
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the SDK cancels its own request: it ends as the SDK means
            # The call that asked ended (its caller gone, its run or task cancelled): the
            # question is withdrawn. Raised out of this callback, the cancellation would
            # end the server's connection, and every other call on it.
            return types.ElicitResult(action="cancel")
        except Exception:
            log.warning("MCP server %s: asking the caller failed", self.name, exc_info=True)
            return types.ElicitResult(action="decline")
        if not decision.approved:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content=decision.answer or {})

    async def _notified(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._relist.set()

    # -- the supervisor ----------------------------------------------------------------------

    async def _supervise(self) -> None:
        backoff = self.config.restart_backoff
        while True:
            served = await self._connection()
            self.serving = False
            self._client = None
            if served:
                backoff = self.config.restart_backoff
            wait = backoff * (0.5 + random.random() / 2)
            log.info("MCP server %s: connecting again in %.1f s", self.name, wait)
            await asyncio.sleep(wait)
            backoff = min(backoff * 2, self.config.max_restart_backoff)

    async def _connection(self) -> bool:
        """One connection, from connect to its end; True when it served tools."""
        config = self.config
        served = False
        stdio: StdioTransport | None = None
        try:
            async with AsyncExitStack() as stack:
                if config.command is not None:
                    stdio = self._stdio = StdioTransport(config, self._env)
                    transport: Any = stdio
                else:
                    assert config.url is not None
                    transport = streamable_http_client(
                        config.url,
                        http_client=self._http,
                        max_sse_event_size=config.max_result_bytes,
                    )
                client = Client(
                    transport,
                    mode=config.protocol,
                    elicitation_callback=self._elicit,
                    extensions=[TasksExtension()],
                    message_handler=self._notified,
                    client_info=_CLIENT_INFO,
                    cache=None,
                )
                async with asyncio.timeout(config.discovery_timeout):
                    await stack.enter_async_context(client)
                self._client = client
                log.info(
                    "MCP server %s: connected (%s, protocol %s)",
                    self.name,
                    "stdio" if stdio else "Streamable HTTP",
                    client.protocol_version,
                )
                await self._list(client)
                served = True
                self.serving = True
                self.last_error = None
                self.discovered.set()
                await self._watch(client, stdio)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # However a hostile or broken server fails the SDK, the sidecar goes on.
            self._failed(_why(exc))
        return served

    def _failed(self, why: str) -> None:
        if self.serving or why != self.last_error:
            log.warning("MCP server %s is not serving: %s", self.name, why)
        self.last_error = why
        self.serving = False

    async def _list(self, client: Client) -> None:
        """Every page of the server's tools into the catalog."""
        tools: list[types.Tool] = []
        cursor: str | None = None
        ttl = None
        try:
            async with asyncio.timeout(self.config.discovery_timeout):
                for _ in range(_MAX_PAGES):
                    page = await client.list_tools(cursor=cursor, cache_mode="bypass")
                    tools.extend(page.tools)
                    if ttl is None:
                        ttl = getattr(page, "ttl_ms", None)
                    cursor = page.next_cursor
                    if cursor is None or len(tools) > self.config.max_tools:
                        break
        except TimeoutError:
            if self._stdio is not None:
                self._stdio.hung = True
            raise
        self._ttl = ttl / 1000 if ttl else None
        listing: ToolList = await asyncio.to_thread(tool_list, tools, self.config)
        self._tasks = listing.tasks
        await self._on_discovered(self.name, listing.response, listing.retries)

    async def _watch(self, client: Client, stdio: StdioTransport | None) -> None:
        """Re-list on notice, on expiry and on schedule, until the connection ends."""
        capabilities = client.server_capabilities
        async with asyncio.TaskGroup() as group:
            if stdio is not None:
                group.create_task(_exit_of(stdio))
            if (
                client.protocol_version == "2026-07-28"
                and capabilities.tools is not None
                and capabilities.tools.list_changed
            ):
                group.create_task(self._listen(client))
            await self._relisting(client)

    async def _relisting(self, client: Client) -> None:
        config = self.config
        while True:
            interval = config.health_interval
            if self._ttl is not None:
                interval = min(interval, self._ttl)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(interval, config.min_relist_interval)):
                    await self._relist.wait()
            self._relist.clear()
            started = time.monotonic()
            await self._list(client)
            rest = config.min_relist_interval - (time.monotonic() - started)
            if rest > 0:
                await asyncio.sleep(rest)

    async def _listen(self, client: Client) -> None:
        """2026-07-28: list changes arrive on a ``subscriptions/listen`` stream."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._relist.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Without the stream the schedule and the TTL still re-list.
            log.info("MCP server %s: no list-change subscription (%s)", self.name, exc)


async def _exit_of(stdio: StdioTransport) -> None:
    """Raises ServerExited once the started process has ended."""
    await stdio.exited.wait()
    code = stdio.process.returncode if stdio.process is not None else None
    why = stdio.why or "its process exited"
    raise ServerExited(why + (f" (status {code})" if code is not None else ""))


def _why(exc: BaseException) -> str:
    """Why a connection ended, in a line an operator reads."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "it did not answer within discovery_timeout"
    if isinstance(exc, ServerExited | MCPError | OSError):
        return str(exc)[:_MAX_ERROR_TEXT] or type(exc).__name__
    log.debug("MCP server connection failed", exc_info=exc)
    return f"{type(exc).__name__}: {str(exc)[:_MAX_ERROR_TEXT]}"


def _trace(metadata: Sequence[tuple[str, str | bytes]]) -> dict[str, Any] | None:
    meta = {k: v for k, v in metadata if k in _TRACE_KEYS and isinstance(v, str)}
    return meta or None


def _throttled(report: Callable[[float, float | None, str], None]) -> ProgressFnT:
    """A progress callback passing reports on through a token bucket (a burst, then a rate):
    a server flooding progress cannot flood the caller's stream. The last report (progress
    reaching the total) always goes."""
    tokens, last = float(_PROGRESS_BURST), time.monotonic()

    async def forward(progress: float, total: float | None, message: str | None) -> None:
        nonlocal tokens, last
        now = time.monotonic()
        tokens = min(_PROGRESS_BURST, tokens + (now - last) * _PROGRESS_RATE)
        last = now
        final = total is not None and progress >= total
        if tokens < 1 and not final:
            return
        tokens = max(0.0, tokens - 1)
        report(progress, total, (message or "")[:_MAX_ERROR_TEXT])

    return forward
