"""The MCP endpoint's sessions (the 2025 revisions' ``Mcp-Session-Id``): each used only by
the principal that opened it, bounded per principal and in total, idle ones closed.

The SDK's manager keeps sessions for whoever asks, up to one process-wide bound. Here:

- **owned**: the guard names the request's principal as its ASGI ``user``, so the SDK
  answers any other principal's request on a session ``404 Session not found``, as if it
  did not exist (listing, calling, streaming and ``DELETE`` alike);
- **per principal**: one holds at most its quota (``quota.mcp_sessions``, else
  ``mcp.sessions.max_per_principal``); one more is refused ``429`` with ``Retry-After``;
- **in total**: at ``mcp.sessions.max_sessions``, a principal holding fewer sessions than
  the biggest holder takes that holder's least recently used idle session (closed: its host
  gets 404 and opens another), so no principal can keep the others out; else its own least
  recently used idle one is replaced; when no session is idle, ``503``;
- **idle**: a session with no request in flight for ``mcp.sessions.idle_timeout`` closes.

Session ids are their hosts' secrets (on an anonymous endpoint, whoever has one uses the
session): the SDK's log lines keep their words and lose the ids (:class:`SessionIdFilter`).
"""

from __future__ import annotations

import collections
import logging
import re
from collections.abc import Callable
from typing import Any

import anyio
from mcp.server.auth.middleware.bearer_auth import (
    AuthenticatedUser,
    AuthorizationContext,
    authorization_context,
)
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Message, Receive, Scope, Send

from sidecar.config import McpSessionsConfig
from sidecar.mcp_server.guard import refuse

__all__ = ["BoundedSessions", "SessionIdFilter"]

log = logging.getLogger(__name__)

_SDK_LOGGERS = ("mcp.server.streamable_http_manager", "mcp.server.streamable_http")
"""The SDK's loggers whose lines name session ids."""
_SESSION_HEADER = MCP_SESSION_ID_HEADER.encode()
_HEX_RUN = re.compile(r"[0-9A-Fa-f-]{16,}")


class SessionIdFilter(logging.Filter):
    """Replaces what looks like a session id (a run of 16 hex digits or more) in a log
    line with ``<session>``."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = _HEX_RUN.sub("<session>", message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        return True

    @classmethod
    def install(cls) -> None:
        """On the SDK's session loggers, once."""
        for name in _SDK_LOGGERS:
            logger = logging.getLogger(name)
            if not any(isinstance(f, cls) for f in logger.filters):
                logger.addFilter(cls())


SessionCount = Callable[[str, int], None]
"""Told a principal's number of open sessions each time it changes (metrics)."""


def _owner(requestor: AuthorizationContext | None) -> str:
    return requestor["client_id"] if requestor is not None else ""


class BoundedSessions(StreamableHTTPSessionManager):
    """The SDK's session manager with sessions owned, bounded per principal and in total.

    Args:
        app: The MCP server.
        config: ``mcp.sessions``.
        quota: A principal's own session quota, by name; None: the default.
        on_count: Told each principal's open sessions as they change.
        on_end: Told each session's id as it ends.
        kwargs: As the SDK's manager takes them.
    """

    def __init__(
        self,
        app: Any,
        config: McpSessionsConfig,
        *,
        quota: Callable[[str], int | None],
        on_count: SessionCount | None = None,
        on_end: Callable[[str], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            app,
            session_idle_timeout=config.idle_timeout,
            max_sessions=config.max_sessions,
            **kwargs,
        )
        self._config = config
        self._quota = quota
        self._on_count = on_count
        self._on_end = on_end
        self._held: collections.Counter[str] = collections.Counter()
        # Each session's principal, least recently used first.
        self._owner_of: collections.OrderedDict[str, str] = collections.OrderedDict()

    def held(self, principal: str) -> int:
        """Sessions ``principal`` holds open now."""
        return self._held[principal]

    def limit(self, principal: str) -> int:
        """The most sessions ``principal`` may hold; the anonymous caller (an endpoint
        without principals: every host) is bounded by the total only."""
        if not principal:
            return self._config.max_sessions
        own = self._quota(principal)
        return own if own is not None else self._config.max_per_principal

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers") or [])
        named = headers.get(_SESSION_HEADER)
        if named is not None:
            session_id = named.decode("latin-1")
            held = self._server_instances.get(session_id)
            if held is None:
                await super()._handle_stateful_request(scope, receive, send)
                return
            if session_id in self._owner_of:  # the most recently used, now
                self._owner_of.move_to_end(session_id)

            async def forgetting(message: Message) -> None:
                # The SDK answers a DELETE before it forgets the session: the ledger
                # forgets it first, so the host's next opening finds the room.
                if message["type"] == "http.response.start" and held.is_terminated:
                    self._forget(session_id)
                await send(message)

            await super()._handle_stateful_request(scope, receive, forgetting)
            return
        user = scope.get("user")
        requestor = authorization_context(user) if isinstance(user, AuthenticatedUser) else None
        owner = _owner(requestor)
        evicted: StreamableHTTPServerTransport | None = None
        async with self._session_creation_lock:
            refusal = self._refusal(owner)
            if refusal is None and len(self._server_instances) >= self._config.max_sessions:
                evicted = self._evict_for(owner)
                if evicted is None:
                    refusal = (503, "the endpoint holds as many sessions as it may", "")
            transport = self._admit_session(requestor) if refusal is None else None
        if evicted is not None:
            with anyio.CancelScope(shield=True):
                await evicted.terminate()
        if transport is None:
            status, message, retry = refusal or (503, "Too many open sessions", "")
            await refuse(send, status, message, {"retry-after": retry} if retry else None)
            return
        await self._serve_opening_request(transport, scope, receive, send)

    def _refusal(self, owner: str) -> tuple[int, str, str] | None:
        limit = self.limit(owner)
        if not owner or self._held[owner] < limit:
            return None
        message = (
            f"principal {owner} holds {self._held[owner]} MCP sessions, its limit ({limit}): "
            "close one (DELETE) or let one go idle"
        )
        return 429, message, str(max(1, round(self._config.idle_timeout)))

    def _evict_for(self, owner: str) -> StreamableHTTPServerTransport | None:
        """Forget the least recently used idle session of the biggest holder that would
        still hold as many as ``owner`` after giving it up, or else of ``owner`` itself;
        return its transport to terminate (None: no one can give one up)."""
        mine = self._held[owner]
        holders = [h for h, count in self._held.most_common() if count >= mine + 2]
        for holder in [*holders, owner]:
            idle = (
                (sid, t)
                for sid, held_by in self._owner_of.items()  # least recently used first
                if held_by == holder
                and (t := self._server_instances.get(sid)) is not None
                and not t._requests_in_flight
            )
            found = next(idle, None)
            if found is not None:
                sid, transport = found
                log.warning(
                    "mcp: %s sessions are open: closed %s's least recently used one for %s",
                    len(self._server_instances),
                    holder or "the anonymous caller",
                    owner or "the anonymous caller",
                )
                self._forget(sid)
                return transport
        return None

    def _admit_session(
        self, requestor: AuthorizationContext | None
    ) -> StreamableHTTPServerTransport | None:
        transport = super()._admit_session(requestor)
        if transport is not None and transport.mcp_session_id is not None:
            owner = _owner(requestor)
            self._owner_of[transport.mcp_session_id] = owner
            self._held[owner] += 1
            self._counted(owner)
        return transport

    async def _discard_session(
        self, session_id: str, transport: StreamableHTTPServerTransport
    ) -> None:
        self._forget(session_id)
        await super()._discard_session(session_id, transport)

    def _forget(self, session_id: str) -> None:
        owner = self._owner_of.pop(session_id, None)
        self._server_instances.pop(session_id, None)
        self._session_owners.pop(session_id, None)
        if owner is not None and self._on_end is not None:
            self._on_end(session_id)
        if owner is not None:
            self._held[owner] -= 1
            if self._held[owner] <= 0:
                del self._held[owner]
            self._counted(owner)

    def _counted(self, owner: str) -> None:
        if self._on_count is not None:
            self._on_count(owner, self._held[owner])
