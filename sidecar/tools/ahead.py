"""Calls started ahead of their step: from the model's stream, or speculated.

The model's step decides which calls run; these start some of them sooner, and the step
claims each one (:meth:`Dispatcher.run_step`) rather than run it again:

- :class:`EarlyCalls`: while the model streams its answer, a read-only call starts as soon
  as its arguments are complete, before the model has written the calls after it.
- :class:`Prefetch`: before the model has answered at all, read-only idempotent calls it is
  very likely to ask for (predicted from the run's input:
  :mod:`sidecar.agent.speculation.prediction`) start while it thinks. A speculated call
  the model then asks for, with the same arguments, is answered from the speculation; the
  others are cancelled and counted as waste.

Only calls that cannot change anything start ahead: the tool is read-only (for a
speculation, also idempotent: a call the model never makes must be harmless to make), it
needs no approval, the profile allows it, its arguments are valid, and no call before it
in the answer writes a key it reads.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from sidecar.tools.dispatch import Dispatcher, Prepared, StepScope, cancelled, conflicts
from sidecar.types import ToolCall, ToolOutcome

__all__ = ["EarlyCalls", "Prefetch", "Started"]


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
        prefetch: The run's speculated calls: an announced call that was speculated is
            answered from the speculation instead of starting again.
    """

    def __init__(
        self, dispatcher: Dispatcher, scope: StepScope, prefetch: Prefetch | None = None
    ) -> None:
        self._dispatcher = dispatcher
        self._scope = scope
        self._prefetch = prefetch
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
        speculated = self._prefetch.claim(item) if self._prefetch is not None else None
        if speculated is not None:
            self._started[call.id] = speculated
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


def _key(item: Prepared) -> bytes | None:
    """What two calls must share to be the same call: the tool and the arguments' values
    (whatever their order or spacing in the model's text)."""
    if item.tool is None or item.arguments is None:
        return None
    return (
        item.tool.name.encode() + b"\0" + orjson.dumps(item.arguments, option=orjson.OPT_SORT_KEYS)
    )


class Prefetch:
    """Calls speculated for the first step, started while the model thinks.

    A speculated call is silent until the model asks for it: no event reaches the caller,
    no audit line is written and no span is opened (each would name a call the model may
    never make). Claimed, it is reported as the model's call: started when claimed,
    finished with the speculation's result under the model's call id, its timeline stage
    starting when the speculation did and marked ``speculated``. One the model does not
    ask for is cancelled by :meth:`discard`, and its audit line, when it reached its
    server, says so.

    Args:
        dispatcher: Runs the calls.
        scope: The first step's, without approvals.
    """

    def __init__(self, dispatcher: Dispatcher, scope: StepScope) -> None:
        self._dispatcher = dispatcher
        self._scope = scope
        self._quiet = dataclasses.replace(scope, sink=None, on_finished=None, trace=None)
        self._started: dict[bytes, Started] = {}
        self.started = 0
        """Calls speculated."""

    def start(self, calls: Sequence[ToolCall]) -> None:
        """Start each call that may be speculated; leave the others."""
        loop = asyncio.get_running_loop()
        for call in calls:
            item = self._dispatcher.prepare(call, self._quiet)
            tool, key = item.tool, _key(item)
            if (
                item.outcome is not None
                or tool is None
                or key is None
                or not (tool.read_only and tool.idempotent)
                or tool.requires_approval
                or item.writes
                or key in self._started
            ):
                continue
            speculated = Started(item, None, running=True)
            speculated.task = loop.create_task(
                self._dispatcher.run_or_reuse(self._quiet, item, self._quiet.clock.now(), None)
            )
            self._started[key] = speculated
            self.started += 1

    def claim(self, item: Prepared) -> Started | None:
        """The speculation of the call the model asks for (``item``), told to the caller as
        started now; None when it was not speculated (or was claimed already)."""
        key = _key(item)
        speculated = self._started.pop(key, None) if key is not None else None
        if speculated is None:
            return None
        scope, call = self._scope, item.call
        if scope.sink is not None:
            scope.sink.tool_call_started(scope.step, call.id, call.name, call.arguments)
        span = scope.trace.tool_call(call.id, call.name) if scope.trace is not None else None
        claimed = Started(item, span, running=True)
        claimed.task = asyncio.get_running_loop().create_task(_as_asked(speculated, item))
        return claimed

    def discard(self) -> int:
        """Cancel every speculation the model did not ask for; how many there were."""
        left, self._started = self._started, {}
        scope = self._scope
        for speculated in left.values():
            speculated.task.cancel()
            item = speculated.item
            if scope.on_finished is not None and item.sent_to is not None:
                why = "not used: speculated, and the model did not ask for this call"
                scope.on_finished(item.call, item.sent_to, cancelled(item.call, why, scope))
        return len(left)


async def _as_asked(speculated: Started, asked: Prepared) -> ToolOutcome:
    """The speculation's outcome as the outcome of the call the model asked for."""
    try:
        outcome = await speculated.task
    finally:
        asked.sent_to = speculated.item.sent_to  # cut off, the audit record names its server
    call = asked.call
    return dataclasses.replace(outcome, call_id=call.id, tool_name=call.name, speculated=True)
