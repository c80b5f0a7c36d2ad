"""The tool catalog: names, cached tool lists, argument validation, resource keys."""

from __future__ import annotations

import orjson
import pytest

from agentsidecar.v1 import tool_pb2
from sidecar.errors import ArgumentsInvalid
from sidecar.tools.catalog import ToolCatalog


def _listing(*tools: tool_pb2.ToolDescriptor, version: str = "v1") -> tool_pb2.ListToolsResponse:
    return tool_pb2.ListToolsResponse(tools=tools, tool_set_version=version)


def _tool(name: str, **facts: object) -> tool_pb2.ToolDescriptor:
    schema = {
        "type": "object",
        "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer"}},
        "required": ["sku"],
    }
    return tool_pb2.ToolDescriptor(
        name=name, description=name, input_schema=orjson.dumps(schema).decode(), **facts
    )


def test_names_that_collide_across_servers_are_namespaced_by_server() -> None:
    catalog = ToolCatalog()
    catalog.set_server_order(["shop", "warehouse"])
    catalog.update("warehouse", _listing(_tool("check_stock"), _tool("move")))
    catalog.update("shop", _listing(_tool("check_stock"), _tool("price")))
    assert [t.name for t in catalog.tools()] == [
        "shop__check_stock",
        "price",
        "warehouse__check_stock",
        "move",
    ]
    assert catalog.get("shop__check_stock").remote_name == "check_stock"  # type: ignore[union-attr]


def test_the_models_tool_list_is_the_same_object_until_the_catalog_changes() -> None:
    catalog = ToolCatalog()
    catalog.update("shop", _listing(_tool("price")))
    first = catalog.definitions("default", None, frozenset())
    assert catalog.definitions("default", None, frozenset()) is first
    assert not catalog.update("shop", _listing(_tool("price")))  # same version: no change
    assert catalog.definitions("default", None, frozenset()) is first
    assert catalog.update("shop", _listing(_tool("price"), _tool("tax"), version="v2"))
    assert len(catalog.definitions("default", None, frozenset())) == 2
    assert catalog.definitions("default", None, frozenset({"shop"})) == []


def test_a_change_on_one_server_rebuilds_none_of_another_servers_tools() -> None:
    catalog = ToolCatalog()
    catalog.update("shop", _listing(_tool("price", cache_ttl={"seconds": 30}, version="3")))
    price = catalog.get("price")
    assert price is not None and price.cache_ttl == 30 and price.version == "3"
    catalog.update("warehouse", _listing(_tool("move")))
    catalog.update("warehouse", _listing(_tool("move"), _tool("count"), version="v2"))
    assert catalog.get("price") is price  # same object: schema not recompiled
    catalog.update("shop", _listing(_tool("price"), version="v2"))
    assert catalog.get("price") is not price


def test_invalid_arguments_are_explained_for_the_model() -> None:
    catalog = ToolCatalog()
    catalog.update("shop", _listing(_tool("reserve")))
    tool = catalog.get("reserve")
    assert tool is not None
    assert tool.parse_arguments('{"sku": "X-1", "quantity": 2}') == {"sku": "X-1", "quantity": 2}
    with pytest.raises(ArgumentsInvalid, match="quantity"):
        tool.parse_arguments('{"sku": "X-1", "quantity": "two"}')
    with pytest.raises(ArgumentsInvalid, match="sku"):
        tool.parse_arguments("{}")
    with pytest.raises(ArgumentsInvalid, match="not valid JSON"):
        tool.parse_arguments('{"sku": ')
    with pytest.raises(ArgumentsInvalid, match="JSON object"):
        tool.parse_arguments("[1]")


def test_resource_key_templates_are_filled_from_the_arguments() -> None:
    catalog = ToolCatalog()
    catalog.update("shop", _listing(_tool("reserve", write_keys=["sku:{sku}", "ledger"])))
    tool = catalog.get("reserve")
    assert tool is not None
    reads, writes = tool.resource_keys({"sku": "X-1"})
    assert reads == frozenset() and writes == {"sku:X-1", "ledger"}


def test_integers_beyond_double_precision_survive_validation_untouched() -> None:
    catalog = ToolCatalog()
    catalog.update("shop", _listing(_tool("reserve")))
    tool = catalog.get("reserve")
    assert tool is not None
    big = 2**63 - 1
    assert tool.parse_arguments(f'{{"sku": "a", "quantity": {big}}}')["quantity"] == big


def test_a_tool_with_an_unusable_schema_is_left_out_and_the_rest_stay() -> None:
    catalog = ToolCatalog()
    broken = tool_pb2.ToolDescriptor(
        name="broken", input_schema='{"type": "object", "properties": 5}'
    )
    not_json = tool_pb2.ToolDescriptor(name="not_json", input_schema="{")
    catalog.update("shop", _listing(broken, not_json, _tool("price")))
    assert [t.name for t in catalog.tools()] == ["price"]
