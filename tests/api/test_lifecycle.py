"""The sidecar's life and its tool servers' deaths: breaker, drain, kills, readiness.

Each test starts its own stack, since each one breaks something on purpose.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar.testing import start_process
from tests.support import SCRIPTED_TOOLSERVER
from tests.support.stack import (
    SimControl,
    eventually,
    finished_calls,
    run_events,
    scripted_toolserver,
    set_broken,
    sidecar,
    sidecar_config,
    simulator,
    tool_stats,
)


def _status(finished: agent_pb2.ToolCallFinished) -> str:
    return agent_pb2.ToolCallStatus.Name(finished.status)


async def _availability(client: AgentClient, session_id: str, tool: str) -> int:
    tools = await client.list_session_tools(session_id)
    return next(t.availability for t in tools if t.tool.name == tool)


async def _serving(health: health_pb2_grpc.HealthStub) -> bool:
    try:
        reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
    except grpc.aio.AioRpcError as exc:
        assert exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
        return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


async def _not_serving(health: health_pb2_grpc.HealthStub) -> bool:
    return not await _serving(health)


async def test_the_breaker_opens_lets_one_trial_through_and_closes(tmp_path: Path) -> None:
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(
            sim,
            [
                {
                    "name": "fragile",
                    "address": tools.address,
                    "retry": {"max_attempts": 1},
                    "breaker": {"failure_threshold": 2, "reset_timeout": 1.0},
                }
            ],
        )
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                await client.wait_ready(20)
                await set_broken(tools.address, True)
                for _ in range(2):
                    events, _ = await run_events(client, "broken tool")
                    assert _status(finished_calls(events)["broken"]) == (
                        "TOOL_CALL_STATUS_UNAVAILABLE"
                    )
                assert (await tool_stats(tools.address))["calls"]["broken"] == 2

                # Open: the call is refused without reaching the server, and the tool
                # is left out of what the model is offered.
                events, result = await run_events(client, "broken tool")
                refused = finished_calls(events)["broken"]
                assert _status(refused) == "TOOL_CALL_STATUS_UNAVAILABLE"
                assert "temporarily unavailable" in refused.content
                assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
                assert (await tool_stats(tools.address))["calls"]["broken"] == 2
                # The breaker guards the whole server: none of its tools is offered.
                last_request = (await SimControl(sim.address).stats())["last_request"]
                assert not last_request.get("tools")
                session = await client.create_session()
                assert (
                    await _availability(client, session.session_id, "broken")
                    == agent_pb2.TOOL_AVAILABILITY_BREAKER_OPEN
                )

                # The server heals; once the reset timeout passes, the tool is back.
                await set_broken(tools.address, False)

                async def available_again() -> bool:
                    availability = await _availability(client, session.session_id, "broken")
                    return availability == agent_pb2.TOOL_AVAILABILITY_AVAILABLE

                await eventually(available_again)

                # Half-open: of three concurrent calls exactly one is the trial.
                events, _ = await run_events(client, "three broken")
                statuses = sorted(
                    _status(e.tool_call_finished)
                    for e in events
                    if e.WhichOneof("event") == "tool_call_finished"
                )
                assert statuses == [
                    "TOOL_CALL_STATUS_OK",
                    "TOOL_CALL_STATUS_UNAVAILABLE",
                    "TOOL_CALL_STATUS_UNAVAILABLE",
                ]
                assert (await tool_stats(tools.address))["calls"]["broken"] == 3

                # The trial succeeded: closed again, calls flow.
                events, _ = await run_events(client, "three broken")
                assert {_status(f) for f in finished_calls(events).values()} == {
                    "TOOL_CALL_STATUS_OK"
                }
                assert (await tool_stats(tools.address))["calls"]["broken"] == 6


async def test_a_tool_server_killed_mid_call_becomes_an_unavailable_result(
    tmp_path: Path,
) -> None:
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(sim, [{"name": "doomed", "address": tools.address, "timeout": 30}])
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                await client.wait_ready(20)
                session = await client.create_session()
                finished = None
                result = None
                async with asyncio.timeout(20):
                    async for event in client.stream(session.session_id, "hang please"):
                        kind = event.WhichOneof("event")
                        if kind == "tool_call_started":
                            tools.kill()
                        elif kind == "tool_call_finished":
                            finished = event.tool_call_finished
                        elif kind == "run_finished":
                            result = event.run_finished
                assert finished is not None and result is not None
                assert _status(finished) == "TOOL_CALL_STATUS_UNAVAILABLE"
                assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED


async def test_sigterm_lets_in_flight_runs_finish_and_refuses_new_ones(tmp_path: Path) -> None:
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(sim, [{"name": "scripted", "address": tools.address}])
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                await client.wait_ready(20)
                health = health_pb2_grpc.HealthStub(client._channel)
                session = await client.create_session()
                result = None
                async with asyncio.timeout(20):
                    async for event in client.stream(session.session_id, "three slow reads"):
                        kind = event.WhichOneof("event")
                        if kind == "tool_call_started" and result is None:
                            side.send_signal(signal.SIGTERM)
                            # Draining: health flips, then new connections are refused.
                            await eventually(lambda: _not_serving(health))
                        elif kind == "run_finished":
                            result = event.run_finished
                assert result is not None
                assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
                assert result.tool_calls == 3
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await client.create_session(timeout=5)
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert side.popen.wait(timeout=20) == 0


async def test_a_run_past_the_grace_period_ends_interrupted_with_run_finished_last(
    tmp_path: Path,
) -> None:
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(sim, [{"name": "scripted", "address": tools.address}])
        config["server"] = {"port": 0, "grace_period": 0.5}
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                await client.wait_ready(20)
                session = await client.create_session()
                events = []
                async with asyncio.timeout(20):
                    async for event in client.stream(session.session_id, "hang please"):
                        events.append(event)
                        if event.WhichOneof("event") == "tool_call_started":
                            side.send_signal(signal.SIGTERM)  # the hang outlasts the grace
            assert side.popen.wait(timeout=20) == 0
        with sidecar(config, tmp_path) as again:
            async with AgentClient(again.address) as client:
                stored = await client.get_session(session.session_id)
    last = events[-1]
    assert last.WhichOneof("event") == "run_finished"
    assert last.run_finished.stop_reason == agent_pb2.STOP_REASON_INTERRUPTED
    assert (last.run_finished.error.code, last.run_finished.error.retryable) == (
        "interrupted",
        True,
    )
    assert [t.stop_reason for t in stored.turns] == [agent_pb2.STOP_REASON_INTERRUPTED]


async def test_health_is_not_serving_until_the_tool_servers_are_discovered(
    tmp_path: Path,
) -> None:
    with simulator() as sim:
        # A tool server that is not there yet: reserve a port by starting and stopping one.
        with scripted_toolserver() as placeholder:
            address = placeholder.address
        config = sidecar_config(
            sim, [{"name": "late", "address": address, "discovery_timeout": 30}]
        )
        with sidecar(config, tmp_path, ready=False) as side:
            async with grpc.aio.insecure_channel(side.address) as channel:
                health = health_pb2_grpc.HealthStub(channel)
                reply = await health.Check(health_pb2.HealthCheckRequest())
                assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
                late = start_process(
                    [
                        str(SCRIPTED_TOOLSERVER),
                        "--port",
                        address.rsplit(":", 1)[1],
                    ]
                )
                try:
                    await eventually(lambda: _serving(health), timeout=20)
                    async with AgentClient(side.address) as client:
                        _, result = await run_events(client, "three slow reads")
                        assert result.tool_calls == 3
                finally:
                    late.stop()


async def test_with_no_model_key_the_sidecar_runs_on_the_embedded_simulator(
    tmp_path: Path,
) -> None:
    config_path = tmp_path / "empty.yaml"
    config_path.write_text(f"server:\n  port: 0\nsessions:\n  sqlite:\n    path: {tmp_path}/s.db\n")
    side = start_process(
        ["-m", "sidecar", "--log-level", "INFO", "serve", "--config", str(config_path)],
        env={"GROQ_API_KEY": ""},
    )
    try:
        async with AgentClient(side.address) as client:
            await client.wait_ready(20)
            _, result = await run_events(client, "hello")
            assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
            assert result.answer.startswith("[simulated]")
    finally:
        assert side.stop() == 0
