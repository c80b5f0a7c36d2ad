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

import logging
import re
from typing import Any
from urllib.parse import urlsplit

import grpc
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.grpc_handler import (
    DefaultGrpcServerCallContextBuilder,
    GrpcHandler,
)
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.types import a2a_pb2, a2a_pb2_grpc
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, VERSION_HEADER
from a2a.utils.errors import A2AError, VersionNotSupportedError
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from starlette.requests import Request

from agentsidecar.addresses import is_loopback
from sidecar.a2a.card import CardMaker, Interfaces
from sidecar.a2a.errors import DOMAIN, Refused, to_a2a
from sidecar.a2a.handler import PRINCIPAL, SHAPE, TaskHandler, push_body
from sidecar.a2a.http import CARD_PATH, application, refusal_body
from sidecar.agent.runtime import Runtime
from sidecar.errors import StartupError, Unauthenticated
from sidecar.http import Door, HttpListener, OriginRule
from sidecar.security.callers import CallerCheck
from sidecar.security.identity import Principal
from sidecar.security.peers import PeerCertificates

__all__ = ["SERVICE_NAME", "A2AFront"]

log = logging.getLogger(__name__)

_SERVED = tuple(PROTOCOL_VERSION_CURRENT.split(".")[:2])
_VERSION = re.compile(r"\s*(\d+)\.(\d+)(?:\.\d+)?\s*")
SERVICE_NAME = a2a_pb2.DESCRIPTOR.services_by_name["A2AService"].full_name


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


class _Servicer(GrpcHandler):
    """The SDK's servicer; a refusal the spec has no error for goes out with the
    sidecar's code, reason and retry delay instead of UNKNOWN."""

    async def abort_context(self, error: A2AError, context: grpc.aio.ServicerContext) -> None:
        if isinstance(error, VersionNotSupportedError):
            # The spec's gRPC code for it is UNIMPLEMENTED (the SDK sends FAILED_PRECONDITION).
            info = error_details_pb2.ErrorInfo(
                reason="VERSION_NOT_SUPPORTED", domain="a2a-protocol.org"
            )
            status = rpc_status.to_status(
                status_pb2.Status(
                    code=code_pb2.UNIMPLEMENTED, message=str(error), details=[_pack(info)]
                )
            )
            await context.abort(status.code, status.details, status.trailing_metadata)
            return
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
        self._http: HttpListener | None = None
        self._peers = PeerCertificates()
        self._callers = CallerCheck(lambda: runtime.snapshot.authenticator, runtime.audit)
        self.http_port: int | None = None

    @property
    def handler(self) -> TaskHandler:
        """The operations, over the runtime's agent (made once the runtime started)."""
        if self._handler is None:
            self._handler = TaskHandler(
                self._runtime.agent,
                self._settings,
                card=self._extended_card,
                push=self._push,
                callers=self._callers,
            )
        return self._handler

    # -- who calls ---------------------------------------------------------------------

    def authenticate(self, metadata: Any, peer: Any, method: str, where: str) -> Principal:
        """The principal of a call.

        Raises:
            Unauthenticated: credentials are required and these name no principal.
        """
        return self._callers.principal(metadata, peer, method=method, peer=where)

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
            self._http = HttpListener(
                "a2a.http",
                host,
                http.port,
                tls=config.server.tls,
                limits=http.limits,
                peers=self._peers,
            )
            self.http_port = self._http.bind()
            scheme = "https" if config.server.tls is not None else "http"
            base = http.public_url or f"{scheme}://{_url_host(host)}:{self.http_port}"
            interfaces.jsonrpc = base + http.jsonrpc_path
            if http.rest:
                interfaces.rest = base + http.rest_prefix
        self.cards = CardMaker(config, interfaces, push=self._push)
        if self._http is not None and http is not None:
            app = application(
                self.handler,
                self.cards.public,
                jsonrpc_path=http.jsonrpc_path,
                rest_prefix=http.rest_prefix if http.rest else None,
                context_builder=_HttpCaller(),
                max_body_bytes=http.limits.max_body_bytes,
            )
            public_host = urlsplit(http.public_url).hostname if http.public_url else None
            rule = OriginRule(
                allowed_origins=http.allowed_origins,
                loopback=is_loopback(host),
                hosts=[public_host] if public_host else [],
            )
            door = Door(
                app,
                rule=rule,
                authenticate=self._http_principal,
                refusal=refusal_body,
                public=[CARD_PATH],
                principal_key=PRINCIPAL,
            )
            await self._http.start(door)

    def _http_principal(self, headers: list[tuple[str, str]], scope: Any) -> Principal:
        client = scope.get("client")
        where = f"{client[0]}:{client[1]}" if client else ""
        return self.authenticate(headers, self._peers.identity(scope), scope["path"], where)

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
        _check_version(context.invocation_metadata() or ())
        return call


def _check_version(metadata: Any) -> None:
    """Refuse a gRPC call that asks for another A2A version than 1.x, as the SDK's HTTP
    bindings do (its gRPC servicer does not look). A call that names none is served."""
    for key, value in metadata:
        if key.lower() != VERSION_HEADER.lower():
            continue
        text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
        asked = _VERSION.fullmatch(text)
        if asked is None or asked.groups() != _SERVED:
            raise VersionNotSupportedError(
                f"A2A version {text[:32]!r} is not supported; this agent speaks "
                f"{PROTOCOL_VERSION_CURRENT}"
            )


class _HttpCaller(DefaultServerCallContextBuilder):
    """Passes on the principal the door named."""

    def build(self, request: Request) -> ServerCallContext:
        call = super().build(request)
        # The bearer token stays out of the call's state (the SDK reads A2A-Version there).
        call.state.get("headers", {}).pop("authorization", None)
        call.state[PRINCIPAL] = request.scope[PRINCIPAL]
        return call
