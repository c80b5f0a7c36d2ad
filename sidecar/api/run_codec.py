"""A background run's events and results as the gRPC front stores them.

Events are stored as ``StreamRunResponse`` messages, serialised once when they are stored:
``WatchRun`` sends each as it was stored (framed as a ``WatchRunResponse`` without being
parsed again), and a run's result as a ``RunResult``, which ``GetRun`` parses. Protobuf is
the stored form because it is the contract callers already read, and it keeps old records
readable as the messages grow.
"""

from __future__ import annotations

from google.protobuf import json_format

from agentsidecar.v1 import agent_pb2
from sidecar.api import convert
from sidecar.types import (
    ApprovalRequired,
    BudgetExceeded,
    RunEvent,
    RunOutcome,
    RunRecord,
    RunResumed,
    RunStart,
    StepFinished,
    TextDelta,
    ToolCallFinished,
    ToolCallProgress,
    ToolCallStarted,
)

__all__ = ["GrpcRunCodec", "watch_response"]

_CUT = "\n[... {} more bytes not stored]"


def _cap(text: str, cap: int) -> str:
    """``text`` within ``cap`` bytes of UTF-8, with a marker saying how much was cut."""
    if len(text) * 4 <= cap:
        return text
    data = text.encode()
    if len(data) <= cap:
        return text
    keep = max(0, cap - 64)
    return data[:keep].decode(errors="ignore") + _CUT.format(len(data) - keep)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def watch_response(event: bytes) -> bytes:
    """A stored ``StreamRunResponse`` as a serialised ``WatchRunResponse``: its field 1,
    length-delimited (tag 0x0a), which is what serialising the message would produce."""
    return b"\x0a" + _varint(len(event)) + event


class GrpcRunCodec:
    """:class:`~sidecar.agent.runs.RunCodec` of the gRPC front."""

    def event(self, run_id: str, sequence: int, event: RunEvent, cap: int) -> bytes:
        message = agent_pb2.StreamRunResponse(run_id=run_id, sequence=sequence)
        # The same messages a streamed run sends (sidecar.api.convert), text cut at ``cap``.
        match event:
            case RunStart():
                message.run_started.CopyFrom(convert.run_started(event))
            case RunResumed(step=step, attempt=attempt):
                message.run_resumed.SetInParent()
                message.run_resumed.step, message.run_resumed.attempt = step, attempt
            case TextDelta(step=step, text=text):
                message.text_delta.CopyFrom(convert.text_delta(step, _cap(text, cap)))
            case ToolCallStarted():
                message.tool_call_started.CopyFrom(
                    convert.tool_call_started(
                        event.step, event.call_id, event.tool_name, _cap(event.arguments, cap)
                    )
                )
            case ToolCallFinished(step=step, outcome=outcome):
                finished = convert.tool_call_finished(step, outcome)
                finished.content = _cap(finished.content, cap)
                message.tool_call_finished.CopyFrom(finished)
            case ApprovalRequired():
                message.approval_required.CopyFrom(
                    convert.approval_required(
                        event.step,
                        event.call_id,
                        event.tool_name,
                        _cap(event.arguments, cap),
                        event.destructive,
                        event.question,
                    )
                )
            case ToolCallProgress():
                message.tool_call_progress.CopyFrom(
                    convert.tool_call_progress(
                        event.step,
                        event.call_id,
                        event.tool_name,
                        event.progress,
                        event.total,
                        _cap(event.message, cap),
                    )
                )
            case StepFinished(step=step, stages=stages, total=total):
                message.step_finished.CopyFrom(convert.step_finished(step, stages, total))
            case BudgetExceeded(overrun=overrun):
                message.budget_exceeded.CopyFrom(convert.budget_exceeded(overrun))
        return message.SerializeToString()

    def result(self, outcome: RunOutcome) -> bytes:
        return convert.run_result(outcome).SerializeToString()

    def rejected(self, code: str, message: str) -> bytes:
        error = agent_pb2.RunError(code=code, message=message, retryable=False)
        return agent_pb2.RunResult(error=error).SerializeToString()

    def finished(self, run_id: str, sequence: int, result: bytes) -> bytes:
        message = agent_pb2.StreamRunResponse(run_id=run_id, sequence=sequence)
        message.run_finished.ParseFromString(result)
        return message.SerializeToString()

    def callback_body(self, run: RunRecord, session_id: str) -> bytes:
        message = convert.run(run, session_id, with_result=True)
        return json_format.MessageToJson(message, indent=None).encode()
