"""The example tool servers, each in its own process, through a real gRPC client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest

from agentsidecar.v1 import tool_pb2, tool_pb2_grpc
from sidecar.testing import ServerProcess, start_process
from toolservers import ToolContext, cli
from toolservers.examples import shop as shop_tools

WAIT = 10.0
LATENCY_MS = 20


@pytest.fixture(scope="module")
def orders() -> Iterator[ServerProcess]:
    # Through the console script's module, which also proves the CLI runs examples.
    server = start_process(["-m", "toolservers.cli", "orders", "--port", "0"])
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def logistics() -> Iterator[ServerProcess]:
    server = start_process(["-m", "toolservers.examples.logistics", "--port", "0"])
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def shop() -> Iterator[ServerProcess]:
    server = start_process(
        [
            "-m",
            "toolservers.examples.shop",
            "--port",
            "0",
            "--latency",
            f"get_price={LATENCY_MS}",
            "--latency",
            f"reserve_stock={LATENCY_MS}",
        ]
    )
    yield server
    assert server.stop() == 0


async def connect(server: ServerProcess) -> AsyncIterator[tool_pb2_grpc.ToolServiceStub]:
    async with grpc.aio.insecure_channel(server.address) as channel:
        yield tool_pb2_grpc.ToolServiceStub(channel)


@pytest.fixture
async def orders_stub(orders: ServerProcess) -> AsyncIterator[tool_pb2_grpc.ToolServiceStub]:
    async for stub in connect(orders):
        yield stub


@pytest.fixture
async def logistics_stub(
    logistics: ServerProcess,
) -> AsyncIterator[tool_pb2_grpc.ToolServiceStub]:
    async for stub in connect(logistics):
        yield stub


@pytest.fixture
async def shop_stub(shop: ServerProcess) -> AsyncIterator[tool_pb2_grpc.ToolServiceStub]:
    async for stub in connect(shop):
        yield stub


async def call(
    stub: tool_pb2_grpc.ToolServiceStub, tool: str, **arguments: Any
) -> tool_pb2.ToolResult:
    request = tool_pb2.CallToolRequest(tool_name=tool, arguments=json.dumps(arguments))
    return (await stub.CallTool(request, timeout=WAIT)).result


async def output(stub: tool_pb2_grpc.ToolServiceStub, tool: str, **arguments: Any) -> Any:
    result = await call(stub, tool, **arguments)
    assert result.WhichOneof("outcome") == "output", result.error.message
    return json.loads(result.output)


async def descriptors(stub: tool_pb2_grpc.ToolServiceStub) -> dict[str, tool_pb2.ToolDescriptor]:
    response = await stub.ListTools(tool_pb2.ListToolsRequest(), timeout=WAIT)
    return {tool.name: tool for tool in response.tools}


async def test_orders_offers_a_cacheable_read_only_order_lookup(
    orders_stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    tools = await descriptors(orders_stub)

    assert list(tools) == ["get_order_status"]
    tool = tools["get_order_status"]
    assert (tool.read_only, tool.idempotent, tool.cache_ttl.ToSeconds()) == (True, True, 30)
    assert json.loads(tool.input_schema)["required"] == ["order_id"]


async def test_orders_answers_with_deterministic_clearly_fake_data(
    orders_stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    first = await output(orders_stub, "get_order_status", order_id="20250101")
    again = await output(orders_stub, "get_order_status", order_id="20250101")

    assert first == again
    assert first["order_id"] == "20250101"
    assert first["placed"] == "2025-01-01"
    assert first["status"] in {"processing", "shipped", "in_transit", "delivered"}
    assert first["items"] and all(item["quantity"] >= 1 for item in first["items"])
    assert "fake" in first["source"]


async def test_logistics_tracks_the_parcel_of_an_order_with_the_orders_carrier(
    orders_stub: tool_pb2_grpc.ToolServiceStub,
    logistics_stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    tools = await descriptors(logistics_stub)
    order = await output(orders_stub, "get_order_status", order_id="20250101")

    parcel = await output(logistics_stub, "track_parcel", order_id="20250101")

    assert (tools["track_parcel"].read_only, tools["track_parcel"].idempotent) == (True, True)
    assert parcel["order_id"] == "20250101"
    assert parcel["carrier"] == order["carrier"]
    assert parcel["location"]
    assert parcel["eta"] > "2025-01-01"


async def test_shop_declares_reads_a_keyed_write_and_an_approved_destructive_refund(
    shop_stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    tools = await descriptors(shop_stub)

    assert list(tools) == [
        "check_inventory",
        "get_price",
        "get_discount",
        "reserve_stock",
        "refund_order",
    ]
    for name in ("check_inventory", "get_price", "get_discount"):
        assert (tools[name].read_only, tools[name].idempotent) == (True, True)
    reserve = tools["reserve_stock"]
    assert (reserve.read_only, reserve.idempotent) == (False, False)
    assert list(reserve.write_keys) == ["sku:{sku}"]
    assert list(tools["check_inventory"].read_keys) == ["sku:{sku}"]
    refund = tools["refund_order"]
    assert (refund.destructive, refund.requires_approval, refund.read_only) == (True, True, False)


async def test_shop_reservations_reduce_the_stock_that_check_inventory_reports(
    shop_stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    before = (await output(shop_stub, "check_inventory", sku="SKU-RED-MUG"))["available"]

    reservation = await output(shop_stub, "reserve_stock", sku="SKU-RED-MUG", quantity=2)

    after = (await output(shop_stub, "check_inventory", sku="SKU-RED-MUG"))["available"]
    assert reservation["remaining"] == before - 2
    assert after == before - 2


async def test_shop_refuses_to_reserve_more_than_is_in_stock(
    shop_stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    available = (await output(shop_stub, "check_inventory", sku="SKU-TEA-SET"))["available"]

    result = await call(shop_stub, "reserve_stock", sku="SKU-TEA-SET", quantity=available + 1)

    assert result.error.kind == tool_pb2.TOOL_ERROR_KIND_EXECUTION_FAILED
    assert result.error.message == (
        f"only {available} units of SKU-TEA-SET are in stock; reserve at most that"
    )


async def test_shop_prices_and_discounts_are_deterministic(
    shop_stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    price = await output(shop_stub, "get_price", sku="SKU-DESK-FAN")
    discount = await output(shop_stub, "get_discount", sku="SKU-DESK-FAN")

    assert price == await output(shop_stub, "get_price", sku="SKU-DESK-FAN")
    assert price["currency"] == "EUR" and price["price"] > 0
    assert 0 <= discount["percent"] <= 20


async def test_per_tool_latency_is_spent_inside_the_handler(
    shop_stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    priced = await call(shop_stub, "get_price", sku="SKU-RED-MUG")
    reserved = await call(shop_stub, "reserve_stock", sku="SKU-BLUE-LAMP", quantity=1)

    # Lower bounds only: a sleep lasts at least its duration, never reliably at most.
    assert priced.handler_duration.ToMilliseconds() >= LATENCY_MS
    assert reserved.handler_duration.ToMilliseconds() >= LATENCY_MS


async def test_a_refund_needs_a_positive_amount(shop_stub: tool_pb2_grpc.ToolServiceStub) -> None:
    refused = await call(shop_stub, "refund_order", order_id="20250101", amount=0, reason="broken")
    refund = await output(
        shop_stub, "refund_order", order_id="20250101", amount=12.5, reason="broken"
    )

    assert refused.error.kind == tool_pb2.TOOL_ERROR_KIND_INVALID_ARGUMENTS
    assert "- amount: Input should be greater than 0; got 0" in refused.error.message
    assert (refund["order_id"], refund["amount"]) == ("20250101", 12.5)


def test_the_console_script_rejects_an_unknown_example_naming_the_known_ones() -> None:
    with pytest.raises(SystemExit) as raised:
        cli.main(["nonesuch"])

    assert "orders, logistics, shop" in str(raised.value.code)


async def test_a_tool_stays_a_plain_function_callable_with_a_standalone_context() -> None:
    reservation = await shop_tools.reserve_stock(
        "SKU-LOCAL", 1, ToolContext("local-1", "reserve_stock")
    )

    assert (reservation.sku, reservation.reserved) == ("SKU-LOCAL", 1)
