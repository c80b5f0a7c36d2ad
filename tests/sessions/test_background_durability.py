"""Background runs survive their process: a sidecar stopped mid-run (SIGKILL, or a drain
whose grace period runs out) comes back and takes its runs up again, from the last
completed step when the cut-off step sent only calls safe to repeat, and as interrupted
when it sent one that is not. One SQLite store, one process at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar.testing import ServerProcess
from tests.support.runs import CALLBACK_SECRET, events_of, kinds, receiver, signed_correctly
from tests.support.stack import (
    eventually,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
    tool_stats,
)

STOPS = ["sigkill", "drain"]


@pytest.fixture(scope="module")
def processes() -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with simulator() as sim, scripted_toolserver() as tools:
        yield sim, tools


def _config(processes: tuple[ServerProcess, ServerProcess], tmp_path: Path) -> dict[str, Any]:
    sim, tools = processes
    callbacks = {
        "allowed_hosts": ["127.0.0.1"],
        "allow_private_networks": True,
        "allow_http": True,
        "secret_env": "CALLBACK_SECRET",
    }
    return sidecar_config(
        sim,
        [{"name": "scripted", "address": tools.address}],
        server={"port": 0, "grace_period": 0.3},  # a drain hands running runs over soon
        sessions={"sqlite": {"path": str(tmp_path / "sessions.db")}},
        background={"flush_interval": 0.02, "poll_interval": 0.2, "callbacks": callbacks},
    )


ENV = {"CALLBACK_SECRET": CALLBACK_SECRET}


async def _cut_off(
    side: ServerProcess,
    text: str,
    kind: str,
    count: int,
    how: str,
    reached: Callable[[], Awaitable[bool]] | None = None,
    callback_url: str = "",
) -> tuple[str, str, list[agent_pb2.StreamRunResponse]]:
    """Start a run, watch it to its ``count``-th ``kind`` event (and until ``reached``
    holds), then stop the sidecar ``how``; the session, the run and the events seen."""
    async with AgentClient(side.address) as client:
        await client.wait_ready(20)
        session = (await client.create_session()).session_id
        run = await client.start_run(session, text, callback_url=callback_url)
        seen: list[agent_pb2.StreamRunResponse] = []
        async with asyncio.timeout(30), aclosing(client.watch_run(run.run_id)) as watch:
            async for event in watch:
                seen.append(event)
                if kinds(seen).count(kind) == count:
                    break
        if reached is not None:
            await eventually(reached)
    if how == "sigkill":
        side.kill()
    else:
        await asyncio.to_thread(side.stop)  # SIGTERM: drained, its run given up as it is
    return session, run.run_id, seen


@pytest.mark.parametrize("how", STOPS)
async def test_a_run_cut_off_in_a_step_safe_to_repeat_goes_on_from_its_last_step(
    processes: tuple[ServerProcess, ServerProcess], tmp_path: Path, how: str
) -> None:
    config = _config(processes, tmp_path)
    reads = (await tool_stats(processes[1].address))["calls"].get("slow_read", 0)
    with sidecar(config, tmp_path, env=ENV) as side:
        # Step 2's read is under way (it takes 2.5 s) when the sidecar stops.
        session, run_id, seen = await _cut_off(
            side, "read then read slowly", "tool_call_started", 2, how
        )
    with sidecar(config, tmp_path, env=ENV) as side:
        async with AgentClient(side.address) as client:
            await client.wait_ready(20)
            seen += await events_of(client, run_id, after=seen[-1].sequence, timeout=30)
            done = await client.get_run(run_id)
            stored = await client.get_session(session)
    assert [e.sequence for e in seen] == list(range(1, len(seen) + 1))
    (resumed,) = [e.run_resumed for e in seen if e.HasField("run_resumed")]
    assert (resumed.step, resumed.attempt) == (2, 2)
    after = kinds(seen)[kinds(seen).index("run_resumed") :]
    assert after == [
        "run_resumed",
        "tool_call_started",
        "tool_call_finished",
        "step_finished",
        "text_delta",
        "run_finished",
    ]
    assert (done.state, done.attempts) == (agent_pb2.RUN_STATE_COMPLETED, 2)
    assert done.result.answer.endswith("read both")
    assert done.result.steps == 3 and done.result.tool_calls == 2
    # Step 1 ran once; only the cut-off step's read ran again.
    assert (await tool_stats(processes[1].address))["calls"]["slow_read"] == reads + 3
    assert [(t.run_id, t.stop_reason) for t in stored.turns] == [
        (run_id, agent_pb2.STOP_REASON_ANSWERED)
    ]


@pytest.mark.parametrize("how", STOPS)
async def test_a_run_cut_off_after_sending_a_call_not_safe_to_repeat_fails_as_interrupted(
    processes: tuple[ServerProcess, ServerProcess], tmp_path: Path, how: str
) -> None:
    config = _config(processes, tmp_path)
    tools = processes[1].address
    reserves = (await tool_stats(tools))["calls"].get("reserve", 0)

    async def sent() -> bool:  # the reservation reached its tool server
        return bool((await tool_stats(tools))["calls"].get("reserve", 0) > reserves)

    with sidecar(config, tmp_path, env=ENV) as side:
        session, run_id, seen = await _cut_off(
            side, "slow reservation please", "tool_call_started", 1, how, sent
        )
    with sidecar(config, tmp_path, env=ENV) as side:
        async with AgentClient(side.address) as client:
            await client.wait_ready(20)
            seen += await events_of(client, run_id, after=seen[-1].sequence, timeout=30)
            done = await client.get_run(run_id)
            stored = await client.get_session(session)
    assert [e.sequence for e in seen] == list(range(1, len(seen) + 1))
    assert "run_resumed" not in kinds(seen)
    assert done.state == agent_pb2.RUN_STATE_FAILED
    result = done.result
    assert (result.stop_reason, result.error.code, result.error.retryable) == (
        agent_pb2.STOP_REASON_INTERRUPTED,
        "interrupted",
        True,
    )
    assert "not safe to repeat" in result.error.message
    assert seen[-1].run_finished == result
    # The reservation was sent once, and never again.
    await asyncio.sleep(0.3)
    assert (await tool_stats(tools))["calls"]["reserve"] == reserves + 1
    assert [(t.run_id, t.stop_reason) for t in stored.turns] == [
        (run_id, agent_pb2.STOP_REASON_INTERRUPTED)
    ]


@pytest.mark.parametrize("how", STOPS)
async def test_a_run_cut_off_in_its_second_step_not_safe_to_repeat_fails_as_interrupted(
    processes: tuple[ServerProcess, ServerProcess], tmp_path: Path, how: str
) -> None:
    config = _config(processes, tmp_path)
    tools = processes[1].address
    reserves = (await tool_stats(tools))["calls"].get("reserve", 0)

    async def second_sent() -> bool:  # both steps' reservations reached the tool server
        return bool((await tool_stats(tools))["calls"].get("reserve", 0) >= reserves + 2)

    with sidecar(config, tmp_path, env=ENV) as side:
        _, run_id, seen = await _cut_off(
            side, "book two rooms, the second slowly", "tool_call_started", 2, how, second_sent
        )
    with sidecar(config, tmp_path, env=ENV) as side:
        async with AgentClient(side.address) as client:
            await client.wait_ready(20)
            seen += await events_of(client, run_id, after=seen[-1].sequence, timeout=30)
            done = await client.get_run(run_id)
    # Every unsafe step is recorded, not only the first: the second is not run again.
    assert "run_resumed" not in kinds(seen)
    assert done.state == agent_pb2.RUN_STATE_FAILED
    assert done.result.stop_reason == agent_pb2.STOP_REASON_INTERRUPTED
    assert "stopped in step 2" in done.result.error.message
    assert (await tool_stats(tools))["calls"]["reserve"] == reserves + 2


async def test_a_run_failed_as_interrupted_after_a_restart_still_calls_its_callback(
    processes: tuple[ServerProcess, ServerProcess], tmp_path: Path
) -> None:
    config = _config(processes, tmp_path)
    tools = processes[1].address
    reserves = (await tool_stats(tools))["calls"].get("reserve", 0)

    async def sent() -> bool:
        return bool((await tool_stats(tools))["calls"].get("reserve", 0) > reserves)

    async with receiver() as hook:
        with sidecar(config, tmp_path, env=ENV) as side:
            _, run_id, _ = await _cut_off(
                side, "slow reservation please", "tool_call_started", 1, "sigkill", sent, hook.url
            )
        assert hook.deliveries == []
        with sidecar(config, tmp_path, env=ENV) as side:
            (delivery,) = await hook.wait(1)
            async with AgentClient(side.address) as client:

                async def delivered() -> bool:
                    run = await client.get_run(run_id)
                    return run.callback_status == agent_pb2.CALLBACK_STATUS_DELIVERED

                await eventually(delivered)
    assert signed_correctly(delivery) and delivery.headers["webhook-id"] == run_id
    body = orjson.loads(delivery.body)
    assert (body["state"], body["result"]["stopReason"]) == (
        "RUN_STATE_FAILED",
        "STOP_REASON_INTERRUPTED",
    )
