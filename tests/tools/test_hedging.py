"""Hedged calls: a late call to an idempotent tool gets a second copy; the first answer wins.

Through real processes: the LLM simulator (its planner calls the tool the text names,
with the arguments the text assigns), the tail tool server (an SDK server: the first
call of a tag is as late as asked, every later one answers in 1 ms) and a sidecar that
hedges that server's calls after their 95th percentile, never before 50 ms.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2, tool_pb2, tool_pb2_grpc
from sidecar import testing
from sidecar.config import HedgePolicy, parse_config
from sidecar.errors import ConfigError
from sidecar.testing import ServerProcess
from sidecar.tools.hedging import HedgeBudget, LatencyWindow
from tests.support import TAIL_TOOLSERVER
from tests.support.stack import eventually, ms, scrape, sidecar, sidecar_config, simulator

HEDGE = {"min_samples": 5, "window": 10, "min_delay": 0.05, "budget": 1.0}
_tags = count()


def _tag(kind: str) -> str:
    return f"{kind}-{next(_tags)}-{random.randrange(10**6)}"


def _stack(tmp: Path, **server: Any) -> Iterator[dict[str, ServerProcess]]:
    with simulator() as sim, testing.tool_server(str(TAIL_TOOLSERVER)) as tools:
        config = sidecar_config(
            sim,
            [{"name": "tail", "address": tools.address, "hedge": HEDGE, **server}],
            telemetry={"metrics": {"enabled": True, "port": 0}},
        )
        with sidecar(config, tmp) as side:
            yield {"sim": sim, "tools": tools, "sidecar": side}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    yield from _stack(tmp_path_factory.mktemp("hedging"))


async def _tool_stats(tools: ServerProcess) -> dict[str, dict[str, int]]:
    import grpc

    async with grpc.aio.insecure_channel(tools.address) as channel:
        stub = tool_pb2_grpc.ToolServiceStub(channel)
        response = await stub.CallTool(tool_pb2.CallToolRequest(tool_name="tail_stats"), timeout=5)
    return orjson.loads(response.result.output)  # type: ignore[no-any-return]


async def _call(client: AgentClient, tool: str, tag: str, late_ms: int) -> agent_pb2.Stage:
    """One run whose single tool call is ``tool(tag, ms)``; its tool stage."""
    session = await client.create_session()
    response = await client.run(
        session.session_id, f"call {tool} tag={tag} ms={late_ms}", timeout=30
    )
    result = response.result
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED, result
    (stage,) = [s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL]
    assert stage.tool_call.status == agent_pb2.TOOL_CALL_STATUS_OK, stage
    return stage


async def _warm_up(client: AgentClient, calls: int = 5) -> None:
    """Calls that answer at once: the tool's latency percentile is then known."""
    for _ in range(calls):
        stage = await _call(client, "late_read", _tag("warm"), 1)
        assert stage.tool_call.hedge == agent_pb2.TOOL_HEDGE_UNSPECIFIED


async def test_a_late_call_gets_a_second_copy_and_the_first_answer_wins(
    client: AgentClient, stack: dict[str, ServerProcess]
) -> None:
    await _warm_up(client)
    before = await scrape(stack["sidecar"])
    tag = _tag("late")
    stage = await _call(client, "late_read", tag, 30_000)
    timing = stage.tool_call
    assert timing.hedge == agent_pb2.TOOL_HEDGE_SECOND_WON
    # Sent once the first copy outlived every warm-up call and the 50 ms floor (a timer
    # may fire a millisecond early); answered by the second copy, not after 30 s.
    assert 48 <= ms(timing.hedge_delay) < 1000
    assert ms(stage.duration) < 5000
    assert timing.attempts == 1  # a second copy is not a retry
    # The tool server saw both copies and the loser was cancelled there.
    stats = await _tool_stats(stack["tools"])
    assert stats["calls"][tag] == 2

    async def cancelled() -> bool:
        return (await _tool_stats(stack["tools"]))["cancelled"].get(tag) == 1

    await eventually(cancelled)
    after = await scrape(stack["sidecar"])
    labels = {"profile": "default", "tool": "late_read", "winner": "second_won"}
    hedges = "agent_sidecar_tool_hedges_total"
    assert after.get(hedges, **labels) - before.get(hedges, 0, **labels) == 1


async def test_a_call_that_answers_in_time_is_sent_once(
    client: AgentClient, stack: dict[str, ServerProcess]
) -> None:
    await _warm_up(client)
    tag = _tag("fast")
    stage = await _call(client, "late_read", tag, 1)
    assert stage.tool_call.hedge == agent_pb2.TOOL_HEDGE_UNSPECIFIED
    assert not stage.tool_call.HasField("hedge_delay")
    assert (await _tool_stats(stack["tools"]))["calls"][tag] == 1


async def test_a_tool_that_is_not_idempotent_is_never_hedged(
    client: AgentClient, stack: dict[str, ServerProcess]
) -> None:
    for _ in range(5):
        await _call(client, "late_write", _tag("warm-write"), 1)
    tag = _tag("late-write")
    stage = await _call(client, "late_write", tag, 300)
    assert stage.tool_call.hedge == agent_pb2.TOOL_HEDGE_UNSPECIFIED
    assert ms(stage.duration) >= 300
    assert (await _tool_stats(stack["tools"]))["calls"][tag] == 1


@pytest.fixture(scope="module")
def budget_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    yield from _stack(tmp_path_factory.mktemp("budget"), hedge={**HEDGE, "budget": 0.25})


async def test_second_copies_stay_within_the_budget_share_of_calls(
    budget_stack: dict[str, ServerProcess],
) -> None:
    async with AgentClient(budget_stack["sidecar"].address) as client:
        await client.wait_ready(20)
        await _warm_up(client)
        stages = [await _call(client, "late_read", _tag("late"), 250) for _ in range(7)]
    hedged = [s for s in stages if s.tool_call.hedge != agent_pb2.TOOL_HEDGE_UNSPECIFIED]
    # 12 calls sent earn 3 second copies at 0.25 a call; the late calls outnumber them.
    assert 1 <= len(hedged) <= math.floor(0.25 * 12)
    # A late call without a second copy waited for its first.
    assert all(ms(s.duration) >= 250 for s in stages if s not in hedged)


@pytest.fixture(scope="module")
def breaker_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    yield from _stack(
        tmp_path_factory.mktemp("breaker"),
        timeout=0.4,
        breaker={"failure_threshold": 1, "reset_timeout": 0.5},
    )


async def test_no_second_copy_is_sent_while_the_breaker_is_not_closed(
    breaker_stack: dict[str, ServerProcess],
) -> None:
    async with AgentClient(breaker_stack["sidecar"].address) as client:
        await client.wait_ready(20)
        await _warm_up(client)
        # A call that outlives the server's timeout opens its breaker (one failure).
        session = await client.create_session()
        response = await client.run(
            session.session_id, f"call late_write tag={_tag('timeout')} ms=2000", timeout=30
        )
        (failed,) = [
            s for s in response.result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL
        ]
        assert failed.tool_call.status == agent_pb2.TOOL_CALL_STATUS_TIMED_OUT

        async def half_open() -> bool:
            tools = await client.list_session_tools(session.session_id)
            return all(t.availability == agent_pb2.TOOL_AVAILABILITY_AVAILABLE for t in tools)

        await eventually(half_open)
        # The trial call of the half-open breaker is late and has no second copy.
        trial = await _call(client, "late_read", _tag("trial"), 200)
        assert trial.tool_call.hedge == agent_pb2.TOOL_HEDGE_UNSPECIFIED
        assert ms(trial.duration) >= 200
        # Its success closed the breaker: the next late call is hedged again.
        closed = await _call(client, "late_read", _tag("closed"), 30_000)
        assert closed.tool_call.hedge == agent_pb2.TOOL_HEDGE_SECOND_WON


@pytest.mark.parametrize(
    ("hedge", "key"),
    [
        ({"percentile": 100}, "percentile"),
        ({"percentile": 0}, "percentile"),
        ({"budget": 0}, "budget"),
        ({"budget": 1.5}, "budget"),
        ({"min_delay": -1}, "min_delay"),
        ({"window": 20, "min_samples": 50}, "window"),
        ({"percentil": 95}, "percentil"),
    ],
)
def test_an_invalid_hedge_policy_is_refused_naming_its_key(hedge: dict[str, Any], key: str) -> None:
    config = {"tool_servers": [{"name": "t", "address": "127.0.0.1:1", "hedge": hedge}]}
    with pytest.raises(ConfigError, match=r"tool_servers\[0\]\.hedge") as refused:
        parse_config(config)
    assert key in str(refused.value)


@given(
    st.lists(st.floats(0, 10, allow_nan=False), max_size=80),
    st.floats(1, 99),
    st.integers(10, 40),
)
def test_the_delay_is_the_percentile_of_the_latest_calls_never_below_the_floor(
    samples: list[float], percentile: float, size: int
) -> None:
    policy = HedgePolicy(percentile=percentile, min_samples=10, window=size, min_delay=0.5)
    window = LatencyWindow(policy)
    expected = None
    for n, seconds in enumerate(samples, 1):
        window.add(seconds, size)
        # Known from the tenth call on, then refreshed every tenth call.
        if n >= 10 and (expected is None or n % 10 == 0):
            latest = sorted(samples[:n][-size:])
            rank = max(0, math.ceil(percentile / 100 * len(latest)) - 1)
            expected = max(0.5, latest[rank])
        assert window.delay == expected


@given(st.floats(0.01, 1), st.lists(st.booleans(), max_size=300))
def test_second_copies_never_exceed_the_budget_share_of_calls(
    share: float, late: list[bool]
) -> None:
    budget = HedgeBudget(share)
    hedged = 0
    for is_late in late:
        budget.earn()
        if is_late and budget.spend():
            hedged += 1
    assert hedged <= share * len(late) + 1e-9
