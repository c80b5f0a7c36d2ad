"""Prometheus metrics: run, model-call and tool-call latency, outcomes, hedges, breakers,
tokens, cost.

Everything a run measured is already in its timeline, so a run is recorded once, when it
ends, in one pass over its stages: the loop carries no metric calls. Only three things
are recorded as they happen: runs in flight, model errors (a failed attempt that a retry
hides leaves no stage) and breaker transitions.

Label children are looked up once per label set and kept (``labels()`` takes a lock and
builds a key on every call). Tool names come from the model, so a name that is not a
known tool is recorded as ``(unknown)``: a hallucinating model cannot grow the series.

The endpoint is prometheus_client's own HTTP server, in a daemon thread, on its own port.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from agentsidecar.listening import cannot_listen
from sidecar.errors import StartupError
from sidecar.types import (
    MODEL_PACING,
    BreakerState,
    BudgetOverrun,
    HedgeResult,
    ModelCallDetail,
    RunOutcome,
    RunPath,
    StageKind,
    StopReason,
    ToolCallStatus,
    ToolOutcome,
)

__all__ = ["ANONYMOUS", "UNKNOWN_TOOL", "Metrics"]

UNKNOWN_TOOL = "(unknown)"
ANONYMOUS = "(anonymous)"
"""The principal label of runs when no principals are configured."""

# Agents spend seconds; the sidecar's own stages spend microseconds to milliseconds.
_RUN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 30, 60, 120)
_MODEL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60)
_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10)
_TOOL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_STAGE_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1,
)
_BREAKER_VALUES = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}
_OWN_STAGES = (
    StageKind.QUEUE,
    StageKind.CONTEXT_BUILD,
    StageKind.PERSISTENCE,
    StageKind.OVERHEAD,
)


class _ProfileSeries:
    __slots__ = (
        "_metrics",
        "_profile",
        "_stops",
        "in_flight",
        "pacing",
        "run_duration",
        "stages",
    )

    def __init__(self, metrics: Metrics, profile: str) -> None:
        self._metrics = metrics
        self._profile = profile
        self.in_flight = metrics.runs_in_flight.labels(profile)
        self.run_duration = metrics.run_duration.labels(profile)
        self.stages = {
            kind: metrics.stage_duration.labels(profile, kind.name.lower()) for kind in _OWN_STAGES
        }
        self.pacing = metrics.model_pacing.labels(profile)
        self._stops: dict[StopReason, Any] = {}

    def stopped(self, reason: StopReason) -> Any:
        child = self._stops.get(reason)
        if child is None:
            child = self._stops[reason] = self._metrics.runs.labels(
                self._profile, reason.name.lower()
            )
        return child


class _ModelSeries:
    __slots__ = (
        "cached_tokens",
        "completion_tokens",
        "cost",
        "duration",
        "prompt_tokens",
        "retries",
        "ttft",
    )

    def __init__(self, metrics: Metrics, profile: str, model: str) -> None:
        self.duration = metrics.model_call_duration.labels(profile, model)
        self.ttft = metrics.time_to_first_token.labels(profile, model)
        self.retries = metrics.model_retries.labels(profile, model)
        self.prompt_tokens = metrics.tokens.labels(profile, model, "prompt")
        self.completion_tokens = metrics.tokens.labels(profile, model, "completion")
        self.cached_tokens = metrics.tokens.labels(profile, model, "cached_prompt")
        self.cost = metrics.cost.labels(profile, model)


class _ToolSeries:
    __slots__ = ("_hedges", "_metrics", "_profile", "_statuses", "_tool", "duration", "retries")

    def __init__(self, metrics: Metrics, profile: str, tool: str) -> None:
        self._metrics = metrics
        self._profile = profile
        self._tool = tool
        self.duration = metrics.tool_call_duration.labels(profile, tool)
        self.retries = metrics.tool_retries.labels(profile, tool)
        self._statuses: dict[ToolCallStatus, Any] = {}
        self._hedges: dict[HedgeResult, Any] = {}

    def hedged(self, result: HedgeResult) -> Any:
        child = self._hedges.get(result)
        if child is None:
            child = self._hedges[result] = self._metrics.tool_hedges.labels(
                self._profile, self._tool, result.name.lower()
            )
        return child

    def ended(self, status: ToolCallStatus) -> Any:
        child = self._statuses.get(status)
        if child is None:
            child = self._statuses[status] = self._metrics.tool_results.labels(
                self._profile, self._tool, status.name.lower()
            )
        return child


class Metrics:
    """The sidecar's Prometheus metrics, in a registry of their own.

    Args:
        registry: Where the metrics live; default: a new registry, so that several
            sidecars in one process (tests) never share series.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.run_duration = Histogram(
            "agent_sidecar_run_duration_seconds",
            "Wall time of a run, from receiving the request to its result.",
            ["profile"],
            buckets=_RUN_BUCKETS,
            registry=r,
        )
        self.model_call_duration = Histogram(
            "agent_sidecar_model_call_duration_seconds",
            "Wall time of one model call, retries included.",
            ["profile", "model"],
            buckets=_MODEL_BUCKETS,
            registry=r,
        )
        self.time_to_first_token = Histogram(
            "agent_sidecar_time_to_first_token_seconds",
            "From sending a streamed model request to its first token.",
            ["profile", "model"],
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        self.tool_call_duration = Histogram(
            "agent_sidecar_tool_call_duration_seconds",
            "Wall time of one tool call as the sidecar saw it, retries included.",
            ["profile", "tool"],
            buckets=_TOOL_BUCKETS,
            registry=r,
        )
        self.model_pacing = Histogram(
            "agent_sidecar_model_pacing_seconds",
            "How long model requests waited for room in the endpoint's rate limits.",
            ["profile"],
            buckets=_MODEL_BUCKETS,
            registry=r,
        )
        self.stage_duration = Histogram(
            "agent_sidecar_stage_duration_seconds",
            "The sidecar's own stages per run: queue, context_build, persistence, overhead.",
            ["profile", "stage"],
            buckets=_STAGE_BUCKETS,
            registry=r,
        )
        self.runs = Counter(
            "agent_sidecar_runs",
            "Finished runs by stop reason.",
            ["profile", "stop_reason"],
            registry=r,
        )
        self.tool_results = Counter(
            "agent_sidecar_tool_results",
            "Finished tool calls by status.",
            ["profile", "tool", "status"],
            registry=r,
        )
        self.tool_hedges = Counter(
            "agent_sidecar_tool_hedges",
            "Tool calls sent a second time because the first copy was late, by the copy "
            "that answered first: first_won or second_won.",
            ["profile", "tool", "winner"],
            registry=r,
        )
        self.tool_retries = Counter(
            "agent_sidecar_tool_retries",
            "Tool-call attempts beyond the first.",
            ["profile", "tool"],
            registry=r,
        )
        self.model_retries = Counter(
            "agent_sidecar_model_retries",
            "Model-request attempts beyond the first.",
            ["profile", "model"],
            registry=r,
        )
        self.model_errors = Counter(
            "agent_sidecar_model_errors",
            "Failed model-request attempts, by HTTP status or error code.",
            ["model", "status"],
            registry=r,
        )
        self.breaker_transitions = Counter(
            "agent_sidecar_breaker_transitions",
            "Circuit-breaker state changes per tool server.",
            ["server", "from_state", "to_state"],
            registry=r,
        )
        self.breaker_state = Gauge(
            "agent_sidecar_breaker_state",
            "Circuit-breaker state per tool server: 0 closed, 1 half-open, 2 open.",
            ["server"],
            registry=r,
        )
        self.runs_in_flight = Gauge(
            "agent_sidecar_runs_in_flight",
            "Runs in progress.",
            ["profile"],
            registry=r,
        )
        self.tokens = Counter(
            "agent_sidecar_tokens",
            "Model tokens used, by kind: prompt, completion, cached_prompt.",
            ["profile", "model", "kind"],
            registry=r,
        )
        self.cost = Counter(
            "agent_sidecar_cost_usd",
            "Estimated cost of model tokens at the configured prices, in US dollars.",
            ["profile", "model"],
            registry=r,
        )
        self.overloaded = Gauge(
            "agent_sidecar_overloaded",
            "1 while the sidecar is overloaded (server.light_path): new runs of a profile "
            "with a light variant take it; 0 otherwise.",
            registry=r,
        )
        self.speculated_calls = Counter(
            "agent_sidecar_speculated_calls",
            "Tool calls started before the model asked for them (speculative prefetch), by "
            "result: used (the model asked for it) or wasted (it did not).",
            ["profile", "result"],
            registry=r,
        )
        self.speculation_rules = Gauge(
            "agent_sidecar_speculation_rules",
            "Rules speculative prefetch learned for a profile at its last learning (each "
            "predicts a first-step call from the input, above the profile's precision).",
            ["profile"],
            registry=r,
        )
        self.light_runs = Counter(
            "agent_sidecar_light_runs",
            "Runs that took their profile's light path because the sidecar was overloaded.",
            ["profile"],
            registry=r,
        )
        self.principal_cost_usd = Counter(
            "agent_sidecar_principal_cost_usd",
            "Estimated cost of each principal's runs at the configured prices, in US dollars.",
            ["principal"],
            registry=r,
        )
        self.principal_daily_cost = Gauge(
            "agent_sidecar_principal_daily_cost",
            "What a principal with a daily quota spent today (UTC), in the price table's "
            "currency, counted in the session store (every replica's runs).",
            ["principal"],
            registry=r,
        )
        self.principal_daily_tokens = Gauge(
            "agent_sidecar_principal_daily_tokens",
            "Tokens of unpriced models a principal with a daily quota used today (UTC), "
            "counted in the session store.",
            ["principal"],
            registry=r,
        )
        self.budget_overruns = Counter(
            "agent_sidecar_budget_overruns",
            "Latency-budget overruns, by stage and the profile's policy.",
            ["profile", "stage", "policy"],
            registry=r,
        )
        self.variant_runs = Counter(
            "agent_sidecar_variant_runs",
            "Finished runs per model variant, by outcome: ok or failed (a model error or "
            "an answer that did not fit its schema).",
            ["profile", "variant", "outcome"],
            registry=r,
        )
        self.variant_duration = Histogram(
            "agent_sidecar_variant_run_duration_seconds",
            "Wall time of a run per model variant.",
            ["profile", "variant"],
            buckets=_RUN_BUCKETS,
            registry=r,
        )
        self.variant_repairs = Counter(
            "agent_sidecar_variant_repair_rounds",
            "Malformed tool calls the model was asked to repair, per model variant.",
            ["profile", "variant"],
            registry=r,
        )
        self.variant_invalid_answers = Counter(
            "agent_sidecar_variant_invalid_answers",
            "Structured answers that did not match the profile's schema, per model variant.",
            ["profile", "variant"],
            registry=r,
        )
        self.variant_cost = Counter(
            "agent_sidecar_variant_cost_usd",
            "Estimated cost of runs per model variant, in US dollars.",
            ["profile", "variant"],
            registry=r,
        )
        self.variant_in_rotation = Gauge(
            "agent_sidecar_variant_in_rotation",
            "1 while a model variant takes new sessions, 0 once rolled back.",
            ["profile", "variant"],
            registry=r,
        )
        self.shadow_runs = Counter(
            "agent_sidecar_shadow_runs",
            "Shadow runs compared with the live run they copied, by whether their tool "
            "calls (names and arguments) and their answers were the same: true, false, or "
            "unknown (answers not compared).",
            ["profile", "variant", "same_tool_calls", "same_answer"],
            registry=r,
        )
        self.shadow_new_failures = Counter(
            "agent_sidecar_shadow_new_failures",
            "Shadow runs that failed where the live run they copied ended well.",
            ["profile", "variant"],
            registry=r,
        )
        self.shadow_cost = Counter(
            "agent_sidecar_shadow_cost_usd",
            "Estimated cost of shadow runs, in US dollars: counted apart from every caller's run.",
            ["profile", "variant"],
            registry=r,
        )
        self.shadow_latency_ratio = Histogram(
            "agent_sidecar_shadow_latency_ratio",
            "A shadow run's duration over the live run's (its tools answer at once, so "
            "this compares model time with the live run's whole).",
            ["profile", "variant"],
            buckets=(0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0),
            registry=r,
        )
        self.shadow_skipped = Counter(
            "agent_sidecar_shadow_skipped",
            "Live turns drawn for a shadow variant that found no room (too many shadow "
            "runs in flight).",
            ["profile", "variant"],
            registry=r,
        )
        self.variant_rollbacks = Counter(
            "agent_sidecar_variant_rollbacks",
            "Automatic rollbacks of canary variants.",
            ["profile", "variant"],
            registry=r,
        )
        self.config_reloads = Counter(
            "agent_sidecar_config_reloads",
            "Configuration reloads (SIGHUP or a changed file), by result: applied or refused.",
            ["result"],
            registry=r,
        )
        self.mcp_sessions = Gauge(
            "agent_sidecar_mcp_sessions",
            "Sessions a principal holds open on the MCP endpoint (2025 revisions); the "
            "anonymous caller's principal label is empty.",
            ["principal"],
            registry=r,
        )
        self.unknown_tools = Gauge(
            "agent_sidecar_profile_unknown_tools",
            "Names in a profile's tools list that no discovered tool server offers.",
            ["profile"],
            registry=r,
        )
        self._profiles: dict[str, _ProfileSeries] = {}
        self._models: dict[tuple[str, str], _ModelSeries] = {}
        self._tools: dict[tuple[str, str], _ToolSeries] = {}
        self._model_errors: dict[tuple[str, str], Any] = {}
        self._httpd: Any = None

    # -- the endpoint -------------------------------------------------------------------

    def serve(
        self, host: str, port: int, *, read_timeout: float = 10.0, max_connections: int = 16
    ) -> int:
        """Serve ``/metrics`` from a daemon thread, a thread per connection, bounded: a
        request must arrive within ``read_timeout`` and at most ``max_connections`` are
        served at once (one beyond is closed as accepted), so slow or idle clients cannot
        pile up threads. Return the bound port.

        Raises:
            StartupError: the port cannot be listened on (the message names its holder).
        """
        try:
            httpd = _bounded_server(
                host, port, make_wsgi_app(self.registry), read_timeout, max_connections
            )
        except OSError as exc:
            reason = cannot_listen(host, port) or exc.strerror
            raise StartupError(
                f"telemetry.metrics.port: cannot listen on {host}:{port}: {reason}"
            ) from None
        threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True).start()
        self._httpd = httpd
        return int(httpd.server_port)

    def close(self) -> None:
        """Stop serving (blocks up to half a second, the server's poll interval)."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    # -- recording ----------------------------------------------------------------------

    def profile(self, profile: str) -> _ProfileSeries:
        series = self._profiles.get(profile)
        if series is None:
            series = self._profiles[profile] = _ProfileSeries(self, profile)
        return series

    def _model(self, profile: str, model: str) -> _ModelSeries:
        key = (profile, model)
        series = self._models.get(key)
        if series is None:
            series = self._models[key] = _ModelSeries(self, profile, model)
        return series

    def _tool(self, profile: str, tool: str) -> _ToolSeries:
        key = (profile, tool)
        series = self._tools.get(key)
        if series is None:
            series = self._tools[key] = _ToolSeries(self, profile, tool)
        return series

    def run_finished(
        self, profile: str, model: str, outcome: RunOutcome | None, reason: StopReason
    ) -> None:
        """Record a finished run from its outcome (None when it was cancelled early)."""
        series = self.profile(profile)
        series.stopped(reason).inc()
        if outcome is None:
            return
        series.run_duration.observe(outcome.total)
        if outcome.path is RunPath.LIGHT:
            self.light_runs.labels(profile).inc()
        if outcome.speculated:
            used = sum(
                1
                for s in outcome.stages
                if isinstance(s.detail, ToolOutcome) and s.detail.speculated
            )
            self.speculated_calls.labels(profile, "used").inc(used)
            self.speculated_calls.labels(profile, "wasted").inc(outcome.speculated - used)
        stages = series.stages
        for stage in outcome.stages:
            detail = stage.detail
            if isinstance(detail, ModelCallDetail):
                m = self._model(profile, stage.name)
                m.duration.observe(stage.duration)
                if detail.time_to_first_token is not None:
                    m.ttft.observe(detail.time_to_first_token)
                if detail.attempts > 1:
                    m.retries.inc(detail.attempts - 1)
            elif isinstance(detail, ToolOutcome):
                status = detail.status
                name = UNKNOWN_TOOL if status is ToolCallStatus.UNKNOWN_TOOL else stage.name
                t = self._tool(profile, name)
                t.ended(status).inc()
                if detail.attempts:  # never sent (invalid, unknown, denied): no latency
                    t.duration.observe(stage.duration)
                    if detail.attempts > 1:
                        t.retries.inc(detail.attempts - 1)
                    if detail.hedge:
                        t.hedged(detail.hedge).inc()
            elif stage.name == MODEL_PACING:  # the provider's wait, not the sidecar's queue
                series.pacing.observe(stage.duration)
            else:
                child = stages.get(stage.kind)
                if child is not None:
                    child.observe(stage.duration)
        usage = outcome.usage
        run_model = self._model(profile, model)
        if usage.prompt_tokens:
            run_model.prompt_tokens.inc(usage.prompt_tokens)
        if usage.completion_tokens:
            run_model.completion_tokens.inc(usage.completion_tokens)
        if usage.cached_prompt_tokens:
            run_model.cached_tokens.inc(usage.cached_prompt_tokens)
        if outcome.cost is not None:
            run_model.cost.inc(outcome.cost.total_usd)
        if outcome.overruns:
            self._overruns(profile, outcome.overruns)

    def variant_run(self, profile: str, variant: str, outcome: RunOutcome, failed: bool) -> None:
        """Record a finished run against its model variant."""
        self.variant_runs.labels(profile, variant, "failed" if failed else "ok").inc()
        self.variant_duration.labels(profile, variant).observe(outcome.total)
        if outcome.repairs:
            self.variant_repairs.labels(profile, variant).inc(outcome.repairs)
        if outcome.stop_reason is StopReason.INVALID_ANSWER:
            self.variant_invalid_answers.labels(profile, variant).inc()
        if outcome.cost is not None:
            self.variant_cost.labels(profile, variant).inc(outcome.cost.total_usd)

    def principal_cost(self, principal: str, usd: float) -> None:
        self.principal_cost_usd.labels(principal or ANONYMOUS).inc(usd)

    def principal_day(self, principal: str, cost: float, tokens: int) -> None:
        self.principal_daily_cost.labels(principal or ANONYMOUS).set(cost)
        self.principal_daily_tokens.labels(principal or ANONYMOUS).set(tokens)

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
        """Record a shadow run's comparison with the live run it copied."""
        answer = "unknown" if same_answer is None else str(same_answer).lower()
        self.shadow_runs.labels(profile, variant, str(same_tool_calls).lower(), answer).inc()
        if new_failure:
            self.shadow_new_failures.labels(profile, variant).inc()
        if cost is not None:
            self.shadow_cost.labels(profile, variant).inc(cost)
        if latency_ratio is not None:
            self.shadow_latency_ratio.labels(profile, variant).observe(latency_ratio)

    def variant_state(self, profile: str, variant: str, in_rotation: bool) -> None:
        self.variant_in_rotation.labels(profile, variant).set(1 if in_rotation else 0)

    def variant_rolled_back(self, profile: str, variant: str) -> None:
        self.variant_rollbacks.labels(profile, variant).inc()
        self.variant_state(profile, variant, False)

    def _overruns(self, profile: str, overruns: Iterable[BudgetOverrun]) -> None:
        for o in overruns:
            # Rare by design; no cache needed.
            self.budget_overruns.labels(profile, o.stage.name.lower(), o.policy.name.lower()).inc()

    def model_error(self, model: str, status: str) -> None:
        """Record one failed model-request attempt."""
        key = (model, status)
        child = self._model_errors.get(key)
        if child is None:
            child = self._model_errors[key] = self.model_errors.labels(model, status)
        child.inc()

    def breaker_known(self, server: str) -> None:
        """Start a tool server's breaker series at closed, so it exists before any change."""
        self.breaker_state.labels(server).set(0)

    def breaker_changed(self, server: str, old: BreakerState, new: BreakerState) -> None:
        """Record a breaker transition (a ``CircuitBreaker.on_state_change`` callback)."""
        self.breaker_transitions.labels(server, old.value, new.value).inc()
        self.breaker_state.labels(server).set(_BREAKER_VALUES[new])


class _QuietHandler(WSGIRequestHandler):
    """A scrape's handler: logs nothing; its socket times out (``timeout``, per server)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _bounded_server(
    host: str, port: int, app: Any, read_timeout: float, max_connections: int
) -> WSGIServer:
    slots = threading.BoundedSemaphore(max_connections)

    class Handler(_QuietHandler):
        timeout = read_timeout  # socketserver: each read waits this long at most

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        def process_request(self, request: Any, client_address: Any) -> None:
            if not slots.acquire(blocking=False):
                self.shutdown_request(request)  # as many are served as may be
                return
            super().process_request(request, client_address)

        def process_request_thread(self, request: Any, client_address: Any) -> None:
            try:
                super().process_request_thread(request, client_address)
            finally:
                slots.release()

    return make_server(host, port, app, Server, handler_class=Handler)
