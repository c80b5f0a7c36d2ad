"""The sidecar end to end: simulator, scripted tool server and sidecar as real processes.

One stack serves the whole module; each test resets the simulator's faults and uses its
own sessions, and its own scripted conversation (``sidecar_scenario.yaml``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar import testing
from sidecar.testing import ServerProcess
from tests.support.stack import (
    SimControl,
    eventually,
    finished_calls,
    ms,
    run_events,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
    tool_stats,
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(
            sim,
            [
                {
                    "name": "scripted",
                    "address": tools.address,
                    "timeout": 1.0,
                    "retry": {"max_attempts": 3, "initial_backoff": 0.01, "max_backoff": 0.05},
                }
            ],
            profiles={
                "default": {},
                "two_steps": {"max_steps": 2},
                "no_early": {"early_dispatch": False},
                "one_call": {"max_tool_calls": 1},
                "restricted": {"tools": ["slow_read"]},
                "misspelt": {"tools": ["slow_read", "slow_raed"]},
                "structured": {
                    "answer_schema": {
                        "type": "object",
                        "properties": {"status": {"type": "string"}},
                        "required": ["status"],
                    }
                },
            },
        )
        with sidecar(config, tmp_path_factory.mktemp("sidecar")) as side:
            yield {"sim": sim, "tools": tools, "sidecar": side}


@pytest.fixture
def sim(stack: dict[str, ServerProcess]) -> SimControl:
    return SimControl(stack["sim"].address)


@pytest.fixture
def tools_address(stack: dict[str, ServerProcess]) -> str:
    return stack["tools"].address


def _stop(result: agent_pb2.RunResult) -> str:
    return agent_pb2.StopReason.Name(result.stop_reason)


def _status(finished: agent_pb2.ToolCallFinished) -> str:
    return agent_pb2.ToolCallStatus.Name(finished.status)


async def test_a_question_that_needs_no_tool_is_answered_in_one_step(
    client: AgentClient,
) -> None:
    events, result = await run_events(client, "hello there, how are you?")
    assert _stop(result) == "STOP_REASON_ANSWERED"
    assert result.steps == 1 and result.tool_calls == 0
    assert result.answer.startswith("[simulated]")
    text = "".join(e.text_delta.text for e in events if e.WhichOneof("event") == "text_delta")
    assert text == result.answer
    assert events[0].WhichOneof("event") == "run_started"
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    kinds = {agent_pb2.StageKind.Name(s.kind) for s in result.timeline.stages}
    assert {"STAGE_KIND_MODEL_CALL", "STAGE_KIND_OVERHEAD"} <= kinds


async def test_three_parallel_tools_cost_the_slowest_not_the_sum(client: AgentClient) -> None:
    # Early dispatch off: calls started from the stream would overlap even if the step's
    # own dispatch ran them one after another.
    events, result = await run_events(client, "three slow reads please", profile="no_early")
    assert _stop(result) == "STOP_REASON_ANSWERED"
    calls = [s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL]
    assert len(calls) == 3
    assert all(s.tool_call.status == agent_pb2.TOOL_CALL_STATUS_OK for s in calls)
    start = min(ms(s.start_offset) for s in calls)
    end = max(ms(s.start_offset) + ms(s.duration) for s in calls)
    # Each call sleeps 300 ms in its handler: serial would take 900 ms.
    assert 300 <= end - start < 675
    assert all(ms(s.tool_call.handler_duration) >= 290 for s in calls)
    step = next(e.step_finished for e in events if e.WhichOneof("event") == "step_finished")
    assert step.step == 1 and len(step.timeline.stages) >= 4


async def test_calls_with_conflicting_resource_keys_run_in_the_models_order(
    client: AgentClient, tools_address: str
) -> None:
    _, result = await run_events(client, "make conflicting reservations")
    assert _stop(result) == "STOP_REASON_ANSWERED"
    stats = await tool_stats(tools_address)
    assert stats["max_active"]["A-1"] == 1  # never overlapped
    first_a, second_a, b = [
        s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL
    ]
    assert ms(second_a.start_offset) >= ms(first_a.start_offset) + ms(first_a.duration) - 1
    assert ms(second_a.tool_call.wait_duration) >= 100
    # The other SKU did not wait for either.
    assert ms(b.start_offset) < ms(first_a.start_offset) + ms(first_a.duration)
    # The tool server saw the two A-1 writes in the model's order.
    a_writes = [o.split(":", 1)[1] for o in stats["order"] if o.startswith("A-1:")]
    assert a_writes[-2:] == [first_a.tool_call.call_id, second_a.tool_call.call_id]


async def test_an_idempotent_tool_is_retried_on_unavailable(
    client: AgentClient, tools_address: str
) -> None:
    events, result = await run_events(client, "flaky read")
    finished = finished_calls(events)["flaky_read"]
    assert _status(finished) == "TOOL_CALL_STATUS_OK"
    assert finished.attempts == 3
    assert (await tool_stats(tools_address))["calls"]["flaky_read"] == 3
    assert _stop(result) == "STOP_REASON_ANSWERED"


async def test_a_non_idempotent_tool_is_never_retried(
    client: AgentClient, tools_address: str
) -> None:
    events, result = await run_events(client, "flaky write")
    finished = finished_calls(events)["flaky_write"]
    assert _status(finished) == "TOOL_CALL_STATUS_UNAVAILABLE"
    assert finished.attempts == 1
    assert (await tool_stats(tools_address))["calls"]["flaky_write"] == 1
    # The failure reached the model as a result, and the run still answered.
    assert _stop(result) == "STOP_REASON_ANSWERED"


async def test_a_tool_past_its_deadline_times_out_and_the_server_stops_it(
    client: AgentClient, tools_address: str
) -> None:
    before = (await tool_stats(tools_address))["cancelled"]
    events, result = await run_events(client, "hang please")
    finished = finished_calls(events)["hang"]
    assert _status(finished) == "TOOL_CALL_STATUS_TIMED_OUT"
    assert 900 <= ms(finished.duration) < 5000  # the server's timeout is 1 s
    assert "timed out" in finished.content
    assert _stop(result) == "STOP_REASON_ANSWERED"

    async def server_saw_cancel() -> bool:
        return bool((await tool_stats(tools_address))["cancelled"] > before)

    await eventually(server_saw_cancel)


async def test_an_unknown_tool_from_the_model_becomes_an_error_result(
    client: AgentClient,
) -> None:
    events, result = await run_events(client, "unknown tool please")
    finished = finished_calls(events)["no_such_tool"]
    assert _status(finished) == "TOOL_CALL_STATUS_UNKNOWN_TOOL"
    assert "slow_read" in finished.content  # it lists what exists
    assert _stop(result) == "STOP_REASON_ANSWERED"


async def test_invalid_arguments_never_reach_the_tool_server(
    client: AgentClient, tools_address: str
) -> None:
    before = (await tool_stats(tools_address))["calls"].get("slow_read", 0)
    events, result = await run_events(client, "bad arguments please")
    finished = finished_calls(events)["slow_read"]
    assert _status(finished) == "TOOL_CALL_STATUS_ERROR"
    assert "tag" in finished.content or "ms" in finished.content
    assert (await tool_stats(tools_address))["calls"].get("slow_read", 0) == before
    assert _stop(result) == "STOP_REASON_ANSWERED"


async def test_malformed_arguments_from_the_model_go_back_to_it_as_an_error(
    client: AgentClient, sim: SimControl
) -> None:
    await sim.faults({"kind": "malformed_arguments"})
    events, result = await run_events(client, "three slow reads please")
    statuses = {_status(f) for f in finished_calls(events).values()}
    assert statuses == {"TOOL_CALL_STATUS_ERROR"}
    error = next(
        e.tool_call_finished.content
        for e in events
        if e.WhichOneof("event") == "tool_call_finished"
    )
    assert "not valid JSON" in error
    assert _stop(result) == "STOP_REASON_ANSWERED"


async def test_the_step_limit_stops_the_run(client: AgentClient) -> None:
    _, result = await run_events(client, "loop forever", profile="two_steps")
    assert _stop(result) == "STOP_REASON_MAX_STEPS"
    assert result.steps == 2 and result.tool_calls == 1


async def test_the_tool_call_limit_stops_the_run(client: AgentClient) -> None:
    events, result = await run_events(client, "two reads", profile="one_call")
    assert _stop(result) == "STOP_REASON_MAX_TOOL_CALLS"
    assert not finished_calls(events)


async def test_a_tool_the_profile_does_not_allow_is_neither_offered_nor_run(
    client: AgentClient, sim: SimControl
) -> None:
    events, _ = await run_events(client, "hang please", profile="restricted")
    assert _status(finished_calls(events)["hang"]) == "TOOL_CALL_STATUS_UNKNOWN_TOOL"
    offered = [t["function"]["name"] for t in (await sim.stats())["last_request"]["tools"]]
    assert offered == ["slow_read"]


async def test_a_429_is_retried_after_the_time_it_asks_for(
    client: AgentClient, sim: SimControl
) -> None:
    await sim.faults({"kind": "status", "status": 429, "retry_after": 0.2})
    _, result = await run_events(client, "hello again")
    assert _stop(result) == "STOP_REASON_ANSWERED"
    model = next(s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_MODEL_CALL)
    assert model.model_call.attempts == 2
    assert ms(model.duration) >= 190
    assert (await sim.stats())["by_status"]["429"] == 1


async def test_a_500_then_success_answers(client: AgentClient, sim: SimControl) -> None:
    await sim.faults({"kind": "status", "status": 500})
    _, result = await run_events(client, "hello again")
    assert _stop(result) == "STOP_REASON_ANSWERED"
    assert (await sim.stats())["by_status"]["500"] == 1


async def test_rate_limits_that_outlast_the_retries_fail_the_run_clearly(
    client: AgentClient, sim: SimControl
) -> None:
    await sim.faults({"kind": "status", "status": 429, "retry_after": 0.01, "times": 5})
    _, result = await run_events(client, "hello again")
    assert _stop(result) == "STOP_REASON_MODEL_ERROR"
    assert result.error.code == "model_rate_limited"
    assert result.error.retryable
    assert (await sim.stats())["by_status"]["429"] == 3  # max_attempts


async def test_a_rejected_request_fails_the_run_without_retrying(
    client: AgentClient, sim: SimControl
) -> None:
    await sim.faults({"kind": "status", "status": 400})
    _, result = await run_events(client, "hello again")
    assert _stop(result) == "STOP_REASON_MODEL_ERROR"
    assert result.error.code == "model_bad_request" and not result.error.retryable
    assert (await sim.stats())["requests"] == 1


async def test_tool_use_failed_gets_one_repair_round(client: AgentClient, sim: SimControl) -> None:
    await sim.faults({"kind": "tool_use_failed"})
    _, result = await run_events(client, "three slow reads please")
    assert _stop(result) == "STOP_REASON_ANSWERED"
    assert result.steps == 2 and result.tool_calls >= 1
    stats = await sim.stats()
    # The failed call, the repair round, then the answer after the tool results.
    assert stats["by_status"]["400"] == 1
    assert stats["requests"] == 3


async def test_a_hanging_model_ends_the_run_at_the_callers_deadline(
    client: AgentClient, sim: SimControl
) -> None:
    await sim.faults({"kind": "hang"})
    session = await client.create_session()
    response = await client.run(session.session_id, "hello again", timeout=2.0)
    assert _stop(response.result) == "STOP_REASON_BUDGET_EXHAUSTED"


async def test_cancelling_a_run_cancels_its_tool_calls(
    client: AgentClient, tools_address: str
) -> None:
    stats = await tool_stats(tools_address)
    before, hangs = stats["cancelled"], stats["calls"].get("hang", 0)

    async def server_got_the_call() -> bool:
        return bool((await tool_stats(tools_address))["calls"].get("hang", 0) > hangs)

    session = await client.create_session()
    async with aclosing(client.stream(session.session_id, "hang please")) as events:
        async for event in events:
            if event.WhichOneof("event") == "tool_call_started":
                await eventually(server_got_the_call)
                break  # closing the stream cancels the run

    async def server_saw_cancel() -> bool:
        return bool((await tool_stats(tools_address))["cancelled"] > before)

    async def turn_recorded() -> bool:
        return bool((await client.get_session(session.session_id)).turns)

    await eventually(server_saw_cancel)
    # The cancelled turn is recorded, and the session is free again.
    await eventually(turn_recorded)
    stored = await client.get_session(session.session_id)
    assert stored.turns[0].stop_reason == agent_pb2.STOP_REASON_CANCELLED


async def test_a_unary_run_returns_the_result_and_the_session_keeps_the_turn(
    client: AgentClient,
) -> None:
    session = await client.create_session(labels={"team": "pre-sales"})
    response = await client.run(session.session_id, "three slow reads please", timeout=30)
    assert response.result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    stored = await client.get_session(session.session_id)
    assert stored.labels["team"] == "pre-sales"
    assert [t.run_id for t in stored.turns] == [response.run_id]
    assert stored.turns[0].answer == response.result.answer
    assert stored.turns[0].input == "three slow reads please"


def _refunds(stats: dict[str, Any]) -> int:
    return sum(o.startswith("refund ") for o in stats["order"])


async def test_a_tool_that_needs_approval_waits_for_it(
    client: AgentClient, tools_address: str
) -> None:
    session = await client.create_session()
    seen: list[str] = []
    result = None
    before = _refunds(await tool_stats(tools_address))
    async for event in client.stream(session.session_id, "refund order", timeout=30):
        kind = event.WhichOneof("event")
        seen.append(kind)
        if kind == "approval_required":
            assert event.approval_required.destructive
            # Nothing ran before the decision...
            assert _refunds(await tool_stats(tools_address)) == before
            await client.approve(session.session_id, event.approval_required.call_id, approved=True)
        elif kind == "run_finished":
            result = event.run_finished
    assert result is not None
    assert seen.index("approval_required") < seen.index("tool_call_started")
    assert seen.index("tool_call_started") < seen.index("run_finished")
    # ...and it ran exactly once after it.
    assert _refunds(await tool_stats(tools_address)) == before + 1


async def test_a_denied_call_is_reported_to_the_model_as_denied(client: AgentClient) -> None:
    session = await client.create_session()
    finished: list[agent_pb2.ToolCallFinished] = []
    async for event in client.stream(session.session_id, "refund order", timeout=30):
        kind = event.WhichOneof("event")
        if kind == "approval_required":
            await client.approve(
                session.session_id,
                event.approval_required.call_id,
                approved=False,
                reason="over the limit",
            )
        elif kind == "tool_call_finished":
            finished.append(event.tool_call_finished)
    assert _status(finished[0]) == "TOOL_CALL_STATUS_DENIED"
    assert "over the limit" in finished[0].content


async def _status_code(call: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value.code()


async def test_session_tools_lists_what_the_profile_allows(client: AgentClient) -> None:
    session = await client.create_session("restricted")
    tools = await client.list_session_tools(session.session_id)
    assert [t.tool.name for t in tools] == ["slow_read"]
    assert tools[0].server == "scripted"
    assert tools[0].availability == agent_pb2.TOOL_AVAILABILITY_AVAILABLE
    assert tools[0].tool.read_only


async def test_session_tools_lists_a_name_no_server_offers_as_not_offered(
    client: AgentClient,
) -> None:
    session = await client.create_session("misspelt")
    tools = {t.tool.name: t for t in await client.list_session_tools(session.session_id)}
    assert tools.keys() == {"slow_read", "slow_raed"}
    assert tools["slow_read"].availability == agent_pb2.TOOL_AVAILABILITY_AVAILABLE
    missing = tools["slow_raed"]
    assert missing.availability == agent_pb2.TOOL_AVAILABILITY_NOT_OFFERED
    assert missing.server == ""


async def test_a_runs_result_names_the_listed_tool_no_server_offers(client: AgentClient) -> None:
    _, result = await run_events(client, "hello there", profile="misspelt")
    assert _stop(result) == "STOP_REASON_ANSWERED"
    assert [(t.name, t.availability) for t in result.unavailable_tools] == [
        ("slow_raed", agent_pb2.TOOL_AVAILABILITY_NOT_OFFERED)
    ]
    # Every listed tool offered, or no list at all: nothing to say.
    for profile in ("restricted", "default"):
        _, result = await run_events(client, "hello there", profile=profile)
        assert not result.unavailable_tools, profile


async def test_a_runs_result_names_a_listed_tool_whose_server_stopped_serving(
    tmp_path: Path,
) -> None:
    with simulator() as sim, scripted_toolserver() as tools:
        orders = testing.tool_server("toolservers.examples.orders")
        config = sidecar_config(
            sim,
            [
                {"name": "scripted", "address": tools.address},
                {"name": "orders", "address": orders.address},
            ],
            profiles={"default": {"tools": ["slow_read", "orders.get_order_status"]}},
        )
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                _, result = await run_events(client, "hello there")
                assert not result.unavailable_tools
                orders.stop()  # drained, then gone: its health watch ends

                async def named() -> bool:
                    _, result = await run_events(client, "hello there")
                    return [(t.name, t.availability) for t in result.unavailable_tools] == [
                        ("orders.get_order_status", agent_pb2.TOOL_AVAILABILITY_SERVER_UNAVAILABLE)
                    ]

                await eventually(named, timeout=20, interval=0.2)


def test_an_invalid_config_fails_at_start_naming_the_key(tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "bad.yaml"
    bad.write_text("profiles:\n  default:\n    max_steps: 0\nmodel:\n  modle: x\n")
    proc = subprocess.run(
        [sys.executable, "-m", "sidecar", "serve", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "profiles.default.max_steps" in proc.stderr
    assert "model.modle" in proc.stderr


async def test_a_structured_answer_is_requested_by_schema_and_validated(
    client: AgentClient, sim: SimControl
) -> None:
    session = await client.create_session("structured")
    response = await client.run(session.session_id, "what is the status?", timeout=30)
    assert response.result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    assert "status" in orjson.loads(response.result.answer)
    sent = (await sim.stats())["last_request"]
    assert sent["response_format"]["json_schema"]["schema"]["required"] == ["status"]


async def test_a_structured_answer_that_breaks_the_schema_is_reported(
    client: AgentClient,
) -> None:
    session = await client.create_session("structured")
    response = await client.run(session.session_id, "bad structured answer", timeout=30)
    assert response.result.stop_reason == agent_pb2.STOP_REASON_INVALID_ANSWER
    assert response.result.error.code == "invalid_answer"


async def test_the_prompt_prefix_is_identical_across_turns(
    client: AgentClient, sim: SimControl
) -> None:
    session = await client.create_session()
    prefixes = []
    for text in ("hello there", "and hello again", "three slow reads please"):
        await client.run(session.session_id, text, timeout=30)
        sent = (await sim.stats())["last_request"]
        prefixes.append(orjson.dumps([sent["messages"][0], sent["tools"]]))
    assert prefixes[0] == prefixes[1] == prefixes[2]
    # The conversation grows behind the prefix: every turn is in the last request.
    assert [m["content"] for m in sent["messages"] if m["role"] == "user"] == [
        "hello there",
        "and hello again",
        "three slow reads please",
    ]


async def test_a_unary_run_denies_calls_that_need_approval(client: AgentClient) -> None:
    session = await client.create_session()
    response = await client.run(session.session_id, "refund order", timeout=30)
    assert response.result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    tools = [s for s in response.result.timeline.stages if s.HasField("tool_call")]
    assert [s.tool_call.status for s in tools] == [agent_pb2.TOOL_CALL_STATUS_DENIED]


async def test_an_oversized_request_is_refused_and_the_session_stays_usable(
    client: AgentClient,
) -> None:
    session = await client.create_session()
    huge = "x" * (5 * 1024 * 1024)  # over server.max_message_bytes (4 MiB by default)
    code = await _status_code(
        client.stub.Run(agent_pb2.RunRequest(session_id=session.session_id, input=huge))
    )
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    response = await client.run(session.session_id, "hello after that", timeout=30)
    assert response.result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    assert [t.input for t in (await client.get_session(session.session_id)).turns] == [
        "hello after that"
    ]


async def test_a_streamed_run_of_a_profile_with_an_answer_schema_streams_the_validated_json(
    client: AgentClient, sim: SimControl
) -> None:
    session = await client.create_session("structured")
    events = [e async for e in client.stream(session.session_id, "what is the status?")]
    result = events[-1].run_finished
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    deltas = "".join(e.text_delta.text for e in events if e.HasField("text_delta"))
    assert deltas == result.answer and "status" in orjson.loads(result.answer)
    sent = (await sim.stats())["last_request"]
    assert sent["stream"] is True
    assert sent["response_format"]["json_schema"]["schema"]["required"] == ["status"]
    broken = await client.create_session("structured")
    events = [e async for e in client.stream(broken.session_id, "bad structured answer")]
    assert events[-1].run_finished.stop_reason == agent_pb2.STOP_REASON_INVALID_ANSWER
