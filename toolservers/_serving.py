"""Serve a set of tools: the gRPC server, health, reflection, signals and the drain.

Shutdown order on SIGTERM (or SIGINT):

1. New tool calls are refused with UNAVAILABLE, so a caller retries elsewhere.
   (Left to ``server.stop()``, grpc would answer CANCELLED, which callers do
   not retry.)
2. Health turns NOT_SERVING for every service, so watchers prune this server.
3. Running calls get the grace period to finish; a second signal ends the wait.
4. The server stops; calls still running are cancelled.

With ``unix_socket`` the server also listens on a Unix domain socket. grpc would replace
any socket at the path, a live server's included, so nothing may answer there first.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from agentsidecar.listening import cannot_listen
from agentsidecar.serving import (
    SOCKET_MODE,
    TokenCheck,
    UnixSocketError,
    claim_unix_socket,
    enable_reflection,
    server_credentials,
    socket_umask,
)
from agentsidecar.tls import TlsFileError
from agentsidecar.v1 import tool_pb2_grpc
from toolservers._descriptors import list_tools_response
from toolservers._exceptions import ToolServerError
from toolservers._options import ServeOptions
from toolservers._runner import ToolRunner
from toolservers._service import SERVICE_NAME, ToolService
from toolservers._tool import Tool

logger = logging.getLogger("toolservers")

# After the tool calls have drained, how long other RPCs get to end. Health
# Watch streams never end on their own; this bounds how long they hold the
# stop up, and gives them time to deliver NOT_SERVING first.
_FINAL_GRACE = 0.25

KEEPALIVE_POLICY = (
    # Accept a caller's keepalive pings every 10 s, also on a connection with no call in
    # flight (gRPC's default is one per 5 minutes, and GOAWAY too_many_pings beyond).
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
)
_HEALTH_SERVICE: str = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name


async def serve_tools(server_name: str, tools: Sequence[Tool], options: ServeOptions) -> None:
    """Serve ``tools`` until a signal (or cancellation), then drain; see the module docstring.

    Raises:
        ToolServerError: the address cannot be bound.
    """
    executor = ThreadPoolExecutor(options.sync_workers, thread_name_prefix=f"{server_name}-tool")
    runners = {
        tool.name: ToolRunner(tool, executor, options.latency_for(tool.name)) for tool in tools
    }
    tracing = None
    if options.otlp_endpoint:
        from toolservers._tracing import HandlerTracing

        tracing = HandlerTracing(server_name, options.otlp_endpoint)
    identity = None
    fetched = None
    if options.identity_keys_file is not None or options.identity_keys_from is not None:
        from toolservers._identity import IdentityVerifier
        from toolservers._identity_keys import FetchedKeys

        assert options.identity_audience is not None
        try:
            if options.identity_keys_from is not None:
                fetched = FetchedKeys(options.identity_keys_from, options.identity_keys_ca)
            identity = IdentityVerifier(
                options.identity_keys_file,
                options.identity_audience,
                options.identity_issuer,
                fetched=fetched,
                required=options.identity_required,
                leeway=options.identity_leeway,
            )
        except ValueError as exc:
            raise ToolServerError(str(exc)) from None
    service = ToolService(runners, list_tools_response(tools), tracing, identity)
    health = HealthServicer()
    # No SO_REUSEPORT: a second server on a taken port must fail, not share it.
    server = grpc.aio.server(
        options=[("grpc.so_reuseport", 0), *KEEPALIVE_POLICY],
        interceptors=[TokenCheck([options.token])] if options.token else None,
    )
    tool_pb2_grpc.add_ToolServiceServicer_to_server(service, server)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    enable_reflection(server, (SERVICE_NAME, _HEALTH_SERVICE))
    addresses = [f"{_host_literal(options.host)}:{options.port}"]
    if options.unix_socket is not None:
        addresses.append(f"unix:{options.unix_socket}")
    # Before gRPC tries: its refusal is a C-core log line that names no one.
    reason = cannot_listen(options.host, options.port)
    if reason is not None:
        raise ToolServerError(f"cannot listen on {addresses[0]}: {reason}")
    signals = _Signals()
    # The keys are fetched beside serving: calls are refused until they arrive.
    fetching = asyncio.get_running_loop().create_task(fetched.run()) if fetched else None
    try:
        if options.unix_socket is not None:
            try:
                claim_unix_socket(options.unix_socket)
            except UnixSocketError as exc:
                raise ToolServerError(
                    f"cannot listen on unix:{options.unix_socket}: {exc}"
                ) from None
        with socket_umask(options.unix_socket is not None):
            ports = []
            for address in addresses:
                try:
                    if options.tls_cert_file is not None and options.tls_key_file is not None:
                        # Credentials of its own per port: each port's certificate fetcher
                        # answers "unchanged" after its first load.
                        credentials = server_credentials(
                            options.tls_cert_file, options.tls_key_file, options.tls_client_ca_file
                        )
                        ports.append(server.add_secure_port(address, credentials))
                    else:
                        ports.append(server.add_insecure_port(address))
                except TlsFileError as exc:
                    raise ToolServerError(str(exc)) from None
                except RuntimeError as exc:
                    raise ToolServerError(f"cannot listen on {address}: {exc}") from exc
            port = ports[0]
            await server.start()
        if options.unix_socket is not None:
            os.chmod(options.unix_socket, SOCKET_MODE)  # the server's user and group
        for service_name in ("", SERVICE_NAME):
            await health.set(service_name, health_pb2.HealthCheckResponse.SERVING)
        if options.handle_signals:
            signals.install()
        listening = f"{_host_literal(options.host)}:{port}"
        # Start-up objects live as long as the process: freeze them so full collections
        # walk only what calls allocate (otherwise a pause of tens of milliseconds).
        gc.collect()
        gc.freeze()
        logger.info("%s: serving %d tools on %s", server_name, len(runners), listening)
        if options.unix_socket is not None:
            print(f"socket on unix:{options.unix_socket}", flush=True)
        print(f"listening on {listening}", flush=True)
        await signals.first.wait()
        await _drain(server, service, health, options.grace, signals.second)
    finally:
        signals.remove()
        if fetching is not None:
            fetching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await fetching
        await server.stop(None)
        # Sync tools still running finish in their threads; their results are dropped.
        executor.shutdown(wait=False, cancel_futures=True)
        if tracing is not None:
            await asyncio.to_thread(tracing.shutdown)  # exports what is buffered


async def _drain(
    server: grpc.aio.Server,
    service: ToolService,
    health: HealthServicer,
    grace: float,
    hurry: asyncio.Event,
) -> None:
    # Refuse first, then announce: whoever sees NOT_SERVING is refused too.
    service.begin_drain()
    await health.enter_graceful_shutdown()
    logger.info("draining: %d calls running, up to %.1fs to finish", service.in_flight, grace)
    idle = asyncio.ensure_future(service.wait_idle())
    hurried = asyncio.ensure_future(hurry.wait())
    try:
        await asyncio.wait((idle, hurried), timeout=grace, return_when=asyncio.FIRST_COMPLETED)
    finally:
        idle.cancel()
        hurried.cancel()
    if service.in_flight:
        logger.warning("cancelling %d calls still running", service.in_flight)
        await server.stop(None)
    else:
        await server.stop(_FINAL_GRACE)
    logger.info("stopped")


class _Signals:
    """SIGTERM/SIGINT as two events: the first signal, and any later one."""

    def __init__(self) -> None:
        self.first = asyncio.Event()
        self.second = asyncio.Event()
        self._installed: list[signal.Signals] = []

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._received, sig)
            self._installed.append(sig)

    def remove(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self._installed:
            loop.remove_signal_handler(sig)
        self._installed.clear()

    def _received(self, sig: signal.Signals) -> None:
        if self.first.is_set():
            logger.info("%s again: stopping without waiting", sig.name)
            self.second.set()
        else:
            logger.info("%s: draining", sig.name)
            self.first.set()


def _host_literal(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def run_event_loop(main: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop
    except ImportError:  # uvloop is optional (and unavailable on Windows)
        asyncio.run(main)
    else:
        uvloop.run(main)
