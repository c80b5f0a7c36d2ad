"""Connections to tool servers that set nothing: keepalive they accept, drains they finish."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import grpc
import pytest

from agentsidecar.client import AgentClient
from agentsidecar.v1 import tool_pb2, tool_pb2_grpc
from sidecar.config import ToolServerConfig
from sidecar.testing import ServerProcess
from tests.support.stack import sidecar, sidecar_config, simulator
from tests.tools.test_tool_names import named

SCALE_MS = 2000
"""gRPC's default ping policy (one ping per 300 s without data), scaled down 150 times
(grpc's client sends no ping sooner than a second after the last, so not further)."""


async def watches(server: ServerProcess) -> int:
    async with grpc.aio.insecure_channel(server.address) as channel:
        stub = tool_pb2_grpc.ToolServiceStub(channel)
        reply = await stub.CallTool(tool_pb2.CallToolRequest(tool_name="watches"), timeout=5)
    return int(reply.result.output)


def test_the_default_keepalive_is_one_every_server_accepts() -> None:
    # gRPC servers that set no policy refuse pings oftener than every 300 s.
    assert ToolServerConfig(name="a", address="x:1").keepalive_time >= 300


@pytest.mark.parametrize(("keepalive_s", "drops"), [(SCALE_MS / 1000, False), (0.1, True)])
async def test_keepalive_at_the_servers_pace_keeps_the_connection_and_faster_drops_it(
    tmp_path: Path, keepalive_s: float, drops: bool
) -> None:
    with simulator() as sim, named("plain", "x", "--min-ping-ms", str(SCALE_MS)) as tools:
        server = {"name": "plain", "address": tools.address, "keepalive_time": keepalive_s}
        config = sidecar_config(sim, [server])
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                await client.wait_ready(10)
                first = await watches(tools)
                await asyncio.sleep(5 * SCALE_MS / 1000)  # idle for several ping intervals
                later = await watches(tools)
    # A connection dropped with GOAWAY too_many_pings is redialled: a new watch.
    assert (later > first) is drops, (first, later)


async def test_a_tool_server_that_drains_is_not_held_up_by_the_sidecars_watch(
    tmp_path: Path,
) -> None:
    grace = 30.0  # the server waits for every call, a health watch included
    with simulator() as sim, named("plain", "x", "--grace", str(grace)) as tools:
        config = sidecar_config(sim, [{"name": "plain", "address": tools.address}])
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                await client.wait_ready(10)
                started = time.monotonic()
                tools.send_signal(signal.SIGTERM)
                code = await asyncio.to_thread(tools.popen.wait, grace)
                took = time.monotonic() - started
    assert code == 0
    assert took < grace / 3, f"the drain took {took:.1f} s of its {grace:.0f} s grace"
