"""Where sessions live: their profile, their finished turns and their memory.

:class:`SessionStore` is the interface every store implements; :class:`MemorySessionStore`
keeps sessions in this process (tests, demos). ``sqlite.py`` is the embedded default and
``postgres.py`` the store several replicas share.

The turn protocol, the same for every store:

1. :meth:`SessionStore.begin_turn` writes a small *turn started* record. It is also the
   session's lock: a session has at most one, so runs of one session never overlap, even
   across replicas sharing a store.
2. :meth:`SessionStore.finish_turn` replaces it with the finished turn (its answer and the
   messages it added) in one transaction: a turn is either all there or not there.
3. A *turn started* record whose process died is reported as a turn with
   ``STOP_REASON_INTERRUPTED`` (each store says how it knows the process died). A turn is
   never half-written and never silently dropped.

Exceptions (``sidecar.errors``)::

    SessionStoreError        the store cannot be used (unreachable, locked, too new)
    SessionExists            create: the id is taken
    SessionNotFound          begin_turn: the session is gone (deleted, expired)
    SessionBusy              begin_turn: another run holds the session

Stores also keep each principal's spend per day (the cost guard's daily quotas): added to
atomically, so replicas sharing a store add to one total; and the operator's change to
each profile's variants (``VariantService``), which every replica sharing the store reads.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Protocol

from sidecar.errors import SessionBusy, SessionExists, SessionNotFound
from sidecar.sessions.runs import MemoryRunStore, RunStore
from sidecar.types import Session, StopReason, Turn


def interrupted_turn(run_id: str, user_input: str, start_time: float, noticed: float) -> Turn:
    """The record of a turn whose process died mid-run; ``end_time`` is when it was noticed."""
    return Turn(
        run_id=run_id,
        input=user_input,
        answer="",
        stop_reason=StopReason.INTERRUPTED,
        start_time=start_time,
        end_time=noticed,
    )


class SessionStore(Protocol):
    """Keeps sessions. Every method may be called concurrently from one event loop."""

    async def open(self) -> None:
        """Connect, create the schema when needed, report turns cut off by a previous
        process as interrupted, and start background upkeep (expiry, leases).

        Raises:
            SessionStoreError: the store cannot be used.
        """
        ...

    async def close(self) -> None:
        """Stop background upkeep and release connections."""
        ...

    async def create(self, profile: str, session_id: str, labels: Mapping[str, str]) -> Session:
        """Create a session; an empty id gets a generated one.

        Raises:
            SessionExists: the id is taken.
        """
        ...

    async def get(self, session_id: str) -> Session | None:
        """The session with its turns, or None when it does not exist or has expired."""
        ...

    async def count(self, prefix: str = "") -> int:
        """How many sessions the store holds whose id starts with ``prefix`` (expired
        ones not yet swept included)."""
        ...

    async def delete(self, session_id: str) -> bool:
        """Delete a session and its turns; False when there was none."""
        ...

    async def begin_turn(
        self, session_id: str, run_id: str, user_input: str, start_time: float
    ) -> None:
        """Record that a turn started, taking the session's lock.

        Raises:
            SessionBusy: another run holds the session.
            SessionNotFound: the session does not exist.
        """
        ...

    async def finish_turn(self, session_id: str, turn: Turn) -> None:
        """Replace the turn's start record with the finished turn, atomically. A session
        deleted meanwhile stays deleted."""
        ...

    async def set_memory(self, session_id: str, memory: str, memory_turns: int) -> bool:
        """Store a new memory covering the oldest ``memory_turns`` turns, unless the
        stored memory already covers as many; True when it was stored."""
        ...

    async def resume_turn(
        self, session_id: str, run_id: str, user_input: str, start_time: float
    ) -> None:
        """Claim the session again for a turn taken over from a process that stopped (a
        background run resumed): take over the turn's start record if it is still there,
        or write a new one. The caller owns the run (see ``RunStore``).

        Raises:
            SessionBusy: another run holds the session.
            SessionNotFound: the session does not exist.
        """
        ...

    async def release_turn(self, session_id: str, run_id: str) -> None:
        """Let the turn's start record go without finishing the turn (the process stops
        and another takes the run over): on a shared store its lease ends now."""
        ...

    @property
    def runs(self) -> RunStore:
        """The background runs beside these sessions."""
        ...

    async def recent_turns(self, profile: str, limit: int) -> list[Turn]:
        """The latest ``limit`` turns of the sessions of ``profile``, oldest first (what
        speculative prefetch learns from)."""
        ...

    async def spent(self, principal: str, day: str) -> tuple[float, int]:
        """What ``principal``'s runs spent on ``day`` (``YYYY-MM-DD``, UTC): the cost in
        the price table's currency, and the tokens of models it has no price for."""
        ...

    async def add_spend(
        self, principal: str, day: str, cost: float, tokens: int
    ) -> tuple[float, int]:
        """Add one run's spend to ``principal``'s ``day``, atomically (replicas sharing the
        store add to one total); the day's totals after it."""
        ...

    shared: bool
    """Whether other processes use the store too (they may change what it holds)."""

    async def variant_changes(self) -> dict[str, str]:
        """The operator's change to each profile's variants, by profile, as the encoded
        form :mod:`sidecar.agent.variant_control` wrote."""
        ...

    async def set_variant_change(self, profile: str, change: str | None) -> None:
        """Keep ``change`` as ``profile``'s; None drops the profile's."""
        ...


class MemorySessionStore:
    """Sessions in this process's memory; they end with it, so nothing is ever cut off."""

    shared = False

    def __init__(
        self,
        *,
        idle_ttl: float | None = None,
        retention: float = 86_400.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sessions: dict[str, Session] = {}
        self._running: dict[str, str] = {}
        self._spend: dict[tuple[str, str], tuple[float, int]] = {}
        self._variant_changes: dict[str, str] = {}
        self._idle_ttl = idle_ttl
        self._clock = clock
        self._runs = MemoryRunStore(self, retention=retention, clock=clock)

    @property
    def runs(self) -> MemoryRunStore:
        return self._runs

    def has(self, session_id: str) -> bool:
        return session_id in self._sessions

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def create(self, profile: str, session_id: str, labels: Mapping[str, str]) -> Session:
        session_id = session_id or uuid.uuid4().hex
        if await self.get(session_id) is not None:
            raise SessionExists(session_id)
        now = self._clock()
        session = Session(
            session_id=session_id,
            profile=profile,
            labels=dict(labels),
            create_time=now,
            update_time=now,
        )
        self._sessions[session_id] = session
        return session

    async def get(self, session_id: str) -> Session | None:
        session = self._sessions.get(session_id)
        if session is None:
            return None
        if (
            self._idle_ttl is not None
            and session_id not in self._running
            and not self._runs.active_in(session_id)
            and session.update_time < self._clock() - self._idle_ttl
        ):
            await self.delete(session_id)
            return None
        return session

    async def count(self, prefix: str = "") -> int:
        if not prefix:
            return len(self._sessions)
        return sum(1 for key in self._sessions if key.startswith(prefix))

    async def delete(self, session_id: str) -> bool:
        self._running.pop(session_id, None)
        return self._sessions.pop(session_id, None) is not None

    async def begin_turn(
        self, session_id: str, run_id: str, user_input: str, start_time: float
    ) -> None:
        if await self.get(session_id) is None:
            raise SessionNotFound(session_id)
        if session_id in self._running:
            raise SessionBusy(session_id)
        self._running[session_id] = run_id

    async def resume_turn(
        self, session_id: str, run_id: str, user_input: str, start_time: float
    ) -> None:
        if self._running.get(session_id) == run_id:
            return
        await self.begin_turn(session_id, run_id, user_input, start_time)

    async def release_turn(self, session_id: str, run_id: str) -> None:
        return None  # the process and its sessions end together

    async def finish_turn(self, session_id: str, turn: Turn) -> None:
        if self._running.get(session_id) == turn.run_id:
            del self._running[session_id]
        session = self._sessions.get(session_id)
        if session is None:
            return
        for i, stored in enumerate(session.turns):
            if stored.run_id == turn.run_id:
                session.turns[i] = turn  # a report of it replaced, in place
                break
        else:
            session.turns.append(turn)
        session.update_time = turn.end_time

    async def set_memory(self, session_id: str, memory: str, memory_turns: int) -> bool:
        session = self._sessions.get(session_id)
        if session is None or session.memory_turns >= memory_turns:
            return False
        session.memory = memory
        session.memory_turns = memory_turns
        return True

    async def recent_turns(self, profile: str, limit: int) -> list[Turn]:
        turns = [t for s in self._sessions.values() if s.profile == profile for t in s.turns]
        turns.sort(key=lambda t: t.end_time)
        return turns[-limit:] if limit > 0 else []

    async def spent(self, principal: str, day: str) -> tuple[float, int]:
        return self._spend.get((principal, day), (0.0, 0))

    async def add_spend(
        self, principal: str, day: str, cost: float, tokens: int
    ) -> tuple[float, int]:
        old_cost, old_tokens = self._spend.get((principal, day), (0.0, 0))
        total = self._spend[(principal, day)] = (old_cost + cost, old_tokens + tokens)
        return total

    async def variant_changes(self) -> dict[str, str]:
        return dict(self._variant_changes)

    async def set_variant_change(self, profile: str, change: str | None) -> None:
        if change is None:
            self._variant_changes.pop(profile, None)
        else:
            self._variant_changes[profile] = change
