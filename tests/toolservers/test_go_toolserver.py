"""The Go tool-server library's example beside the Python example servers.

The Python sidecar discovers the Go currency server (toolservers/go/examples/currency)
next to the SDK's orders, logistics and shop servers, and one model answer calls a Go
tool and a Python tool in the same step. The test builds the Go binary itself (into
.tools/bin, incrementally) so that it runs wherever the suite runs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar import testing

ROOT = Path(__file__).resolve().parents[2]
GO_MODULE = ROOT / "toolservers" / "go"
BINARY = ROOT / ".tools" / "bin" / "currency-toolserver"
SCENARIO = Path(__file__).with_name("go_toolserver_scenario.yaml")
BUILD_TIMEOUT = 480  # seconds: a cold build downloads and compiles grpc-go
QUESTION = "Please convert 100 EUR to USD and check order 20250101."

# A cold Go build takes minutes on a fresh machine; the suite's default is 120 s.
pytestmark = pytest.mark.timeout(BUILD_TIMEOUT + 120)


@pytest.fixture(scope="module")
def currency_binary() -> Path:
    go = shutil.which("go")
    assert go is not None, "the Go toolchain (go) is needed to build the Go tool server"
    subprocess.run(
        [go, "build", "-o", str(BINARY), "./examples/currency"],
        cwd=GO_MODULE,
        check=True,
        timeout=BUILD_TIMEOUT,
    )
    return BINARY


@pytest.fixture(scope="module")
def stack(currency_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The simulator, the Go server, the Python example servers and a sidecar on them."""
    with (
        testing.simulator(scenario=SCENARIO) as sim,
        # start_process runs `python ARGS`; any executable that prints `listening on
        # HOST:PORT` starts the same way, with the binary in the interpreter's place.
        testing.start_process(
            ["--port", "0", "--log-level", "warn"], executable=str(currency_binary)
        ) as currency,
        testing.tool_server("toolservers.examples.orders", "--log-level", "WARNING") as orders,
        testing.tool_server("toolservers.examples.logistics", "--log-level", "WARNING") as parcels,
        testing.tool_server("toolservers.examples.shop", "--log-level", "WARNING") as shop,
    ):
        servers = {
            "orders": orders.address,
            "logistics": parcels.address,
            "shop": shop.address,
            "currency": currency.address,
        }
        config = testing.sidecar_config(sim.address, servers)
        with testing.sidecar(config, tmp_path_factory.mktemp("go-toolserver")) as side:
            testing.wait_serving(side.address)
            yield side.address
        # SIGTERM drains the Go server: health NOT_SERVING, then a graceful stop.
        assert currency.stop() == 0


async def test_one_step_calls_a_go_tool_and_a_python_tool(stack: str) -> None:
    async with AgentClient(stack) as client:
        session = await client.create_session()
        tools = {t.tool.name: t for t in await client.list_session_tools(session.session_id)}
        events = [e async for e in client.stream(session.session_id, QUESTION)]

    currency = tools["convert_currency"]
    assert currency.server == "currency"
    assert currency.availability == agent_pb2.TOOL_AVAILABILITY_AVAILABLE
    assert currency.tool.read_only and currency.tool.idempotent
    finished = {
        e.tool_call_finished.tool_name: e.tool_call_finished
        for e in events
        if e.HasField("tool_call_finished")
    }
    assert set(finished) == {"convert_currency", "get_order_status"}
    go_call, py_call = finished["convert_currency"], finished["get_order_status"]
    assert go_call.status == agent_pb2.TOOL_CALL_STATUS_OK, go_call.content
    assert py_call.status == agent_pb2.TOOL_CALL_STATUS_OK, py_call.content
    assert go_call.step == py_call.step == 1
    converted = json.loads(go_call.content)
    assert converted["from"] == "EUR" and converted["to"] == "USD"
    assert converted["converted"] == pytest.approx(108.0)
    assert json.loads(py_call.content)["order_id"] == "20250101"
    result = events[-1].run_finished
    assert events[-1].HasField("run_finished")
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    assert result.answer == "[simulated] converted and checked"
    assert result.steps == 2 and result.tool_calls == 2
