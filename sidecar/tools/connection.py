"""One tool server as the sidecar sees it: a gRPC channel, its health, its breaker.

A background task watches the server's ``grpc.health.v1`` status. When the server comes
(back) to SERVING, its tools are discovered again, so a restarted server with new tools
is picked up without restarting the sidecar. While it is not serving, its tools are left
out of the list the model sees.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentsidecar.v1 import tool_pb2, tool_pb2_grpc
from sidecar.config import ToolServerConfig
from sidecar.tools.breaker import CircuitBreaker
from sidecar.types import BreakerState

log = logging.getLogger(__name__)

_CHANNEL_OPTIONS = [
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.http2.max_pings_without_data", 0),
    # Reconnect fast after a tool server restarts; the default backoff reaches minutes.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2_000),
    ("grpc.enable_retries", 0),
]

DiscoveryListener = Callable[[str, tool_pb2.ListToolsResponse], Awaitable[None]]
StateListener = Callable[[str, BreakerState, BreakerState], None]


class ToolServerConnection:
    """A tool server's channel, stub, health and circuit breaker."""

    def __init__(
        self,
        config: ToolServerConfig,
        *,
        on_discovered: DiscoveryListener,
        on_breaker_change: StateListener | None = None,
    ) -> None:
        self.config = config
        self.name = config.name
        options = [
            *_CHANNEL_OPTIONS,
            # No more often than a server that sets nothing accepts (gRPC's default: one
            # ping per 5 minutes without data; more, and it answers GOAWAY too_many_pings).
            ("grpc.keepalive_time_ms", int(config.keepalive_time * 1000)),
            ("grpc.max_receive_message_length", config.max_result_bytes),
        ]
        self.channel = grpc.aio.insecure_channel(config.address, options=options)
        self.stub = tool_pb2_grpc.ToolServiceStub(self.channel)
        self._health = health_pb2_grpc.HealthStub(self.channel)
        self.breaker = CircuitBreaker(
            config.name,
            config.breaker,
            on_state_change=self._breaker_changed,
        )
        self._on_breaker_change = on_breaker_change
        self.serving = False
        self.discovered = asyncio.Event()
        self._on_discovered = on_discovered
        self._watch_task: asyncio.Task[None] | None = None

    @property
    def available(self) -> bool:
        """True when a call would be attempted now: serving, breaker not refusing."""
        return self.serving and self.breaker.allows_calls()

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
            response = await self.stub.ListTools(tool_pb2.ListToolsRequest(), timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            log.warning("tool server %s: ListTools failed: %s", self.name, exc.code().name)
            return False
        await self._on_discovered(self.name, response)
        self.serving = True
        self.discovered.set()
        return True

    def start(self) -> None:
        """Start watching the server's health in the background."""
        self._watch_task = asyncio.get_running_loop().create_task(
            self._watch(), name=f"health-watch:{self.name}"
        )

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
                if self.serving:
                    log.warning("tool server %s unreachable: %s", self.name, exc.code().name)
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
        if self._watch_task is not None:
            self._watch_task.cancel()
            try:
                await self._watch_task
            except asyncio.CancelledError:
                pass
        await self.channel.close()
