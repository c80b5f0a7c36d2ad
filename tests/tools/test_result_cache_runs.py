"""The result cache through real processes: hits, TTL expiry, single flight, tools that
may write, and results shared by replicas through PostgreSQL.

The scripted tool server counts the calls it really served, so every claim about work
skipped is checked on the server's side.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar.testing import PostgresServer, ServerProcess, create_database, drop_database
from tests.support.stack import (
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
        config = sidecar_config(sim, [{"name": "scripted", "address": tools.address}])
        with sidecar(config, tmp_path_factory.mktemp("cache")) as side:
            yield {"sim": sim, "tools": tools, "sidecar": side}


async def _calls(stack: dict[str, ServerProcess], tool: str) -> int:
    return int((await tool_stats(stack["tools"].address))["calls"].get(tool, 0))


def _tool_stages(result: agent_pb2.RunResult) -> list[agent_pb2.Stage]:
    return [s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL]


async def test_a_repeated_read_is_served_from_the_cache_and_the_timeline_says_so(
    client: AgentClient, stack: dict[str, ServerProcess]
) -> None:
    before = await _calls(stack, "cached_read")
    _, first = await run_events(client, "call cached_read with key=hit ms=80")
    events, second = await run_events(client, "call cached_read with key=hit ms=80")
    assert await _calls(stack, "cached_read") == before + 1

    [miss] = _tool_stages(first)
    assert miss.tool_call.status == agent_pb2.TOOL_CALL_STATUS_OK
    assert miss.tool_call.cache_result == agent_pb2.TOOL_CACHE_RESULT_MISS
    [hit] = _tool_stages(second)
    assert hit.tool_call.status == agent_pb2.TOOL_CALL_STATUS_CACHED
    assert hit.tool_call.cache_result == agent_pb2.TOOL_CACHE_RESULT_HIT
    assert ms(hit.tool_call.cache_saved) >= 70  # the handler alone slept 80 ms
    finished = finished_calls(events)["cached_read"]
    assert finished.status == agent_pb2.TOOL_CALL_STATUS_CACHED
    assert finished.content == '{"key":"hit","value":"value of hit"}'


async def test_a_cached_result_expires_after_the_tools_ttl(
    client: AgentClient, stack: dict[str, ServerProcess]
) -> None:
    async def status() -> int:
        events, _ = await run_events(client, "call short_cached_read with key=ttl")
        return int(finished_calls(events)["short_cached_read"].status)

    before = await _calls(stack, "short_cached_read")
    assert await status() == agent_pb2.TOOL_CALL_STATUS_OK
    assert await status() == agent_pb2.TOOL_CALL_STATUS_CACHED  # within its 0.4 s

    async def ran_again() -> bool:
        return await status() == agent_pb2.TOOL_CALL_STATUS_OK

    await eventually(ran_again, interval=0.1)
    assert await _calls(stack, "short_cached_read") == before + 2


async def test_identical_calls_in_flight_together_run_the_tool_once(
    client: AgentClient, stack: dict[str, ServerProcess]
) -> None:
    before = await _calls(stack, "cached_read")
    events, result = await run_events(client, "three identical cached reads")
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    assert await _calls(stack, "cached_read") == before + 1
    caching = sorted(s.tool_call.cache_result for s in _tool_stages(result))
    assert caching == [
        agent_pb2.TOOL_CACHE_RESULT_MISS,
        agent_pb2.TOOL_CACHE_RESULT_SHARED,
        agent_pb2.TOOL_CACHE_RESULT_SHARED,
    ]
    contents = {
        e.tool_call_finished.content
        for e in events
        if e.WhichOneof("event") == "tool_call_finished"
    }
    assert contents == {'{"key":"single-flight","value":"value of single-flight"}'}


async def test_a_tool_that_may_write_is_never_cached_whatever_ttl_it_declares(
    client: AgentClient, stack: dict[str, ServerProcess]
) -> None:
    before = await _calls(stack, "cached_write")
    for _ in range(2):
        _, result = await run_events(client, "call cached_write with key=w")
        [stage] = _tool_stages(result)
        assert stage.tool_call.status == agent_pb2.TOOL_CALL_STATUS_OK
        assert stage.tool_call.cache_result == agent_pb2.TOOL_CACHE_RESULT_UNSPECIFIED
    assert await _calls(stack, "cached_write") == before + 2


async def test_replicas_sharing_the_store_reuse_each_others_results(
    stack: dict[str, ServerProcess], postgres_server: PostgresServer, tmp_path: Path
) -> None:
    dsn = await create_database(postgres_server)
    config = sidecar_config(
        stack["sim"],
        [{"name": "scripted", "address": stack["tools"].address}],
        sessions={"store": "postgres", "postgres": {"dsn": dsn}},
        cache={"shared": True},
    )
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    before = await _calls(stack, "cached_read")
    try:
        with sidecar(config, tmp_path / "a") as a, sidecar(config, tmp_path / "b") as b:
            async with AgentClient(a.address) as on_a, AgentClient(b.address) as on_b:
                await on_a.wait_ready(20)
                await on_b.wait_ready(20)
                _, first = await run_events(on_a, "call cached_read with key=shared ms=50")
                assert _tool_stages(first)[0].tool_call.cache_result == (
                    agent_pb2.TOOL_CACHE_RESULT_MISS
                )

                async def hit_on_b() -> bool:
                    # A shares its result in the background, right after its call.
                    _, result = await run_events(on_b, "call cached_read with key=shared ms=50")
                    return bool(
                        _tool_stages(result)[0].tool_call.cache_result
                        == agent_pb2.TOOL_CACHE_RESULT_HIT
                    )

                await eventually(hit_on_b)
        assert await _calls(stack, "cached_read") == before + 1
    finally:
        await drop_database(postgres_server, dsn)


_DISPATCHED = {
    agent_pb2.TOOL_CALL_STATUS_OK,
    agent_pb2.TOOL_CALL_STATUS_CACHED,
    agent_pb2.TOOL_CALL_STATUS_TIMED_OUT,
    agent_pb2.TOOL_CALL_STATUS_UNAVAILABLE,
}


@pytest.mark.parametrize(
    "text",
    [
        "call cached_read with key=pairs ms=5",  # a miss, then (below) a hit
        "three identical cached reads",  # one flight, two shared
        "early reads",
        "two reads",
        "unknown tool please",
        "bad arguments please",
        "broken tool",
    ],
)
async def test_every_dispatched_call_starts_before_it_finishes(
    client: AgentClient, text: str
) -> None:
    # A caller pairs tool_call_started with tool_call_finished by call id: every call
    # that was dispatched (to its server, or answered by the cache) gets both, in order;
    # a call settled before dispatch (unknown tool, invalid arguments) only finishes.
    for _ in range(2):
        events, _ = await run_events(client, text)
        started: list[str] = []
        for event in events:
            kind = event.WhichOneof("event")
            if kind == "tool_call_started":
                started.append(event.tool_call_started.call_id)
            elif kind == "tool_call_finished":
                finished = event.tool_call_finished
                dispatched = finished.status in _DISPATCHED or finished.attempts > 0
                assert (finished.call_id in started) == dispatched, (text, finished)
        assert len(started) == len(set(started)), text  # started once each
