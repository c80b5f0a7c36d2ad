"""Plain run types to protobuf messages, on the way out of the service."""

from __future__ import annotations

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from agentsidecar.v1 import agent_pb2
from sidecar.llm.model import ProviderTiming, Usage
from sidecar.run import (
    CacheResult,
    ModelCallDetail,
    RunOutcome,
    Stage,
    ToolCallDetail,
    ToolOutcome,
    Turn,
)
from sidecar.sessions.store import Session


def duration(seconds: float) -> Duration:
    whole = int(seconds)
    return Duration(seconds=whole, nanos=int((seconds - whole) * 1e9))


def timestamp(epoch_seconds: float) -> Timestamp:
    whole = int(epoch_seconds)
    return Timestamp(seconds=whole, nanos=int((epoch_seconds - whole) * 1e9))


def usage(u: Usage) -> agent_pb2.TokenUsage:
    return agent_pb2.TokenUsage(
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens,
        cached_prompt_tokens=u.cached_prompt_tokens,
    )


def _provider(stage: agent_pb2.ModelCallTiming, p: ProviderTiming) -> None:
    if p.queue_time is not None:
        stage.provider_queue_time.CopyFrom(duration(p.queue_time))
    if p.prompt_time is not None:
        stage.provider_prompt_time.CopyFrom(duration(p.prompt_time))
    if p.completion_time is not None:
        stage.provider_completion_time.CopyFrom(duration(p.completion_time))


def stage(s: Stage) -> agent_pb2.Stage:
    message = agent_pb2.Stage(
        kind=int(s.kind),  # type: ignore[arg-type]
        name=s.name,
        step=s.step,
        start_offset=duration(s.start),
        duration=duration(s.duration),
    )
    detail = s.detail
    if isinstance(detail, ModelCallDetail):
        timing = message.model_call
        timing.attempts = detail.attempts
        timing.usage.CopyFrom(usage(detail.usage))
        if detail.time_to_first_token is not None:
            timing.time_to_first_token.CopyFrom(duration(detail.time_to_first_token))
        _provider(timing, detail.provider)
    elif isinstance(detail, ToolCallDetail):
        tool = message.tool_call
        tool.call_id = detail.call_id
        tool.status = int(detail.status)  # type: ignore[assignment]
        tool.attempts = detail.attempts
        tool.wait_duration.CopyFrom(duration(detail.wait_duration))
        if detail.handler_duration is not None:
            tool.handler_duration.CopyFrom(duration(detail.handler_duration))
        if detail.cache:
            tool.cache_result = int(detail.cache)  # type: ignore[assignment]
            if detail.cache is CacheResult.HIT or detail.cache is CacheResult.SHARED:
                tool.cache_saved.CopyFrom(duration(detail.saved))
    return message


def timeline(stages: list[Stage], total: float) -> agent_pb2.Timeline:
    return agent_pb2.Timeline(stages=[stage(s) for s in stages], total=duration(total))


def run_result(outcome: RunOutcome) -> agent_pb2.RunResult:
    result = agent_pb2.RunResult(
        answer=outcome.answer,
        stop_reason=int(outcome.stop_reason),  # type: ignore[arg-type]
        usage=usage(outcome.usage),
        timeline=timeline(outcome.stages, outcome.total),
        steps=outcome.steps,
        tool_calls=outcome.tool_calls,
    )
    if outcome.error is not None:
        result.error.code = outcome.error.code
        result.error.message = outcome.error.message
        result.error.retryable = outcome.error.retryable
    return result


def tool_call_finished(step: int, o: ToolOutcome) -> agent_pb2.ToolCallFinished:
    return agent_pb2.ToolCallFinished(
        step=step,
        call_id=o.call_id,
        tool_name=o.tool_name,
        status=int(o.status),  # type: ignore[arg-type]
        content=o.content,
        duration=duration(o.duration),
        attempts=o.attempts,
    )


def turn(t: Turn) -> agent_pb2.Turn:
    return agent_pb2.Turn(
        run_id=t.run_id,
        input=t.input,
        answer=t.answer,
        stop_reason=int(t.stop_reason),  # type: ignore[arg-type]
        start_time=timestamp(t.start_time),
        end_time=timestamp(t.end_time),
        usage=usage(t.usage),
    )


def session(s: Session) -> agent_pb2.Session:
    return agent_pb2.Session(
        session_id=s.session_id,
        profile=s.profile,
        labels=s.labels,
        create_time=timestamp(s.create_time),
        update_time=timestamp(s.update_time),
        turns=[turn(t) for t in s.turns],
        memory=s.memory,
        memory_turns=s.memory_turns,
    )
