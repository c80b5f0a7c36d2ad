"""SDK tool servers on a Unix domain socket (``--unix PATH``), through real processes.

The sidecar dials ``tool_servers[].address: unix:PATH`` like any other address: it
discovers the server's tools there, watches its health and calls its tools, with TLS and
a token when they are set. The server's TCP port stays open beside the socket.
"""

from __future__ import annotations

import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2, tool_pb2, tool_pb2_grpc
from sidecar import testing
from sidecar.testing import ProcessStartError, ServerProcess
from sidecar.testing.certs import TestCA
from toolservers import ServeOptions

FOUNDING = "What is the status of order 20250101, and where is its parcel?"


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerProcess]:
    with testing.simulator(scenario=testing.SCENARIO) as simulator:
        yield simulator


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # Short: a socket's path holds at most 107 bytes, and pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="sock-") as directory:
        yield Path(directory)


def tool_calls(result: agent_pb2.RunResult) -> dict[str, int]:
    return {
        s.name: s.tool_call.status
        for s in result.timeline.stages
        if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL
    }


async def founding_run(address: str) -> agent_pb2.RunResult:
    async with AgentClient(address) as client:
        session = await client.create_session("default")
        tools = {t.tool.name for t in await client.list_session_tools(session.session_id)}
        assert {"get_order_status", "track_parcel"} <= tools
        return (await client.run(session.session_id, FOUNDING, timeout=30)).result


async def test_a_tool_server_on_a_unix_socket_is_discovered_and_called(
    sim: ServerProcess, socket_dir: Path, tmp_path: Path
) -> None:
    path = socket_dir / "orders.sock"
    with (
        testing.tool_server("toolservers.examples.orders", "--unix", str(path)) as orders,
        testing.tool_server("toolservers.examples.logistics") as logistics,
    ):
        assert orders.announced("socket on ") == f"unix:{path}"
        assert stat.S_IMODE(path.lstat().st_mode) == 0o660
        # The sidecar knows orders by its socket only: its TCP port is not in the config.
        config = testing.sidecar_config(
            sim.address, {"orders": f"unix:{path}", "logistics": logistics.address}
        )
        with testing.sidecar(config, tmp_path) as side:
            testing.wait_serving(side.address)
            result = await founding_run(side.address)
        assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED, result
        ok = agent_pb2.TOOL_CALL_STATUS_OK
        assert tool_calls(result) == {"get_order_status": ok, "track_parcel": ok}
        assert orders.stop() == 0
    assert not path.exists()


async def test_a_tool_server_serves_its_tls_and_token_on_the_socket_too(
    sim: ServerProcess, socket_dir: Path, tmp_path: Path
) -> None:
    ca = TestCA(tmp_path / "ca")
    served = ca.issue("orders")  # for localhost
    path = socket_dir / "orders.sock"
    flags = ("--unix", str(path), "--tls-cert", served.cert_file, "--tls-key", served.key_file)
    token = {"ORDERS_TOKEN": "orders-token-over-the-socket"}
    with testing.tool_server(
        "toolservers.examples.orders", *flags, "--token-env", "ORDERS_TOKEN", env=token
    ):
        # Plaintext to the socket of a TLS server: no connection.
        async with grpc.aio.insecure_channel(f"unix:{path}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as plaintext:
                await health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=5
                )
        assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE
        entry = {
            "name": "orders",
            "address": f"unix:{path}",
            # A unix: address names no host: the name the certificate must carry.
            "tls": {"ca_file": ca.ca_file, "server_name": "localhost"},
            "token_env": "ORDERS_TOKEN",
        }
        config = testing.sidecar_config(sim.address, [entry])
        with testing.sidecar(config, tmp_path, env=token) as side:
            testing.wait_serving(side.address)
            async with AgentClient(side.address) as client:
                session = await client.create_session("default")
                result = await client.run(
                    session.session_id, "What is the status of order 20250101?", timeout=30
                )
        status = tool_calls(result.result)
        assert status == {"get_order_status": agent_pb2.TOOL_CALL_STATUS_OK}


async def test_the_sidecar_sends_a_tool_servers_token_over_its_socket_without_tls(
    sim: ServerProcess, socket_dir: Path, tmp_path: Path
) -> None:
    path = socket_dir / "orders.sock"
    token = {"ORDERS_TOKEN": "orders-token-over-a-plaintext-socket"}
    flags = ("--unix", str(path), "--token-env", "ORDERS_TOKEN")
    with testing.tool_server("toolservers.examples.orders", *flags, env=token):
        entry = {"name": "orders", "address": f"unix:{path}", "token_env": "ORDERS_TOKEN"}
        config = testing.sidecar_config(sim.address, [entry])
        with testing.sidecar(config, tmp_path, env=token) as side:
            testing.wait_serving(side.address)
            async with AgentClient(side.address) as client:
                session = await client.create_session("default")
                result = await client.run(
                    session.session_id, "What is the status of order 20250101?", timeout=30
                )
        status = tool_calls(result.result)
        assert status == {"get_order_status": agent_pb2.TOOL_CALL_STATUS_OK}
        # Without the token the server refuses the call itself (health stays open).
        async with grpc.aio.insecure_channel(f"unix:{path}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await tool_pb2_grpc.ToolServiceStub(channel).ListTools(
                    tool_pb2.ListToolsRequest(), timeout=5
                )
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_tool_server_replaces_a_stale_socket_and_refuses_a_live_one(
    socket_dir: Path, tmp_path: Path
) -> None:
    path = socket_dir / "orders.sock"
    with socket.socket(socket.AF_UNIX) as dead:  # what a killed server leaves behind
        dead.bind(str(path))
    log = tmp_path / "log"
    with (
        log.open("ab") as stderr,
        testing.tool_server("toolservers.examples.orders", "--unix", str(path), stderr=stderr),
    ):
        testing.wait_serving(f"unix:{path}")
        with pytest.raises(ProcessStartError, match="before listening"):
            testing.tool_server("toolservers.examples.orders", "--unix", str(path), stderr=stderr)
        assert "another process listens on" in log.read_text()
        testing.wait_serving(f"unix:{path}", timeout=5)  # still the first server's


def test_the_socket_option_is_a_path() -> None:
    with pytest.raises(ValueError, match="without the unix: prefix"):
        ServeOptions(unix_socket="unix:/run/orders.sock")
    assert ServeOptions(unix_socket="/run/orders.sock").unix_socket == "/run/orders.sock"
