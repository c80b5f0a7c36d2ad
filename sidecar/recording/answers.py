"""Tool calls answered from a recording: nothing reaches a tool server.

A new run of a recorded turn (a replay, a shadow variant) makes its own tool calls; each
is answered with the recorded result of the same tool called with the same arguments
(compared as JSON values, so key order and spacing do not matter). The same call made
several times gets the recorded results in their order, then the last one again. A call
the recording does not hold gets an error result the model sees, saying so: it was
never run.
"""

from __future__ import annotations

from collections import deque

import orjson

from sidecar.recording.format import RecordedCall, RecordedTurn
from sidecar.types import ToolCall, ToolCallStatus, ToolOutcome

__all__ = ["RecordedAnswers"]


def _key(name: str, arguments: str) -> tuple[str, str]:
    try:
        canonical = orjson.dumps(orjson.loads(arguments or "{}"), option=orjson.OPT_SORT_KEYS)
        return name, canonical.decode()
    except orjson.JSONDecodeError:
        return name, arguments


class RecordedAnswers:
    """The recorded results of one turn's tool calls, by tool and arguments."""

    def __init__(self, turn: RecordedTurn) -> None:
        self._results: dict[tuple[str, str], deque[RecordedCall]] = {}
        for call in turn.calls:
            if call.status is ToolCallStatus.CANCELLED:
                continue  # cut off in the recorded run: it has no result to give
            self._results.setdefault(_key(call.name, call.arguments), deque()).append(call)
        self.missed = 0
        """Calls the recording could not answer."""

    def holds(self, call: ToolCall) -> bool:
        return _key(call.name, call.arguments) in self._results

    def answer(self, call: ToolCall, start: float) -> ToolOutcome:
        """The recorded result of ``call``, or an error result when there is none."""
        key = _key(call.name, call.arguments)
        queue = self._results.get(key)
        if queue is None:
            self.missed += 1
            return ToolOutcome(
                call_id=call.id,
                tool_name=call.name,
                status=ToolCallStatus.ERROR,
                content=f"not run: the recording holds no call of {call.name} with these arguments",
                start=start,
                duration=0.0,
            )
        recorded = queue.popleft() if len(queue) > 1 else queue[0]
        return recorded.outcome(call, start)
