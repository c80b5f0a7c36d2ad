"""Latency budgets: each policy on an overrun, and which deadline wins.

The end-to-end tests run on ``observed_stack`` (``conftest.py``), whose profiles declare
budgets that the scripted conversation overruns on purpose: three concurrent 300 ms
reads against a 100 ms tools budget, or a model that hangs.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar.agent.budget import RunBudget
from sidecar.config import BudgetConfig
from sidecar.testing import ServerProcess
from sidecar.types import BudgetPolicy, BudgetStage
from tests.support.stack import (
    SimControl,
    ms,
    run_events,
    scrape,
)


@pytest.fixture
def stack(observed_stack: dict[str, ServerProcess]) -> dict[str, ServerProcess]:
    return observed_stack


@pytest.fixture
def sim(stack: dict[str, ServerProcess]) -> SimControl:
    return SimControl(stack["sim"].address)


@pytest.fixture
async def client(stack: dict[str, ServerProcess], sim: SimControl) -> AsyncIterator[AgentClient]:
    await sim.reset()
    async with AgentClient(stack["sidecar"].address) as c:
        await c.wait_ready(20)
        yield c


def _overruns(events: list[agent_pb2.StreamRunResponse]) -> list[agent_pb2.BudgetExceeded]:
    return [e.budget_exceeded for e in events if e.WhichOneof("event") == "budget_exceeded"]


def _tool_stages(result: agent_pb2.RunResult) -> list[agent_pb2.Stage]:
    return [s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL]


async def test_under_stop_a_tools_overrun_ends_the_run_without_an_answer(
    client: AgentClient, sim: SimControl, stack: dict[str, ServerProcess]
) -> None:
    before = await scrape(stack["sidecar"])
    events, result = await run_events(client, "three slow reads please", profile="tools_stop")
    assert result.stop_reason == agent_pb2.STOP_REASON_BUDGET_STOPPED
    assert result.answer == ""
    [overrun] = _overruns(events)
    assert overrun.stage == agent_pb2.BUDGET_STAGE_TOOLS
    assert overrun.policy == agent_pb2.BUDGET_POLICY_STOP
    assert ms(overrun.budget) == 100 and ms(overrun.spent) >= 100
    assert list(result.budget_overruns) == [overrun]
    # The remaining tools budget was each call's deadline: the 300 ms reads were cut off.
    for stage in _tool_stages(result):
        assert stage.tool_call.status == agent_pb2.TOOL_CALL_STATUS_TIMED_OUT
        assert ms(stage.tool_call.time_allowed) <= 100
    assert (await sim.stats())["requests"] == 1  # no model call after the overrun
    after = await scrape(stack["sidecar"])
    labels = {"profile": "tools_stop", "stage": "tools", "policy": "stop"}
    overruns = after.get("agent_sidecar_budget_overruns_total", **labels)
    assert overruns - before.get("agent_sidecar_budget_overruns_total", 0.0, **labels) == 1
    stopped = {"profile": "tools_stop", "stop_reason": "budget_stopped"}
    assert after.get("agent_sidecar_runs_total", **stopped) >= 1


async def test_under_answer_a_tools_overrun_gets_one_last_model_call_without_tools(
    client: AgentClient, sim: SimControl
) -> None:
    events, result = await run_events(client, "three slow reads please", profile="tools_answer")
    assert result.stop_reason == agent_pb2.STOP_REASON_BUDGET_ANSWERED
    assert result.answer == "[simulated] all three were read"
    assert result.steps == 2
    [overrun] = _overruns(events)
    assert overrun.stage == agent_pb2.BUDGET_STAGE_TOOLS
    assert overrun.policy == agent_pb2.BUDGET_POLICY_ANSWER
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds.index("budget_exceeded") < kinds.index("text_delta")
    last = (await sim.stats())["last_request"]
    # The tools stay in the prompt (its prefix stays cacheable) but may not be called,
    # and the model saw what the cut-off calls came to.
    assert last["tool_choice"] == "none" and len(last["tools"]) > 0
    results = [m["content"] for m in last["messages"] if m["role"] == "tool"]
    assert len(results) == 3 and all("timed out" in r for r in results)


async def test_calls_cut_off_by_the_budget_do_not_count_against_the_breaker(
    client: AgentClient,
) -> None:
    for _ in range(2):  # six cut-off calls; the breaker opens after five failures
        _, result = await run_events(client, "three slow reads please", profile="tools_stop")
        assert all(
            s.tool_call.status == agent_pb2.TOOL_CALL_STATUS_TIMED_OUT for s in _tool_stages(result)
        )
    session = await client.create_session("tools_stop")
    availability = {
        t.tool.name: t.availability for t in await client.list_session_tools(session.session_id)
    }
    assert availability["slow_read"] == agent_pb2.TOOL_AVAILABILITY_AVAILABLE


async def test_under_continue_overruns_are_reported_and_the_run_goes_on(
    client: AgentClient,
) -> None:
    events, result = await run_events(client, "three slow reads please", profile="tools_continue")
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    stages = {o.stage for o in _overruns(events)}
    assert stages == {agent_pb2.BUDGET_STAGE_TOOLS, agent_pb2.BUDGET_STAGE_OTHER}
    assert len(result.budget_overruns) == 2  # each stage once, though both stay over
    # Budgets are targets here: the calls kept the tool server's own timeout.
    for stage in _tool_stages(result):
        assert stage.tool_call.status == agent_pb2.TOOL_CALL_STATUS_OK
        assert ms(stage.tool_call.time_allowed) > 900


async def test_the_total_budget_caps_the_model_request_and_stops_the_run(
    client: AgentClient, sim: SimControl
) -> None:
    await sim.faults({"kind": "hang"})
    session = await client.create_session("total_stop")
    response = await client.run(session.session_id, "hello again", timeout=20)
    result = response.result
    assert result.stop_reason == agent_pb2.STOP_REASON_BUDGET_STOPPED
    assert [o.stage for o in result.budget_overruns] == [agent_pb2.BUDGET_STAGE_TOTAL]
    model = next(s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_MODEL_CALL)
    assert model.model_call.error_code == "deadline_exceeded"
    assert ms(model.model_call.time_allowed) <= 500


async def test_a_shorter_caller_deadline_wins_over_the_budget(
    client: AgentClient, sim: SimControl
) -> None:
    await sim.faults({"kind": "hang"})
    session = await client.create_session("roomy")
    response = await client.run(session.session_id, "hello again", timeout=2.0)
    result = response.result
    # The caller's deadline ran out, not the 30 s budget, and the result came back within it.
    assert result.stop_reason == agent_pb2.STOP_REASON_BUDGET_EXHAUSTED
    assert not result.budget_overruns
    model = next(s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_MODEL_CALL)
    assert ms(model.model_call.time_allowed) < 2000


def _budget(policy: str, **budgets: float) -> tuple[RunBudget, float]:
    now = time.monotonic()
    config = BudgetConfig.model_validate({**budgets, "policy": policy})
    return RunBudget(config, started=now, deadline=now + 100), now


def test_under_continue_budgets_never_shorten_a_call() -> None:
    budget, now = _budget("continue", total=1.0, tools=0.1)
    assert budget.deadline(BudgetStage.TOOLS) == now + 100
    assert budget.deadline(BudgetStage.MODEL) == now + 100


def test_an_enforced_call_gets_what_is_left_of_its_stage_and_of_the_total() -> None:
    budget, now = _budget("stop", total=1.0, tools=0.3)
    budget.tools_spent = 0.25
    assert now + 0.05 <= budget.deadline(BudgetStage.TOOLS) < now + 0.3
    assert budget.deadline(BudgetStage.MODEL) == now + 1.0  # no model budget: the total
    budget.tools_spent = 0.5
    assert budget.deadline(BudgetStage.TOOLS) <= time.monotonic()  # nothing left


def test_each_stage_overrun_is_reported_once_with_what_it_spent() -> None:
    budget, _ = _budget("answer", total=1.0, model=0.2, other=0.1)
    budget.model_spent = 0.3
    [model] = budget.overruns(step=1, elapsed=0.35)
    assert (model.stage, model.budget, model.spent) == (BudgetStage.MODEL, 0.2, 0.3)
    assert model.policy is BudgetPolicy.ANSWER
    assert budget.overruns(step=2, elapsed=0.35) == []
    found = budget.overruns(step=2, elapsed=1.5)
    assert {o.stage for o in found} == {BudgetStage.TOTAL, BudgetStage.OTHER}
    other = next(o for o in found if o.stage is BudgetStage.OTHER)
    assert other.spent == pytest.approx(1.2)
