"""Telemetry over real processes: the metrics endpoint, traces across processes, the log.

The stack is ``observed_stack`` (``conftest.py``): the LLM simulator, the scripted tool
server, the example shop tool server (tracing on, exporting to a receiver in this
process) and a sidecar with metrics, tracing, the timeline log and a price table. Metric
assertions compare two scrapes around the runs of one test, so tests do not depend on
each other's runs.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from tests.conftest import PRICES
from tests.support.otlp import OtlpReceiver
from tests.support.stack import (
    Scrape,
    SimControl,
    eventually,
    ms,
    run_events,
    scrape,
    scripted_toolserver,
    set_broken,
    sidecar,
    sidecar_config,
    simulator,
)

PRE_SALES = "Is SKU X-100 in inventory, what is its price, and is there a discount?"


@pytest.fixture
def stack(observed_stack: dict[str, Any]) -> dict[str, Any]:
    return observed_stack


def _delta(before: Scrape, after: Scrape, name: str, **labels: str) -> float:
    # A counter's labelled series exists once it was first incremented: absent is 0.
    return after.get(name, 0.0, **labels) - before.get(name, 0.0, **labels)


async def test_metrics_count_runs_model_calls_and_tool_calls_by_label(
    client: AgentClient, stack: dict[str, Any]
) -> None:
    side = stack["sidecar"]
    before = await scrape(side)
    results = [
        (await run_events(client, "three slow reads please"))[1],
        (await run_events(client, "flaky read"))[1],
    ]
    after = await scrape(side)

    def d(name: str, **labels: str) -> float:
        return _delta(before, after, name, **labels)

    default = {"profile": "default"}
    model = {**default, "model": "simulated-model"}
    assert d("agent_sidecar_runs_total", **default, stop_reason="answered") == 2
    assert d("agent_sidecar_run_duration_seconds_count", **default) == 2
    assert d("agent_sidecar_model_call_duration_seconds_count", **model) == 4
    assert d("agent_sidecar_time_to_first_token_seconds_count", **model) == 4
    slow = {**default, "tool": "slow_read"}
    assert d("agent_sidecar_tool_results_total", **slow, status="ok") == 3
    assert d("agent_sidecar_tool_call_duration_seconds_count", **slow) == 3
    # Each slow_read sleeps 300 ms in its handler.
    assert d("agent_sidecar_tool_call_duration_seconds_sum", **slow) >= 0.9
    flaky = {**default, "tool": "flaky_read"}
    assert d("agent_sidecar_tool_results_total", **flaky, status="ok") == 1
    assert d("agent_sidecar_tool_retries_total", **flaky) == 2
    for stage in ("queue", "context_build", "persistence", "overhead"):
        count = d("agent_sidecar_stage_duration_seconds_count", **default, stage=stage)
        assert count == (4 if stage == "context_build" else 2), stage
    assert after.get("agent_sidecar_runs_in_flight", **default) == 0
    prompt = sum(r.usage.prompt_tokens for r in results)
    assert d("agent_sidecar_tokens_total", **model, kind="prompt") == prompt
    completion = sum(r.usage.completion_tokens for r in results)
    assert d("agent_sidecar_tokens_total", **model, kind="completion") == completion
    cost = sum(r.cost.total_usd for r in results)
    assert cost > 0
    assert math.isclose(d("agent_sidecar_cost_usd_total", **model), cost, rel_tol=1e-9)


async def test_failed_model_attempts_are_counted_by_status(
    client: AgentClient, stack: dict[str, Any]
) -> None:
    await SimControl(stack["sim"].address).faults({"kind": "status", "status": 500})
    before = await scrape(stack["sidecar"])
    _, result = await run_events(client, "hello again")
    after = await scrape(stack["sidecar"])
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    model = {"model": "simulated-model"}
    assert _delta(before, after, "agent_sidecar_model_errors_total", **model, status="500") == 1
    retries = _delta(before, after, "agent_sidecar_model_retries_total", profile="default", **model)
    assert retries == 1


@pytest.fixture
async def breakable(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """A stack of its own: a test that opens a breaker must not fail its neighbours'."""
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(
            sim,
            [
                {
                    "name": "scripted",
                    "address": tools.address,
                    "breaker": {"failure_threshold": 3, "reset_timeout": 0.3},
                    "retry": {"max_attempts": 1},
                }
            ],
            telemetry={"metrics": {"enabled": True, "port": 0}},
        )
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                await client.wait_ready(20)
                yield {"sidecar": side, "tools": tools, "client": client}


async def test_breaker_transitions_and_state_are_exported(breakable: dict[str, Any]) -> None:
    side, tools, client = breakable["sidecar"], breakable["tools"].address, breakable["client"]
    before = await scrape(side)
    assert before.get("agent_sidecar_breaker_state", server="scripted") == 0
    await set_broken(tools, True)
    try:
        await run_events(client, "three broken")
        opened = await scrape(side)
        assert opened.get("agent_sidecar_breaker_state", server="scripted") == 2
        assert (
            _delta(
                before,
                opened,
                "agent_sidecar_breaker_transitions_total",
                server="scripted",
                from_state="closed",
                to_state="open",
            )
            == 1
        )
        # While it is open, a call is refused without being sent, and the timeline says so.
        _, refused = await run_events(client, "broken tool")
        stage = next(s for s in refused.timeline.stages if s.HasField("tool_call"))
        assert stage.tool_call.breaker_rejected
        assert stage.tool_call.status == agent_pb2.TOOL_CALL_STATUS_UNAVAILABLE
    finally:
        await set_broken(tools, False)

    async def closed_again() -> bool:
        await run_events(client, "broken tool")
        return (await scrape(side)).get("agent_sidecar_breaker_state", server="scripted") == 0

    await eventually(closed_again)
    after = await scrape(side)
    for old, new in (("open", "half_open"), ("half_open", "closed")):
        transitions = _delta(
            before,
            after,
            "agent_sidecar_breaker_transitions_total",
            server="scripted",
            from_state=old,
            to_state=new,
        )
        assert transitions >= 1, (old, new)


async def test_a_trace_runs_from_the_client_through_the_sidecar_into_the_tool_server(
    client: AgentClient, stack: dict[str, Any]
) -> None:
    receiver: OtlpReceiver = stack["receiver"]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test-client")
    session = await client.create_session()
    with tracer.start_as_current_span("checkout", kind=SpanKind.CLIENT) as caller:
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)
        events = [
            e
            async for e in client.stream(
                session.session_id, PRE_SALES, timeout=30, metadata=list(carrier.items())
            )
        ]
    result = events[-1].run_finished
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED and result.tool_calls == 3
    trace_id = f"{caller.get_span_context().trace_id:032x}"
    caller_id = f"{caller.get_span_context().span_id:016x}"

    def in_trace() -> list[Any]:
        return [s for s in receiver.spans() if s.trace_id == trace_id]

    async def complete() -> bool:
        spans = in_trace()
        handlers = [s for s in spans if s.service == "shop"]
        return len(handlers) == 3 and any(s.name.startswith("invoke_agent") for s in spans)

    await eventually(complete)
    spans = {s.span_id: s for s in in_trace()}
    run = next(s for s in spans.values() if s.name == "invoke_agent default")
    assert run.parent_id == caller_id and run.service == "agent-sidecar"
    assert run.attributes["agent_sidecar.stop_reason"] == "answered"
    assert run.attributes["gen_ai.conversation.id"] == session.session_id
    steps = {s.span_id for s in spans.values() if s.parent_id == run.span_id}
    assert len(steps) == 2 and all(spans[i].name.startswith("step ") for i in steps)
    chats = [s for s in spans.values() if s.name == "chat simulated-model"]
    assert len(chats) == 2 and all(c.parent_id in steps for c in chats)
    calls = [s for s in spans.values() if s.name.startswith("execute_tool ")]
    assert len(calls) == 3 and all(c.parent_id in steps for c in calls)
    handlers = [s for s in spans.values() if s.service == "shop"]
    # Each handler span in the tool server is the child of the sidecar's span of its call.
    assert sorted(h.parent_id for h in handlers) == sorted(c.span_id for c in calls)
    for handler in handlers:
        call = spans[handler.parent_id]
        assert handler.attributes["gen_ai.tool.name"] == call.attributes["gen_ai.tool.name"]
        assert handler.name == "agentsidecar.v1.ToolService/CallTool"


async def test_each_runs_span_names_the_operation_that_started_it(
    client: AgentClient, stack: dict[str, Any]
) -> None:
    receiver: OtlpReceiver = stack["receiver"]
    session = await client.create_session()
    runs = {}
    ran = await client.run(session.session_id, "hello", timeout=30)
    runs[ran.run_id] = "Run"
    streamed = [e async for e in client.stream(session.session_id, "hello", timeout=30)]
    runs[streamed[-1].run_id] = "StreamRun"
    background = await client.start_run(session.session_id, "hello")
    runs[background.run_id] = "StartRun"

    def methods() -> dict[str, Any]:
        return {
            s.attributes["agent_sidecar.run_id"]: s.attributes["rpc.method"]
            for s in receiver.spans()
            if s.name.startswith("invoke_agent")
            and s.attributes.get("agent_sidecar.run_id") in runs
        }

    async def exported() -> bool:
        return len(methods()) == len(runs)

    await eventually(exported, timeout=20)
    assert methods() == runs


async def test_every_run_is_logged_with_its_label_timeline_and_cost(
    client: AgentClient, stack: dict[str, Any]
) -> None:
    events, result = await run_events(client, "three slow reads please")
    run_id = events[-1].run_id

    def logged() -> dict[str, Any] | None:
        for line in Path(stack["log"]).read_text().splitlines():
            record: dict[str, Any] = orjson.loads(line)
            if record["run_id"] == run_id:
                return record
        return None

    record = logged()  # written before the final event was sent
    assert record is not None
    assert record["label"] == "build-42" and record["stop_reason"] == "answered"
    assert record["usage"]["prompt_tokens"] == result.usage.prompt_tokens
    assert math.isclose(record["cost"]["total_usd"], result.cost.total_usd)
    kinds = [s["kind"] for s in record["stages"]]
    assert kinds[0] == "queue" and kinds[-2:] == ["persistence", "overhead"]
    assert kinds.count("tool_call") == 3 and kinds.count("model_call") == 2
    assert math.isclose(record["total"], ms(result.timeline.total) / 1000, abs_tol=1e-6)


async def test_the_cost_follows_the_price_table(client: AgentClient) -> None:
    _, result = await run_events(client, "three slow reads please")
    usage, cost = result.usage, result.cost
    assert usage.cached_prompt_tokens > 0  # the second call reuses the first one's prefix
    uncached = usage.prompt_tokens - usage.cached_prompt_tokens
    cached_usd = usage.cached_prompt_tokens * PRICES["cached_prompt"] / 1e6
    assert math.isclose(cost.cached_prompt_usd, cached_usd)
    assert math.isclose(cost.prompt_usd, uncached * PRICES["prompt"] / 1e6 + cached_usd)
    assert math.isclose(cost.completion_usd, usage.completion_tokens * PRICES["completion"] / 1e6)
    assert math.isclose(cost.total_usd, cost.prompt_usd + cost.completion_usd)


async def test_the_stages_account_for_the_whole_run(client: AgentClient) -> None:
    _, result = await run_events(client, "three slow reads please")
    stages = result.timeline.stages
    kinds = [agent_pb2.StageKind.Name(s.kind).removeprefix("STAGE_KIND_") for s in stages]
    assert kinds[0] == "QUEUE" and kinds[-2:] == ["PERSISTENCE", "OVERHEAD"]
    tools = [s for s in stages if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL]
    tool_wall = max(ms(s.start_offset) + ms(s.duration) for s in tools) - min(
        ms(s.start_offset) for s in tools
    )
    alone = sum(ms(s.duration) for s in stages if s.kind != agent_pb2.STAGE_KIND_TOOL_CALL)
    # One step of concurrent tools counts as the wall time it covers; the rest add up.
    assert math.isclose(alone + tool_wall, ms(result.timeline.total), abs_tol=0.01)


async def test_a_run_the_caller_does_not_sample_leaves_no_span_anywhere(
    client: AgentClient, stack: dict[str, Any]
) -> None:
    receiver: OtlpReceiver = stack["receiver"]
    unsampled, sampled = "a1" * 16, "b2" * 16
    for trace_id, flags in ((unsampled, "00"), (sampled, "01")):
        session = await client.create_session()
        traceparent = [("traceparent", f"00-{trace_id}-{'c3' * 8}-{flags}")]
        response = await client.run(session.session_id, PRE_SALES, timeout=30, metadata=traceparent)
        assert response.result.tool_calls == 3

    async def sampled_arrived() -> bool:
        spans = [s for s in receiver.spans() if s.trace_id == sampled]
        return sum(s.service == "shop" for s in spans) == 3 and len(spans) >= 9

    # Both processes export in the order spans end: once the later run's spans are in,
    # the earlier run's would be too.
    await eventually(sampled_arrived)
    assert not [s for s in receiver.spans() if s.trace_id == unsampled]
    # The tool server followed the caller's decision rather than start traces of its own.
    assert all(s.parent_id for s in receiver.spans() if s.service == "shop")


def test_a_record_that_cannot_be_written_never_fails_the_run(tmp_path: Path) -> None:
    from sidecar.config import parse_config
    from sidecar.telemetry import Telemetry
    from sidecar.types import RunOutcome, StopReason, Usage

    config = parse_config({"telemetry": {"timeline_log": str(tmp_path / "t.jsonl")}})
    telemetry = Telemetry.from_config(config)
    assert telemetry.timeline_log is not None
    telemetry.timeline_log.close()  # every write now fails, as on a vanished disk
    outcome = RunOutcome(
        answer="answer",
        stop_reason=StopReason.ANSWERED,
        usage=Usage(),
        stages=[],
        total=0.01,
        steps=1,
        tool_calls=0,
    )
    telemetry.run_finished(
        profile="default",
        model="m",
        session_id="s",
        run_id="r",
        outcome=outcome,
        trace=None,
        end=0.01,
    )


def test_a_timeline_log_that_cannot_be_opened_is_a_start_error_naming_the_key(
    tmp_path: Path,
) -> None:
    from sidecar.config import parse_config
    from sidecar.errors import TelemetryUnavailable
    from sidecar.telemetry import Telemetry

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    config = parse_config({"telemetry": {"timeline_log": f"{blocker}/timeline.jsonl"}})
    with pytest.raises(TelemetryUnavailable, match=r"telemetry\.timeline_log"):
        Telemetry.from_config(config)
