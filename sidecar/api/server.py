"""The gRPC front: ``AgentService``, health and reflection on the sidecar's port (and its
Unix socket), and the drain.

Health (``grpc.health.v1``, the empty name and ``agentsidecar.v1.AgentService``) says
NOT_SERVING until every configured tool server has been discovered (or its discovery
timeout has passed, in which case its tools stay hidden until it appears), and again from
the moment the drain starts. Draining refuses new runs and gives in-flight runs the
configured grace period to finish.

Security (docs/security.md): the port serves TLS with ``server.tls`` (mutual TLS with a
client CA); every ``AgentService`` call is authenticated when ``auth.principals`` is set
(health and reflection stay open), by the principals of the configuration applied now.

With ``server.unix_socket`` the same server (its services, TLS and callers) also listens
on a Unix domain socket: grpc binds ``unix:PATH`` next to the TCP port. grpc itself would
replace any socket at the path, one a live sidecar serves included, so the sidecar first
checks that nothing answers there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from typing import Protocol

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from agentsidecar.listening import cannot_listen
from agentsidecar.serving import (
    SOCKET_MODE,
    UnixSocketError,
    claim_unix_socket,
    enable_reflection,
    socket_umask,
)
from agentsidecar.v1 import agent_pb2
from sidecar.agent.runtime import Runtime
from sidecar.api.identity_keys import IdentityKeysServicer
from sidecar.api.run_codec import GrpcRunCodec
from sidecar.api.service import AgentServicer, add_to_server
from sidecar.api.variants import SERVICE_NAME as VARIANTS_SERVICE
from sidecar.api.variants import VariantServicer
from sidecar.errors import StartupError
from sidecar.security.tls import server_credentials

__all__ = ["SERVICE_NAME", "GrpcFront", "GrpcService"]

log = logging.getLogger(__name__)


class _CallerLeft(logging.Filter):
    """gRPC core logs ``ExecuteBatchError raised in core by servicer method`` with a
    traceback when a handler ends just as its caller leaves (a deadline of a few
    milliseconds): the status had nowhere to go, nothing failed. Told as one DEBUG line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("ExecuteBatchError raised in core by servicer"):
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return log.isEnabledFor(logging.DEBUG)
        return True


def _quiet_core() -> None:
    core = logging.getLogger("grpc._cython.cygrpc")
    if not any(isinstance(f, _CallerLeft) for f in core.filters):
        core.addFilter(_CallerLeft())


def _claim_port(key: str, host: str, port: int) -> None:
    """Refuse a port that cannot be listened on, naming who holds it, before gRPC tries
    (its refusal is a C-core log line and "No address added")."""
    reason = cannot_listen(host, port)
    if reason is not None:
        raise StartupError(f"{key}: cannot listen on {host}:{port}: {reason}")


SERVICE_NAME = agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name
# After the drain's last refusal, how long no further call may arrive before the server
# stops (see Admission.wait_refusals_settled).
_REFUSALS_QUIET = 0.25


class GrpcService(Protocol):
    """Another service served on the same port (the A2A front's, the identity keys),
    behind the same TLS; it authenticates its calls itself, if at all."""

    @property
    def service_name(self) -> str:
        """Its full name, for health and reflection."""
        ...

    def register(self, server: grpc.aio.Server) -> None:
        """Add its handlers to ``server``."""
        ...


class GrpcFront:
    """Serves a runtime's agent over gRPC until it is stopped.

    Args:
        runtime: The started runtime whose agent it serves.
        services: Other fronts' services served on the same port.
    """

    def __init__(self, runtime: Runtime, services: Sequence[GrpcService] = ()) -> None:
        self._runtime = runtime
        # The identity keys, whether or not the sidecar signs (it says so): a reload may
        # turn signing on.
        keys = IdentityKeysServicer(lambda: runtime.snapshot.tool_identity)
        self._services = (*services, keys)
        self._names = (
            "",
            SERVICE_NAME,
            VARIANTS_SERVICE,
            *(s.service_name for s in self._services),
        )
        self.health = health.aio.HealthServicer()
        self._server: grpc.aio.Server | None = None
        self._health_server: grpc.aio.Server | None = None
        self._ready_task: asyncio.Task[None] | None = None
        self.port = 0
        self.health_port: int | None = None

    async def start(self) -> int:
        """Start serving; return the bound port. Health says SERVING once the runtime is
        ready.

        Raises:
            StartupError: the port or the socket cannot be bound, or a TLS file cannot be
                read.
        """
        runtime = self._runtime
        config = runtime.config.server
        _quiet_core()
        server = grpc.aio.server(
            options=[
                # gRPC would share a port another process holds with SO_REUSEPORT (a
                # second sidecar, an old one): both would answer, each half the calls.
                ("grpc.so_reuseport", 0),
                ("grpc.max_send_message_length", config.max_message_bytes),
                ("grpc.max_receive_message_length", config.max_message_bytes),
            ]
        )
        servicer = AgentServicer(
            runtime.agent,
            stream_buffer_bytes=config.stream_buffer_bytes,
            # The principals of the configuration applied now, read per call.
            authenticator=lambda: runtime.snapshot.authenticator,
        )
        add_to_server(servicer, server)
        assert runtime.variants is not None  # the runtime is started
        VariantServicer(
            runtime.variants, runtime.audit, lambda: runtime.snapshot.authenticator
        ).register(server)
        for service in self._services:
            service.register(server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        if config.reflection:
            enable_reflection(server, (*self._names[1:], health.SERVICE_NAME))
        for name in self._names:
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        _claim_port("server.port", config.host, config.port)
        addresses = [f"{config.host}:{config.port}"]
        if config.unix_socket is not None:
            try:
                claim_unix_socket(config.unix_socket)
            except UnixSocketError as exc:
                raise StartupError(f"server.unix_socket: {exc}") from None
            addresses.append(f"unix:{config.unix_socket}")
        with socket_umask(config.unix_socket is not None):
            bound = []
            for address in addresses:
                try:
                    if config.tls is not None:
                        # Credentials of its own per port: each port's certificate fetcher
                        # answers "unchanged" after its first load.
                        bound.append(
                            server.add_secure_port(address, server_credentials(config.tls))
                        )
                    else:
                        bound.append(server.add_insecure_port(address))
                except RuntimeError:
                    raise StartupError(f"cannot listen on {address}") from None
            self.port = bound[0]
            await server.start()
        self._server = server
        if config.unix_socket is not None:
            # Callers in other containers of the pod share the sidecar's group (fsGroup).
            os.chmod(config.unix_socket, SOCKET_MODE)
        if config.health_port is not None:
            # For probes that speak no TLS (the kubelet's): health alone, in plaintext.
            _claim_port("server.health_port", config.host, config.health_port)
            probes = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
            health_pb2_grpc.add_HealthServicer_to_server(self.health, probes)
            self.health_port = probes.add_insecure_port(f"{config.host}:{config.health_port}")
            await probes.start()
            self._health_server = probes
        self._ready_task = asyncio.get_running_loop().create_task(self._become_ready())
        return self.port

    async def _become_ready(self) -> None:
        await self._runtime.ready()
        # Background runs start (and those a stopped process left are taken up) once the
        # tools are known, here where their events' stored form is.
        await self._runtime.agent.runs.serve(GrpcRunCodec())
        for name in self._names:
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def stop(self, grace: float) -> None:
        """Drain: health NOT_SERVING, refuse new runs, let in-flight runs finish within
        ``grace`` seconds, interrupt the rest (each ends with a result its caller gets),
        then stop serving."""
        if self._ready_task is not None and not self._ready_task.done():
            self._ready_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ready_task
        await self.health.enter_graceful_shutdown()
        agent = self._runtime.agent
        # Refuse new runs with UNAVAILABLE (actionable) while the port stays open, and
        # give the runs in flight the grace period.
        agent.start_draining()
        deadline = asyncio.get_running_loop().time() + grace
        try:
            async with asyncio.timeout_at(deadline):
                await agent.wait_idle()
        except TimeoutError:
            log.warning("grace period over; interrupting the runs still in flight")
            # Each ends INTERRUPTED with a result its caller receives (run_finished
            # stays the last event of every stream), and is stored as such.
            await agent.interrupt_all("the sidecar stopped before the run ended")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline):
                await agent.wait_refusals_settled(_REFUSALS_QUIET)
        if self._server is not None:
            await self._server.stop(0.5)
        if self._health_server is not None:
            await self._health_server.stop(0)
