"""Background runs across two sidecar replicas on one real PostgreSQL: either replica
watches, cancels and approves a run the other owns; when the owner is SIGKILLed mid-run,
the survivor takes the run over when its lease lapses (resuming it or failing it as
interrupted, as the rules say), and a watcher connected to the survivor sees every event
of it once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar.testing import PostgresServer, ServerProcess, create_database, drop_database
from tests.support.runs import events_of, first_event, kinds, state_becomes
from tests.support.stack import (
    eventually,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
    tool_stats,
)

LEASE = 1.0


@pytest.fixture(scope="module")
def processes() -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with simulator() as sim, scripted_toolserver() as tools:
        yield sim, tools


@pytest.fixture
async def replicas(
    processes: tuple[ServerProcess, ServerProcess],
    postgres_server: PostgresServer,
    tmp_path: Path,
) -> AsyncIterator[Any]:
    """Starts two replicas (no replica ids: each is new, as in a Deployment)."""
    dsn = await create_database(postgres_server)
    sim, tools = processes
    config = sidecar_config(
        sim,
        [{"name": "scripted", "address": tools.address}],
        sessions={"store": "postgres", "postgres": {"dsn": dsn, "lease": LEASE}},
        background={"flush_interval": 0.02, "poll_interval": 0.2},
    )

    @asynccontextmanager
    async def start() -> AsyncIterator[tuple[ServerProcess, ServerProcess]]:
        (tmp_path / "a").mkdir(exist_ok=True)
        (tmp_path / "b").mkdir(exist_ok=True)
        with sidecar(config, tmp_path / "a") as a, sidecar(config, tmp_path / "b") as b:
            yield a, b

    yield start
    await drop_database(postgres_server, dsn)


async def _clients(a: ServerProcess, b: ServerProcess) -> tuple[AgentClient, AgentClient]:
    on_a, on_b = AgentClient(a.address), AgentClient(b.address)
    await on_a.wait_ready(20)
    await on_b.wait_ready(20)
    return on_a, on_b


async def test_a_run_owned_by_one_replica_is_watched_listed_and_cancelled_on_the_other(
    replicas: Any, processes: tuple[ServerProcess, ServerProcess]
) -> None:
    tools = processes[1].address
    async with replicas() as (a, b):
        on_a, on_b = await _clients(a, b)
        try:
            before = (await tool_stats(tools))["cancelled"]
            session = (await on_a.create_session()).session_id
            run = await on_a.start_run(session, "hang please")  # A has a slot: A runs it
            started = await first_event(on_b, run.run_id, "tool_call_started")
            assert started.tool_call_started.tool_name == "hang"
            assert [r.run_id for r in (await on_b.list_runs(session)).runs] == [run.run_id]
            cancelled = await on_b.cancel_run(run.run_id)
            assert cancelled.state == agent_pb2.RUN_STATE_CANCELED
            assert cancelled.attempts == 1  # never taken over: A stopped it
            assert (await tool_stats(tools))["cancelled"] == before + 1
            events = await events_of(on_a, run.run_id)
            assert await events_of(on_b, run.run_id) == events
        finally:
            await on_a.close()
            await on_b.close()


async def test_a_call_of_a_run_on_one_replica_is_approved_on_the_other(replicas: Any) -> None:
    async with replicas() as (a, b):
        on_a, on_b = await _clients(a, b)
        try:
            session = (await on_a.create_session()).session_id
            run = await on_a.start_run(session, "Please refund order 20250101")
            waiting = await state_becomes(on_b, run.run_id, agent_pb2.RUN_STATE_INPUT_REQUIRED)
            (call,) = waiting.pending_approvals
            await on_b.approve(session, call.call_id, approved=True)
            done = await state_becomes(on_b, run.run_id, agent_pb2.RUN_STATE_COMPLETED)
            events = await events_of(on_a, run.run_id)
            (finished,) = [e for e in events if e.HasField("tool_call_finished")]
            assert finished.tool_call_finished.status == agent_pb2.TOOL_CALL_STATUS_OK
            assert done.result.answer.endswith("refund handled")
        finally:
            await on_a.close()
            await on_b.close()


async def _watch_through_a_takeover(
    text: str, count: int, replicas: Any
) -> tuple[list[agent_pb2.StreamRunResponse], agent_pb2.Run, list[int]]:
    """Start ``text`` on A, watch it from B, SIGKILL A at B's ``count``-th
    tool_call_started, and keep watching on B to the end: every event B saw, the run, and
    its session's stop reasons."""
    async with replicas() as (a, b):
        on_a, on_b = await _clients(a, b)
        try:
            session = (await on_a.create_session()).session_id
            run = await on_a.start_run(session, text)
            seen: list[agent_pb2.StreamRunResponse] = []
            killed = False
            async with asyncio.timeout(60), aclosing(on_b.watch_run(run.run_id)) as watch:
                async for event in watch:
                    seen.append(event)
                    if not killed and kinds(seen).count("tool_call_started") == count:
                        a.kill()
                        killed = True
            done = await on_b.get_run(run.run_id)
            turns = (await on_b.get_session(session)).turns
            return seen, done, [t.stop_reason for t in turns]
        finally:
            await on_a.close()
            await on_b.close()


async def test_a_run_whose_owner_is_killed_in_a_step_safe_to_repeat_goes_on_on_the_survivor(
    replicas: Any,
) -> None:
    seen, done, turns = await _watch_through_a_takeover("read then read slowly", 2, replicas)
    assert [e.sequence for e in seen] == list(range(1, len(seen) + 1))  # each event once
    (resumed,) = [e.run_resumed for e in seen if e.HasField("run_resumed")]
    assert (resumed.step, resumed.attempt) == (2, 2)
    assert (done.state, done.attempts) == (agent_pb2.RUN_STATE_COMPLETED, 2)
    assert done.result.answer.endswith("read both")
    assert turns == [agent_pb2.STOP_REASON_ANSWERED]


async def test_a_run_whose_owner_is_killed_after_an_unsafe_call_fails_as_interrupted(
    replicas: Any, processes: tuple[ServerProcess, ServerProcess]
) -> None:
    tools = processes[1].address
    reserves = (await tool_stats(tools))["calls"].get("reserve", 0)
    async with replicas() as (a, b):
        on_a, on_b = await _clients(a, b)
        try:
            session = (await on_a.create_session()).session_id
            run = await on_a.start_run(session, "slow reservation please")
            seen: list[agent_pb2.StreamRunResponse] = []
            async with asyncio.timeout(60), aclosing(on_b.watch_run(run.run_id)) as watch:
                async for event in watch:
                    seen.append(event)
                    if event.HasField("tool_call_started"):

                        async def sent() -> bool:
                            calls = (await tool_stats(tools))["calls"]
                            return bool(calls.get("reserve", 0) > reserves)

                        await eventually(sent)
                        a.kill()
            done = await on_b.get_run(run.run_id)
            turns = (await on_b.get_session(session)).turns
        finally:
            await on_a.close()
            await on_b.close()
    assert [e.sequence for e in seen] == list(range(1, len(seen) + 1))
    assert "run_resumed" not in kinds(seen)
    assert done.state == agent_pb2.RUN_STATE_FAILED
    assert (done.result.stop_reason, done.result.error.code) == (
        agent_pb2.STOP_REASON_INTERRUPTED,
        "interrupted",
    )
    assert [t.stop_reason for t in turns] == [agent_pb2.STOP_REASON_INTERRUPTED]
    assert (await tool_stats(tools))["calls"]["reserve"] == reserves + 1


async def test_runs_across_two_replicas_with_one_killed_halfway_are_none_of_them_lost(
    replicas: Any,
) -> None:
    # A small soak (bench.soak runs 500): every run ends, each with its events whole.
    async with replicas() as (a, b):
        on_a, on_b = await _clients(a, b)
        try:
            runs = []
            for i in range(40):
                client = on_a if i % 2 == 0 else on_b
                session = (await client.create_session()).session_id
                text = "read then read slowly" if i % 4 == 0 else "two reads"
                runs.append((await client.start_run(session, text)).run_id)

            async def half_finished() -> bool:
                states = [(await on_b.get_run(r)).state for r in runs]
                return sum(s == agent_pb2.RUN_STATE_COMPLETED for s in states) >= 20

            await eventually(half_finished, timeout=60)
            a.kill()

            async def all_finished() -> bool:
                for run_id in runs:
                    state = (await on_b.get_run(run_id)).state
                    if state not in (agent_pb2.RUN_STATE_COMPLETED, agent_pb2.RUN_STATE_FAILED):
                        return False
                return True

            await eventually(all_finished, timeout=60)
            for run_id in runs:
                events = await events_of(on_b, run_id)
                assert [e.sequence for e in events] == list(range(1, len(events) + 1))
                assert kinds(events).count("run_finished") == 1
                done = await on_b.get_run(run_id)
                # Reads are safe to repeat: a run cut off by the kill went on.
                assert done.state == agent_pb2.RUN_STATE_COMPLETED, done
        finally:
            await on_a.close()
            await on_b.close()
