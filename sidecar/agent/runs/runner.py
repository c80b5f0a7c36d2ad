"""The background runs this replica runs: which it takes, how each goes, what it hears.

:class:`Runner` runs up to ``background.max_running`` runs at once. A slot is for a run
that is running: a run waiting for approval gives its slot back for a place among the waits,
and a finished run delivering its callback holds a place among the deliveries, each pool
bounded in all and per principal (:mod:`~sidecar.agent.runs.pools`). It takes a run started
here at once (StartRun reserved its slot), and claims the others from the store: queued
runs, runs whose process stopped (a lapsed lease on PostgreSQL; at start on SQLite) and
callbacks due. It claims when a slot frees, when told a run waits (a notification), and,
on a shared store, every ``background.poll_interval``. On a store of its own it claims only
when something may wait there (at start, a run queued for want of a slot, a run or a
callback given back and now due): a run started and finished here costs no claim.

Each run it takes goes one of these ways:

- submitted: its session is claimed for its turn and it runs. A session another turn holds,
  or a sidecar or principal at its bound of concurrent runs, gives the run back to wait a
  little (not counted against it); a principal or profile no longer allowed rejects it; a
  principal past a daily quota fails it with the quota's error (it would wait until
  midnight, holding its place in the queue's bounds);
- cut off (working when its process stopped): it goes on from its last completed step, or
  fails as interrupted, as :mod:`sidecar.agent.runs.resume` rules;
- finished with a callback due: the callback is delivered.

On a shared store the runner renews its runs' leases every third of the lease, and learns
what other replicas asked of them (cancellations, approval decisions) then and whenever a
notification says so; a run it no longer owns is stopped without a word written.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

from sidecar.agent.admission import Admission
from sidecar.agent.approvals import Approvals, Decision
from sidecar.agent.runs.callbacks import CallbackBody, Callbacks
from sidecar.agent.runs.codec import RunCodec
from sidecar.agent.runs.feed import Feed
from sidecar.agent.runs.journal import Journal
from sidecar.agent.runs.pools import Pool
from sidecar.agent.runs.resume import Verdict, judge
from sidecar.agent.snapshot import Snapshot
from sidecar.agent.turns import ClaimedTurn, Turns
from sidecar.config import BackgroundConfig
from sidecar.errors import (
    CallNotPending,
    Draining,
    InputTooLarge,
    InvalidRequest,
    Overloaded,
    PermissionDenied,
    ProfileRemoved,
    QuotaExceeded,
    SessionBusy,
    SessionNotFound,
)
from sidecar.periodic import Periodic
from sidecar.security.audit import AuditLog
from sidecar.security.identity import Principal
from sidecar.sessions.store import SessionStore
from sidecar.types import (
    CallbackStatus,
    RunOutcome,
    RunRecord,
    RunResumed,
    RunStart,
    RunState,
    StopReason,
    Turn,
)

__all__ = ["Runner"]

log = logging.getLogger(__name__)

CANCELLED_CODE = "cancelled"


@dataclass(slots=True)
class _Active:
    """A run this replica holds."""

    record: RunRecord
    task: asyncio.Task[None] = dataclasses.field(init=False)
    journal: Journal | None = None
    in_turn: bool = False
    """Its turn is in its loop: a cancellation stops it there."""
    cancel: bool = False
    """Cancelled before its turn began: it never begins."""
    running: bool = True
    """It holds a run slot: it runs (not waiting for approval, not delivering)."""
    waits: int = 0
    """Its calls waiting for approval now."""


class Runner:
    """Takes, runs, resumes and ends this replica's background runs.

    Args:
        turns: Claims and runs turns.
        model_name: The model of profiles with no variants (for ``run_started``).
        sessions: The session store, with its runs.
        admission: The running turns (to stop one) and the drain.
        approvals: The calls waiting for approval (decisions from other replicas go there).
        snapshot: The configuration applied now (principals, callback secrets).
        settings: ``background``.
        owner: This replica's name in the store.
        feed: Wakes this process's watchers.
        audit: The audit record.
        codec: Encodes events and results (the front's).
        lease: Seconds of the store's leases (a shared store); None: no leases.
    """

    def __init__(
        self,
        *,
        turns: Turns,
        model_name: str,
        sessions: SessionStore,
        admission: Admission,
        approvals: Approvals,
        snapshot: Callable[[], Snapshot],
        settings: BackgroundConfig,
        owner: str,
        feed: Feed,
        audit: AuditLog,
        codec: RunCodec,
        lease: float | None,
        shapes: Mapping[str, CallbackBody],
    ) -> None:
        self._turns = turns
        self._model_name = model_name
        self._sessions = sessions
        self._store = sessions.runs
        self._admission = admission
        self._approvals = approvals
        self._snapshot = snapshot
        self._settings = settings
        self._owner = owner
        self._feed = feed
        self._audit = audit
        self._codec = codec
        self.callbacks = Callbacks(
            settings.callbacks,
            store=self._store,
            owner=owner,
            codec=codec,
            secrets=lambda name: snapshot().callback_secrets.get(name),
            audit=audit,
            shapes=shapes,
        )
        self._active: dict[str, _Active] = {}
        self._reserved = 0
        self._returning = 0  # decided runs waiting to run again: they go before new ones
        self._freed = asyncio.Event()  # a run slot was given back
        self.waits = Pool(settings.max_waiting, settings.max_waiting_per_principal)
        self.deliveries = Pool(
            settings.callbacks.max_deliveries, settings.callbacks.max_deliveries_per_principal
        )
        self._wake = asyncio.Event()
        self._dues: list[float] = []  # a heap: when runs given back here are due (one store)
        self._look = True  # the store may hold runs for this replica (at start: left behind)
        self._loop_task: asyncio.Task[None] | None = None
        self._heartbeat = Periodic("run-leases", lease / 3, self.renew) if lease else None
        self._renewing: asyncio.Task[None] | None = None

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Start taking runs (first: those a process that stopped left behind)."""
        if self._store.shared:
            await self._listen()
        self._loop_task = asyncio.get_running_loop().create_task(self._run(), name="runs")
        if self._heartbeat is not None:
            self._heartbeat.start()

    async def _listen(self) -> None:
        try:
            await self._store.listen(self.notice)
        except Exception:
            log.warning(
                "cannot listen for run notifications; looking every %.1fs instead",
                self._settings.poll_interval,
                exc_info=True,
            )

    def hand_over(self) -> None:
        """The process stops: every run still going is given up as it is, not finished,
        for another replica (or the next start) to take up."""
        for active in self._active.values():
            if active.journal is not None:
                active.journal.handing_over = True

    async def close(self) -> None:
        """Stop taking runs; give up the ones still held."""
        if self._heartbeat is not None:
            await self._heartbeat.stop()
        for task in (self._loop_task, self._renewing):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self.hand_over()
        tasks = [a.task for a in self._active.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.callbacks.close()

    # -- taking runs ------------------------------------------------------------------

    def reserve(self) -> bool:
        """Hold a slot for a run about to be started here; pair with :meth:`take` or
        :meth:`unreserve`."""
        if self._admission.draining or self._free() <= 0:
            return False
        self._reserved += 1
        return True

    def unreserve(self) -> None:
        self._reserved -= 1

    def take(self, run: RunRecord) -> None:
        """Run ``run``, started here with its slot reserved."""
        self._reserved -= 1
        self._launch(run)

    def wake(self) -> None:
        """Look for runs to take now."""
        self._look = True
        self._wake.set()

    def holds(self, run_id: str) -> bool:
        return run_id in self._active

    def note_callback(self, run_id: str, url: str, shape: str, token: str, auth: bytes) -> None:
        """A run held here was given a callback (or lost it) since it was taken."""
        active = self._active.get(run_id)
        if active is not None:
            record = active.record
            record.callback_url, record.callback_shape, record.callback_token = url, shape, token
            record.callback_auth = auth

    def _free(self) -> int:
        """Run slots free for a new run: those of runs waiting or delivering are not
        taken, and decided runs take theirs back first."""
        running = sum(1 for a in self._active.values() if a.running)
        return self._settings.max_running - running - self._reserved - self._returning

    def _launch(self, run: RunRecord) -> None:
        active = _Active(run, running=not run.state.finished)
        active.task = asyncio.get_running_loop().create_task(
            self._execute(active), name=f"run:{run.run_id}"
        )
        self._active[run.run_id] = active

        def done(_: object) -> None:
            if self._active.get(run.run_id) is active:  # not a later take of the same run
                del self._active[run.run_id]
            if active.running:
                self._slot_freed()
            self._wake.set()

        active.task.add_done_callback(done)

    def _slot_freed(self) -> None:
        self._freed.set()
        self._wake.set()

    def _leave_slot(self, active: _Active) -> None:
        if active.running:
            active.running = False
            self._slot_freed()

    @contextlib.asynccontextmanager
    async def _awaiting(self, active: _Active) -> AsyncIterator[bool]:
        """A call of the run waits for approval: the run gives its slot back, taking a
        place among the waits instead (False: its principal's or the pool's are all
        taken, and the call does not wait). Once none of its calls waits, it takes a slot
        again, before any new run does."""
        principal = active.record.principal
        if active.waits == 0:
            if not self.waits.take(principal):
                yield False
                return
            self._leave_slot(active)
        active.waits += 1
        try:
            yield True
        finally:
            active.waits -= 1
            if active.waits == 0:
                self.waits.give(principal)
                await self._take_slot_again(active)

    async def _take_slot_again(self, active: _Active) -> None:
        self._returning += 1
        try:
            while self._free() + self._returning <= 0 and active.waits == 0:
                self._freed.clear()
                await self._freed.wait()
        finally:
            self._returning -= 1
        if active.waits == 0:  # else a call began waiting meanwhile: it holds no slot
            active.running = True

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            free, calls = max(0, self._free()), self.deliveries.free
            now = time.time()
            while self._dues and self._dues[0] <= now:
                heapq.heappop(self._dues)
                self._look = True
            looking = self._store.shared or self._look
            if (free > 0 or calls > 0) and looking and not self._admission.draining:
                try:
                    claimed = await self._store.claim(self._owner, free, calls)
                except Exception:
                    log.exception("claiming background runs failed")
                    claimed = []
                else:
                    # Fewer than it could take: on a store of its own, nothing else waits
                    # until a submission, a notification or a due time says so.
                    done = sum(1 for r in claimed if r.state.finished)
                    self._look = len(claimed) - done >= free or done >= calls
                for run in claimed:
                    self._launch(run)
            timeout: float | None = None
            if self._store.shared:
                timeout = self._settings.poll_interval
            elif self._dues:
                timeout = max(0.0, self._dues[0] - time.time())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            if self._store.shared and (timeout is not None and not self._wake.is_set()):
                await self._listen()  # a dropped listener comes back
                self._feed.publish_all()  # watchers read, in case a notification was missed

    def _note_due(self, due: float) -> None:
        """A run given back is due at ``due``: a store of this process's own is looked at
        then (each due time kept, so a later one is not lost to an earlier)."""
        if not self._store.shared:
            heapq.heappush(self._dues, due)
            self._wake.set()

    async def _give_back(self, run: RunRecord, delay: float) -> None:
        """Let another look take the run, ``delay`` seconds from now."""
        due = time.time() + delay
        self._note_due(due)
        await self._store.release(run.run_id, self._owner, run.attempts, not_before=due)

    # -- one run ----------------------------------------------------------------------

    async def _execute(self, active: _Active) -> None:
        run = active.record
        try:
            if run.state.finished:
                await self._call_back(run)
                return
            principal = self._snapshot().authenticator.principal(run.principal)
            session_id = principal.shown(run.session_key) if principal is not None else ""
            if principal is None:
                await self._reject(
                    active, "principal_removed", "its principal is no longer configured"
                )
            elif run.cancel_requested:
                await self._end_cancelled(active, started=run.state is not RunState.SUBMITTED)
            elif run.state is RunState.SUBMITTED:
                await self._start(active, principal, session_id)
            else:
                await self._resume(active, principal, session_id)
            self._leave_slot(active)  # what is left to do is no run's
            # A callback named on another replica while the run went is in the store only.
            if (
                active.journal is not None
                and active.journal.finished
                and (run.callback_url or self._store.shared)
            ):
                fresh = await self._store.get(run.run_id)
                if fresh is not None and fresh.callback_url:
                    await self._call_back(fresh)
        except asyncio.CancelledError:
            if active.journal is None or not (active.journal.finished or active.journal.lost):
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._store.release(run.run_id, self._owner, run.attempts))
            raise
        except Exception:
            log.exception("background run %s failed in the runner", run.run_id)
            try:
                await self._give_back(run, self._settings.poll_interval)
            except Exception:  # the store is away: the run's lease (or the next start) frees it
                log.warning("background run %s could not be given back", run.run_id)

    async def _claim_turn(
        self, active: _Active, principal: Principal, session_id: str, *, resumed: bool
    ) -> ClaimedTurn | None:
        """The run's turn, its session claimed; None when the run was settled instead."""
        run = active.record
        try:
            return await self._turns.begin_detached(
                principal,
                session_id,
                run.run_id,
                run.input,
                started=time.time() if not resumed else run.create_time,
                resumed=resumed,
            )
        except QuotaExceeded as exc:
            if exc.daily:  # spent until midnight: the run fails now and frees its place
                await self._out_of_quota(active, exc)
            else:
                await self._give_back(run, self._settings.poll_interval)  # for now
        except (Overloaded, Draining):
            await self._give_back(run, self._settings.poll_interval)  # full here, for now
        except SessionBusy:
            if resumed:
                await self._interrupt(active, "another turn holds its session")
            else:
                await self._give_back(run, self._settings.poll_interval)  # a foreground turn
        except SessionNotFound:
            pass  # deleted: its runs went with it
        except (PermissionDenied, ProfileRemoved, InputTooLarge) as exc:
            await self._reject(active, "not_allowed", exc.message)
        return None

    async def _start(self, active: _Active, principal: Principal, session_id: str) -> None:
        turn = await self._claim_turn(active, principal, session_id, resumed=False)
        if turn is None:
            return
        await self._run_turn(
            active,
            turn,
            self._journal(active),
            turn.start(self._model_name),
        )

    async def _resume(self, active: _Active, principal: Principal, session_id: str) -> None:
        run = active.record
        session = await self._sessions.get(run.session_key)
        if session is None:
            return  # deleted: its runs went with it
        verdict = judge(run, session, max_attempts=self._settings.max_attempts)
        if not verdict.resumable:
            await self._interrupt(active, verdict.why)
            return
        turn = await self._claim_turn(active, principal, session_id, resumed=True)
        if turn is None:
            return
        if self._audit.enabled:
            self._audit.record(
                "run_resumed",
                run.principal,
                session_id=session_id,
                run_id=run.run_id,
                step=verdict.step,
                attempt=run.attempts,
            )
        journal = self._journal(active, verdict)
        await self._run_turn(active, turn, journal, RunResumed(verdict.step, run.attempts))

    def _journal(self, active: _Active, verdict: Verdict | None = None) -> Journal:
        run = active.record
        journal = Journal(
            run,
            owner=self._owner,
            sessions=self._sessions,
            codec=self._codec,
            settings=self._settings,
            feed=self._feed,
            on_lost=lambda: self._stop(active, "lost"),
            resume=verdict.progress if verdict is not None else None,
            awaiting=lambda: self._awaiting(active),
        )
        active.journal = journal
        return journal

    async def _run_turn(
        self, active: _Active, turn: ClaimedTurn, journal: Journal, first: RunStart | RunResumed
    ) -> None:
        """Store the attempt's first event, then run the claimed turn."""
        run = active.record
        try:
            opened = await journal.open(first)
        except BaseException:
            await self._turns.abandon(turn, stored=False)
            await self._sessions.release_turn(run.session_key, run.run_id)
            raise
        if not opened or active.cancel:
            # Lost before it began, or cancelled: its turn never runs.
            await self._turns.abandon(turn, stored=False)
            if opened:
                await self._end_cancelled(active, started=True)
            else:
                await self._sessions.release_turn(run.session_key, run.run_id)
            return
        active.in_turn = True  # from here a cancellation stops the turn in its loop
        await self._turns.run(
            turn,
            structured=run.structured,
            sink=None,
            time_remaining=None,
            method=run.origin,
            detached=journal,
        )

    def _stop(self, active: _Active, code: str) -> None:
        running = self._admission.running(active.record.session_key)
        if running is not None and running.run_id == active.record.run_id:
            why = (
                "the run was cancelled"
                if code == CANCELLED_CODE
                else "the run is no longer this replica's"
            )
            reason = StopReason.CANCELLED if code == CANCELLED_CODE else StopReason.INTERRUPTED
            self._admission.stop(running, reason, why, code)

    def cancel(self, run_id: str) -> bool:
        """Cancel a run this replica holds; False when it holds none of that id."""
        active = self._active.get(run_id)
        if active is None or active.record.state.finished:
            return False
        active.cancel = True
        if active.in_turn:
            self._stop(active, CANCELLED_CODE)
        return True

    async def wait(self, run_id: str, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a run this replica holds to be done."""
        active = self._active.get(run_id)
        if active is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                async with asyncio.timeout(timeout):
                    await asyncio.shield(active.task)

    # -- ends without a turn of their own -------------------------------------------

    # Each of these ends the run through its own journal (``active.journal``), so that a
    # callback it names is delivered next, as after any run's end.

    async def _end_cancelled(self, active: _Active, *, started: bool) -> None:
        run = active.record
        outcome = RunOutcome.failed(
            StopReason.CANCELLED,
            CANCELLED_CODE,
            "the run was cancelled before it started" if not started else "the run was cancelled",
            retryable=False,
            total=0.0,
        )
        turn = self._turn(run, StopReason.CANCELLED) if started else None
        journal = active.journal or self._journal(active)
        await journal.end(RunState.CANCELED, self._codec.result(outcome), turn)

    async def _interrupt(self, active: _Active, why: str) -> None:
        run = active.record
        outcome = RunOutcome.failed(
            StopReason.INTERRUPTED, "interrupted", why, retryable=True, total=0.0
        )
        journal = self._journal(active)
        if await journal.end(
            RunState.FAILED, self._codec.result(outcome), self._turn(run, StopReason.INTERRUPTED)
        ):
            log.warning("background run %s failed as interrupted: %s", run.run_id, why)
            if self._audit.enabled:
                self._audit.record(
                    "run_finished",
                    run.principal,
                    run_id=run.run_id,
                    stop_reason=StopReason.INTERRUPTED.name,
                    error="interrupted",
                )

    async def _out_of_quota(self, active: _Active, exc: QuotaExceeded) -> None:
        run = active.record
        outcome = RunOutcome.failed(
            StopReason.COST_LIMIT, "quota_exceeded", exc.message, retryable=True, total=0.0
        )
        journal = self._journal(active)
        if await journal.end(RunState.FAILED, self._codec.result(outcome), None):
            if self._audit.enabled:
                self._audit.record(
                    "run_finished",
                    run.principal,
                    run_id=run.run_id,
                    stop_reason=StopReason.COST_LIMIT.name,
                    error="quota_exceeded",
                    quota=exc.quota_name,
                )

    async def _reject(self, active: _Active, code: str, why: str) -> None:
        run = active.record
        journal = self._journal(active)
        if await journal.end(RunState.REJECTED, self._codec.rejected(code, why), None):
            if self._audit.enabled:
                self._audit.record("run_rejected", run.principal, run_id=run.run_id, error=code)

    @staticmethod
    def _turn(run: RunRecord, reason: StopReason) -> Turn:
        return Turn(
            run_id=run.run_id,
            input=run.input,
            answer="",
            stop_reason=reason,
            start_time=run.create_time,
            end_time=time.time(),
        )

    async def _call_back(self, run: RunRecord) -> None:
        """Deliver the run's callback in a place of the deliveries' pool; with none free
        for its principal, give it back to be delivered a little later."""
        due: float | None
        if not self.deliveries.take(run.principal):
            due = time.time() + self._settings.poll_interval
            await self._store.callback_done(
                run.run_id,
                self._owner,
                status=CallbackStatus.PENDING,
                attempts=run.callback_attempts,
                not_before=due,
            )
        else:
            try:
                principal = self._snapshot().authenticator.principal(run.principal)
                shown = principal.shown(run.session_key) if principal else run.session_key
                due = await self.callbacks.deliver(run, shown)
            finally:
                self.deliveries.give(run.principal)
                self._wake.set()  # a place freed: a delivery given back may be taken now
        if due is not None:
            self._note_due(due)

    # -- what other replicas ask ------------------------------------------------------

    def notice(self, payload: str) -> None:
        """A notification: ``e:RUN`` (something stored: watchers read), ``c:RUN`` (a
        request for the run's owner), ``q`` (a run waits for a replica)."""
        kind, _, run_id = payload.partition(":")
        if kind == "e":
            self._feed.publish(run_id)
        elif kind == "c" and run_id in self._active:
            if self._renewing is None or self._renewing.done():
                self._renewing = asyncio.get_running_loop().create_task(self.renew())
        elif kind == "q":
            self._wake.set()

    async def renew(self) -> None:
        """Renew the leases of the runs held here; act on what other replicas asked."""
        held = list(self._active)
        if not held:
            return
        signals = await self._store.renew(self._owner, held)
        for run_id in signals.lost:
            active = self._active.get(run_id)
            if active is not None:
                if active.journal is not None:
                    active.journal.lose()
                else:
                    active.task.cancel()
        for run_id in signals.cancel:
            self.cancel(run_id)
        for decision in signals.decisions:
            active = self._active.get(decision.run_id)
            if active is None:
                continue
            # Decided here or timed out meanwhile; or an answer to a tool's question, which
            # the store does not carry, so the question stays open (docs/background-runs.md).
            with contextlib.suppress(CallNotPending, InvalidRequest):
                self._approvals.decide(
                    active.record.session_key,
                    decision.call_id,
                    Decision(decision.approved, decision.reason),
                )
