"""Background runs as A2A tasks, and their stored events as A2A stream events.

A task is a background run: the same id, the session as its ``context_id``, the run's
state as the task's (``RunState`` is ``TaskState`` value for value). A run's events are
stored in the gRPC front's form (``StreamRunResponse`` bytes, ``api/run_codec.py``); each
is read once here and becomes at most one A2A event:

=====================  =============================================================
stored event           A2A event
=====================  =============================================================
``run_started``        status update WORKING
``text_delta``         artifact update of the ``answer`` artifact, appended
``tool_call_started``  status update WORKING, a message with a ``toolCall`` data part
``tool_call_finished`` status update WORKING, a message with a ``toolResult`` data part
``approval_required``  status update INPUT_REQUIRED, a message asking for a decision
``run_finished``       the ``answer`` artifact whole (a data part when the answer is
                       JSON), then the final status update
others                 nothing (step timelines and budget overruns stay in ``GetRun``)
=====================  =============================================================
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, cast

import orjson
from a2a.types import a2a_pb2
from google.protobuf import json_format, struct_pb2

from agentsidecar.v1 import agent_pb2
from sidecar.types import PendingApproval, RunRecord, RunState

__all__ = [
    "ANSWER_ARTIFACT",
    "EventReader",
    "answer_parts",
    "task_of",
    "timestamp",
]

ANSWER_ARTIFACT = "answer"
"""The id of the artifact that holds a task's answer."""

_STOP_REASONS = {v: k.removeprefix("STOP_REASON_").lower() for k, v in agent_pb2.StopReason.items()}
_AVAILABILITY = {
    v: k.removeprefix("TOOL_AVAILABILITY_").lower() for k, v in agent_pb2.ToolAvailability.items()
}


def _state(state: RunState) -> a2a_pb2.TaskState:
    return cast(a2a_pb2.TaskState, int(state))  # value for value


def timestamp(seconds: float) -> Any:
    stamp = a2a_pb2.TaskStatus().timestamp
    stamp.FromNanoseconds(round(seconds * 1e9))
    return stamp


def _struct(values: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(values)
    return out


def _data_part(values: dict[str, Any]) -> a2a_pb2.Part:
    part = a2a_pb2.Part(media_type="application/json")
    part.data.struct_value.update(values)
    return part


def answer_parts(answer: str) -> list[a2a_pb2.Part]:
    """The answer as parts: a data part when it is a JSON object or array (what a profile
    with an ``answer_schema`` returns), else a text part."""
    if answer[:1] in ("{", "["):
        try:
            value = orjson.loads(answer)
        except orjson.JSONDecodeError:
            value = None
        if isinstance(value, dict | list):
            part = a2a_pb2.Part(media_type="application/json")
            json_format.ParseDict(cast(dict[str, Any], value), part.data)
            return [part]
    return [a2a_pb2.Part(text=answer, media_type="text/plain")]


def _agent_message(
    task_id: str, context_id: str, text: str, *data: dict[str, Any]
) -> a2a_pb2.Message:
    parts = [a2a_pb2.Part(text=text)] if text else []
    parts += [_data_part(d) for d in data]
    return a2a_pb2.Message(
        message_id=f"{task_id}-{time.monotonic_ns():x}",
        context_id=context_id,
        task_id=task_id,
        role=a2a_pb2.ROLE_AGENT,
        parts=parts,
    )


def approval_request(
    task_id: str, context_id: str, pending: list[tuple[str, str, str, bool]]
) -> a2a_pb2.Message:
    """The message of an INPUT_REQUIRED status: what waits for approval, and how to
    answer (``callId, toolName, arguments, destructive`` for each call)."""
    calls = [
        {
            "callId": call_id,
            "toolName": tool,
            "arguments": arguments,
            "destructive": destructive,
        }
        for call_id, tool, arguments, destructive in pending
    ]
    names = ", ".join(tool for _, tool, _, _ in pending)
    return _agent_message(
        task_id,
        context_id,
        f"approval required for {names}: answer with a message on this task whose text is "
        '\'approve\' or \'deny\' (or a data part {"decision": "approve"|"deny", '
        '"callId": ..., "reason": ...})',
        {"approvalRequired": calls},
    )


def _pending(approvals: list[PendingApproval]) -> list[tuple[str, str, str, bool]]:
    return [(p.call_id, p.tool_name, p.arguments, p.destructive) for p in approvals]


def _status_message(
    run: RunRecord, context_id: str, result: agent_pb2.RunResult | None
) -> a2a_pb2.Message | None:
    if run.state is RunState.INPUT_REQUIRED and run.pending:
        return approval_request(run.run_id, context_id, _pending(run.pending))
    if result is not None and result.HasField("error"):
        error = result.error
        return _agent_message(
            run.run_id,
            context_id,
            error.message,
            {"error": {"code": error.code, "retryable": error.retryable}},
        )
    return None


def _metadata(result: agent_pb2.RunResult) -> struct_pb2.Struct:
    usage = result.usage
    metadata: dict[str, Any] = {
        "stopReason": _STOP_REASONS.get(result.stop_reason, "unspecified"),
        "steps": result.steps,
        "toolCalls": result.tool_calls,
        "promptTokens": usage.prompt_tokens,
        "completionTokens": usage.completion_tokens,
        "costUsd": result.cost.total_usd,
    }
    if result.unavailable_tools:
        metadata["unavailableTools"] = [
            {"name": t.name, "availability": _AVAILABILITY.get(t.availability, "unspecified")}
            for t in result.unavailable_tools
        ]
    return _struct(metadata)


def task_of(
    run: RunRecord, context_id: str, *, history_length: int | None = None, artifacts: bool = True
) -> a2a_pb2.Task:
    """``run`` as an A2A task.

    Args:
        context_id: The run's session id as the caller names it.
        history_length: Messages of history to include (the user's input); None: all.
        artifacts: Include the answer artifact of a finished run.
    """
    result = agent_pb2.RunResult.FromString(run.result) if run.result else None
    status = a2a_pb2.TaskStatus(
        state=_state(run.state), timestamp=timestamp(run.end_time or run.update_time)
    )
    message = _status_message(run, context_id, result)
    if message is not None:
        status.message.CopyFrom(message)
    task = a2a_pb2.Task(id=run.run_id, context_id=context_id, status=status)
    if history_length is None or history_length > 0:
        task.history.append(
            a2a_pb2.Message(
                message_id=run.message_id or f"{run.run_id}-input",
                context_id=context_id,
                task_id=run.run_id,
                role=a2a_pb2.ROLE_USER,
                parts=[a2a_pb2.Part(text=run.input)],
            )
        )
    if result is not None:
        if artifacts and result.answer:
            task.artifacts.append(
                a2a_pb2.Artifact(
                    artifact_id=ANSWER_ARTIFACT, name="answer", parts=answer_parts(result.answer)
                )
            )
        task.metadata.CopyFrom(_metadata(result))
    return task


Event = a2a_pb2.TaskStatusUpdateEvent | a2a_pb2.TaskArtifactUpdateEvent


class EventReader:
    """Turns one task's stored events, in order, into A2A events.

    Args:
        task_id: The run's id.
        context_id: Its session id as the caller names it.
    """

    def __init__(self, task_id: str, context_id: str) -> None:
        self.task_id = task_id
        self.context_id = context_id
        self.sequence = 0
        """The sequence of the last event read."""
        self.state = RunState.SUBMITTED
        """The task's state after the events read so far."""
        self._streamed = False
        self.finished = False
        """Whether the last event (``run_finished``) was read."""

    def _status(
        self, state: RunState, message: a2a_pb2.Message | None = None
    ) -> a2a_pb2.TaskStatusUpdateEvent:
        self.state = state
        status = a2a_pb2.TaskStatus(state=_state(state), timestamp=timestamp(time.time()))
        if message is not None:
            status.message.CopyFrom(message)
        return a2a_pb2.TaskStatusUpdateEvent(
            task_id=self.task_id, context_id=self.context_id, status=status
        )

    def _artifact(
        self, parts: list[a2a_pb2.Part], *, append: bool, last: bool
    ) -> a2a_pb2.TaskArtifactUpdateEvent:
        return a2a_pb2.TaskArtifactUpdateEvent(
            task_id=self.task_id,
            context_id=self.context_id,
            artifact=a2a_pb2.Artifact(artifact_id=ANSWER_ARTIFACT, name="answer", parts=parts),
            append=append,
            last_chunk=last,
        )

    def read(self, data: bytes) -> Iterator[Event]:
        """The A2A events of one stored event."""
        event = agent_pb2.StreamRunResponse.FromString(data)
        self.sequence = event.sequence
        kind = event.WhichOneof("event")
        if kind == "run_started" or kind == "run_resumed":
            yield self._status(RunState.WORKING)
        elif kind == "text_delta":
            if event.text_delta.text:
                append, self._streamed = self._streamed, True
                yield self._artifact(
                    [a2a_pb2.Part(text=event.text_delta.text)], append=append, last=False
                )
        elif kind == "tool_call_started":
            call = event.tool_call_started
            yield self._status(
                RunState.WORKING,
                _agent_message(
                    self.task_id,
                    self.context_id,
                    "",
                    {
                        "toolCall": {
                            "step": call.step,
                            "callId": call.call_id,
                            "toolName": call.tool_name,
                            "arguments": call.arguments,
                        }
                    },
                ),
            )
        elif kind == "tool_call_finished":
            done = event.tool_call_finished
            yield self._status(
                RunState.WORKING,
                _agent_message(
                    self.task_id,
                    self.context_id,
                    "",
                    {
                        "toolResult": {
                            "step": done.step,
                            "callId": done.call_id,
                            "toolName": done.tool_name,
                            "status": agent_pb2.ToolCallStatus.Name(done.status)
                            .removeprefix("TOOL_CALL_STATUS_")
                            .lower(),
                            "content": done.content,
                        }
                    },
                ),
            )
        elif kind == "approval_required":
            asked = event.approval_required
            yield self._status(
                RunState.INPUT_REQUIRED,
                approval_request(
                    self.task_id,
                    self.context_id,
                    [(asked.call_id, asked.tool_name, asked.arguments, asked.destructive)],
                ),
            )
        elif kind == "run_finished":
            self.finished = True
            if event.run_finished.answer:
                # The whole answer, replacing what was streamed: a reader that joined late,
                # or whose deltas were not stored (past background.max_events), has it all.
                yield self._artifact(
                    answer_parts(event.run_finished.answer), append=False, last=True
                )

    def final(self, run: RunRecord) -> a2a_pb2.TaskStatusUpdateEvent:
        """The last event of a finished task: its final status, as stored."""
        result = agent_pb2.RunResult.FromString(run.result) if run.result else None
        update = self._status(run.state, _status_message(run, self.context_id, result))
        if result is not None:
            update.metadata.CopyFrom(_metadata(result))
        return update
