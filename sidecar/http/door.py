"""The door of an HTTP front: who may send it a request, decided before the front reads it.

Checked in this order, for every request of every path (a front names the few public
paths, such as A2A's agent card, that skip only the credentials):

- **Origin**: a browser's request carries the page's origin; any but a loopback origin or
  one the front allows is refused 403, so a page elsewhere cannot drive the sidecar's
  tools through a browser that reaches it (DNS rebinding).
- **Host**: on a loopback bind the ``Host`` header must name loopback (or the front's
  public URL's host): 421 otherwise, so a rebound DNS name cannot reach a local listener.
- **Credentials**: the front's ``authenticate`` names the caller's principal from the
  headers and the client certificate, or raises
  :class:`~sidecar.errors.Unauthenticated` (401, ``WWW-Authenticate: Bearer``).

Each refusal is written by the front's :data:`Refusal` (its protocol's error shape).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from agentsidecar.addresses import is_loopback
from sidecar.errors import Unauthenticated
from sidecar.security.identity import Principal

__all__ = ["Door", "OriginRule", "Refusal"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

Refusal = Callable[[int, str, str], bytes]
"""``(http status, reason, message) -> body``: a refusal in the front's error shape
(``application/json``)."""

Authenticate = Callable[[list[tuple[str, str]], Scope], Principal]
"""``(lower-cased headers, scope) -> principal``; raises ``Unauthenticated``."""


def _host_of(value: str) -> str:
    if value.startswith("["):  # [v6]:port
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


@dataclass(frozen=True)
class OriginRule:
    """Which browsers and names may reach a listener.

    Attributes:
        allowed_origins: Origins allowed besides loopback ones (``https://app.example``).
        loopback: The listener is bound to loopback, so the Host header is checked.
        hosts: Host names accepted besides loopback ones on a loopback bind (a public
            URL's host, behind a proxy that keeps it).
    """

    allowed_origins: Collection[str] = ()
    loopback: bool = True
    hosts: Collection[str] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "allowed_origins", frozenset(o.rstrip("/") for o in self.allowed_origins)
        )
        object.__setattr__(self, "hosts", frozenset(h.lower() for h in self.hosts))

    def origin_allowed(self, origin: str) -> bool:
        """Whether a request with this ``Origin`` header may be served."""
        try:
            hostname = urlsplit(origin).hostname
        except ValueError:
            return False
        if hostname is not None and is_loopback(hostname):
            return True
        return origin.rstrip("/") in self.allowed_origins

    def host_allowed(self, host: str) -> bool:
        """Whether a request with this ``Host`` header may be served."""
        if not self.loopback:
            return True
        name = _host_of(host.strip()).lower()
        return is_loopback(name) or name in self.hosts

    def refusal(self, headers: dict[str, str]) -> tuple[int, str, str] | None:
        """``(status, reason, message)`` refusing a request with these headers, or None."""
        origin = headers.get("origin")
        if origin is not None and not self.origin_allowed(origin):
            return 403, "ORIGIN_NOT_ALLOWED", "the request's Origin is not allowed"
        if not self.host_allowed(headers.get("host", "")):
            return 421, "HOST_NOT_ALLOWED", "the Host header must name this loopback listener"
        return None


class Door:
    """ASGI middleware in front of a whole HTTP front's application.

    Args:
        app: The front's application (all its routes).
        rule: The Origin and Host rule.
        authenticate: Names the caller's principal (and records a refusal).
        refusal: Writes a refusal's body in the front's shape.
        public: Paths served without credentials (still behind Origin and Host).
        principal_key: Where the principal rides the request (``scope[principal_key]``).
    """

    def __init__(
        self,
        app: App,
        *,
        rule: OriginRule,
        authenticate: Authenticate,
        refusal: Refusal,
        public: Collection[str] = (),
        principal_key: str,
    ) -> None:
        self._app = app
        self._rule = rule
        self._authenticate = authenticate
        self._refusal = refusal
        self._public = frozenset(public)
        self._key = principal_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        pairs = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"]]
        refused = self._rule.refusal(dict(pairs))
        if refused is not None:
            await self._refuse(send, *refused)
            return
        if scope["path"] not in self._public:
            try:
                scope[self._key] = self._authenticate(pairs, scope)
            except Unauthenticated as exc:
                await self._refuse(
                    send, 401, "UNAUTHENTICATED", exc.message, {"www-authenticate": "Bearer"}
                )
                return
        await self._app(scope, receive, send)

    async def _refuse(
        self,
        send: Send,
        status: int,
        reason: str,
        message: str,
        extra: dict[str, str] | None = None,
    ) -> None:
        body = self._refusal(status, reason, message)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
