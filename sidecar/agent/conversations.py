"""Sessions as callers see them: created, read a page at a time, deleted, their tools.

A session exists only for the principal that created it: its store key is the principal's
namespace and the id the caller gave (:meth:`Principal.key`), derived once per request
here, and everything handed back carries the id the caller knows. The session quotas
(``sessions.max_sessions``, a principal's ``quota.sessions``) are counted in the store,
about once a second.
"""

from __future__ import annotations

import base64
import dataclasses
import time
import uuid
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sidecar.agent.admission import Admission
from sidecar.agent.approvals import Approvals
from sidecar.agent.limits import (
    capped,
    id_problems,
    label_problems,
    page_size,
    page_size_problems,
    refuse,
)
from sidecar.agent.profiles import Profile
from sidecar.agent.snapshot import Snapshot
from sidecar.errors import (
    InvalidRequest,
    PermissionDenied,
    ProfileNotFound,
    ProfileRemoved,
    QuotaExceeded,
    SessionExists,
    SessionNotFound,
    TooManySessions,
)
from sidecar.security.audit import AuditLog
from sidecar.security.identity import Principal
from sidecar.sessions.store import SessionStore
from sidecar.tools.availability import ToolAccess
from sidecar.tools.catalog import CatalogTool, ListedTool
from sidecar.types import Session, StopReason, ToolAvailability, Turn

__all__ = ["Conversations", "SessionPage"]

_COUNT_EVERY = 1.0  # seconds a session count is reused before the store counts again


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionPage:
    """A session and one page of its turns."""

    session: Session
    """The session; its ``turns`` are this page's."""
    next_page_token: str
    """Where the next page starts; empty after the last."""
    total_turns: int


def _page_token(offset: int, key: str) -> str:
    raw = f"{offset}:{zlib.crc32(key.encode()):08x}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _page_start(token: str, key: str, turns: int) -> int:
    if not token:
        return 0
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        offset_text, check = raw.split(":")
        offset = int(offset_text)
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequest.field("page_token", "is not a token this sidecar made") from None
    if check != f"{zlib.crc32(key.encode()):08x}" or not 0 <= offset <= turns:
        raise InvalidRequest.field("page_token", "belongs to another session or read")
    return offset


class Conversations:
    """The session operations of every front.

    Args:
        store: Where sessions live.
        snapshot: The configuration applied now (its profiles).
        admission: The drain, and the turns running (a delete stops its session's).
        approvals: The calls waiting for a decision (a delete denies its session's).
        tools: The tools and whether each can be called now.
        audit: The audit record.
        max_response_bytes: The largest response a front sends; a page of turns stays
            under half of it.
        max_sessions: Sessions the store may hold; None: no limit.
    """

    def __init__(
        self,
        store: SessionStore,
        *,
        snapshot: Callable[[], Snapshot],
        admission: Admission,
        approvals: Approvals,
        tools: ToolAccess,
        audit: AuditLog,
        max_response_bytes: int,
        max_sessions: int | None,
    ) -> None:
        self.store = store
        self._snapshot = snapshot
        self._admission = admission
        self._approvals = approvals
        self._tools = tools
        self._audit = audit
        self.max_response_bytes = max_response_bytes
        self.max_sessions = max_sessions
        self._counted = (0, -1.0)  # (sessions in the store, when: monotonic)
        self._by_principal: dict[str, tuple[int, float]] = {}  # the same, by principal

    def profile(self, name: str) -> Profile:
        """The configured profile ``name``.

        Raises:
            ProfileNotFound: no such profile.
        """
        profiles = self._snapshot().profiles
        profile = profiles.get(name)
        if profile is None:
            raise ProfileNotFound(name, list(profiles))
        return profile

    async def create(
        self, principal: Principal, profile: str, session_id: str, labels: Mapping[str, str]
    ) -> Session:
        """Start a session under ``profile``; an empty ``session_id`` gets a generated one.

        Raises:
            Draining: the sidecar is shutting down.
            InvalidRequest: naming every invalid field.
            PermissionDenied: the principal may not use the profile.
            ProfileNotFound: no such profile.
            QuotaExceeded: the principal holds as many sessions as its quota allows.
            SessionExists: the id is taken.
            TooManySessions: the store holds as many as it may.
        """
        self._admission.refuse_if_draining()
        refuse(
            id_problems(profile, "profile"),
            id_problems(session_id, "session_id", required=False),
            label_problems(labels),
        )
        if not principal.may_use(profile):
            raise PermissionDenied(principal.name, profile)
        self.profile(profile)
        if self.max_sessions is not None:
            await self._check_count(self.max_sessions)
        if principal.quota.sessions is not None:
            await self._check_principal(principal, principal.quota.sessions)
        shown = session_id or uuid.uuid4().hex
        try:
            session = await self.store.create(profile, principal.key(shown), labels)
        except SessionExists:
            raise SessionExists(shown) from None
        count, when = self._counted
        self._counted = (count + 1, when)
        if principal.name in self._by_principal:
            count, when = self._by_principal[principal.name]
            self._by_principal[principal.name] = (count + 1, when)
        self._audit.record("session_created", principal.name, session_id=shown, profile=profile)
        return dataclasses.replace(session, session_id=shown)

    async def _check_count(self, limit: int) -> None:
        count, when = self._counted
        if time.monotonic() - when > _COUNT_EVERY:
            count = await self.store.count()
            self._counted = (count, time.monotonic())
        if count >= limit:
            raise TooManySessions(limit)

    async def _check_principal(self, principal: Principal, limit: int) -> None:
        count, when = self._by_principal.get(principal.name, (0, -1.0))
        if time.monotonic() - when > _COUNT_EVERY:
            count = await self.store.count(principal.prefix)
            self._by_principal[principal.name] = (count, time.monotonic())
        if count >= limit:
            raise QuotaExceeded(principal.name, "sessions", limit, retry_after=None)

    async def stored(self, key: str, session_id: str) -> Session:
        """The session as stored under ``key`` (its ``session_id`` is the key).

        Raises:
            SessionNotFound: no such session.
        """
        session = await self.store.get(key)
        if session is None:
            raise SessionNotFound(session_id)
        return session

    async def page(
        self, principal: Principal, session_id: str, *, size: int = 0, token: str = ""
    ) -> SessionPage:
        """The session with one page of its turns (oldest first), each turn's input and
        answer capped, the page kept under half the largest response.

        Raises:
            InvalidRequest: a bad id, page size or page token.
            SessionNotFound: no such session.
        """
        refuse(id_problems(session_id, "session_id"), page_size_problems(size))
        size = page_size(size)
        key = principal.key(session_id)
        session = await self.stored(key, session_id)
        turns = session.turns
        start = _page_start(token, key, len(turns))
        page: list[Turn] = []
        spent = 0
        for turn in turns[start : start + size]:
            shown = dataclasses.replace(turn, input=capped(turn.input), answer=capped(turn.answer))
            spent += len(shown.input.encode()) + len(shown.answer.encode()) + 256
            if page and spent > self.max_response_bytes // 2:
                break
            page.append(shown)
        end = start + len(page)
        following = _page_token(end, key) if end < len(turns) else ""
        shown_session = dataclasses.replace(session, session_id=session_id, turns=page)
        return SessionPage(session=shown_session, next_page_token=following, total_turns=len(turns))

    async def delete(self, principal: Principal, session_id: str) -> bool:
        """Delete a session and its turns; False when there was none. Nothing of its
        turn in flight runs afterwards: its pending approvals are denied, its run stopped,
        and the delete waits until it has unwound.

        Raises:
            InvalidRequest: the id is not one.
        """
        refuse(id_problems(session_id, "session_id"))
        key = principal.key(session_id)
        if self._admission.running(key) is not None:
            self._approvals.deny_session(key, "the session was deleted")
            await self._admission.stop_and_wait(
                key, StopReason.CANCELLED, "the session was deleted"
            )
        deleted = await self.store.delete(key)
        if deleted:
            count, when = self._counted
            self._counted = (max(0, count - 1), when)
            if principal.name in self._by_principal:
                count, when = self._by_principal[principal.name]
                self._by_principal[principal.name] = (max(0, count - 1), when)
            self._audit.record("session_deleted", principal.name, session_id=session_id)
        return deleted

    async def tools(
        self, principal: Principal, session_id: str
    ) -> list[tuple[CatalogTool | ListedTool, ToolAvailability]]:
        """The tools the session's profile allows, each with whether it can be called now;
        the names its tools list gives that no server offers, as NOT_OFFERED.

        Raises:
            InvalidRequest: the id is not one.
            SessionNotFound: no such session.
            ProfileRemoved: its profile is no longer configured.
        """
        refuse(id_problems(session_id, "session_id"))
        session = await self.stored(principal.key(session_id), session_id)
        profile = self._snapshot().profiles.get(session.profile)
        if profile is None:
            raise ProfileRemoved(session_id, session.profile)
        return self._tools.session_tools(profile.allowed, profile.config.tools or ())
