"""OpenTelemetry tracing: a span per run, step, model call and tool call, exported over OTLP.

The trace context arrives in the caller's gRPC metadata (W3C ``traceparent``,
``tracestate`` and ``baggage``) and leaves in each tool call's metadata, set to that
call's span, so a tool server continues the trace in its handler span::

    caller span                      (the calling service)
    └── invoke_agent PROFILE         run span, SERVER     (the sidecar)
        ├── step 1                   INTERNAL
        │   ├── chat MODEL           CLIENT, one per model call
        │   ├── execute_tool NAME    CLIENT, one per tool call
        │   │   └── agentsidecar.v1.ToolService/CallTool   SERVER (the tool server)
        │   └── execute_tool NAME …
        └── step 2 …

Span names and attributes follow OpenTelemetry's GenAI and RPC conventions
(``gen_ai.operation.name``, ``gen_ai.usage.input_tokens``, ``rpc.system``…); what they
do not cover is under ``agent_sidecar.*``.

Model-call spans are written when the call ends, from its timeline stage (its start and
duration are already measured): nothing is traced inside the model client. Tool-call
spans are live, because their context must be in the call's metadata when it is sent.
The tracer provider is the sidecar's own, never the global one, and spans are exported in
batches from a background thread.

This module imports OpenTelemetry at import time; it is imported only when tracing is on.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sidecar.config import TracingConfig
from sidecar.telemetry import own_version
from sidecar.types import (
    Clock,
    ModelCallDetail,
    RunOutcome,
    Stage,
    StopReason,
    ToolCallStatus,
    ToolOutcome,
)

__all__ = ["RunTrace", "ToolSpan", "Tracing"]

_EXPORT_BATCH = 64
_SUCCESS = frozenset({ToolCallStatus.OK, ToolCallStatus.CACHED})


class Tracing:
    """The sidecar's tracer provider, exporter and propagator.

    Args:
        config: The ``telemetry.tracing`` section.
        exporter: Where spans go; default: OTLP/gRPC to ``config.otlp_endpoint``.
    """

    def __init__(self, config: TracingConfig, exporter: SpanExporter | None = None) -> None:
        release = own_version()
        self._provider = TracerProvider(
            resource=Resource.create(
                {"service.name": config.service_name, "service.version": release}
            ),
            sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)),
        )
        if exporter is None:
            exporter = OTLPSpanExporter(endpoint=config.otlp_endpoint, insecure=config.insecure)
        self._provider.add_span_processor(
            BatchSpanProcessor(
                exporter,
                schedule_delay_millis=config.export_delay * 1000,
                # Encoding a batch holds the GIL; small batches keep each hold short, so
                # runs on the event loop never wait long behind an export.
                max_export_batch_size=_EXPORT_BATCH,
            )
        )
        self.tracer = self._provider.get_tracer("agent-sidecar", release)
        self.propagator = CompositePropagator(
            [TraceContextTextMapPropagator(), W3CBaggagePropagator()]
        )

    def start_run(
        self,
        *,
        profile: str,
        method: str,
        session_id: str,
        run_id: str,
        metadata: Sequence[tuple[str, str | bytes]],
        clock: Clock,
    ) -> RunTrace:
        """Open a run's span, continuing the caller's trace when its metadata carries one.

        Args:
            profile: The session's profile.
            method: The operation that started the run (``StreamRun``, ``Run``,
                ``StartRun``, A2A's ``SendMessage``, MCP's ``tools/call``).
            session_id: The session.
            run_id: The run.
            metadata: The caller's gRPC metadata.
            clock: The run's clock; the span starts at its origin.
        """
        carrier = {k: v for k, v in metadata if isinstance(v, str)}
        parent = self.propagator.extract(carrier)
        origin_ns = time.time_ns() - int(clock.now() * 1e9)
        span = self.tracer.start_span(
            f"invoke_agent {profile}",
            context=parent,
            kind=SpanKind.SERVER,
            start_time=origin_ns,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": profile,
                "gen_ai.conversation.id": session_id,
                "agent_sidecar.run_id": run_id,
                "rpc.method": method,
            },
        )
        return RunTrace(self, span, parent, origin_ns)

    def shutdown(self) -> None:
        """Export what is buffered and stop (blocks; call it off the event loop)."""
        self._provider.shutdown()


def _carried(propagator: CompositePropagator, context: Context) -> list[tuple[str, str]]:
    carrier: dict[str, str] = {}
    propagator.inject(carrier, context=context)
    return list(carrier.items())


class ToolSpan:
    """One tool call's span, and the gRPC metadata that carries its context."""

    __slots__ = ("_metadata", "span")

    def __init__(self, span: Span, metadata: list[tuple[str, str]]) -> None:
        self.span = span
        self._metadata = metadata

    def metadata(self) -> list[tuple[str, str]]:
        """gRPC metadata carrying this span's context (and the caller's baggage)."""
        return self._metadata

    def end(self, outcome: ToolOutcome | None) -> None:
        """End the span with the call's outcome; None when the call was cancelled."""
        span = self.span
        if not span.is_recording():
            return
        if outcome is None:
            span.set_status(Status(StatusCode.ERROR, "cancelled"))
            span.end()
            return
        span.set_attributes(
            {
                "agent_sidecar.tool.status": outcome.status.name.lower(),
                "agent_sidecar.tool.attempts": outcome.attempts,
            }
        )
        if outcome.handler_duration is not None:
            span.set_attribute("agent_sidecar.tool.handler_ms", outcome.handler_duration * 1e3)
        if outcome.wait_duration:
            span.set_attribute("agent_sidecar.tool.wait_ms", outcome.wait_duration * 1e3)
        if outcome.backoff:
            span.set_attribute("agent_sidecar.tool.backoff_ms", outcome.backoff * 1e3)
        if outcome.status not in _SUCCESS:
            span.set_attribute("error.type", outcome.status.name.lower())
            span.set_status(Status(StatusCode.ERROR, outcome.content[:200]))
        span.end()


class RunTrace:
    """One run's spans: the run, its current step, and the spans under the step.

    A run that is not sampled records nothing: every method returns at once, and each tool
    call carries the run's (unsampled) context, so tool servers follow the decision.
    """

    __slots__ = (
        "_origin_ns",
        "_parent",
        "_step_context",
        "_step_span",
        "_tracing",
        "_unsampled",
        "span",
    )

    def __init__(self, tracing: Tracing, span: Span, parent: Context, origin_ns: int) -> None:
        self._tracing = tracing
        self.span = span
        # The caller's context (its baggage included) with the run span as current.
        self._parent = set_span_in_context(span, parent)
        self._origin_ns = origin_ns
        self._step_span: Span | None = None
        self._step_context = self._parent
        self._unsampled: ToolSpan | None = None
        if not span.is_recording():
            self._unsampled = ToolSpan(span, _carried(tracing.propagator, self._parent))

    def _ns(self, offset: float) -> int:
        return self._origin_ns + int(offset * 1e9)

    def step(self, step: int, start: float) -> None:
        """Close the previous step's span and open step ``step``'s at offset ``start``."""
        if self._unsampled is not None:
            return
        at = self._ns(start)
        if self._step_span is not None:
            self._step_span.end(end_time=at)
        span = self._tracing.tracer.start_span(
            f"step {step}",
            context=self._parent,
            start_time=at,
            attributes={"agent_sidecar.step": step},
        )
        self._step_span = span
        self._step_context = set_span_in_context(span, self._parent)

    def model_call(self, stage: Stage) -> None:
        """Record a finished (or failed) model call from its timeline stage."""
        if self._unsampled is not None:
            return
        detail = stage.detail
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": stage.name,
        }
        error = None
        if isinstance(detail, ModelCallDetail):
            usage = detail.usage
            attributes["gen_ai.usage.input_tokens"] = usage.prompt_tokens
            attributes["gen_ai.usage.output_tokens"] = usage.completion_tokens
            attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached_prompt_tokens
            attributes["agent_sidecar.model.attempts"] = detail.attempts
            if detail.time_to_first_token is not None:
                attributes["agent_sidecar.model.ttft_ms"] = detail.time_to_first_token * 1e3
            p = detail.provider
            if p.queue_time is not None:
                attributes["agent_sidecar.provider.queue_ms"] = p.queue_time * 1e3
            if p.prompt_time is not None:
                attributes["agent_sidecar.provider.prompt_ms"] = p.prompt_time * 1e3
            if p.completion_time is not None:
                attributes["agent_sidecar.provider.completion_ms"] = p.completion_time * 1e3
            error = detail.error
        span = self._tracing.tracer.start_span(
            f"chat {stage.name}",
            context=self._step_context,
            kind=SpanKind.CLIENT,
            start_time=self._ns(stage.start),
            attributes=attributes,
        )
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=self._ns(stage.start + stage.duration))

    def tool_call(self, call_id: str, tool_name: str) -> ToolSpan:
        """Open a tool call's span, now, under the current step."""
        if self._unsampled is not None:
            return self._unsampled
        span = self._tracing.tracer.start_span(
            f"execute_tool {tool_name}",
            context=self._step_context,
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool_name,
                "gen_ai.tool.call.id": call_id,
            },
        )
        context = set_span_in_context(span, self._parent)
        return ToolSpan(span, _carried(self._tracing.propagator, context))

    def end(self, outcome: RunOutcome | None, reason: StopReason, end: float) -> None:
        """Close the step and run spans at offset ``end`` with the run's outcome."""
        if self._unsampled is not None:
            return
        at = self._ns(end)
        if self._step_span is not None:
            self._step_span.end(end_time=at)
            self._step_span = None
        span = self.span
        span.set_attribute("agent_sidecar.stop_reason", reason.name.lower())
        if outcome is not None:
            span.set_attributes(
                {
                    "agent_sidecar.steps": outcome.steps,
                    "agent_sidecar.tool_calls": outcome.tool_calls,
                    "gen_ai.usage.input_tokens": outcome.usage.prompt_tokens,
                    "gen_ai.usage.output_tokens": outcome.usage.completion_tokens,
                }
            )
            if outcome.cost is not None:
                span.set_attribute("agent_sidecar.cost_usd", outcome.cost.total_usd)
            for o in outcome.overruns:
                span.add_event(
                    "budget_exceeded",
                    {
                        "agent_sidecar.budget.stage": o.stage.name.lower(),
                        "agent_sidecar.budget.budget_ms": o.budget * 1e3,
                        "agent_sidecar.budget.spent_ms": o.spent * 1e3,
                        "agent_sidecar.budget.policy": o.policy.name.lower(),
                    },
                )
            if outcome.error is not None:
                span.set_attribute("error.type", outcome.error.code)
                span.set_status(Status(StatusCode.ERROR, outcome.error.message))
        span.end(end_time=at)
