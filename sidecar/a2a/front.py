"""The A2A front: the gRPC binding on the sidecar's port, and an HTTP listener for the
agent card, the JSON-RPC binding and the HTTP+JSON binding.

Both sides serve one :class:`~sidecar.a2a.handler.TaskHandler` through the SDK's own
servicer and routes, behind the sidecar's TLS (``server.tls``, on the HTTP listener too)
and its principals (a bearer token, or on gRPC a client certificate), authenticated by
the principals of the configuration applied now, before a request's body is looked at.
A caller that proves nothing is UNAUTHENTICATED on gRPC and HTTP 401 on HTTP, audited as
``auth_failed``. The public card at ``/.well-known/agent-card.json`` is open to all, as
A2A discovery needs; the extended card (``GetExtendedAgentCard``) lists the skills the
caller may use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import grpc
import uvicorn
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.grpc_handler import (
    DefaultGrpcServerCallContextBuilder,
    GrpcHandler,
)
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.types import a2a_pb2, a2a_pb2_grpc
from a2a.utils.errors import A2AError
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from sidecar.a2a.card import CardMaker, Interfaces
from sidecar.a2a.errors import DOMAIN, Refused, to_a2a
from sidecar.a2a.handler import PRINCIPAL, SHAPE, TaskHandler, push_body
from sidecar.agent.runtime import Runtime
from sidecar.errors import StartupError, Unauthenticated
from sidecar.security.identity import Principal
from sidecar.security.peers import PeerCertificates

__all__ = ["SERVICE_NAME", "A2AFront"]

log = logging.getLogger(__name__)

SERVICE_NAME = a2a_pb2.DESCRIPTOR.services_by_name["A2AService"].full_name


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


class _Servicer(GrpcHandler):
    """The SDK's servicer; a refusal the spec has no error for goes out with the
    sidecar's code, reason and retry delay instead of UNKNOWN."""

    async def abort_context(self, error: A2AError, context: grpc.aio.ServicerContext) -> None:
        if not isinstance(error, Refused):
            await super().abort_context(error, context)
            return
        info = error_details_pb2.ErrorInfo(reason=error.reason, domain=DOMAIN)
        details = [_pack(info)]
        if error.retry_after is not None:
            delay = duration_pb2.Duration()
            delay.FromNanoseconds(round(error.retry_after * 1e9))
            details.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
        status = rpc_status.to_status(
            status_pb2.Status(
                code=getattr(code_pb2, error.code.name), message=error.message, details=details
            )
        )
        await context.abort(status.code, status.details, status.trailing_metadata)


class A2AFront:
    """Serves the A2A protocol over a runtime's agent.

    Args:
        runtime: The started runtime (its ``a2a`` section is set).
    """

    service_name = SERVICE_NAME

    def __init__(self, runtime: Runtime) -> None:
        config = runtime.config
        settings = config.a2a
        if settings is None:
            raise StartupError("the A2A front needs the a2a section")
        self._runtime = runtime
        self._settings = settings
        self._push = bool(config.background.callbacks.allowed_hosts) and config.background.enabled
        self.cards: CardMaker | None = None
        self._handler: TaskHandler | None = None
        self._http: _HttpServer | None = None
        self._peers = PeerCertificates()
        self.http_port: int | None = None

    @property
    def handler(self) -> TaskHandler:
        """The operations, over the runtime's agent (made once the runtime started)."""
        if self._handler is None:
            self._handler = TaskHandler(
                self._runtime.agent, self._settings, card=self._extended_card, push=self._push
            )
        return self._handler

    # -- who calls ---------------------------------------------------------------------

    def authenticate(self, metadata: Any, peer: Any, method: str, where: str) -> Principal:
        """The principal of a call.

        Raises:
            Unauthenticated: credentials are required and these name no principal.
        """
        authenticator = self._runtime.snapshot.authenticator
        try:
            return authenticator.authenticate(metadata, peer)
        except Unauthenticated as exc:
            audit = self._runtime.audit
            if audit.enabled:
                audit.record("auth_failed", "", method=method, peer=where, message=exc.message)
            raise

    def _extended_card(self, principal: Principal) -> a2a_pb2.AgentCard:
        assert self.cards is not None
        return self.cards.extended(principal)

    # -- gRPC ------------------------------------------------------------------------

    def register(self, server: grpc.aio.Server) -> None:
        """Serve the gRPC binding on ``server`` (the sidecar's)."""
        servicer = _Servicer(self.handler, context_builder=_GrpcCaller(self))
        a2a_pb2_grpc.add_A2AServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]

    # -- the process -----------------------------------------------------------------

    async def start(self, grpc_port: int) -> None:
        """Bind the HTTP listener (when configured) and make the cards.

        Raises:
            StartupError: the port cannot be bound, a TLS file or the signing key cannot
                be read.
        """
        config = self._runtime.config
        settings = self._settings
        # Tasks' push notifications are the A2A task, whichever replica delivers them.
        self._runtime.agent.runs.callback_shapes[SHAPE] = push_body
        interfaces = Interfaces()
        if settings.grpc:
            interfaces.grpc = settings.grpc_url or f"{config.server.host}:{grpc_port}"
        http = settings.http
        if http is not None:
            host = http.host or config.server.host
            self._http = _HttpServer(host, http.port, config.server.tls, self._peers)
            self.http_port = self._http.bind()
            scheme = "https" if config.server.tls is not None else "http"
            base = http.public_url or f"{scheme}://{_url_host(host)}:{self.http_port}"
            interfaces.jsonrpc = base + http.jsonrpc_path
            if http.rest:
                interfaces.rest = base + http.rest_prefix
        self.cards = CardMaker(config, interfaces, push=self._push)
        if self._http is not None and http is not None:
            routes: list[BaseRoute] = [
                *create_agent_card_routes(self.cards.public),
                *create_jsonrpc_routes(
                    self.handler, http.jsonrpc_path, context_builder=_HttpCaller()
                ),
            ]
            if http.rest:
                routes += create_rest_routes(
                    self.handler, context_builder=_HttpCaller(), path_prefix=http.rest_prefix
                )
            app = Starlette(routes=routes)
            protected = [http.jsonrpc_path, http.rest_prefix + "/"]
            await self._http.start(_Authenticating(app, self, protected, self._peers))

    async def stop(self) -> None:
        """Stop the HTTP listener (streams in flight end)."""
        if self._http is not None:
            await self._http.stop()


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1" if host != "::" else "[::1]"
    return f"[{host}]" if ":" in host else host


class _GrpcCaller(DefaultGrpcServerCallContextBuilder):
    """Names the principal of a gRPC call before its request is served."""

    def __init__(self, front: A2AFront) -> None:
        self._front = front

    def build(self, context: grpc.aio.ServicerContext) -> ServerCallContext:
        call = super().build(context)
        try:
            principal = self._front.authenticate(
                context.invocation_metadata() or (),
                context.auth_context(),
                "A2AService",
                context.peer(),
            )
        except Unauthenticated as exc:
            raise to_a2a(exc) from None
        call.state[PRINCIPAL] = principal
        return call


class _HttpCaller(DefaultServerCallContextBuilder):
    """Passes on the principal the middleware named."""

    def build(self, request: Request) -> ServerCallContext:
        call = super().build(request)
        # The bearer token stays out of the call's state (the SDK reads A2A-Version there).
        call.state.get("headers", {}).pop("authorization", None)
        call.state[PRINCIPAL] = request.scope[PRINCIPAL]
        return call


class _Authenticating:
    """Authenticates every request under the protected paths (HTTP 401 for a caller
    that proves nothing), before the SDK reads its body."""

    def __init__(
        self, app: ASGIApp, front: A2AFront, protected: list[str], peers: PeerCertificates
    ) -> None:
        self._app = app
        self._front = front
        self._protected = protected
        self._peers = peers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and any(
            scope["path"] == p or scope["path"].startswith(p) for p in self._protected
        ):
            metadata = [
                (k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"]
            ]
            client = scope.get("client")
            where = f"{client[0]}:{client[1]}" if client else ""
            try:
                scope[PRINCIPAL] = self._front.authenticate(
                    metadata, self._peers.identity(scope), scope["path"], where
                )
            except Unauthenticated as exc:
                response = JSONResponse(
                    {
                        "error": {
                            "code": 401,
                            "status": "UNAUTHENTICATED",
                            "message": exc.message,
                            "details": [
                                {
                                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                                    "reason": "UNAUTHENTICATED",
                                    "domain": DOMAIN,
                                }
                            ],
                        }
                    },
                    status_code=401,
                    headers={"www-authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        await self._app(scope, receive, send)


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The sidecar handles its signals itself (commands/serve.py): a drain stops this.
        yield


class _HttpServer:
    """uvicorn on a socket bound before it starts, so the port is known at once."""

    def __init__(self, host: str, port: int, tls: Any, peers: PeerCertificates) -> None:
        self._host = host
        self._port = port
        self._tls = tls
        self._peers = peers
        self._socket: socket.socket | None = None
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None

    def bind(self) -> int:
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self._host, self._port))
        except OSError:
            sock.close()
            raise StartupError(f"a2a.http: cannot listen on {self._host}:{self._port}") from None
        sock.listen(128)
        sock.setblocking(False)
        self._socket = sock
        port: int = sock.getsockname()[1]
        return port

    async def start(self, app: ASGIApp) -> None:
        tls: dict[str, Any] = {}
        if self._tls is not None:
            tls = {"ssl_certfile": self._tls.cert_file, "ssl_keyfile": self._tls.key_file}
            if self._tls.client_ca_file is not None:
                tls |= {
                    "ssl_ca_certs": self._tls.client_ca_file,
                    "ssl_cert_reqs": ssl.CERT_REQUIRED,
                }
        config = uvicorn.Config(
            app,
            lifespan="off",
            log_level="warning",
            access_log=False,
            server_header=False,
            timeout_graceful_shutdown=1,
            **tls,
        )
        try:
            config.load()
        except (OSError, ssl.SSLError) as exc:
            raise StartupError(f"a2a.http: TLS files cannot be read ({exc})") from None
        config.http_protocol_class = self._peers.protocol(config.http_protocol_class)
        server = _Server(config)
        server.lifespan = config.lifespan_class(config)
        assert self._socket is not None
        await server.startup(sockets=[self._socket])
        self._server = server
        self._task = asyncio.get_running_loop().create_task(server.main_loop(), name="a2a-http")

    async def stop(self) -> None:
        server, task = self._server, self._task
        if server is None or task is None:
            return
        server.should_exit = True
        await task
        await server.shutdown(sockets=[self._socket] if self._socket is not None else None)
        self._server = None
