"""Where sessions live: their profile, their conversation and their finished turns.

:class:`SessionStore` is the interface; :class:`MemorySessionStore` keeps sessions in
this process. A turn is recorded whole, once, when its run ends.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sidecar.run import Turn


class SessionExists(Exception):
    """A session with that id already exists."""


@dataclass(slots=True)
class Session:
    """One conversation under one agent profile."""

    session_id: str
    profile: str
    labels: dict[str, str]
    create_time: float
    update_time: float
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The conversation as model messages (no system prompt), oldest first."""
    turns: list[Turn] = field(default_factory=list)
    running: bool = False
    """True while a run holds the session; runs of one session never overlap."""


class SessionStore(Protocol):
    """Keeps sessions. Implementations must record a turn atomically."""

    async def create(self, profile: str, session_id: str, labels: Mapping[str, str]) -> Session:
        """Create a session; raise :class:`SessionExists` when the id is taken."""
        ...

    async def get(self, session_id: str) -> Session | None: ...

    async def delete(self, session_id: str) -> bool: ...

    async def record_turn(
        self, session: Session, turn: Turn, messages: list[dict[str, Any]]
    ) -> None:
        """Append a finished turn and the messages it added to the conversation."""
        ...


class MemorySessionStore:
    """Sessions in this process's memory; they end with it."""

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}

    async def create(self, profile: str, session_id: str, labels: Mapping[str, str]) -> Session:
        session_id = session_id or uuid.uuid4().hex
        if session_id in self._sessions:
            raise SessionExists(session_id)
        now = time.time()
        session = Session(session_id, profile, dict(labels), now, now)
        self._sessions[session_id] = session
        return session

    async def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    async def delete(self, session_id: str) -> bool:
        return self._sessions.pop(session_id, None) is not None

    async def record_turn(
        self, session: Session, turn: Turn, messages: list[dict[str, Any]]
    ) -> None:
        session.messages.extend(messages)
        session.turns.append(turn)
        session.update_time = turn.end_time
