"""The MCP front: the sidecar as an MCP server over Streamable HTTP, beside the gRPC front.

It serves the runtime's agent as :mod:`sidecar.api` does, with MCP as the protocol: the
SDK's Streamable HTTP application (both revisions: 2026-07-28 and the 2025 handshake with
its sessions) behind the :class:`~sidecar.mcp_server.guard.Guard`, on the sidecar's
bounded HTTP listener (:mod:`sidecar.http.listener`: a read timeout and a connection cap,
``mcp.read_timeout`` and ``mcp.max_connections``), in the sidecar's own event loop. TLS
is the gRPC port's (``server.tls``: its certificate, and
with ``client_ca_file`` a client certificate is required); the callers are its principals,
proving themselves with their bearer tokens.

The drain: :meth:`McpFront.stop` stops taking connections and gives requests in flight the
grace period (the agent refuses new calls meanwhile, as it refuses new runs).
"""

from __future__ import annotations

import logging
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.routing import Route

from agentsidecar.addresses import is_loopback
from sidecar.agent.runtime import Runtime
from sidecar.http.listener import HttpListener
from sidecar.mcp_server.changes import ToolListChanges
from sidecar.mcp_server.guard import PRINCIPAL, Guard
from sidecar.mcp_server.handlers import build_server, state_key, task_board
from sidecar.mcp_server.sessions import BoundedSessions, SessionIdFilter
from sidecar.security.identity import ANONYMOUS, Principal
from sidecar.security.peers import PeerCertificates
from sidecar.telemetry import own_version

__all__ = ["McpFront"]

log = logging.getLogger(__name__)


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
        self._listener: HttpListener | None = None
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
        listener = HttpListener(
            "mcp",
            mcp.host,
            mcp.port,
            tls=config.server.tls,
            limits=mcp.limits,
            peers=peers,
            grace=config.server.grace_period,
            lifespan=True,  # the SDK's session manager runs in the app's lifespan
        )
        self.port = listener.bind()
        await listener.start(guarded)
        self._listener = listener
        return self.port

    async def stop(self) -> None:
        """Stop taking connections; requests in flight get the grace period."""
        if self._listener is not None:
            await self._listener.stop()
        if self._changes is not None:
            await self._changes.close()
        await self._tasks.close()
