"""The configuration: validation, its messages, and docs that cover every key."""

from __future__ import annotations

import types
import typing
from typing import Any

import pytest
from pydantic import BaseModel

from sidecar.config import (
    AuthConfig,
    CacheConfig,
    ModelConfig,
    PriceConfig,
    ProfileConfig,
    SecurityConfig,
    ServerConfig,
    SessionsConfig,
    TelemetryConfig,
    ToolServerConfig,
    parse_config,
)
from sidecar.errors import ConfigError
from sidecar.tools.connection import ToolServerConnection
from tests.support import ROOT


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


@pytest.mark.parametrize(
    ("config", "what"),
    [
        (
            {"tool_servers": [{"name": "a", "address": "x:1"}, {"name": "a", "address": "y:2"}]},
            "tool server",
        ),
        (
            {
                "auth": {
                    "principals": [{"name": "a", "token_env": "A"}, {"name": "a", "token_env": "B"}]
                }
            },
            "principal",
        ),
        (
            {
                "profiles": {
                    "p": {"variants": [{"name": "v", "weight": 1}, {"name": "v", "weight": 1}]}
                }
            },
            "variant",
        ),
    ],
)
def test_names_must_be_unique(config: dict[str, Any], what: str) -> None:
    with pytest.raises(ConfigError, match=f"{what} names must be unique; repeated: \\['(a|v)'\\]"):
        parse_config(config)


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


def _config_keys(model: type[BaseModel], prefix: str) -> list[str]:
    """Every key under ``model``: into sections (also optional ones, ``X | None``) and
    lists of sections (``principals[].name``)."""
    keys = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        if typing.get_origin(annotation) is list and inner:
            section = inner[0]
            suffix = "[]."
        elif len(inner) == 1 and typing.get_origin(annotation) in (typing.Union, types.UnionType):
            section, suffix = inner[0], "."
        else:
            section, suffix = annotation, "."
        if isinstance(section, type) and issubclass(section, BaseModel):
            keys += _config_keys(section, f"{prefix}{name}{suffix}")
        else:
            keys.append(prefix + name)
    return keys


def test_every_config_key_is_documented() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    keys = (
        _config_keys(ServerConfig, "server.")
        + _config_keys(ModelConfig, "model.")
        + _config_keys(ProfileConfig, "profiles.NAME.")
        + _config_keys(ToolServerConfig, "tool_servers[].")
        + _config_keys(TelemetryConfig, "telemetry.")
        + _config_keys(PriceConfig, "prices.MODEL.")
        + _config_keys(SessionsConfig, "sessions.")
        + _config_keys(CacheConfig, "cache.")
        + _config_keys(SecurityConfig, "security.")
        + _config_keys(AuthConfig, "auth.")
    )
    missing = [k for k in keys if f"`{k}`" not in doc]
    assert not missing


_UNUSABLE_ANSWER_SCHEMAS = {
    "not an object at the root": {"type": "array", "items": {"type": "string"}},
    "no type at the root": {"properties": {"a": {"type": "string"}}},
    "an unknown type": {"type": "object", "properties": {"a": {"type": "nope"}}},
    "a remote reference": {"type": "object", "$ref": "http://127.0.0.1:9/schema.json"},
    "a missing local reference": {"type": "object", "$ref": "#/definitions/missing"},
    "a pattern that is no regular expression": {
        "type": "object",
        "properties": {"a": {"type": "string", "pattern": "("}},
    },
    "required that is no list": {"type": "object", "required": 5},
}


@pytest.mark.parametrize("why", sorted(_UNUSABLE_ANSWER_SCHEMAS))
def test_an_answer_schema_that_cannot_check_answers_is_refused_naming_its_key(why: str) -> None:
    schema = _UNUSABLE_ANSWER_SCHEMAS[why]
    with pytest.raises(ConfigError) as info:
        parse_config({"profiles": {"reports": {"answer_schema": schema}}})
    assert "profiles.reports.answer_schema" in str(info.value)


def test_a_deeply_nested_answer_schema_is_refused_not_a_crash() -> None:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(3000):
        schema = {"type": "object", "properties": {"a": schema}}
    with pytest.raises(ConfigError) as info:
        parse_config({"profiles": {"deep": {"answer_schema": schema}}})
    assert "profiles.deep.answer_schema" in str(info.value)
