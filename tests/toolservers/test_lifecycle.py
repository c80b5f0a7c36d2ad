"""A tool server's life: health, reflection, and draining on SIGTERM.

Each drain test starts its own server process; a call is held open by a
socket the test controls, so "in flight during the drain" is a fact, not a
timing hope.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2

from agentsidecar.v1 import tool_pb2, tool_pb2_grpc
from sidecar.testing import ServerProcess, scaled, start_process
from tests.support import TOOLSERVER_FIXTURES
from tests.support.port_holder import held_port

FIXTURES = str(TOOLSERVER_FIXTURES)
TOOL_SERVICE = "agentsidecar.v1.ToolService"
WAIT = 10.0
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Releaser:
    """A socket the ``hold`` tool connects to; the call finishes when the test says so."""

    def __init__(self) -> None:
        self.connected: asyncio.Queue[asyncio.StreamWriter] = asyncio.Queue()
        self.server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        await self.connected.put(writer)

    async def close(self) -> None:
        for writer in self._writers:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    process = start_process([FIXTURES, "--port", "0", "--grace", str(WAIT)])
    yield process
    process.stop()


@pytest.fixture
async def channel(server: ServerProcess) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(server.address) as channel:
        yield channel


@pytest.fixture
async def releaser() -> AsyncIterator[Releaser]:
    releaser = Releaser()
    yield releaser
    await releaser.close()


def hold_request(port: int) -> tool_pb2.CallToolRequest:
    return tool_pb2.CallToolRequest(tool_name="hold", arguments=json.dumps({"release_port": port}))


async def exit_code(server: ServerProcess) -> int:
    return await asyncio.to_thread(server.popen.wait, WAIT)


async def test_health_reports_serving_for_the_server_and_the_tool_service(
    channel: grpc.aio.Channel,
) -> None:
    health = health_pb2_grpc.HealthStub(channel)

    for service in ("", TOOL_SERVICE):
        request = health_pb2.HealthCheckRequest(service=service)
        response = await health.Check(request, timeout=WAIT)
        assert response.status == SERVING


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
async def test_reflection_lists_the_tool_service_health_and_reflection(
    channel: grpc.aio.Channel, version: str
) -> None:
    # v1 and v1alpha are the same messages under two names: v1alpha's stub, renamed.
    method = f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo"
    call = channel.stream_stream(
        method,
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    requests = [reflection_pb2.ServerReflectionRequest(list_services="")]

    responses = [r async for r in call(iter(requests), timeout=WAIT)]

    names = {s.name for s in responses[0].list_services_response.service}
    assert names == {
        TOOL_SERVICE,
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    }


async def test_sigterm_lets_a_running_call_finish_refuses_new_calls_and_exits_zero(
    server: ServerProcess, channel: grpc.aio.Channel, releaser: Releaser
) -> None:
    tools = tool_pb2_grpc.ToolServiceStub(channel)
    watch = health_pb2_grpc.HealthStub(channel).Watch(
        health_pb2.HealthCheckRequest(service=TOOL_SERVICE), timeout=WAIT
    )
    assert (await watch.read()).status == SERVING
    held = tools.CallTool(hold_request(await releaser.start()), timeout=WAIT)
    connection = await asyncio.wait_for(releaser.connected.get(), WAIT)

    server.send_signal(signal.SIGTERM)

    assert (await watch.read()).status == NOT_SERVING
    watch.cancel()
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await tools.CallTool(
            tool_pb2.CallToolRequest(tool_name="echo_int", arguments='{"value": 1}'), timeout=WAIT
        )
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    connection.write(b"x")
    assert (await held).result.output == "released"
    assert await exit_code(server) == 0


async def test_a_second_signal_stops_without_waiting_for_running_calls(
    server: ServerProcess, channel: grpc.aio.Channel, releaser: Releaser
) -> None:
    tools = tool_pb2_grpc.ToolServiceStub(channel)
    watch = health_pb2_grpc.HealthStub(channel).Watch(
        health_pb2.HealthCheckRequest(service=""), timeout=WAIT
    )
    assert (await watch.read()).status == SERVING
    held = tools.CallTool(hold_request(await releaser.start()), timeout=WAIT)
    await asyncio.wait_for(releaser.connected.get(), WAIT)

    server.send_signal(signal.SIGTERM)
    assert (await watch.read()).status == NOT_SERVING
    server.send_signal(signal.SIGTERM)

    with pytest.raises(grpc.aio.AioRpcError) as cut:
        await held
    assert cut.value.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)
    assert await exit_code(server) == 0


async def test_calls_still_running_when_the_grace_period_ends_are_cancelled(
    releaser: Releaser,
) -> None:
    server = start_process([FIXTURES, "--port", "0", "--grace", "0.05"])
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            tools = tool_pb2_grpc.ToolServiceStub(channel)
            held = tools.CallTool(hold_request(await releaser.start()), timeout=WAIT)
            await asyncio.wait_for(releaser.connected.get(), WAIT)

            server.send_signal(signal.SIGTERM)

            with pytest.raises(grpc.aio.AioRpcError) as cut:
                await held
            assert cut.value.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)
            assert await exit_code(server) == 0
    finally:
        server.stop()


def test_a_taken_port_stops_the_server_naming_the_process_that_holds_it() -> None:
    with held_port() as (port, pid):
        done = subprocess.run(
            [sys.executable, "-m", "toolservers.examples.logistics", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=scaled(60),
            check=False,
        )
    assert done.returncode == 1
    assert (
        f"logistics: cannot listen on 127.0.0.1:{port}: port {port} is in use by process {pid} ("
        in done.stderr
    )
    assert "add_port" not in done.stderr and "Traceback" not in done.stderr
