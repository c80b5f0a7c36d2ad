"""A background run's events on their way to the store, and the state they imply.

:class:`Journal` is the run's :class:`~sidecar.types.EventSink` and its
:class:`~sidecar.agent.turns.Detached`: the loop hands it events as they happen; it numbers
them, encodes each once (the front's :class:`~sidecar.agent.runs.codec.RunCodec`) and
stores them in batches, one write every ``background.flush_interval`` at most, each write
fenced by the run's attempt (a replica that lost the run writes nothing). What must not
wait goes at once, in the same write as the events before it: the run waiting for an
approval (input-required) and going on again, the end of each step with its checkpoint,
and a call not safe to repeat about to be sent, which waits until that write is stored.

Bounds: text deltas stored together are merged into one event; one event's text fields are
cut at ``background.max_event_bytes``; past ``background.max_events`` stored events, text
deltas are no longer stored (the result holds the answer), every other event still is.
A write that fails (the store away) is tried again with the next; a write after which the
store's answer was lost is made good by reading back what was stored first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from sidecar.agent.runs.codec import RunCodec
from sidecar.agent.runs.feed import Feed
from sidecar.agent.runs.resume import encode_checkpoint
from sidecar.agent.scope import Progress
from sidecar.config import BackgroundConfig
from sidecar.sessions.runs import RunChange, RunStore
from sidecar.sessions.store import SessionStore
from sidecar.tools.catalog import CatalogTool
from sidecar.types import (
    ApprovalRequired,
    BudgetExceeded,
    BudgetOverrun,
    EventSink,
    PendingApproval,
    RunEvent,
    RunOutcome,
    RunRecord,
    RunResumed,
    RunStart,
    RunState,
    Stage,
    StepFinished,
    TextDelta,
    ToolCall,
    ToolCallFinished,
    ToolCallProgress,
    ToolCallStarted,
    ToolOutcome,
    ToolQuestion,
    Turn,
)

__all__ = ["Journal"]

log = logging.getLogger(__name__)


@asynccontextmanager
async def _may_wait() -> AsyncIterator[bool]:
    yield True


class Journal:
    """One attempt at a background run, as it is recorded.

    Args:
        run: The run, as its owner claimed or submitted it (``attempts`` is the attempt).
        owner: This replica's name in the store.
        sessions: The session store (its turn's start record, when it hands the run over).
        codec: Encodes events and results.
        settings: ``background`` of the configuration.
        feed: Told of every write, for this process's watchers.
        on_lost: Called once when the store says the run is no longer this replica's.
        resume: Where the attempt goes on from, when the run was taken up again.
        awaiting: Held while a call of the run waits for approval; says whether it may
            wait (the runner's pool of waits).
    """

    def __init__(
        self,
        run: RunRecord,
        *,
        owner: str,
        sessions: SessionStore,
        codec: RunCodec,
        settings: BackgroundConfig,
        feed: Feed,
        on_lost: Callable[[], object],
        resume: Progress | None = None,
        awaiting: Callable[[], AbstractAsyncContextManager[bool]] | None = None,
    ) -> None:
        self.run = run
        self._owner = owner
        self._sessions = sessions
        self._store: RunStore = sessions.runs
        self._codec = codec
        self._settings = settings
        self._feed = feed
        self._on_lost = on_lost
        self.sink: EventSink = self
        self.approval_timeout = settings.approval_timeout
        self.time_allowed = settings.run_timeout
        self.resume = resume
        self.awaiting = awaiting or _may_wait
        self._events: list[RunEvent] = []  # not yet numbered
        self._outbox: list[tuple[int, bytes]] = []  # numbered, not yet stored
        self._sequence = run.last_sequence
        self._state = run.state
        self._state_changed = False
        self._waiting: dict[str, PendingApproval] = {p.call_id: p for p in run.pending}
        self._unsafe = run.unsafe_step
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._uncertain = False  # a write failed: what it stored is read back first
        self.lost = False
        self.handing_over = False
        """The process is stopping: the run is given up, not finished (see :meth:`store`)."""
        self.finished = False

    @property
    def attempt(self) -> int:
        return self.run.attempts

    # -- writes -----------------------------------------------------------------------

    async def open(self, first: RunStart | RunResumed) -> bool:
        """Store the attempt's first event with the run WORKING; False when the run is no
        longer this replica's."""
        self._state, self._state_changed = RunState.WORKING, True
        self._events.append(first)
        return await self._write()

    async def _write(self, **extra: Any) -> bool:
        """Store what is waiting, with ``extra`` (a checkpoint, an unsafe step); False when
        the run is lost. Raises what the store raised (the events stay, for the next)."""
        async with self._lock:
            if self.lost:
                return False
            if self._uncertain:
                stored = await self._store.get(self.run.run_id)
                if stored is not None:
                    self._outbox = [e for e in self._outbox if e[0] > stored.last_sequence]
                self._uncertain = False
            self._number()
            change = RunChange(
                events=list(self._outbox),
                state=self._state if self._state_changed else None,
                pending=list(self._waiting.values()) if self._state_changed else None,
                **extra,
            )
            if not change.events and change.state is None and not extra:
                return True
            try:
                written = await self._store.write(
                    self.run.run_id, self._owner, self.attempt, change
                )
            except Exception:
                self._uncertain = True
                raise
            if not written:
                self.lose()
                return False
            self._outbox.clear()
            self._state_changed = False
        self._feed.publish(self.run.run_id)
        return True

    def _number(self) -> None:
        cap = self._settings.max_event_bytes
        for event in self._events:
            self._sequence += 1
            data = self._codec.event(self.run.run_id, self._sequence, event, cap)
            self._outbox.append((self._sequence, data))
        self._events.clear()

    def lose(self) -> None:
        """The run is no longer this replica's: stop, writing nothing more."""
        if not self.lost:
            self.lost = True
            self._events.clear()
            self._outbox.clear()
            log.warning(
                "background run %s is no longer this replica's (taken over, or deleted with "
                "its session); it stops here",
                self.run.run_id,
            )
            self._on_lost()

    def _soon(self, now: bool = False) -> None:
        """Write what is waiting: at once, or within the flush interval."""
        if self._flusher is not None and not self._flusher.done():
            if now and self._timer is not None:
                self._timer.cancel()
                self._timer = None
            return  # the running flush takes everything up to its end
        if now:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._flush()
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._settings.flush_interval, self._flush)

    def _flush(self) -> None:
        self._timer = None
        self._flusher = asyncio.get_running_loop().create_task(
            self._flush_all(), name=f"journal:{self.run.run_id}"
        )

    async def _flush_all(self) -> None:
        while (self._events or self._outbox or self._state_changed) and not self.lost:
            try:
                await self._write()
            except Exception:
                log.exception("background run %s: storing its events failed", self.run.run_id)
                await asyncio.sleep(self._settings.poll_interval)

    async def drain(self) -> None:
        """Wait for the writes under way."""
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)

    # -- the loop's events (EventSink) ----------------------------------------------------

    def _add(self, event: RunEvent) -> None:
        if self.lost:
            return
        self._events.append(event)
        self._soon()

    def text_delta(self, step: int, text: str) -> None:
        if self._sequence + len(self._events) >= self._settings.max_events:
            return  # the result holds the whole answer; other events still go
        piece = self._settings.max_event_bytes // 4  # characters that surely fit
        last = self._events[-1] if self._events else None
        if isinstance(last, TextDelta) and last.step == step:
            merged = last.text + text
            if len(merged) <= piece:
                self._events[-1] = TextDelta(step, merged)
                return
        for at in range(0, len(text), piece):
            self._add(TextDelta(step, text[at : at + piece]))

    def reasoning_delta(self, step: int, text: str) -> None:
        pass  # streamed to a live caller only: reasoning is never journaled

    def tool_call_started(self, step: int, call_id: str, tool_name: str, arguments: str) -> None:
        self._add(ToolCallStarted(step, call_id, tool_name, arguments))
        self._settled(call_id)

    def tool_call_finished(self, step: int, outcome: ToolOutcome) -> None:
        self._add(ToolCallFinished(step, outcome))
        self._settled(outcome.call_id)

    def approval_required(
        self,
        step: int,
        call_id: str,
        tool_name: str,
        arguments: str,
        destructive: bool,
        question: ToolQuestion | None = None,
    ) -> None:
        self._add(ApprovalRequired(step, call_id, tool_name, arguments, destructive, question))
        cap = self._settings.max_event_bytes // 4
        self._waiting[call_id] = PendingApproval(
            step=step,
            call_id=call_id,
            tool_name=tool_name,
            arguments=arguments[:cap],
            destructive=destructive,
        )
        self._state, self._state_changed = RunState.INPUT_REQUIRED, True
        self._soon(now=True)

    def _settled(self, call_id: str) -> None:
        if self._waiting.pop(call_id, None) is not None:
            if not self._waiting:
                self._state = RunState.WORKING
            self._state_changed = True
            self._soon(now=True)

    def tool_call_progress(
        self,
        step: int,
        call_id: str,
        tool_name: str,
        progress: float,
        total: float | None,
        message: str,
    ) -> None:
        self._add(ToolCallProgress(step, call_id, tool_name, progress, total, message))

    def step_finished(self, step: int, stages: list[Stage], total: float) -> None:
        self._add(StepFinished(step, stages, total))

    def budget_exceeded(self, overrun: BudgetOverrun) -> None:
        self._add(BudgetExceeded(overrun))

    def backlog(self) -> Awaitable[None] | None:
        return None  # nobody reads it live: the store takes it at its own pace

    # -- the turn's hooks (Detached) ------------------------------------------------------

    async def step_done(self, step: int, progress: Progress) -> None:
        """Store the step's end with the checkpoint the run goes on from if it is cut off
        later. A failed write is survivable: the run would go on from an older one, and a
        step since that sent an unsafe call is recorded as such (or was never sent)."""
        checkpoint = (step, encode_checkpoint(progress))
        try:
            written = await self._write(checkpoint=checkpoint)
        except Exception:
            log.exception("background run %s: storing step %d failed", self.run.run_id, step)
            return
        if not written:
            await asyncio.sleep(0)  # the run was stopped: its cancellation lands here

    async def before_dispatch(self, step: int, call: ToolCall, tool: CatalogTool) -> None:
        """Record that ``step`` sends a call not safe to repeat, before it is sent: the
        step is then never run again. A record that cannot be stored keeps the call unsent
        (the exception fails the run)."""
        if tool.read_only or tool.idempotent or self._unsafe >= step:
            return
        for attempt in range(3):  # a store that is briefly away does not fail the run
            try:
                written = await self._write(unsafe_step=step)
                break
            except Exception:
                if attempt == 2:
                    raise
                await asyncio.sleep(self._settings.poll_interval)
        if not written:
            await asyncio.sleep(0)  # stopped: never sent
            raise asyncio.CancelledError
        self._unsafe = step

    async def store(self, turn: Turn, outcome: RunOutcome | None) -> None:
        """Store the run's end with its turn, or, when the process is stopping, give the
        run up as it is for the next replica (or the next start) to take up."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await self.drain()
        if self.lost:
            return
        if outcome is None or self.handing_over:
            await self.hand_over()
            return
        result = self._codec.result(outcome)
        await self.end(RunState.of(outcome.stop_reason), result, turn)

    async def end(self, state: RunState, result: bytes, turn: Turn | None) -> bool:
        """Finish the run: ``state``, ``result`` and the last event (with every event still
        waiting), and its ``turn``, in one write."""
        async with self._lock:
            if self.lost:
                return False
            self._number()
            self._sequence += 1
            final = self._codec.finished(self.run.run_id, self._sequence, result)
            events = [*self._outbox, (self._sequence, final)]
            done = await self._store.finish(
                self.run.run_id,
                self._owner,
                self.attempt,
                state=state,
                result=result,
                events=events,
                turn=turn,
            )
            if not done:
                self.lose()
                return False
            self._outbox.clear()
            self.finished = True
        self._feed.publish(self.run.run_id)
        return True

    async def hand_over(self) -> None:
        """Give the run up without finishing it: its events so far stored, its turn's
        start record and its ownership let go (the next owner resumes it or fails it)."""
        try:
            await self._write()
        except Exception:
            log.exception("background run %s: storing its last events failed", self.run.run_id)
        await self._sessions.release_turn(self.run.session_key, self.run.run_id)
        await self._store.release(self.run.run_id, self._owner, self.attempt)
