"""The light path: while the sidecar is overloaded, new runs of a profile with a light
variant take it, say so, and come back to the full path with hysteresis.

Through real processes: two LLM simulators (the profile's model answers after 300 ms,
the light variant's at once), the scripted tool server (``hang please`` holds a run in
flight until its caller leaves) and a sidecar taking at most four runs, overloaded from
three in flight until one.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentsidecar.client import AgentClient
from agentsidecar.errors import error_details
from agentsidecar.v1 import agent_pb2
from sidecar.agent.admission import Admission
from sidecar.config import LightPathConfig, parse_config
from sidecar.errors import ConfigError, Overloaded
from sidecar.testing import ServerProcess
from tests.support.stack import (
    eventually,
    scrape,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
)

LIGHT_MODEL = "light-model"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with (
        simulator("--ttft-ms", "300") as sim,
        simulator() as fast,
        scripted_toolserver() as tools,
    ):
        light = {
            "model": {"model": LIGHT_MODEL, "base_url": f"http://{fast.address}/openai/v1"},
            "max_steps": 2,
            "context": {"max_tokens": 4000},
        }
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            profiles={"default": {"light": light}, "heavy": {}},
            server={
                "port": 0,
                "max_concurrent_runs": 4,
                "light_path": {"enter": 0.75, "leave": 0.25},
            },
            telemetry={"metrics": {"enabled": True, "port": 0}},
        )
        with sidecar(config, tmp_path_factory.mktemp("light")) as side:
            yield {"sim": sim, "fast": fast, "tools": tools, "sidecar": side}


@contextlib.asynccontextmanager
async def _held(client: AgentClient, profile: str = "heavy") -> AsyncIterator[None]:
    """A run held in flight (its tool hangs) until the block ends and its caller leaves."""
    session = await client.create_session(profile)
    stream = client.stream(session.session_id, "hang please", timeout=60)
    async for event in stream:
        if event.WhichOneof("event") == "tool_call_started":
            break
    try:
        yield
    finally:
        await stream.aclose()  # type: ignore[attr-defined]


async def _in_flight(side: ServerProcess, runs: int) -> None:
    async def settled() -> bool:
        scraped = await scrape(side)
        total = sum(
            value
            for (name, _), value in scraped.samples.items()
            if name == "agent_sidecar_runs_in_flight"
        )
        return total == runs

    await eventually(settled)


async def _run(client: AgentClient, text: str = "hello") -> tuple[agent_pb2.RunStarted, Any]:
    session = await client.create_session("default")
    events = [e async for e in client.stream(session.session_id, text, timeout=30)]
    return events[0].run_started, events[-1].run_finished


async def test_an_overloaded_sidecar_runs_new_turns_on_the_light_path_and_says_so(
    stack: dict[str, ServerProcess],
) -> None:
    side = stack["sidecar"]
    async with AgentClient(side.address) as client:
        await client.wait_ready(20)
        started, result = await _run(client)
        assert started.path == agent_pb2.RUN_PATH_FULL and result.path == agent_pb2.RUN_PATH_FULL
        before = await scrape(side)
        async with _held(client), _held(client), _held(client):
            await _in_flight(side, 3)
            assert (await scrape(side)).get("agent_sidecar_overloaded") == 1
            started, result = await _run(client)
            assert started.path == agent_pb2.RUN_PATH_LIGHT and started.model == LIGHT_MODEL
            assert result.path == agent_pb2.RUN_PATH_LIGHT
            assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
            models = [
                s.name for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_MODEL_CALL
            ]
            assert models == [LIGHT_MODEL]
            # A profile without a light variant keeps its full path.
            session = await client.create_session("heavy")
            heavy = (await client.run(session.session_id, "hello", timeout=30)).result
            assert heavy.path == agent_pb2.RUN_PATH_FULL
        after = await scrape(side)
        light = "agent_sidecar_light_runs_total"
        assert after.get(light, profile="default") - before.get(light, 0, profile="default") == 1


async def test_the_light_path_takes_the_light_variants_limits(
    stack: dict[str, ServerProcess],
) -> None:
    side = stack["sidecar"]
    async with AgentClient(side.address) as client:
        await client.wait_ready(20)
        async with _held(client), _held(client), _held(client):
            await _in_flight(side, 3)
            # Three tool steps: the light variant's two steps stop it at the second.
            _, result = await _run(client, "loop forever")
        assert result.path == agent_pb2.RUN_PATH_LIGHT
        assert result.stop_reason == agent_pb2.STOP_REASON_MAX_STEPS and result.steps == 2


async def test_overload_ends_only_once_the_runs_in_flight_fall_to_the_leave_share(
    stack: dict[str, ServerProcess],
) -> None:
    side = stack["sidecar"]
    async with AgentClient(side.address) as client:
        await client.wait_ready(20)
        async with _held(client), _held(client):
            async with _held(client):
                await _in_flight(side, 3)
            await _in_flight(side, 2)
            # Two in flight, above the leave share's one: still overloaded.
            assert (await scrape(side)).get("agent_sidecar_overloaded") == 1
            _, result = await _run(client)
            assert result.path == agent_pb2.RUN_PATH_LIGHT
            async with _held(client):
                pass
        await _in_flight(side, 0)
        assert (await scrape(side)).get("agent_sidecar_overloaded") == 0
        _, result = await _run(client)
        assert result.path == agent_pb2.RUN_PATH_FULL


async def test_at_capacity_a_run_is_still_refused_as_overloaded(
    stack: dict[str, ServerProcess],
) -> None:
    side = stack["sidecar"]
    async with AgentClient(side.address) as client:
        await client.wait_ready(20)
        async with _held(client), _held(client), _held(client), _held(client):
            await _in_flight(side, 4)
            session = await client.create_session("default")
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await client.run(session.session_id, "hello", timeout=30)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert error_details(refused.value).reason == "OVERLOADED"


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"server": {"light_path": {"enter": 0.5, "leave": 0.5}}}, "light_path"),
        ({"server": {"light_path": {"enter": 0}}}, "enter"),
        ({"server": {"light_path": {"leave": 1}}}, "leave"),
        ({"profiles": {"p": {"light": {"max_steps": 0}}}}, "max_steps"),
        ({"profiles": {"p": {"light": {"model": {"temperature": 9}}}}}, "light.model"),
        ({"profiles": {"p": {"light": {"context": {"max_tokens": 10}}}}}, "max_tokens"),
        ({"profiles": {"p": {"light": {"modle": {}}}}}, "modle"),
    ],
)
def test_an_invalid_light_path_setting_is_refused_naming_its_key(
    section: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(section)
    assert key in str(refused.value)


@given(
    st.integers(1, 40),
    st.floats(0.01, 1),
    st.floats(0, 0.99),
    st.lists(st.booleans(), max_size=200),
)
def test_overload_starts_at_the_enter_share_and_ends_at_the_leave_share(
    max_runs: int, enter: float, leave: float, starts: list[bool]
) -> None:
    if leave >= enter:
        leave = enter / 2
    changes: list[bool] = []
    admission = Admission(max_runs, LightPathConfig(enter=enter, leave=leave), changes.append)
    admitted, overloaded = 0, False
    for start in starts:
        if start:
            try:
                with admission.claiming():
                    pass
            except Overloaded:
                assert admitted == max_runs
                continue
            admitted += 1
            overloaded = overloaded or admitted >= max(1, enter * max_runs - 1e-9)
        elif admitted:
            admission.release()
            admitted -= 1
            overloaded = overloaded and admitted > leave * max_runs
        assert admission.overloaded is overloaded
    # Told of each change once, alternating.
    assert changes == [i % 2 == 0 for i in range(len(changes))]
