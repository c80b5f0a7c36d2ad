"""Where background runs live: their state, their events, who runs them.

:class:`RunStore` is the interface; each session store has one beside it
(``SessionStore.runs``) over the same database, since a run's end writes its turn into
its session in the same transaction. :class:`MemoryRunStore` keeps runs in this process.

Ownership. One replica runs a run at a time: its *owner*. :meth:`RunStore.claim` hands a
replica runs nobody owns (submitted, or left by a process that died) and makes it their
owner, bumping the run's ``attempts``; every later write of the owner names the attempt it
holds, and a write from any other (a replica that stalled past its lease while another took
the run over) changes nothing and returns False. On a shared store ownership is a lease the
owner renews (:meth:`RunStore.renew`); one store per process (SQLite, memory) needs none:
every run left owned when the process died is unowned again when the next one opens it.

Events are written by the owner only, with their sequence numbers, in the same write as
the state they come with; a reader sees an event only once it is stored, so whoever reads
(on any replica) sees each event once, in order.

Exceptions (``sidecar.errors``)::

    RunQueueFull      submit: as many runs are active as the bounds allow
    QuotaExceeded     submit: the principal's bound (quota.background_runs)
    SessionBusy       submit: the session has an active run
    SessionNotFound   submit: no such session
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import orjson

from sidecar.errors import QuotaExceeded, RunQueueFull, SessionBusy, SessionNotFound
from sidecar.types import (
    ACTIVE_STATES,
    CallbackStatus,
    PendingApproval,
    RunRecord,
    RunState,
    Turn,
)

__all__ = [
    "MemoryRunStore",
    "RunBounds",
    "RunChange",
    "RunStore",
    "Signals",
    "StoredDecision",
    "decode_pending",
    "encode_pending",
]


@dataclass(frozen=True, slots=True)
class RunBounds:
    """How many runs may be active (submitted, working or waiting for input) at once."""

    total: int
    """In the whole store."""
    principal: int | None = None
    """Of the run's principal; None: no bound of its own."""

    def admit(self, principal: str, active: int, mine: int | None) -> None:
        """The rule every store applies to one more run of ``principal``, given the
        ``active`` runs and the principal's own (``mine``: counted only when
        :attr:`principal` is set).

        Raises:
            RunQueueFull: the store holds ``total`` active runs.
            QuotaExceeded: the principal holds its bound (``quota.background_runs``).
        """
        if active >= self.total:
            raise RunQueueFull(self.total)
        if self.principal is not None and mine is not None and mine >= self.principal:
            raise QuotaExceeded(principal, "background_runs", self.principal, retry_after=5.0)


@dataclass(slots=True, kw_only=True)
class RunChange:
    """One write of a run's owner: the events it stores and what changed with them."""

    events: Sequence[tuple[int, bytes]] = ()
    """``(sequence, data)``, in order, following the stored ones without a gap."""
    state: RunState | None = None
    pending: list[PendingApproval] | None = None
    checkpoint: tuple[int, bytes] | None = None
    """``(step, data)``: where the run's last completed step left it."""
    unsafe_step: int | None = None
    """A step that is about to dispatch a call not safe to repeat."""


@dataclass(frozen=True, slots=True)
class StoredDecision:
    """An approval decided on another replica, for the run's owner to deliver."""

    run_id: str
    call_id: str
    approved: bool
    reason: str


@dataclass(frozen=True, slots=True)
class Signals:
    """What other replicas asked of a replica's runs since it last looked."""

    lost: frozenset[str] = frozenset()
    """Runs it no longer owns (taken over, deleted with their session, expired)."""
    cancel: frozenset[str] = frozenset()
    """Runs whose cancellation was asked for."""
    decisions: tuple[StoredDecision, ...] = ()


class RunStore(Protocol):
    """Keeps background runs. Every method may be called concurrently from one loop."""

    @property
    def shared(self) -> bool:
        """Several replicas share the store: ownership is leased, and other replicas'
        writes are learnt by :meth:`renew` and notifications."""
        ...

    @property
    def owner(self) -> str:
        """This process's name as the owner of runs (the replica's id on a shared store)."""
        ...

    @property
    def lease(self) -> float | None:
        """Seconds an owner's hold on a run lasts without renewal; None: no leases."""
        ...

    async def submit(
        self, run: RunRecord, *, owner: str | None, bounds: RunBounds
    ) -> RunRecord | None:
        """Store a new run (``run.state`` SUBMITTED), owned by ``owner`` when it is about to
        run there (its ``attempts`` is then 1), else by nobody; or, when the principal's
        kept runs hold one of ``run.request_id``, store nothing and return that one.

        Raises:
            RunQueueFull: ``bounds.total`` runs are active.
            QuotaExceeded: ``bounds.principal`` of the principal's runs are active.
            SessionBusy: the session has an active run.
            SessionNotFound: the session does not exist.
        """
        ...

    async def get(self, run_id: str) -> RunRecord | None:
        """The run, or None when there is none (or it expired)."""
        ...

    async def page(self, session_key: str, *, before: int | None, limit: int) -> list[RunRecord]:
        """Up to ``limit`` of the session's runs, newest first, older than the one of
        ordinal ``before`` (None: from the newest); without results or checkpoints."""
        ...

    async def page_of(self, principal: str, *, before: int | None, limit: int) -> list[RunRecord]:
        """As :meth:`page`, over every session of the principal named ``principal``."""
        ...

    async def events(self, run_id: str, after: int, limit: int) -> list[tuple[int, bytes]]:
        """Up to ``limit`` stored events of the run with a sequence above ``after``."""
        ...

    async def claim(self, owner: str, limit: int, callbacks: int | None = None) -> list[RunRecord]:
        """Runs nobody owns, oldest first, made ``owner``'s: up to ``limit`` submitted runs
        due to start and active runs whose owner stopped (their ``attempts`` bumped), and
        up to ``callbacks`` (None: ``limit``) finished runs whose callback is due. The two
        are counted apart: a run slot and a delivery are different places."""
        ...

    async def write(self, run_id: str, owner: str, attempt: int, change: RunChange) -> bool:
        """Apply the owner's ``change``; False (and nothing written) unless ``owner`` holds
        attempt ``attempt`` of the run."""
        ...

    async def finish(
        self,
        run_id: str,
        owner: str,
        attempt: int,
        *,
        state: RunState,
        result: bytes,
        events: Sequence[tuple[int, bytes]],
        turn: Turn | None,
    ) -> bool:
        """End the run in one transaction: its final state, result and events, and its
        ``turn`` replacing the turn's start record in its session (when it ran). A run with
        a callback keeps its owner to deliver it. False (nothing written) unless ``owner``
        holds attempt ``attempt``."""
        ...

    async def release(
        self, run_id: str, owner: str, attempt: int, *, not_before: float = 0.0
    ) -> None:
        """Give the run up (it stays as it is, for another replica or a later look to
        claim), not to be claimed before ``not_before`` (wall-clock seconds)."""
        ...

    async def renew(self, owner: str, run_ids: Collection[str]) -> Signals:
        """Extend ``owner``'s leases of ``run_ids``; say what other replicas asked."""
        ...

    async def request_cancel(self, run_id: str) -> None:
        """Ask the run's owner to cancel it (it learns it from :meth:`renew`)."""
        ...

    async def cancel_submitted(self, run_id: str, *, result: bytes, event: bytes) -> bool:
        """Cancel a submitted run nobody owns: CANCELED with ``result`` and its one event
        (sequence 1); False when it is not such a run."""
        ...

    async def set_callback(
        self,
        run_id: str,
        url: str,
        shape: str,
        token: str,
        auth: bytes = b"",
        *,
        callback_id: str = "",
        after_end: bool = False,
    ) -> bool:
        """Name the unfinished run's completion callback (``url`` empty: none), with its
        sealed credentials and the id its caller gave it; False when the run has
        finished, or names another callback.

        With ``after_end``, a finished run's callback is named or dropped too, unless its
        delivery is still under way: one named then has nothing to deliver (its status
        stays what the run's end made it)."""
        ...

    async def decide(self, run_id: str, call_id: str, approved: bool, reason: str) -> bool:
        """Leave a decision for the run's owner; False unless the call is pending."""
        ...

    async def callback_done(
        self,
        run_id: str,
        owner: str,
        *,
        status: CallbackStatus,
        attempts: int,
        not_before: float = 0.0,
    ) -> None:
        """Record a delivery's outcome: DELIVERED or FAILED gives the run up for good;
        PENDING (with the attempts so far) keeps it ``owner``'s until ``not_before``."""
        ...

    async def sweep(self) -> int:
        """Delete finished runs past their retention; return how many."""
        ...

    async def listen(self, on_notice: Callable[[str], None]) -> None:
        """Hand the notifications other replicas' writes send to ``on_notice`` (a shared
        store only; see ``postgres_runs``)."""
        ...


def encode_pending(pending: Sequence[PendingApproval]) -> bytes:
    """A run's pending approvals as stored."""
    return orjson.dumps(
        [[p.step, p.call_id, p.tool_name, p.arguments, p.destructive] for p in pending]
    )


def decode_pending(data: bytes | None) -> list[PendingApproval]:
    """A run's pending approvals from their stored form (never raises: a bad record reads
    as none)."""
    try:
        rows = orjson.loads(data) if data else []
    except orjson.JSONDecodeError:
        return []
    found = []
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, list) and len(row) == 5:
            step, call_id, tool, arguments, destructive = row
            found.append(
                PendingApproval(
                    step=step if isinstance(step, int) else 0,
                    call_id=str(call_id),
                    tool_name=str(tool),
                    arguments=str(arguments),
                    destructive=bool(destructive),
                )
            )
    return found


@dataclass(slots=True)
class _Held:
    """A run in the memory store, with what only the store sees."""

    record: RunRecord
    owner: str | None = None
    not_before: float = 0.0
    events: list[tuple[int, bytes]] = field(default_factory=list)
    decisions: list[StoredDecision] = field(default_factory=list)


class MemoryRunStore:
    """Background runs in this process's memory, beside a
    :class:`~sidecar.sessions.store.MemorySessionStore`; they end with the process.

    Args:
        sessions: The session store its runs' sessions and turns live in.
        retention: Seconds a finished run is kept.
        clock: Wall-clock time, seconds since the epoch.
    """

    shared = False
    owner = "memory"
    lease = None

    def __init__(
        self,
        sessions: _TurnKeeper,
        *,
        retention: float = 86_400.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sessions = sessions
        self._retention = retention
        self._clock = clock
        self._runs: dict[str, _Held] = {}
        self._ordinal = 0

    def _live(self, run_id: str) -> _Held | None:
        held = self._runs.get(run_id)
        if held is None:
            return None
        record = held.record
        if record.state.finished and record.end_time + self._retention < self._clock():
            del self._runs[run_id]
            return None
        if not self._sessions.has(record.session_key):
            del self._runs[run_id]  # its session was deleted: its runs went with it
            return None
        return held

    def active_in(self, session_key: str) -> bool:
        """Whether the session has an active run (which keeps it from expiring)."""
        return any(
            h.record.session_key == session_key and h.record.state in ACTIVE_STATES
            for h in self._runs.values()
        )

    def _active(self) -> list[RunRecord]:
        return [
            h.record
            for h in list(self._runs.values())
            if h.record.state in ACTIVE_STATES and self._live(h.record.run_id)
        ]

    def _started(self, principal: str, request_id: str) -> RunRecord | None:
        for held in list(self._runs.values()):
            record = held.record
            if (record.principal, record.request_id) == (principal, request_id):
                if self._live(record.run_id):
                    return replace(record, pending=list(record.pending))
        return None

    async def submit(
        self, run: RunRecord, *, owner: str | None, bounds: RunBounds
    ) -> RunRecord | None:
        if run.request_id and (first := self._started(run.principal, run.request_id)):
            return first
        if not self._sessions.has(run.session_key):
            raise SessionNotFound(run.session_key)
        active = self._active()
        if any(r.session_key == run.session_key for r in active):
            raise SessionBusy(run.session_key)
        mine = (
            sum(1 for r in active if r.principal == run.principal)
            if bounds.principal is not None
            else None
        )
        bounds.admit(run.principal, len(active), mine)
        self._ordinal += 1
        # The caller's record is the one its owner runs: it names the attempt its writes
        # are fenced by, as the SQL stores' submit does.
        run.ordinal, run.attempts = self._ordinal, 1 if owner else 0
        self._runs[run.run_id] = _Held(replace(run), owner)
        return None

    async def get(self, run_id: str) -> RunRecord | None:
        held = self._live(run_id)
        return replace(held.record, pending=list(held.record.pending)) if held else None

    async def page(self, session_key: str, *, before: int | None, limit: int) -> list[RunRecord]:
        return self._newest(lambda r: r.session_key == session_key, before, limit)

    async def page_of(self, principal: str, *, before: int | None, limit: int) -> list[RunRecord]:
        return self._newest(lambda r: r.principal == principal, before, limit)

    def _newest(
        self, chosen: Callable[[RunRecord], bool], before: int | None, limit: int
    ) -> list[RunRecord]:
        """Up to ``limit`` chosen live runs older than ``before``, newest first, as a
        listing shows them (no result, no checkpoint)."""
        runs = [
            h.record
            for h in list(self._runs.values())
            if chosen(h.record)
            and (before is None or h.record.ordinal < before)
            and self._live(h.record.run_id)
        ]
        runs.sort(key=lambda r: -r.ordinal)
        return [replace(r, result=b"", checkpoint=b"") for r in runs[:limit]]

    async def events(self, run_id: str, after: int, limit: int) -> list[tuple[int, bytes]]:
        held = self._live(run_id)
        if held is None:
            return []
        return [e for e in held.events if e[0] > after][:limit]

    async def claim(self, owner: str, limit: int, callbacks: int | None = None) -> list[RunRecord]:
        now = self._clock()
        room = {False: limit, True: limit if callbacks is None else callbacks}
        claimed: list[RunRecord] = []
        for held in sorted(self._runs.values(), key=lambda h: h.record.ordinal):
            record = held.record
            finished = record.state.finished
            if room[finished] <= 0 or held.owner is not None or held.not_before > now:
                continue
            if not self._live(record.run_id):
                continue
            if finished and record.callback_status is not CallbackStatus.PENDING:
                continue
            room[finished] -= 1
            held.owner = owner
            if not finished:
                record.attempts += 1
            claimed.append(replace(record))
        return claimed

    def _owned(self, run_id: str, owner: str, attempt: int) -> _Held | None:
        held = self._live(run_id)
        if held is None or held.owner != owner or held.record.attempts != attempt:
            return None
        return held

    async def write(self, run_id: str, owner: str, attempt: int, change: RunChange) -> bool:
        held = self._owned(run_id, owner, attempt)
        if held is None:
            return False
        self._apply(held, change.events, change.state)
        record = held.record
        if change.pending is not None:
            record.pending = list(change.pending)
            held.decisions.clear()  # decided or moot once the waiting calls change
        if change.checkpoint is not None:
            record.checkpoint_step, record.checkpoint = change.checkpoint
        if change.unsafe_step is not None:
            record.unsafe_step = max(record.unsafe_step, change.unsafe_step)
        return True

    def _apply(
        self, held: _Held, events: Sequence[tuple[int, bytes]], state: RunState | None
    ) -> None:
        record = held.record
        held.events.extend(events)
        if events:
            record.last_sequence = events[-1][0]
        if state is not None:
            record.state = state
        record.update_time = self._clock()

    async def finish(
        self,
        run_id: str,
        owner: str,
        attempt: int,
        *,
        state: RunState,
        result: bytes,
        events: Sequence[tuple[int, bytes]],
        turn: Turn | None,
    ) -> bool:
        held = self._owned(run_id, owner, attempt)
        if held is None:
            return False
        self._finish(held, state, result, events)
        if not held.record.callback_url:
            held.owner = None
        if turn is not None:
            await self._sessions.finish_turn(held.record.session_key, turn)
        return True

    def _finish(
        self, held: _Held, state: RunState, result: bytes, events: Sequence[tuple[int, bytes]]
    ) -> None:
        record = held.record
        self._apply(held, events, state)
        record.result, record.pending, record.end_time = result, [], self._clock()
        record.checkpoint = b""
        if record.callback_url:
            record.callback_status = CallbackStatus.PENDING

    async def release(
        self, run_id: str, owner: str, attempt: int, *, not_before: float = 0.0
    ) -> None:
        held = self._owned(run_id, owner, attempt)
        if held is not None:
            held.owner, held.not_before = None, not_before

    async def renew(self, owner: str, run_ids: Collection[str]) -> Signals:
        lost, cancel, decisions = set(), set(), []
        for run_id in run_ids:
            held = self._live(run_id)
            if held is None or held.owner != owner:
                lost.add(run_id)
                continue
            if held.record.cancel_requested:
                cancel.add(run_id)
            decisions += held.decisions
            held.decisions = []
        return Signals(frozenset(lost), frozenset(cancel), tuple(decisions))

    async def request_cancel(self, run_id: str) -> None:
        held = self._live(run_id)
        if held is not None and not held.record.state.finished:
            held.record.cancel_requested = True

    async def set_callback(
        self,
        run_id: str,
        url: str,
        shape: str,
        token: str,
        auth: bytes = b"",
        *,
        callback_id: str = "",
        after_end: bool = False,
    ) -> bool:
        held = self._live(run_id)
        if held is None:
            return False
        record = held.record
        finished = record.end_time > 0
        if finished and (not after_end or record.callback_status is CallbackStatus.PENDING):
            return False
        if url and record.callback_url not in ("", url):
            return False
        record.callback_url, record.callback_shape, record.callback_token = url, shape, token
        record.callback_auth, record.callback_id = auth, callback_id
        if not finished:
            record.callback_status = CallbackStatus.PENDING if url else CallbackStatus.NONE
        return True

    async def cancel_submitted(self, run_id: str, *, result: bytes, event: bytes) -> bool:
        held = self._live(run_id)
        if held is None or held.owner is not None or held.record.state is not RunState.SUBMITTED:
            return False
        self._finish(held, RunState.CANCELED, result, [(1, event)])
        return True

    async def decide(self, run_id: str, call_id: str, approved: bool, reason: str) -> bool:
        held = self._live(run_id)
        if held is None or not any(p.call_id == call_id for p in held.record.pending):
            return False
        held.decisions.append(StoredDecision(run_id, call_id, approved, reason))
        return True

    async def callback_done(
        self,
        run_id: str,
        owner: str,
        *,
        status: CallbackStatus,
        attempts: int,
        not_before: float = 0.0,
    ) -> None:
        held = self._live(run_id)
        if held is None or held.owner != owner:
            return
        held.record.callback_status = status
        held.record.callback_attempts = attempts
        if status is CallbackStatus.PENDING:
            held.owner, held.not_before = None, not_before
        else:
            held.owner = None

    async def listen(self, on_notice: Callable[[str], None]) -> None:
        return None  # one process: nobody else writes

    async def sweep(self) -> int:
        before = len(self._runs)
        for run_id in list(self._runs):
            self._live(run_id)
        return before - len(self._runs)


class _TurnKeeper(Protocol):
    """What the memory run store needs of its session store."""

    def has(self, session_key: str) -> bool: ...

    async def finish_turn(self, session_id: str, turn: Turn) -> None: ...
