"""The sidecar's parts that need no process: config, catalog, enum parity."""

from __future__ import annotations

import asyncio
import enum
import logging
from pathlib import Path

import orjson
import pytest
from pydantic import BaseModel

from agentsidecar.v1 import agent_pb2, tool_pb2
from sidecar.budget import BudgetPolicy, BudgetStage
from sidecar.config import (
    CacheConfig,
    ConfigError,
    ModelConfig,
    PriceConfig,
    ProfileConfig,
    ServerConfig,
    SessionsConfig,
    TelemetryConfig,
    ToolServerConfig,
    parse_config,
)
from sidecar.run import StageKind, StopReason, ToolAvailability, ToolCallStatus
from sidecar.tools.breaker import BreakerState
from sidecar.tools.catalog import ArgumentsInvalid, ToolCatalog
from sidecar.tools.connection import ToolServerConnection


@pytest.mark.parametrize(
    ("plain", "proto", "prefix"),
    [
        (StopReason, agent_pb2.StopReason, "STOP_REASON_"),
        (ToolCallStatus, agent_pb2.ToolCallStatus, "TOOL_CALL_STATUS_"),
        (StageKind, agent_pb2.StageKind, "STAGE_KIND_"),
        (ToolAvailability, agent_pb2.ToolAvailability, "TOOL_AVAILABILITY_"),
        (BudgetStage, agent_pb2.BudgetStage, "BUDGET_STAGE_"),
        (BudgetPolicy, agent_pb2.BudgetPolicy, "BUDGET_POLICY_"),
    ],
)
def test_plain_enums_mirror_the_proto_enums_value_for_value(
    plain: type[enum.IntEnum], proto: object, prefix: str
) -> None:
    names = {
        name.removeprefix(prefix): number
        for name, number in proto.items()  # type: ignore[attr-defined]
        if not name.endswith("_UNSPECIFIED")
    }
    assert {m.name: m.value for m in plain} == names


def test_the_default_config_is_valid_and_has_a_default_profile() -> None:
    config = parse_config({})
    assert "default" in config.profiles
    assert config.model.base_url is None  # Groq with a key, the simulator without


def test_config_errors_name_every_offending_key() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            {
                "tool_servers": [{"name": "a", "address": "x:1", "timeout": -1}],
                "profiles": {"p": {"max_steps": 0}},
                "modle": {},
            }
        )
    message = str(info.value)
    assert "tool_servers.0.timeout" in message
    assert "profiles.p.max_steps" in message
    assert "modle" in message


def test_tool_server_names_must_be_unique() -> None:
    with pytest.raises(ConfigError, match="repeated"):
        parse_config(
            {"tool_servers": [{"name": "a", "address": "x:1"}, {"name": "a", "address": "y:2"}]}
        )


async def test_a_breaker_window_must_hold_its_failure_threshold() -> None:
    server = {"name": "a", "address": "x:1"}
    breaker = {"failure_threshold": 5, "failure_rate": 0.5, "window": 4}
    with pytest.raises(ConfigError, match="window must be at least failure_threshold"):
        parse_config({"tool_servers": [{**server, "breaker": breaker}]})
    with pytest.raises(ConfigError, match="failure_rate"):
        parse_config({"tool_servers": [{**server, "breaker": {"failure_rate": 2}}]})
    ok = parse_config({"tool_servers": [{**server, "breaker": {**breaker, "window": 20}}]})
    connection = ToolServerConnection(ok.tool_servers[0], on_discovered=lambda *_: None)
    assert (connection.breaker.policy.failure_rate, connection.breaker.policy.window) == (0.5, 20)
    await connection.channel.close()


async def test_a_breaker_that_opens_or_closes_is_logged_and_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    breaker = {"failure_threshold": 3, "reset_timeout": 0.001}
    config = parse_config({"tool_servers": [{"name": "a", "address": "x:1", "breaker": breaker}]})
    changes: list[tuple[str, BreakerState, BreakerState]] = []
    connection = ToolServerConnection(
        config.tool_servers[0],
        on_discovered=lambda *_: None,
        on_breaker_change=lambda *change: changes.append(change),
    )
    caplog.set_level(logging.INFO, logger="sidecar.tools.connection")
    for _ in range(3):
        connection.breaker.record_failure(connection.breaker.admit())
    await asyncio.sleep(0.01)
    connection.breaker.record_failure(connection.breaker.admit())  # a failed trial
    await asyncio.sleep(0.01)
    connection.breaker.record_success(connection.breaker.admit())  # the next trial
    await connection.channel.close()
    assert [(old, new) for _, old, new in changes] == [
        (BreakerState.CLOSED, BreakerState.OPEN),
        (BreakerState.OPEN, BreakerState.HALF_OPEN),
        (BreakerState.HALF_OPEN, BreakerState.OPEN),
        (BreakerState.OPEN, BreakerState.HALF_OPEN),
        (BreakerState.HALF_OPEN, BreakerState.CLOSED),
    ]
    opened = [r for r in caplog.records if r.levelno == logging.WARNING]
    hidden = "its tools are hidden from the model for 0.001 s"
    assert [r.getMessage() for r in opened] == [
        f"tool server a: circuit breaker open (3 consecutive failures); {hidden}",
        f"tool server a: circuit breaker open (its trial call failed); {hidden}",
    ]
    assert "tool server a: circuit breaker closed" in caplog.messages


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


def _config_keys(model: type[BaseModel], prefix: str) -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += _config_keys(annotation, f"{prefix}{name}.")
        else:
            keys.append(prefix + name)
    return keys


def test_every_config_key_is_documented() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    keys = (
        _config_keys(ServerConfig, "server.")
        + _config_keys(ModelConfig, "model.")
        + _config_keys(ProfileConfig, "profiles.NAME.")
        + _config_keys(ToolServerConfig, "tool_servers[].")
        + _config_keys(TelemetryConfig, "telemetry.")
        + _config_keys(PriceConfig, "prices.MODEL.")
        + _config_keys(SessionsConfig, "sessions.")
        + _config_keys(CacheConfig, "cache.")
    )
    missing = [k for k in keys if f"`{k}`" not in doc]
    assert not missing


def test_a_tool_with_an_unusable_schema_is_left_out_and_the_rest_stay() -> None:
    catalog = ToolCatalog()
    broken = tool_pb2.ToolDescriptor(
        name="broken", input_schema='{"type": "object", "properties": 5}'
    )
    not_json = tool_pb2.ToolDescriptor(name="not_json", input_schema="{")
    catalog.update("shop", _listing(broken, not_json, _tool("price")))
    assert [t.name for t in catalog.tools()] == ["price"]
