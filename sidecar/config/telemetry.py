"""``telemetry``: metrics, tracing and the timeline log."""

from __future__ import annotations

from pydantic import (
    Field,
)

from sidecar.config.base import _Strict


class MetricsConfig(_Strict):
    """The Prometheus endpoint."""

    enabled: bool = False
    """Serve metrics; off, the hot path records none."""
    host: str = "127.0.0.1"
    """Interface the metrics endpoint binds."""
    port: int = Field(9464, ge=0, le=65535)
    """Port of the metrics endpoint (``/metrics``); 0 picks a free one, printed at start."""
    read_timeout: float = Field(10.0, gt=0)
    """Seconds a scrape's request may take to arrive whole; a slower connection is
    closed (each holds a thread)."""
    max_connections: int = Field(16, ge=1)
    """Connections served at once; one beyond is closed as it is accepted."""


class TracingConfig(_Strict):
    """OpenTelemetry tracing, exported over OTLP/gRPC."""

    enabled: bool = False
    """Record spans (run, step, model call, tool call) and carry the trace context to
    tool servers; off, the hot path creates no span."""
    otlp_endpoint: str = "127.0.0.1:4317"
    """``host:port`` of the OTLP/gRPC receiver (an OpenTelemetry Collector, Jaeger, Tempo)."""
    insecure: bool = True
    """Plaintext to the receiver; false for TLS with the system's trust store."""
    service_name: str = "agent-sidecar"
    """The ``service.name`` resource attribute of every span."""
    sample_ratio: float = Field(1.0, ge=0, le=1)
    """Share of new traces recorded; a caller's sampling decision is always followed."""
    export_delay: float = Field(1.0, gt=0)
    """Seconds between batched exports; spans wait at most this long in memory."""


class TelemetryConfig(_Strict):
    """Metrics, tracing and the timeline log. All off by default."""

    label: str | None = None
    """The config or version label written with each timeline record, for comparing
    releases in ``agent-sidecar report``; unset: ``agent-sidecar VERSION``."""
    metrics: MetricsConfig = MetricsConfig()
    """The Prometheus endpoint."""
    tracing: TracingConfig = TracingConfig()
    """OpenTelemetry tracing."""
    timeline_log: str | None = None
    """Path of a JSON-lines file that gets one record per finished run (its timeline,
    usage, cost and budget overruns), appended; unset: no log."""
