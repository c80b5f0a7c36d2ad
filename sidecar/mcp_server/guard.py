"""The MCP endpoint's door: who may send it a request, checked before the SDK reads it.

- **Origin**: a browser's request carries the page's origin; any but a loopback origin or
  one in ``mcp.allowed_origins`` is refused 403 (a page elsewhere must not drive the
  sidecar's tools through a browser that can reach it: DNS rebinding).
- **Host**: on a loopback bind, the ``Host`` header must name loopback (421 otherwise), so
  a rebound DNS name cannot reach a local endpoint.
- **Credentials**: with ``auth.principals`` a request without a bearer token or a client
  certificate (its SAN) naming a principal is refused 401 (``WWW-Authenticate: Bearer``)
  and recorded as ``auth_failed``; the principal rides the request to the handlers, and
  is its ASGI ``user``, which the SDK binds a 2025 session to. The principals are those of
  the configuration applied now, as on the gRPC port.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

import orjson
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

from agentsidecar.addresses import is_loopback
from sidecar.errors import Unauthenticated
from sidecar.security.audit import AuditLog
from sidecar.security.callers import CallerCheck
from sidecar.security.identity import Authenticator, Principal
from sidecar.security.peers import PeerCertificates

__all__ = ["PRINCIPAL", "Guard", "refuse"]

PRINCIPAL = "agent_sidecar_principal"
"""Where the guard leaves the request's principal, in the ASGI scope's ``state``."""

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def _host_of(value: str) -> str:
    host = value.rsplit(":", 1)[0] if not value.endswith("]") else value
    return host.strip("[]")


class Guard:
    """ASGI middleware in front of the MCP endpoint.

    Args:
        app: The SDK's Streamable HTTP application.
        authenticator: The principals of the configuration applied now, read per request.
        audit: Where refused credentials are recorded.
        allowed_origins: Origins allowed besides loopback ones.
        loopback: The endpoint is bound to loopback (the Host header is checked).
    """

    def __init__(
        self,
        app: App,
        *,
        authenticator: Callable[[], Authenticator],
        audit: AuditLog,
        allowed_origins: list[str],
        loopback: bool,
        peers: PeerCertificates | None = None,
    ) -> None:
        self._app = app
        self._callers = CallerCheck(authenticator, audit)
        self._origins = frozenset(o.rstrip("/") for o in allowed_origins)
        self._loopback = loopback
        self._peers = peers
        self._users: dict[str, AuthenticatedUser] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin):
            await refuse(send, 403, "the request's Origin is not allowed")
            return
        if self._loopback and not is_loopback(_host_of(headers.get("host", ""))):
            await refuse(send, 421, "the Host header must name this loopback endpoint")
            return
        token = headers.get("authorization")
        client = scope.get("client")
        try:
            principal = self._callers.principal(
                [("authorization", token)] if token is not None else [],
                self._peers.identity(scope) if self._peers is not None else {},
                method="mcp",
                peer=f"{client[0]}:{client[1]}" if client else "",
            )
        except Unauthenticated as exc:
            await refuse(send, 401, exc.message, {"www-authenticate": "Bearer"})
            return
        scope.setdefault("state", {})[PRINCIPAL] = principal
        # The SDK binds a 2025 session to its opener's ``user``: another principal's
        # request on it is answered 404.
        scope["user"] = self._user(principal)
        await self._app(scope, receive, send)

    def _user(self, principal: Principal) -> AuthenticatedUser:
        user = self._users.get(principal.name)
        if user is None:
            if len(self._users) > 4096:  # principals a reload removed
                self._users.clear()
            token = AccessToken(token="", client_id=principal.name, scopes=[])
            user = self._users[principal.name] = AuthenticatedUser(token)
        return user

    def _origin_allowed(self, origin: str) -> bool:
        parts = urlsplit(origin)
        if parts.hostname is not None and is_loopback(parts.hostname):
            return True
        return origin.rstrip("/") in self._origins


async def refuse(
    send: Send, status: int, message: str, extra: dict[str, str] | None = None
) -> None:
    """Answer with a JSON-RPC error body (no request id) and ``status``."""
    body = orjson.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    )
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
