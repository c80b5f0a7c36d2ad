"""One sidecar, tools in four languages: the Python SDK's orders example, the Go library's
currency example, the TypeScript library's tax example and the Java library's customers
example, each its own process. The sidecar discovers all four, one model answer calls a tool
on each in the same step, and each server drains and exits 0 on SIGTERM. The TypeScript and
Java servers require a bearer token, which the sidecar sends (``token_env``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar import testing
from tests.languages._builds import (
    GO_CURRENCY,
    TS_TAX_EXAMPLE,
    built,
    java_classpath,
    program,
)

SCENARIO = Path(__file__).with_name("tool_servers_scenario.yaml")
QUESTION = "Please use one tool in every language."
TOKEN = "languages-test-token"

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def sidecar_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    token_env = {"TOOL_TOKEN": TOKEN}
    with (
        testing.simulator(scenario=SCENARIO) as sim,
        testing.tool_server("toolservers.examples.orders", "--log-level", "WARNING") as orders,
        testing.start_process(
            ["--port", "0", "--log-level", "warn"], executable=str(built(GO_CURRENCY))
        ) as currency,
        testing.start_process(
            [str(built(TS_TAX_EXAMPLE)), "--port", "0", "--token-env", "TOOL_TOKEN"],
            executable=program("node"),
            env=token_env,
        ) as tax,
        testing.start_process(
            [
                "-cp",
                java_classpath(),
                "dev.agentsidecar.examples.Customers",
                "--port",
                "0",
                "--token-env",
                "TOOL_TOKEN",
            ],
            executable=program("java"),
            env=token_env,
            timeout=60,
        ) as customers,
    ):
        # The SDK servers accept a keepalive ping every 10 s; these are the ones that
        # say so (tool_servers[].keepalive_time).
        servers = [
            {"name": "orders", "address": orders.address, "keepalive_time": 10},
            {"name": "currency", "address": currency.address, "keepalive_time": 10},
            {
                "name": "tax",
                "address": tax.address,
                "token_env": "TOOL_TOKEN",
                "keepalive_time": 10,
            },
            {
                "name": "customers",
                "address": customers.address,
                "token_env": "TOOL_TOKEN",
                "keepalive_time": 10,
            },
        ]
        config = testing.sidecar_config(sim.address, servers)
        workdir = tmp_path_factory.mktemp("languages")
        with testing.sidecar(config, workdir, env=token_env) as side:
            testing.wait_serving(side.address)
            yield side.address
        # SIGTERM: each drains (health NOT_SERVING, running calls finish) and exits 0.
        for server in (orders, currency, tax, customers):
            assert server.stop() == 0


async def test_one_step_calls_tools_served_in_four_languages(sidecar_address: str) -> None:
    async with AgentClient(sidecar_address) as client:
        session = await client.create_session()
        listed = {t.tool.name: t for t in await client.list_session_tools(session.session_id)}
        events = [e async for e in client.stream(session.session_id, QUESTION, timeout=60)]

    servers = {name: listed[name].server for name in listed}
    assert servers["get_order_status"] == "orders"
    assert servers["convert_currency"] == "currency"
    assert servers["calculate_tax"] == "tax"
    assert servers["lookup_customer"] == "customers"
    for name in ("calculate_tax", "lookup_customer"):
        assert listed[name].availability == agent_pb2.TOOL_AVAILABILITY_AVAILABLE
        assert listed[name].tool.read_only and listed[name].tool.idempotent
    customer_schema = json.loads(listed["lookup_customer"].tool.input_schema)
    assert customer_schema["required"] == ["customer_id"]  # @Arg(name = "customer_id")

    finished = {
        e.tool_call_finished.tool_name: e.tool_call_finished
        for e in events
        if e.HasField("tool_call_finished")
    }
    assert set(finished) == {
        "get_order_status",
        "convert_currency",
        "calculate_tax",
        "lookup_customer",
    }
    for call in finished.values():
        assert call.status == agent_pb2.TOOL_CALL_STATUS_OK, (call.tool_name, call.content)
        assert call.step == 1
    assert json.loads(finished["get_order_status"].content)["order_id"] == "20250101"
    assert json.loads(finished["convert_currency"].content)["converted"] == pytest.approx(108.0)
    tax = json.loads(finished["calculate_tax"].content)
    assert (tax["country"], tax["tax"]) == ("DE", 19)
    customer = json.loads(finished["lookup_customer"].content)
    assert customer["customerId"] == "C-1001" and customer["exampleData"] is True
    result = events[-1].run_finished
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    assert result.answer == "[simulated] four languages answered"
    assert result.steps == 2 and result.tool_calls == 4
