"""OpenTelemetry tracing of tool calls: the caller's trace continues in a handler span.

The caller (the sidecar, usually) sends the W3C trace context in the call's gRPC
metadata; each call gets a SERVER span, child of the caller's span, named after the RPC
(``agentsidecar.v1.ToolService/CallTool``) with the tool's name as an attribute. The
handler runs with that span current, so a tool that creates spans of its own (through
any OpenTelemetry tracer) nests them under it.

Imported only when tracing is on (``--otlp-endpoint``); OpenTelemetry is the optional
``tracing`` extra of the package.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentsidecar.v1 import tool_pb2

_SERVICE: str = tool_pb2.DESCRIPTOR.services_by_name["ToolService"].full_name


class HandlerTracing:
    """A tool server's tracer provider and propagator.

    Args:
        server_name: The ``service.name`` of the spans.
        endpoint: ``host:port`` of the OTLP/gRPC receiver (plaintext).
        exporter: Where spans go instead, for tests.
    """

    def __init__(
        self, server_name: str, endpoint: str, *, exporter: SpanExporter | None = None
    ) -> None:
        self._provider = TracerProvider(resource=Resource.create({"service.name": server_name}))
        self._provider.add_span_processor(
            BatchSpanProcessor(exporter or OTLPSpanExporter(endpoint=endpoint, insecure=True))
        )
        self._tracer = self._provider.get_tracer("toolservers")
        self._propagator = CompositePropagator(
            [TraceContextTextMapPropagator(), W3CBaggagePropagator()]
        )

    @contextlib.contextmanager
    def span(
        self,
        method: str,
        tool_name: str,
        call_id: str,
        metadata: Sequence[tuple[str, Any]] | None,
    ) -> Iterator[Span]:
        """A SERVER span for one call, current while the body runs."""
        carrier = {k: v for k, v in metadata or () if isinstance(v, str)}
        parent = self._propagator.extract(carrier)
        with self._tracer.start_as_current_span(
            f"{_SERVICE}/{method}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={
                "rpc.system": "grpc",
                "rpc.service": _SERVICE,
                "rpc.method": method,
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool_name,
                "gen_ai.tool.call.id": call_id,
            },
        ) as span:
            yield span

    def record(self, span: Span, result: tool_pb2.ToolResult) -> None:
        """Mark the span with how the call ended; a tool error is an error span."""
        if result.WhichOneof("outcome") == "error":
            kind = tool_pb2.ToolErrorKind.Name(result.error.kind).removeprefix("TOOL_ERROR_KIND_")
            span.set_attribute("error.type", kind.lower())
            span.set_status(Status(StatusCode.ERROR, result.error.message[:200]))

    def shutdown(self) -> None:
        """Export what is buffered and stop (blocks; call it off the event loop)."""
        self._provider.shutdown()
