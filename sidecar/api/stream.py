"""A run's events on their way to a ``StreamRun`` caller, within a memory bound.

:class:`StreamSink` is the loop's :class:`~sidecar.types.EventSink` for a streamed run: it
turns each event into a ``StreamRunResponse`` once, queues it for the caller, and holds
what a slow reader has not taken to a bound of ``limit`` bytes:

- the model's text pauses while more than ``limit`` bytes wait (backpressure: the model's
  stream is read on only as the caller takes events), and a caller that takes none for
  :data:`BACKLOG_GRACE` seconds meanwhile is too slow;
- any other event that would make more than twice ``limit`` wait is too much.

Too slow or too much, the queue is emptied, the run stopped (``on_backlog``) and the
stream ends with STREAM_BACKLOG. A reader that keeps up is never cut off, however large
one event or a burst of them: ``run_finished``, the last event, always goes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from agentsidecar.v1 import agent_pb2
from sidecar.api import convert
from sidecar.types import BudgetOverrun, Stage, ToolOutcome, ToolQuestion

__all__ = ["BACKLOG_GRACE", "StreamSink"]

BACKLOG_GRACE = 5.0
"""Seconds the model's stream waits, paused, for a caller that has fallen behind."""
_DELTA_PIECE = 256 * 1024
"""Characters of one text_delta event at most: a longer piece of text from the model goes
out as several (their concatenation is the same text), so no event outgrows a message."""
_Entry = tuple[agent_pb2.StreamRunResponse | None, int]
"""A queued event and its size; or, with no event, the end (size 0) or the caller's
fall too far behind (size -1)."""
_END: _Entry = (None, 0)
_BACKLOG: _Entry = (None, -1)


class StreamSink:
    """One streamed run's events, queued for its caller.

    Args:
        run_id: The run's id, on every event.
        limit: Bytes of events held for a reader that falls behind.
        on_backlog: Stops the run once the reader is too slow.
    """

    __slots__ = (
        "_caught_up",
        "_limit",
        "_on_backlog",
        "_queue",
        "_run_id",
        "_sequence",
        "backlogged",
        "queued",
    )

    def __init__(self, run_id: str, limit: int, *, on_backlog: Callable[[], object]) -> None:
        self._queue: asyncio.Queue[_Entry] = asyncio.Queue()
        self._run_id = run_id
        self._sequence = 0
        self._limit = limit
        self._on_backlog = on_backlog
        self._caught_up: asyncio.Event | None = None
        self.queued = 0
        """Bytes of events waiting for the caller."""
        self.backlogged = False

    async def events(self) -> AsyncIterator[agent_pb2.StreamRunResponse | None]:
        """The events as the caller takes them, until the last; None once the caller has
        fallen too far behind (the run is being stopped)."""
        while True:
            message, size = await self._queue.get()
            if message is None:
                if size < 0:
                    yield None  # fell behind
                return
            yield message
            self._taken(size)

    def close(self) -> None:
        """No more events: the caller's iteration ends after those queued."""
        self._queue.put_nowait(_END)

    def put(self, *, final: bool = False, **event: Any) -> None:
        """Queue one event (``final``: the last one, which always goes)."""
        if self.backlogged:
            return
        self._sequence += 1
        message = agent_pb2.StreamRunResponse(run_id=self._run_id, sequence=self._sequence, **event)
        size = message.ByteSize()
        if not final and self.queued and self.queued + size > 2 * self._limit:
            self._overflow()
            return
        self.queued += size
        self._queue.put_nowait((message, size))

    def _overflow(self) -> None:
        self.backlogged = True
        while not self._queue.empty():  # free the memory now, not when it is read
            self._queue.get_nowait()
        self.queued = 0
        self._queue.put_nowait(_BACKLOG)
        if self._caught_up is not None:
            self._caught_up.set()
        self._on_backlog()

    def _taken(self, size: int) -> None:
        self.queued -= size
        if self._caught_up is not None and self.queued <= self._limit:
            self._caught_up.set()
            self._caught_up = None

    def backlog(self) -> Awaitable[None] | None:
        if self.queued <= self._limit or self.backlogged:
            return None
        return self._catch_up()

    async def _catch_up(self) -> None:
        if self._caught_up is None:
            self._caught_up = asyncio.Event()
        caught_up = self._caught_up
        try:
            async with asyncio.timeout(BACKLOG_GRACE):
                await caught_up.wait()
        except TimeoutError:
            self._overflow()  # stops the run: the next await is its cancellation
            await asyncio.sleep(0)

    # -- the loop's events -------------------------------------------------------------

    def text_delta(self, step: int, text: str) -> None:
        if len(text) <= _DELTA_PIECE:
            self.put(text_delta=convert.text_delta(step, text))
            return
        for at in range(0, len(text), _DELTA_PIECE):
            self.put(text_delta=convert.text_delta(step, text[at : at + _DELTA_PIECE]))

    def reasoning_delta(self, step: int, text: str) -> None:
        for at in range(0, len(text), _DELTA_PIECE):
            piece = text[at : at + _DELTA_PIECE]
            self.put(reasoning_delta=agent_pb2.ReasoningDelta(step=step, text=piece))

    def tool_call_started(self, step: int, call_id: str, tool_name: str, arguments: str) -> None:
        self.put(tool_call_started=convert.tool_call_started(step, call_id, tool_name, arguments))

    def tool_call_finished(self, step: int, outcome: ToolOutcome) -> None:
        self.put(tool_call_finished=convert.tool_call_finished(step, outcome))

    def approval_required(
        self,
        step: int,
        call_id: str,
        tool_name: str,
        arguments: str,
        destructive: bool,
        question: ToolQuestion | None = None,
    ) -> None:
        self.put(
            approval_required=convert.approval_required(
                step, call_id, tool_name, arguments, destructive, question
            )
        )

    def tool_call_progress(
        self,
        step: int,
        call_id: str,
        tool_name: str,
        progress: float,
        total: float | None,
        message: str,
    ) -> None:
        self.put(
            tool_call_progress=convert.tool_call_progress(
                step, call_id, tool_name, progress, total, message
            )
        )

    def step_finished(self, step: int, stages: list[Stage], total: float) -> None:
        self.put(step_finished=convert.step_finished(step, stages, total))

    def budget_exceeded(self, overrun: BudgetOverrun) -> None:
        self.put(budget_exceeded=convert.budget_exceeded(overrun))
