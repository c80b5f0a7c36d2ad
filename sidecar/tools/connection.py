"""One tool server as the sidecar sees it: a gRPC channel, its health, its breaker.

A background task watches the server's ``grpc.health.v1`` status. When the server comes
(back) to SERVING, its tools are discovered again, so a restarted server with new tools
is picked up without restarting the sidecar. While it is not serving, its tools are left
out of the list the model sees.

Calls go on one long-lived ``CallTools`` stream when the server offers it (and
``call_stream`` is not turned off), one ``CallTool`` each otherwise
(:mod:`sidecar.tools.call_stream`); :meth:`ToolServerConnection.call` is the same call
either way.

With ``tls`` the channel dials TLS (mutual TLS with a certificate); when the certificate,
key or CA files change, a new channel takes the new calls and the old one closes once
its calls have ended. A token travels as ``authorization: Bearer …`` metadata on every
call, added to the call itself: grpc's call credentials would run a Python plugin on a
thread of their own for each call.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentsidecar.tls import FileWatch
from agentsidecar.v1 import tool_pb2, tool_pb2_grpc
from sidecar.config import ToolServerConfig
from sidecar.errors import StartupError
from sidecar.security.tls import channel_credentials
from sidecar.tools.breaker import CircuitBreaker
from sidecar.tools.call_stream import CallStream, StreamedCallError
from sidecar.tools.hedging import Hedging
from sidecar.tools.link import CallHooks
from sidecar.types import BreakerState

log = logging.getLogger(__name__)

_CHANNEL_OPTIONS = [
    # The environment's proxy variables route model requests only. gRPC would read some
    # of them (https_proxy, http_proxy, grpc_proxy: lower case only) for tool servers too
    # and carry their tokens through the proxy's tunnel: a tool server is dialled directly.
    ("grpc.enable_http_proxy", 0),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.http2.max_pings_without_data", 0),
    # Reconnect fast after a tool server restarts; the default backoff reaches minutes.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2_000),
    ("grpc.enable_retries", 0),
]

_CERTIFICATE_CHECK = 5.0  # seconds between checks of the TLS files
_OLD_CHANNEL_GRACE = 60.0  # seconds a replaced channel's calls get to end

_TLS_SIGNS = ("handshake", "ssl", "certificate", "tls")


def unreachable_reason(exc: grpc.aio.AioRpcError) -> str:
    """Why a call to a tool server failed, as an operator reads it: a failed TLS handshake
    (ours refusing its certificate, or it refusing ours) is named as such."""
    code = exc.code().name
    details = (exc.details() or "").strip()
    lowered = details.lower()
    if "secure read failed" in lowered or "secure write failed" in lowered:
        # The server closed the connection during the handshake: it refused the sidecar.
        return (
            "TLS handshake failed: the server closed the connection, refusing the sidecar "
            "(does it require a client certificate: tls.cert_file and tls.key_file?) "
            f"({code}: {details[:300]})"
        )
    if any(sign in lowered for sign in _TLS_SIGNS):
        return f"TLS handshake failed ({code}: {details[:300]})"
    return f"{code}: {details[:300]}" if details else code


DiscoveryListener = Callable[[str, tool_pb2.ListToolsResponse], Awaitable[None]]
StateListener = Callable[[str, BreakerState, BreakerState], None]


class ToolServerConnection:
    """A tool server's channel, stub, health and circuit breaker."""

    interactive = False
    """Its calls report no progress and ask nothing (see :mod:`sidecar.tools.link`)."""

    def __init__(
        self,
        config: ToolServerConfig,
        *,
        on_discovered: DiscoveryListener,
        on_breaker_change: StateListener | None = None,
        token: str | None = None,
    ) -> None:
        """Raises:
        StartupError: a TLS file cannot be read."""
        self.config = config
        self.name = config.name
        self.metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ()
        )
        """Sent with every call (the token)."""
        self._options: list[tuple[str, int | str]] = [
            *_CHANNEL_OPTIONS,
            # No more often than a server that sets nothing accepts (gRPC's default: one
            # ping per 5 minutes without data; more, and it answers GOAWAY too_many_pings).
            ("grpc.keepalive_time_ms", int(config.keepalive_time * 1000)),
            ("grpc.max_receive_message_length", config.max_result_bytes),
        ]
        if config.tls is not None and config.tls.server_name:
            self._options.append(("grpc.ssl_target_name_override", config.tls.server_name))
        tls = config.tls
        self._files = (
            FileWatch([tls.ca_file, tls.cert_file, tls.key_file]) if tls is not None else None
        )
        self._stream: CallStream | None = None
        self._streams_offered = False
        self._dial()
        self._rotate_task: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self.breaker = CircuitBreaker(
            config.name,
            config.breaker,
            on_state_change=self._breaker_changed,
        )
        self._on_breaker_change = on_breaker_change
        self.hedging = Hedging(config.hedge) if config.hedge is not None else None
        """Its idempotent calls' second copies (``hedge``); None: each call is sent once."""
        self.serving = False
        self.last_error: str | None = None
        """Why the latest attempt to reach the server failed (a TLS handshake named as
        such), for the log lines that say it is missing; None once it answered."""
        self.discovered = asyncio.Event()
        self._on_discovered = on_discovered
        self._watch_task: asyncio.Task[None] | None = None

    def _dial(self) -> None:
        config = self.config
        credentials = channel_credentials(f"tool server {self.name}", config.tls)
        if credentials is None:
            channel = grpc.aio.insecure_channel(config.address, options=self._options)
        else:
            channel = grpc.aio.secure_channel(config.address, credentials, options=self._options)
        self.channel = channel
        self.stub = tool_pb2_grpc.ToolServiceStub(channel)
        self._health = health_pb2_grpc.HealthStub(channel)
        old, self._stream = self._stream, None
        if old is not None:
            self._closing_stream(old)
        if self._streams_offered:
            self._stream = self._new_stream()

    def _new_stream(self) -> CallStream:
        return CallStream(self.stub, self.metadata, self.config.max_result_bytes)

    def _closing_stream(self, stream: CallStream) -> None:
        """Close a replaced stream once its calls have ended (a new channel's stream
        takes the new ones)."""

        async def close() -> None:
            async with asyncio.timeout(_OLD_CHANNEL_GRACE):
                while stream.in_flight:  # noqa: ASYNC110 - its calls end on their own
                    await asyncio.sleep(0.1)
            await stream.close()

        task = asyncio.get_running_loop().create_task(close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _use_stream(self, offered: bool) -> None:
        """The server said (at discovery) whether it serves CallTools."""
        self._streams_offered = offered and self.config.call_stream
        if self._streams_offered and self._stream is None:
            self._stream = self._new_stream()
        elif not self._streams_offered and self._stream is not None:
            old, self._stream = self._stream, None
            self._closing_stream(old)

    async def call(
        self,
        request: tool_pb2.CallToolRequest,
        timeout: float,
        metadata: Sequence[tuple[str, str | bytes]],
        hooks: CallHooks | None = None,
    ) -> tool_pb2.ToolResult:
        """Run one call on the server: on its stream, or as one ``CallTool``.

        Raises:
            grpc.aio.AioRpcError: the call failed with this status.
        """
        stream = self._stream
        if stream is not None:
            try:
                return await stream.call(request, timeout, metadata)
            except StreamedCallError as exc:
                if exc.code() is not grpc.StatusCode.UNIMPLEMENTED:
                    raise
                # It said it serves the stream and does not: one call each from now on.
                log.warning("tool server %s serves no CallTools stream; unary calls", self.name)
                self._use_stream(False)
        if self.metadata:
            metadata = (*metadata, *self.metadata)
        response = await self.stub.CallTool(request, timeout=timeout, metadata=metadata or None)
        return response.result  # type: ignore[no-any-return]

    async def _rotate(self) -> None:
        """Dial anew when the TLS files change; the old channel's calls finish on it."""
        assert self._files is not None
        while True:
            await asyncio.sleep(_CERTIFICATE_CHECK)
            if not self._files.changed():
                continue
            old = self.channel
            try:
                self._dial()
            except StartupError as exc:  # half-written files: keep the old channel
                log.warning("tool server %s: TLS files not reloaded: %s", self.name, exc)
                continue
            log.info("tool server %s: TLS files changed; new calls use a new channel", self.name)
            closing = asyncio.get_running_loop().create_task(old.close(_OLD_CHANNEL_GRACE))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    @property
    def available(self) -> bool:
        """True when a call would be attempted now: serving, breaker not refusing."""
        return self.serving and self.breaker.allows_calls()

    @property
    def where(self) -> str:
        return self.config.address

    def _breaker_changed(self, name: str, old: BreakerState, new: BreakerState) -> None:
        if new is BreakerState.OPEN:
            log.warning(
                "tool server %s: circuit breaker open (%s); its tools are hidden from the "
                "model for %g s",
                name,
                "its trial call failed"
                if old is BreakerState.HALF_OPEN
                else self.breaker.failure_summary(),
                self.breaker.policy.reset_timeout,
            )
        else:
            log.info("tool server %s: circuit breaker %s", name, new.value)
        if self._on_breaker_change is not None:
            self._on_breaker_change(name, old, new)

    async def discover(self, timeout: float) -> bool:
        """List the server's tools and hand them to the discovery listener."""
        try:
            response = await self.stub.ListTools(
                tool_pb2.ListToolsRequest(), timeout=timeout, metadata=self.metadata or None
            )
        except grpc.aio.AioRpcError as exc:
            self.last_error = unreachable_reason(exc)
            log.warning("tool server %s: ListTools failed: %s", self.name, self.last_error)
            return False
        self.last_error = None
        self._use_stream(response.call_stream)
        await self._on_discovered(self.name, response)
        self.serving = True
        self.discovered.set()
        return True

    def start(self) -> None:
        """Start watching the server's health in the background."""
        loop = asyncio.get_running_loop()
        self._watch_task = loop.create_task(self._watch(), name=f"health-watch:{self.name}")
        if self._files is not None:
            self._rotate_task = loop.create_task(self._rotate(), name=f"tls-files:{self.name}")

    async def _watch(self) -> None:
        backoff = 0.1
        while True:
            try:
                if await self._watch_until_not_serving():
                    backoff = 0.1
                    # Draining or down: end the watch, so a server draining on SIGTERM
                    # is not held up by it, and ask again until it serves again.
                    await self._poll_until_serving()
                    continue
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                    # No health service: trust discovery alone.
                    if not self.serving:
                        await self.discover(self.config.discovery_timeout)
                    return
                reason = unreachable_reason(exc)
                if self.serving or reason != self.last_error:
                    log.warning("tool server %s unreachable: %s", self.name, reason)
                self.last_error = reason
                self.serving = False
            await asyncio.sleep(backoff * (0.5 + random.random()))
            backoff = min(backoff * 2, 2.0)

    async def _watch_until_not_serving(self) -> bool:
        """Follow the server's status; True once it says it is not serving."""
        stream = self._health.Watch(health_pb2.HealthCheckRequest(service=""))
        try:
            async for reply in stream:
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    if not self.serving:
                        # Back to SERVING (or first contact): its tools may have changed.
                        await self.discover(self.config.discovery_timeout)
                    continue
                if self.serving:
                    log.warning("tool server %s is not serving", self.name)
                self.serving = False
                return True
        finally:
            stream.cancel()
        return False

    async def _poll_until_serving(self) -> None:
        backoff = 0.1
        request = health_pb2.HealthCheckRequest(service="")
        while True:
            await asyncio.sleep(backoff * (0.5 + random.random()))
            reply = await self._health.Check(request, timeout=self.config.discovery_timeout)
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return  # the next watch discovers its tools again
            backoff = min(backoff * 2, 2.0)

    async def close(self) -> None:
        for task in (self._watch_task, self._rotate_task):
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        for closing in list(self._closing):
            closing.cancel()
        if self._stream is not None:
            await self._stream.close()
        await self.channel.close()
