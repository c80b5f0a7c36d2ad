"""Telemetry: Prometheus metrics, OpenTelemetry tracing and the timeline log.

:class:`Telemetry` is what the service and the server hold. Each part is None when it is
off, so a hook on the hot path costs one attribute test and nothing else: no span, no
label lookup, no record is built. A run's cost belongs to its result, not to telemetry:
the agent prices it before telemetry records it.

OpenTelemetry is an optional dependency (``pip install 'agent-sidecar[tracing]'``); it
is imported only when tracing is on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from sidecar.config import SidecarConfig
from sidecar.errors import ModelError, TelemetryUnavailable
from sidecar.telemetry.metrics import Metrics
from sidecar.telemetry.timeline_log import TimelineLog, run_record
from sidecar.types import Clock, RunOutcome, StopReason

if TYPE_CHECKING:
    from sidecar.telemetry.tracing import RunTrace, Tracing

__all__ = ["Telemetry", "own_version"]

log = logging.getLogger(__name__)


def own_version() -> str:
    """The installed agent-sidecar version; ``unknown`` when run from an uninstalled tree."""
    try:
        return version("agent-sidecar")
    except PackageNotFoundError:
        return "unknown"


class Telemetry:
    """The sidecar's metrics, tracing and timeline log.

    Args:
        label: The config/version label of timeline records.
        metrics: Prometheus metrics, or None when off.
        tracing: OpenTelemetry tracing, or None when off.
        timeline_log: The timeline log, or None when off.
    """

    def __init__(
        self,
        *,
        label: str,
        metrics: Metrics | None = None,
        tracing: Tracing | None = None,
        timeline_log: TimelineLog | None = None,
    ) -> None:
        self.label = label
        self.metrics = metrics
        self.tracing = tracing
        self.timeline_log = timeline_log

    @classmethod
    def from_config(cls, config: SidecarConfig) -> Telemetry:
        """Build what the configuration turns on; nothing is served or exported yet.

        Raises:
            TelemetryUnavailable: tracing is on but OpenTelemetry is not installed, or the
                timeline log cannot be opened.
        """
        settings = config.telemetry
        tracing = None
        if settings.tracing.enabled:
            try:
                from sidecar.telemetry.tracing import Tracing
            except ImportError as exc:
                raise TelemetryUnavailable(
                    "telemetry.tracing.enabled needs OpenTelemetry: "
                    f"pip install 'agent-sidecar[tracing]' ({exc})"
                ) from None
            tracing = Tracing(settings.tracing)
        log = None
        if settings.timeline_log:
            try:
                log = TimelineLog(settings.timeline_log)
            except OSError as exc:
                raise TelemetryUnavailable(
                    f"telemetry.timeline_log: cannot open {settings.timeline_log}: {exc.strerror}"
                ) from None
        return cls(
            label=settings.label or f"agent-sidecar {own_version()}",
            metrics=Metrics() if settings.metrics.enabled else None,
            tracing=tracing,
            timeline_log=log,
        )

    def model_error_hook(self, model: str) -> Callable[[ModelError], None] | None:
        """The model client's ``on_error`` hook, counting failed attempts by HTTP status
        (or error code when there was none); None when metrics are off."""
        metrics = self.metrics
        if metrics is None:
            return None

        def on_error(exc: ModelError) -> None:
            metrics.model_error(model, str(exc.status) if exc.status is not None else exc.code)

        return on_error

    def variant_run(self, profile: str, variant: str, outcome: RunOutcome, failed: bool) -> None:
        """Count a finished run against its model variant (metrics on)."""
        if self.metrics is not None:
            self.metrics.variant_run(profile, variant, outcome, failed)

    def shadow_compared(
        self,
        profile: str,
        variant: str,
        *,
        same_tool_calls: bool,
        same_answer: bool | None,
        new_failure: bool,
        cost: float | None,
        latency_ratio: float | None,
    ) -> None:
        """Count a shadow run's comparison with the live run it copied (metrics on)."""
        if self.metrics is not None:
            self.metrics.shadow_compared(
                profile,
                variant,
                same_tool_calls=same_tool_calls,
                same_answer=same_answer,
                new_failure=new_failure,
                cost=cost,
                latency_ratio=latency_ratio,
            )

    def shadow_skipped(self, profile: str, variant: str) -> None:
        if self.metrics is not None:
            self.metrics.shadow_skipped.labels(profile, variant).inc()

    def variant_state(self, profile: str, variant: str, in_rotation: bool) -> None:
        if self.metrics is not None:
            self.metrics.variant_state(profile, variant, in_rotation)

    def mcp_sessions(self, principal: str, count: int) -> None:
        if self.metrics is not None:
            self.metrics.mcp_sessions.labels(principal).set(count)

    def unknown_tools(self, profile: str, count: int) -> None:
        if self.metrics is not None:
            self.metrics.unknown_tools.labels(profile).set(count)

    def config_reloaded(self, applied: bool) -> None:
        if self.metrics is not None:
            self.metrics.config_reloads.labels("applied" if applied else "refused").inc()

    def overloaded(self, overloaded: bool) -> None:
        """The sidecar became overloaded (new runs take their light path), or stopped being."""
        log.warning(
            "%s",
            "overloaded: new runs take their profile's light path"
            if overloaded
            else "no longer overloaded: new runs take their profile's full path",
        )
        if self.metrics is not None:
            self.metrics.overloaded.set(1 if overloaded else 0)

    def speculation_learned(self, profile: str, rules: int, turns: int) -> None:
        """A profile's speculation rules were learned again."""
        log.debug("profile %s: %d speculation rules from %d turns", profile, rules, turns)
        if self.metrics is not None:
            self.metrics.speculation_rules.labels(profile).set(rules)

    def principal_cost(self, principal: str, usd: float) -> None:
        """Count what a principal's run cost (metrics on)."""
        if self.metrics is not None:
            self.metrics.principal_cost(principal, usd)

    def principal_day(self, principal: str, cost: float, tokens: int) -> None:
        """A principal's spend today, as its store counts it (metrics on)."""
        if self.metrics is not None:
            self.metrics.principal_day(principal, cost, tokens)

    def variant_rolled_back(self, profile: str, variant: str) -> None:
        if self.metrics is not None:
            self.metrics.variant_rolled_back(profile, variant)

    async def close(self) -> None:
        """Stop the metrics endpoint, export the spans still buffered, close the log."""
        if self.metrics is not None:
            await asyncio.to_thread(self.metrics.close)
        if self.tracing is not None:
            await asyncio.to_thread(self.tracing.shutdown)
        if self.timeline_log is not None:
            self.timeline_log.close()

    def run_started(
        self,
        *,
        profile: str,
        session_id: str,
        run_id: str,
        metadata: Sequence[tuple[str, str | bytes]],
        clock: Clock,
        method: str,
    ) -> RunTrace | None:
        """Count a run in flight and open its trace; the trace is None when tracing is off."""
        if self.metrics is not None:
            self.metrics.profile(profile).in_flight.inc()
        if self.tracing is None:
            return None
        return self.tracing.start_run(
            profile=profile,
            method=method,
            session_id=session_id,
            run_id=run_id,
            metadata=metadata,
            clock=clock,
        )

    def run_finished(
        self,
        *,
        profile: str,
        model: str,
        session_id: str,
        run_id: str,
        outcome: RunOutcome | None,
        trace: RunTrace | None,
        end: float,
    ) -> None:
        """Record the run (priced already) everywhere telemetry is on.

        Never raises: a failing record (a full disk under the timeline log) is logged,
        and the run's result goes out all the same.

        Args:
            profile: The session's profile.
            model: The model the run called.
            session_id: The session.
            run_id: The run.
            outcome: The run's outcome; None when it was cancelled before it had one.
            trace: The run's trace, from :meth:`run_started`.
            end: The run's end, as an offset on its clock.
        """
        reason = StopReason.CANCELLED if outcome is None else outcome.stop_reason
        try:
            if self.metrics is not None:
                self.metrics.profile(profile).in_flight.dec()
                self.metrics.run_finished(profile, model, outcome, reason)
            if trace is not None:
                trace.end(outcome, reason, end)
            if self.timeline_log is not None:
                self.timeline_log.write(
                    run_record(
                        label=self.label,
                        run_id=run_id,
                        session_id=session_id,
                        profile=profile,
                        model=model,
                        outcome=outcome,
                        reason=reason,
                    )
                )
        except Exception:
            log.exception("recording run %s failed", run_id)
