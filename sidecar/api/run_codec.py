"""A background run's events and results as the gRPC front stores them.

Events are stored as ``StreamRunResponse`` messages, serialised once when they are stored:
``WatchRun`` sends each as it was stored (framed as a ``WatchRunResponse`` without being
parsed again), and a run's result as a ``RunResult``, which ``GetRun`` parses. Protobuf is
the stored form because it is the contract callers already read, and it keeps old records
readable as the messages grow.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from agentsidecar.v1 import agent_pb2
from sidecar.api import convert
from sidecar.types import (
    BudgetOverrun,
    RunOutcome,
    RunRecord,
    RunStart,
    Stage,
    ToolOutcome,
    ToolQuestion,
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

    def event(
        self, run_id: str, sequence: int, kind: str, args: tuple[Any, ...], cap: int
    ) -> bytes:
        payload = getattr(self, f"_{kind}")(cap, *args)
        message = agent_pb2.StreamRunResponse(run_id=run_id, sequence=sequence, **{kind: payload})
        return message.SerializeToString()

    @staticmethod
    def _run_started(cap: int, start: RunStart) -> agent_pb2.RunStarted:
        return convert.run_started(start)

    @staticmethod
    def _run_resumed(cap: int, step: int, attempt: int) -> agent_pb2.RunResumed:
        return agent_pb2.RunResumed(step=step, attempt=attempt)

    @staticmethod
    def _text_delta(cap: int, step: int, text: str) -> agent_pb2.TextDelta:
        return agent_pb2.TextDelta(step=step, text=_cap(text, cap))

    @staticmethod
    def _tool_call_started(
        cap: int, step: int, call_id: str, tool_name: str, arguments: str
    ) -> agent_pb2.ToolCallStarted:
        return agent_pb2.ToolCallStarted(
            step=step, call_id=call_id, tool_name=tool_name, arguments=_cap(arguments, cap)
        )

    @staticmethod
    def _tool_call_finished(
        cap: int, step: int, outcome: ToolOutcome
    ) -> agent_pb2.ToolCallFinished:
        message = convert.tool_call_finished(step, outcome)
        message.content = _cap(message.content, cap)
        return message

    @staticmethod
    def _approval_required(
        cap: int,
        step: int,
        call_id: str,
        tool_name: str,
        arguments: str,
        destructive: bool,
        question: ToolQuestion | None = None,
    ) -> agent_pb2.ApprovalRequired:
        return agent_pb2.ApprovalRequired(
            step=step,
            call_id=call_id,
            tool_name=tool_name,
            arguments=_cap(arguments, cap),
            destructive=destructive,
            question=convert.tool_question(question) if question is not None else None,
        )

    @staticmethod
    def _tool_call_progress(
        cap: int,
        step: int,
        call_id: str,
        tool_name: str,
        progress: float,
        total: float | None,
        message: str,
    ) -> agent_pb2.ToolCallProgress:
        return agent_pb2.ToolCallProgress(
            step=step,
            call_id=call_id,
            tool_name=tool_name,
            progress=progress,
            total=total or 0.0,
            message=_cap(message, cap),
        )

    @staticmethod
    def _step_finished(
        cap: int, step: int, stages: list[Stage], total: float
    ) -> agent_pb2.StepFinished:
        return agent_pb2.StepFinished(step=step, timeline=convert.timeline(stages, total))

    @staticmethod
    def _budget_exceeded(cap: int, overrun: BudgetOverrun) -> agent_pb2.BudgetExceeded:
        return convert.budget_exceeded(overrun)

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
