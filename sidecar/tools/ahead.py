"""Calls started ahead of their step, from the model's stream.

The model's step decides which calls run; :class:`EarlyCalls` starts some of them sooner:
while the model streams its answer, a read-only call starts as soon as its arguments are
complete, before the model has written the calls after it, and the step claims it
(:meth:`Dispatcher.run_step`) rather than run it again.

Only calls that cannot change anything start ahead: the tool is read-only, it needs no
approval, the profile allows it, its arguments are valid, and no call before it in the
answer writes a key it reads.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import Any

from sidecar.tools.dispatch import Dispatcher, Prepared, StepScope, cancelled, conflicts
from sidecar.types import ToolCall, ToolOutcome

__all__ = ["EarlyCalls", "Started"]


@dataclass(slots=True)
class Started:
    """A call started before its step claimed it."""

    item: Prepared
    span: Any  # the call's ToolSpan, when tracing
    running: bool = False
    task: asyncio.Task[ToolOutcome] = dataclasses.field(init=False)


class EarlyCalls:
    """Read-only calls started while the model is still streaming the rest of its answer.

    The model streams its calls one after another, so the first can run while the model
    writes the others. The step then claims each started call rather than run it again; a
    started call the final answer does not hold (its model attempt failed and was retried,
    or the run ended before its tools) is cancelled.

    Args:
        dispatcher: Runs the calls.
        scope: The step's.
    """

    def __init__(self, dispatcher: Dispatcher, scope: StepScope) -> None:
        self._dispatcher = dispatcher
        self._scope = scope
        self._announced: dict[str, Prepared] = {}  # by call id, in the model's order
        self._started: dict[str, Started] = {}

    def offer(self, call: ToolCall) -> None:
        """A call whose arguments are complete: start it now if it qualifies."""
        item = self._dispatcher.prepare(call, self._scope)
        tool, earlier = item.tool, self._announced.values()
        qualifies = (
            item.outcome is None
            and tool is not None
            and tool.read_only
            and not tool.requires_approval
            and not item.writes
            and call.id not in self._announced
            and not any(conflicts(e, item) for e in earlier)
        )
        self._announced.setdefault(call.id, item)
        if not qualifies:
            return
        scope = self._scope
        span = scope.trace.tool_call(call.id, call.name) if scope.trace is not None else None
        early = Started(item, span)
        early.task = asyncio.get_running_loop().create_task(self._start(early))
        self._started[call.id] = early

    async def _start(self, early: Started) -> ToolOutcome:
        early.running = True
        scope = self._scope
        return await self._dispatcher.run_or_reuse(scope, early.item, scope.clock.now(), early.span)

    def claim(self, call: ToolCall) -> tuple[Prepared | None, Started | None]:
        """What the stream already made of ``call``: its validated form, when it was
        announced as it is in the answer, and the call started for it, if any."""
        early = self._started.pop(call.id, None)
        item = self._announced.get(call.id)
        if item is None or item.call.arguments != call.arguments:
            if early is not None:
                self._cancel(early)  # not the call that was started after all
            return None, None
        return item, early

    def cancel(self) -> None:
        """Cancel every started call nobody claimed."""
        started, self._started = self._started, {}
        for early in started.values():
            self._cancel(early)

    def _cancel(self, early: Started) -> None:
        early.task.cancel()
        if early.span is not None:
            early.span.end(None)
        scope = self._scope
        if early.running and (scope.sink is not None or scope.on_finished is not None):
            call = early.item.call
            outcome = cancelled(
                call, "not used: the model's final answer did not keep this call", scope
            )
            if scope.sink is not None:
                scope.sink.tool_call_finished(scope.step, outcome)
            if scope.on_finished is not None:
                tool = early.item.tool
                server = early.item.sent_to or (tool.server if tool is not None else None)
                scope.on_finished(call, server, outcome)
