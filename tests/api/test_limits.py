"""Limits: a slow reader costs bounded memory; runs and sessions have a ceiling."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import pytest

from agentsidecar.client import AgentClient
from agentsidecar.errors import error_details
from agentsidecar.v1 import agent_pb2
from sidecar import testing
from tests.support.stack import SimControl, eventually, sidecar, sidecar_config, simulator

BIG_ANSWER_MB = 40
READERS = 4


def big_answer(megabytes: int) -> dict[str, object]:
    """A raw fault streaming ``megabytes`` of answer text, 100 kB per chunk."""
    chunk = json.dumps({"choices": [{"delta": {"content": "x" * 100_000}}]})
    return {
        "kind": "raw",
        "frames": [f"data: {chunk}\n\n"],
        "repeat": megabytes * 10,
        "then": [
            'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n',
            "data: [DONE]\n\n",
        ],
    }


async def test_callers_that_never_read_a_huge_answer_cost_bounded_memory(tmp_path: Path) -> None:
    with simulator() as sim:
        config = sidecar_config(sim, [])
        config["server"] = {"port": 0, "stream_buffer_bytes": 2 * 1024 * 1024}
        with sidecar(config, tmp_path) as side:
            control = SimControl(sim.address)
            await control.faults({**big_answer(BIG_ANSWER_MB), "times": READERS})
            async with AgentClient(side.address) as client:
                await client.wait_ready(10)
                before = side.current_rss_mib()
                sessions = [(await client.create_session()).session_id for _ in range(READERS)]
                streams = [
                    client.stub.StreamRun(
                        agent_pb2.StreamRunRequest(session_id=s, input="tell me everything"),
                        timeout=60,
                    )
                    for s in sessions
                ]
                for stream in streams:
                    await stream.read()  # run_started; then nobody reads

                async def all_cancelled() -> bool:
                    turns = [(await client.get_session(s)).turns for s in sessions]
                    return all(
                        t and t[0].stop_reason == agent_pb2.STOP_REASON_CANCELLED for t in turns
                    )

                await eventually(all_cancelled, timeout=60)
                grown = side.rss_mib() - before
                reasons = []
                for stream in streams:
                    with pytest.raises(grpc.aio.AioRpcError) as ended:
                        while True:
                            await stream.read()
                    reasons.append(error_details(ended.value).reason)
                await client.wait_ready(5)  # still serving
    assert reasons == ["STREAM_BACKLOG"] * READERS
    assert grown < 120, f"grew {grown:.0f} MiB for {READERS} readers of {BIG_ANSWER_MB} MB each"


async def test_runs_beyond_the_limit_are_refused_with_a_retry_delay(tmp_path: Path) -> None:
    with testing.simulator(scenario=testing.SCENARIO) as sim:  # "slow answer": 3 s
        config = sidecar_config(sim, [])
        config["server"] = {"port": 0, "max_concurrent_runs": 2}
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                await client.wait_ready(10)
                sessions = [(await client.create_session()).session_id for _ in range(3)]
                slow = [
                    client.stub.StreamRun(
                        agent_pb2.StreamRunRequest(session_id=s, input="slow answer"), timeout=30
                    )
                    for s in sessions[:2]
                ]
                for stream in slow:
                    await stream.read()  # both running
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await client.run(sessions[2], "hi")
                for stream in slow:
                    stream.cancel()
    details = error_details(refused.value)
    assert (details.code, details.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "OVERLOADED")
    assert details.retry_delay is not None and details.retry_delay > 0


async def test_sessions_beyond_the_limit_are_refused(tmp_path: Path) -> None:
    with simulator() as sim:
        config = sidecar_config(sim, [], sessions={"store": "memory", "max_sessions": 3})
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                for _ in range(3):
                    await client.create_session()
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await client.create_session()
                created = await asyncio.gather(
                    *(client.create_session() for _ in range(3)), return_exceptions=True
                )
    details = error_details(refused.value)
    assert (details.code, details.reason) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "TOO_MANY_SESSIONS",
    )
    assert all(isinstance(c, grpc.aio.AioRpcError) for c in created)
