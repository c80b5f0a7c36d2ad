"""The MCP front: the sidecar as an MCP server over Streamable HTTP, beside the gRPC front.

It serves the runtime's agent as :mod:`sidecar.api` does, with MCP as the protocol: the
SDK's Streamable HTTP application (both revisions: 2026-07-28 and the 2025 handshake with
its sessions) behind the :class:`~sidecar.mcp_server.guard.Guard`, on uvicorn, in the
sidecar's own event loop. TLS is the gRPC port's (``server.tls``: its certificate, and
with ``client_ca_file`` a client certificate is required); the callers are its principals,
proving themselves with their bearer tokens.

The drain: :meth:`McpFront.stop` stops taking connections and gives requests in flight the
grace period (the agent refuses new calls meanwhile, as it refuses new runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import uvicorn
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.routing import Route

from agentsidecar.addresses import is_loopback
from sidecar.agent.runtime import Runtime
from sidecar.errors import StartupError
from sidecar.mcp_server.changes import ToolListChanges
from sidecar.mcp_server.guard import PRINCIPAL, Guard
from sidecar.mcp_server.handlers import build_server, state_key, task_board
from sidecar.mcp_server.sessions import BoundedSessions, SessionIdFilter
from sidecar.security.identity import ANONYMOUS, Principal
from sidecar.security.peers import PeerCertificates
from sidecar.telemetry import own_version

__all__ = ["McpFront"]

log = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the sidecar's own drain the process."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _principal_of(ctx: Any) -> Principal:
    request = ctx.request
    if request is None:
        return ANONYMOUS
    principal = request.scope.get("state", {}).get(PRINCIPAL)
    return principal if isinstance(principal, Principal) else ANONYMOUS


class McpFront:
    """Serves a runtime's agent to MCP hosts over Streamable HTTP until stopped.

    Args:
        runtime: The started runtime.
    """

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._tasks = task_board(runtime.config.mcp)
        self.sessions: BoundedSessions | None = None
        self._changes: ToolListChanges | None = None
        self.port = 0

    @property
    def url(self) -> str:
        config = self._runtime.config
        scheme = "https" if config.server.tls is not None else "http"
        return f"{scheme}://{config.mcp.host}:{self.port}{config.mcp.path}"

    async def start(self) -> int:
        """Start serving; return the bound port.

        Raises:
            StartupError: the port cannot be bound, or a TLS file cannot be read.
        """
        runtime = self._runtime
        config = runtime.config
        mcp = config.mcp
        assert mcp.port is not None
        changes = self._changes = ToolListChanges(max_listeners=mcp.sessions.max_sessions)
        runtime.on_catalog_change(changes.changed)
        server = build_server(
            runtime.agent,
            mcp,
            _principal_of,
            own_version(),
            state_key=state_key(mcp),
            tasks=self._tasks,
            changes=changes,
            ready=runtime.became_ready.wait,
        )
        SessionIdFilter.install()

        def quota(name: str) -> int | None:
            principal = runtime.snapshot.authenticator.principal(name)
            return principal.quota.mcp_sessions if principal is not None else None

        sessions = BoundedSessions(
            server,
            mcp.sessions,
            quota=quota,
            on_count=runtime.telemetry.mcp_sessions,
            on_end=changes.forget,
            max_request_body_size=mcp.max_body_bytes,
            # The guard checks Host and Origin with the configured allow-list; the SDK's own
            # check on a loopback bind would refuse every origin but loopback's.
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.sessions = sessions
        app = Starlette(
            routes=[Route(mcp.path, endpoint=StreamableHTTPASGIApp(sessions))],
            lifespan=lambda _: sessions.run(),
        )
        peers = PeerCertificates()
        guarded = Guard(
            app,
            authenticator=lambda: runtime.snapshot.authenticator,
            audit=runtime.audit,
            allowed_origins=mcp.allowed_origins,
            loopback=is_loopback(mcp.host),
            peers=peers,
        )
        tls: dict[str, Any] = {}
        if config.server.tls is not None:
            server_tls = config.server.tls
            tls = {"ssl_certfile": server_tls.cert_file, "ssl_keyfile": server_tls.key_file}
            if server_tls.client_ca_file is not None:
                tls["ssl_ca_certs"] = server_tls.client_ca_file
                tls["ssl_cert_reqs"] = ssl.CERT_REQUIRED
        family = socket.AF_INET6 if ":" in mcp.host else socket.AF_INET
        sock = socket.socket(family)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((mcp.host, mcp.port))
        except OSError as exc:
            sock.close()
            raise StartupError(f"mcp: cannot listen on {mcp.host}:{mcp.port}: {exc}") from None
        settings = uvicorn.Config(
            guarded,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=max(1, round(config.server.grace_period)),
            **tls,
        )
        try:
            settings.load()  # reads the TLS files now, so a bad one stops the start
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            raise StartupError(f"mcp: the TLS files cannot be used: {exc}") from None
        settings.http_protocol_class = peers.protocol(settings.http_protocol_class)
        self._server = _Server(settings)
        self.port = sock.getsockname()[1]
        self._task = asyncio.get_running_loop().create_task(
            self._server.serve(sockets=[sock]), name="mcp-front"
        )
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise StartupError("mcp: the endpoint stopped as it started")
            await asyncio.sleep(0.01)
        return self.port

    async def stop(self) -> None:
        """Stop taking connections; requests in flight get the grace period."""
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._changes is not None:
            await self._changes.close()
        await self._tasks.close()
