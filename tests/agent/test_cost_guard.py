"""The cost guard: a run stops before a model call it cannot pay for; a principal past its
day is refused; tokens without a price count against token limits.

Through real processes: the LLM simulator (its planner calls the tool the text names), the
scripted tool server and a sidecar whose price table charges the test model 1,000 USD per
million tokens (a token is a thousandth of a dollar), so one model call costs a few tenths
and a call after a large tool result a few dollars.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentsidecar.client import AgentClient
from agentsidecar.errors import error_details
from agentsidecar.v1 import agent_pb2
from sidecar.agent.cost_guard import RunSpend
from sidecar.agent.prices import PriceTable
from sidecar.config import PriceConfig
from sidecar.testing import PostgresServer, ServerProcess, create_database, drop_database
from sidecar.types import Usage
from tests.support.stack import (
    MODEL,
    scrape,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
)

PRICE = {"prompt": 1000.0, "completion": 1000.0}  # USD per million tokens
BIG = "call big_read tag=b size=8000"  # two model calls; the second's prompt is large
UNPRICED = "unpriced-model"
TOKENS = {"pat": "pat-token-0001", "quinn": "quinn-token-0002", "ruth": "ruth-token-0003"}
RUTHS_TOKENS = 1500
PROFILES = {
    "default": {},
    "capped": {"cost": {"per_run": 1.0}},
    "tokens": {
        "variants": [{"name": "unpriced", "weight": 1, "model": {"model": UNPRICED}}],
        "cost": {"tokens_per_run": 1000},
    },
    "unpriced": {"variants": [{"name": "unpriced", "weight": 1, "model": {"model": UNPRICED}}]},
}


def _principals(daily_cost: float) -> list[dict[str, Any]]:
    """pat has no daily quota; quinn may spend ``daily_cost`` a day, ruth RUTHS_TOKENS
    tokens of unpriced models."""
    return [
        {"name": "pat", "token_sha256": hashlib.sha256(TOKENS["pat"].encode()).hexdigest()},
        {
            "name": "quinn",
            "token_sha256": hashlib.sha256(TOKENS["quinn"].encode()).hexdigest(),
            "quota": {"daily_cost": daily_cost},
        },
        {
            "name": "ruth",
            "token_sha256": hashlib.sha256(TOKENS["ruth"].encode()).hexdigest(),
            "quota": {"daily_tokens": RUTHS_TOKENS},
        },
    ]


def _config(sim: ServerProcess, tools: ServerProcess, **sections: Any) -> dict[str, Any]:
    return sidecar_config(
        sim,
        [{"name": "scripted", "address": tools.address}],
        profiles=PROFILES,
        prices={MODEL: PRICE},
        telemetry={"metrics": {"enabled": True, "port": 0}},
        **sections,
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with simulator() as sim, scripted_toolserver() as tools:
        config = _config(sim, tools, auth={"principals": _principals(daily_cost=2.0)})
        with sidecar(config, tmp_path_factory.mktemp("cost")) as side:
            yield {"sim": sim, "tools": tools, "sidecar": side}


def _cost(result: agent_pb2.RunResult) -> float:
    return result.cost.total_usd


async def test_a_run_stops_before_the_model_call_it_cannot_pay_for(
    stack: dict[str, ServerProcess],
) -> None:
    async with AgentClient(stack["sidecar"].address, token=TOKENS["pat"]) as client:
        free = await client.create_session("default")
        uncapped = (await client.run(free.session_id, BIG, timeout=30)).result
        assert uncapped.stop_reason == agent_pb2.STOP_REASON_ANSWERED and uncapped.steps == 2
        assert _cost(uncapped) > 1.0  # what the run costs without a cap
        capped = await client.create_session("capped")
        result = (await client.run(capped.session_id, BIG, timeout=30)).result
    assert result.stop_reason == agent_pb2.STOP_REASON_COST_LIMIT
    assert result.error.code == "cost_limit" and "cost.per_run" in result.error.message
    assert not result.error.retryable
    # With no answer, the error says what ran before the stop.
    assert "stopped before its next model call, with no answer" in result.error.message
    assert "1 model call(s) and 1 tool call(s): big_read (ok)" in result.error.message
    # It made its first model call and ran that step's tool to its end, then stopped.
    assert result.steps == 1 and result.tool_calls == 1
    tools = [s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL]
    assert [s.tool_call.status for s in tools] == [agent_pb2.TOOL_CALL_STATUS_OK]
    assert 0 < _cost(result) <= 1.0


async def test_tokens_without_a_price_count_against_the_token_limit(
    stack: dict[str, ServerProcess],
) -> None:
    async with AgentClient(stack["sidecar"].address, token=TOKENS["pat"]) as client:
        session = await client.create_session("tokens")
        result = (await client.run(session.session_id, BIG, timeout=30)).result
    assert result.stop_reason == agent_pb2.STOP_REASON_COST_LIMIT
    assert "tokens_per_run" in result.error.message and UNPRICED in result.error.message
    assert not result.HasField("cost")  # the model has no price: no cost, tokens instead
    used = result.usage.prompt_tokens + result.usage.completion_tokens
    assert result.steps == 1 and 0 < used <= 1000


async def test_a_principal_past_its_daily_cost_is_refused_with_a_quota_failure(
    stack: dict[str, ServerProcess],
) -> None:
    async with AgentClient(stack["sidecar"].address, token=TOKENS["quinn"]) as quinn:
        session = await quinn.create_session("default")
        spent, largest = 0.0, 0.0
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            for _ in range(20):
                result = (await quinn.run(session.session_id, "hello", timeout=30)).result
                assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
                spent += _cost(result)
                largest = max(largest, _cost(result))
        # Refused once the day's total reached its quota, and not before.
        assert 2.0 <= spent <= 2.0 + largest
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        details = error_details(refused.value)
        assert details.reason == "QUOTA_EXCEEDED" and details.metadata["quota"] == "daily_cost"
        assert details.quota == (("principal:quinn", "daily_cost at most 2"),)
        assert details.retry_delay is not None and 0 < details.retry_delay <= 86_400
        metrics = await scrape(stack["sidecar"])
        assert metrics.get("agent_sidecar_principal_daily_cost", principal="quinn") == (
            pytest.approx(spent)
        )
    # Another principal has a day of its own.
    async with AgentClient(stack["sidecar"].address, token=TOKENS["pat"]) as pat:
        session = await pat.create_session("default")
        assert (await pat.run(session.session_id, "hello", timeout=30)).result.steps == 1


async def test_a_principal_past_its_daily_tokens_is_refused_whatever_its_runs_cost(
    stack: dict[str, ServerProcess],
) -> None:
    # Tokens of a model with no price cost nothing: only the token count can stop them.
    async with AgentClient(stack["sidecar"].address, token=TOKENS["ruth"]) as ruth:
        session = await ruth.create_session("unpriced")
        used, largest = 0, 0
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            for _ in range(40):
                result = (await ruth.run(session.session_id, "hello", timeout=30)).result
                assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
                assert not result.HasField("cost")
                tokens = result.usage.prompt_tokens + result.usage.completion_tokens
                used, largest = used + tokens, max(largest, tokens)
        assert RUTHS_TOKENS <= used <= RUTHS_TOKENS + largest
        details = error_details(refused.value)
        assert details.reason == "QUOTA_EXCEEDED" and details.metadata["quota"] == "daily_tokens"
        metrics = await scrape(stack["sidecar"])
        assert metrics.get("agent_sidecar_principal_daily_tokens", principal="ruth") == used


async def test_replicas_sharing_a_store_count_one_day(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    dsn = await create_database(postgres_server)
    sessions = {"store": "postgres", "postgres": {"dsn": dsn}}
    try:
        with simulator() as sim, scripted_toolserver() as tools:
            config = _config(
                sim, tools, sessions=sessions, auth={"principals": _principals(daily_cost=1.0)}
            )
            with sidecar(config, tmp_path / "a") as a, sidecar(config, tmp_path / "b") as b:
                async with (
                    AgentClient(a.address, token=TOKENS["quinn"]) as on_a,
                    AgentClient(b.address, token=TOKENS["quinn"]) as on_b,
                ):
                    session = await on_a.create_session("default")
                    # Each replica's runs alone stay under a dollar; together they pass it.
                    spent = {a.address: 0.0, b.address: 0.0}
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        for replica, on in [(a, on_a), (b, on_b)] * 10:
                            result = await on.run(session.session_id, "hello", timeout=30)
                            spent[replica.address] += _cost(result.result)
                    assert error_details(refused.value).metadata["quota"] == "daily_cost"
                    assert all(0 < cost < 1.0 for cost in spent.values())
                    assert sum(spent.values()) >= 1.0
                    # Both replicas refuse now: the day is one total in the store.
                    for replica in (on_a, on_b):
                        with pytest.raises(grpc.aio.AioRpcError) as again:
                            await replica.run(session.session_id, "hello", timeout=30)
                        assert error_details(again.value).reason == "QUOTA_EXCEEDED"
    finally:
        await drop_database(postgres_server, dsn)


_PRICES = PriceTable({"priced": PriceConfig(prompt=1.0, completion=2.0)})


@given(
    st.floats(1e-6, 10),
    st.lists(st.tuples(st.booleans(), st.integers(0, 5000), st.integers(0, 2000)), max_size=20),
)
def test_calls_the_guard_lets_through_never_pass_the_limit_by_more_than_their_misestimate(
    limit: float, calls: list[tuple[bool, int, int]]
) -> None:
    # Each call: priced or not, its prompt and completion tokens. The guard is asked with
    # the true prompt; only the completion is a guess (the run's largest answer so far).
    spend = RunSpend.of(_PRICES, per_run=limit, tokens_per_run=3000, counted=False)
    assert spend is not None
    largest = 0
    for priced, prompt, completion in calls:
        model = "priced" if priced else "unpriced"
        if spend.refusal(model, prompt) is not None:
            continue
        before_cost, before_tokens = spend.cost, spend.tokens
        spend.charge(model, Usage(prompt_tokens=prompt, completion_tokens=completion))
        surprise = max(0, completion - largest)
        largest = max(largest, completion)
        if priced:
            assert spend.cost <= max(limit, before_cost) + surprise * 2e-6 + 1e-12
        else:
            assert spend.tokens <= max(3000, before_tokens) + surprise


@given(
    st.one_of(st.none(), st.floats(0.01, 5)),
    st.one_of(st.none(), st.integers(1, 10_000)),
    st.booleans(),
)
def test_a_run_is_accounted_for_only_when_a_limit_or_a_daily_quota_needs_it(
    per_run: float | None, tokens_per_run: int | None, counted: bool
) -> None:
    spend = RunSpend.of(_PRICES, per_run=per_run, tokens_per_run=tokens_per_run, counted=counted)
    needed = per_run is not None or tokens_per_run is not None or counted
    assert (spend is not None) == needed
    if spend is not None and per_run is not None:
        # A call of exactly the limit's worth of prompt fits; two tokens more do not.
        tokens = int(per_run * 1e6)
        assert spend.refusal("priced", tokens) is None
        assert spend.refusal("priced", tokens + 2) is not None
