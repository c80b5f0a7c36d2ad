"""A local OTLP/gRPC trace receiver for tests: it keeps every span it is sent.

It serves ``opentelemetry.proto.collector.trace.v1.TraceService/Export`` from a thread
pool, so it keeps receiving while the test's event loop is busy (or blocked stopping a
process that flushes its spans on the way out).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, with ids as hex strings ("" for no parent)."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[ReceivedSpan] = []

    def Export(self, request: Any, context: Any) -> Any:
        received = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            service = str(resource.get("service.name", ""))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            service=service,
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                        )
                    )
        with self.lock:
            self.spans.extend(received)
        return trace_service_pb2.ExportTraceServiceResponse()


class OtlpReceiver:
    """The receiver's address and what it received."""

    def __init__(self, service: _TraceService, address: str) -> None:
        self._service = service
        self.address = address

    def spans(self) -> list[ReceivedSpan]:
        with self._service.lock:
            return list(self._service.spans)


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """Serve a receiver on a free loopback port until the block ends."""
    service = _TraceService()
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield OtlpReceiver(service, f"127.0.0.1:{port}")
    finally:
        server.stop(None).wait()
