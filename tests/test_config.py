"""The configuration: validation, its messages, and docs that cover every key."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from sidecar.config import (
    A2AConfig,
    AuthConfig,
    BackgroundConfig,
    CacheConfig,
    McpEndpointConfig,
    McpServerConfig,
    McpToolConfig,
    ModelConfig,
    PriceConfig,
    ProfileConfig,
    RecordingConfig,
    ReplayConfig,
    SecurityConfig,
    ServerConfig,
    SessionsConfig,
    SidecarConfig,
    TelemetryConfig,
    ToolServerConfig,
    load_config,
    parse_config,
)
from sidecar.errors import ConfigError, StartupError
from sidecar.mcp_server.handlers import state_key
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
    assert "tool_servers[0].timeout" in message
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
        + _config_keys(McpServerConfig, "mcp_servers[].")
        + _config_keys(McpToolConfig, "mcp_servers[].tools.NAME.")
        + _config_keys(McpEndpointConfig, "mcp.")
        + _config_keys(TelemetryConfig, "telemetry.")
        + _config_keys(PriceConfig, "prices.MODEL.")
        + _config_keys(SessionsConfig, "sessions.")
        + _config_keys(CacheConfig, "cache.")
        + _config_keys(SecurityConfig, "security.")
        + _config_keys(AuthConfig, "auth.")
        + _config_keys(BackgroundConfig, "background.")
        + _config_keys(RecordingConfig, "recording.")
        + _config_keys(ReplayConfig, "replay.")
        + _config_keys(A2AConfig, "a2a.")
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


# -- ${VAR} in the file ----------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sidecar.yaml"
    path.write_text(text)
    return path


def test_variables_in_string_values_are_replaced_from_the_environment(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "model:\n"
        "  base_url: https://${MODEL_HOST}/openai/v1\n"
        "  model: ${MODEL_NAME:-openai/gpt-oss-120b}\n"
        "  timeout: ${MODEL_TIMEOUT}\n"
        "profiles:\n"
        "  default:\n"
        "    system_prompt: 'Prices are in $${CURRENCY}; you help ${TEAM:-everyone}.'\n",
    )
    environ = {"MODEL_HOST": "llm.internal:8443", "MODEL_TIMEOUT": "12.5", "TEAM": ""}
    config = load_config(path, environ)
    assert config.model.base_url == "https://llm.internal:8443/openai/v1"
    assert config.model.model == "openai/gpt-oss-120b"  # unset: the default
    assert config.model.timeout == 12.5  # a whole value converts as it would from the file
    prompt = config.profiles["default"].system_prompt
    assert prompt == "Prices are in ${CURRENCY}; you help everyone."  # empty: the default


def test_an_unset_variable_stops_the_configuration_naming_it_and_its_key(tmp_path: Path) -> None:
    path = write(tmp_path, "model:\n  base_url: https://${MODEL_HOST}/v1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    message = str(info.value)
    assert f"{path}: model.base_url: the environment variable MODEL_HOST is not set" in message
    assert "${MODEL_HOST:-DEFAULT}" in message
    # Without an environment, no variable is set.
    with pytest.raises(ConfigError, match="MODEL_HOST is not set"):
        load_config(path)
    # Set but empty is a value: the empty string.
    empty = write(tmp_path, "model: {model: '${EMPTY}'}\n")
    assert load_config(empty, {"EMPTY": ""}).model.model == ""


def test_a_malformed_reference_is_an_error_that_says_how_to_write_one(tmp_path: Path) -> None:
    for text in ("x ${", "${}", "${1ST}", "${A B}", "${A:default}"):
        path = write(tmp_path, f"profiles: {{default: {{system_prompt: '{text}'}}}}\n")
        with pytest.raises(ConfigError) as info:
            load_config(path, {"A": "a"})
        assert "profiles.default.system_prompt" in str(info.value), text
        assert "is no variable reference" in str(info.value) and "$${" in str(info.value)


def test_keys_are_never_expanded_and_a_value_never_adds_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "prices:\n  ${MODEL}: {prompt: 1, completion: 2}\n")
    assert "${MODEL}" in load_config(path, {"MODEL": "m"}).prices
    injected = "x\nserver: {port: 1}"
    path = write(tmp_path, "profiles: {default: {system_prompt: '${PROMPT}'}}\n")
    config = load_config(path, {"PROMPT": injected})
    assert config.profiles["default"].system_prompt == injected
    assert config.server.port == 50051


def test_an_invalid_expanded_value_is_reported_without_the_variables_value(tmp_path: Path) -> None:
    secret = "s3cr3t-value-from-the-environment"
    path = write(
        tmp_path,
        "tool_servers:\n"
        "  - {name: a, address: 'x:1'}\n"
        "  - {name: '${TOOL_NAME}', address: 'y:1'}\n"
        "  - {name: '${TOOL_NAME}', address: 'z:1'}\n"
        "security: {redact: ['${PATTERN}']}\n",
    )
    with pytest.raises(ConfigError) as info:
        load_config(path, {"TOOL_NAME": secret, "PATTERN": f"({secret}"})
    message = str(info.value)
    assert secret not in message, message
    assert "${TOOL_NAME}" in message or "${PATTERN}" in message, message


_BAD_MCP_SERVERS = {
    "neither command nor url": ({"name": "m"}, "set command (stdio) or url"),
    "both command and url": (
        {"name": "m", "command": "x", "url": "https://h/mcp"},
        "set command (stdio) or url",
    ),
    "headers with a command": (
        {"name": "m", "command": "x", "headers": {"A": "b"}},
        "go with url",
    ),
    "args with a url": ({"name": "m", "url": "https://h/mcp", "args": ["a"]}, "go with command"),
    "a url that is no http": ({"name": "m", "url": "ftp://h/mcp"}, "http or https URL"),
    "credentials in the url": (
        {"name": "m", "url": "https://u:secret@h/mcp"},
        "must not carry credentials",
    ),
    "tls to plain http": (
        {"name": "m", "url": "http://h/mcp", "tls": {"ca_file": "ca.pem"}},
        "tls needs an https url",
    ),
    "a header name with a space": (
        {"name": "m", "url": "https://h/mcp", "headers": {"Bad Header": "x"}},
        "is not an HTTP header name",
    ),
    "a secret from no variable name": (
        {"name": "m", "command": "x", "env_from": {"TOKEN": "not a name"}},
        "is not an environment variable name",
    ),
}


@pytest.mark.parametrize("why", sorted(_BAD_MCP_SERVERS))
def test_an_unusable_mcp_server_entry_is_refused_naming_the_problem(why: str) -> None:
    entry, message = _BAD_MCP_SERVERS[why]
    with pytest.raises(ConfigError) as refused:
        parse_config({"mcp_servers": [entry]})
    assert message in str(refused.value)
    if why == "credentials in the url":
        assert "secret" not in str(refused.value)  # the refusal never echoes the password


def test_mcp_server_names_share_the_tool_servers_namespace_and_the_endpoint_needs_its_profile() -> (
    None
):
    with pytest.raises(ConfigError, match="tool server and MCP server names must be unique"):
        parse_config(
            {
                "tool_servers": [{"name": "a", "address": "127.0.0.1:1"}],
                "mcp_servers": [{"name": "a", "command": "x"}],
            }
        )
    with pytest.raises(ConfigError, match=r"mcp\.profile 'nope' names no profile"):
        parse_config({"mcp": {"port": 0, "profile": "nope"}})
    assert parse_config({"mcp": {"profile": "nope"}}).mcp.port is None  # no endpoint: unused


_SHADOW = {"name": "shadow", "weight": 1, "shadow": 0.5}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"profiles": {"p": {"record": 0.1}}}, "profiles.p.record needs recording.path"),
        (
            {"profiles": {"p": {"variants": [{"name": "a", "weight": 1}, _SHADOW]}}},
            "profiles.p.variants[1].shadow needs recording.path",
        ),
        (
            {"profiles": {"p": {"variants": [_SHADOW, {"name": "a", "weight": 1}]}}},
            "the first variant is the stable one and cannot be a shadow",
        ),
        (
            {
                "recording": {"path": "r"},
                "profiles": {"p": {"variants": [{"name": "a", "weight": 0}, _SHADOW]}},
            },
            "at least one variant that is not a shadow needs a weight above 0",
        ),
        ({"replay": {"answers": "judge"}}, "replay.answers: judge needs replay.judge"),
        ({"replay": {"judge": {"temperature": 9}}}, "replay.judge: temperature"),
    ],
)
def test_recording_shadows_and_judges_are_refused_without_what_they_need(
    config: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(config)


def test_mcp_tasks_are_kept_while_they_may_run_and_the_state_key_must_be_a_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ConfigError) as short_ttl:
        parse_config({"mcp": {"tasks": {"timeout": 100, "ttl": 10}}})
    with pytest.raises(ConfigError) as support:
        parse_config({"mcp": {"tasks": {"tools": {"slow": "sometimes"}}}})
    assert "mcp.tasks" in str(short_ttl.value) and "mcp.tasks.tools" in str(support.value)
    config = parse_config({"mcp": {"request_state_key_env": "SIDECAR_TEST_STATE_KEY"}}).mcp
    assert state_key(parse_config({}).mcp) is None  # none configured: one made at start
    monkeypatch.delenv("SIDECAR_TEST_STATE_KEY", raising=False)
    with pytest.raises(StartupError, match="SIDECAR_TEST_STATE_KEY"):
        state_key(config)
    monkeypatch.setenv("SIDECAR_TEST_STATE_KEY", "too short")
    with pytest.raises(StartupError, match="32 bytes"):
        state_key(config)
    monkeypatch.setenv("SIDECAR_TEST_STATE_KEY", "k" * 40)
    assert state_key(config) == b"k" * 40


def test_the_mcp_request_state_key_is_a_secret_to_redact() -> None:
    from sidecar.config import secret_environment

    config = parse_config({"mcp": {"request_state_key_env": "SIDECAR_TEST_STATE_KEY"}})
    secrets = secret_environment(config, {"SIDECAR_TEST_STATE_KEY": "k" * 40, "OTHER": "x"})
    assert secrets == {"SIDECAR_TEST_STATE_KEY": "k" * 40}


@pytest.mark.parametrize(
    "host",
    [
        "::1",
        "[::1]",
        "::ffff:127.0.0.1",
        "fe80::1%lo",
        "2001:db8::8",
        "10.0.0.1",
        "*.hooks.example",
    ],
)
def test_callback_hosts_take_names_and_every_form_of_an_ip_address(host: str) -> None:
    config = parse_config({"background": {"callbacks": {"allowed_hosts": [host]}}})
    assert config.background.callbacks.allowed_hosts == [host]


@pytest.mark.parametrize("host", ["-bad", "a b", "[::1", "::1]", "*.", "fe80::1%"])
def test_a_callback_host_that_is_neither_name_nor_address_is_refused(host: str) -> None:
    with pytest.raises(ConfigError, match="allowed_hosts"):
        parse_config({"background": {"callbacks": {"allowed_hosts": [host]}}})


_SKILLS = [{"profile": "default", "id": "a", "name": "A", "description": "d"}]


@pytest.mark.parametrize(
    ("sections", "named"),
    [
        ({"server": {"port": 8765}, "mcp": {"port": 8765}}, "mcp.port and server.port"),
        (
            {"mcp": {"port": 9000}, "a2a": {"skills": _SKILLS, "http": {"port": 9000}}},
            "a2a.http.port and mcp.port",
        ),
        (
            {
                "a2a": {"skills": _SKILLS, "http": {"port": 9464}},
                "telemetry": {"metrics": {"enabled": True}},
            },
            "telemetry.metrics.port and a2a.http.port",
        ),
        ({"server": {"port": 7000, "health_port": 7000}}, "server.health_port and server.port"),
    ],
)
def test_two_listeners_on_one_port_are_refused_naming_both(
    sections: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        parse_config(sections)


def test_listeners_on_ports_picked_at_start_never_collide() -> None:
    config = parse_config(
        {
            "server": {"port": 0, "health_port": 0},
            "mcp": {"port": 0},
            "a2a": {"skills": _SKILLS, "http": {"port": 0}},
        }
    )
    assert config.mcp.port == 0


def _misspelt(name: str) -> str:
    """``name`` with two letters in its middle swapped (or doubled, when they are equal)."""
    i = len(name) // 2
    swapped = name[: i - 1] + name[i] + name[i - 1] + name[i + 1 :]
    return swapped if swapped != name else name[:i] + name[i] + name[i:]


def test_a_misspelt_key_anywhere_is_named_where_the_docs_write_it_with_the_key_it_meant() -> None:
    # Every key of every section, lists of sections included, misspelt in place.
    every = _config_keys(SidecarConfig, "")
    keys = [k for k in every if len(k.rpartition(".")[2]) >= 4]
    suggested_itself = 0
    for key in keys:
        *sections, leaf = key.split(".")
        wrong = _misspelt(leaf)
        doc: dict[str, Any] = {}
        node = doc
        for section in sections:
            if section.endswith("[]"):
                item: dict[str, Any] = {}
                node[section[:-2]] = [item]
                node = item
            else:
                node = node.setdefault(section, {})
        node[wrong] = 1
        with pytest.raises(ConfigError) as info:
            parse_config(doc)
        where = "".join(f"{s}." for s in sections).replace("[]", "[0]")
        line = next(
            (ln.strip() for ln in str(info.value).splitlines() if f"{wrong}: unknown key" in ln),
            None,
        )
        assert line is not None and line.startswith(f"{where}{wrong}: unknown key"), (
            key,
            info.value,
        )
        meant = re.search(r"did you mean '([^']+)'\?", line)
        assert meant is not None, line
        parent = key.rpartition(".")[0]
        below = [k[len(parent) + 1 :] if parent else k for k in every if k.startswith(parent)]
        siblings = {k.split(".")[0].removesuffix("[]") for k in below}
        assert meant[1] in siblings, line
        suggested_itself += meant[1] == leaf
    assert suggested_itself >= 0.95 * len(keys), (suggested_itself, len(keys))


def test_sections_by_name_and_nested_lists_get_the_same_suggestions() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            {
                "profiles": {"p": {"max_stpes": 1, "variants": [{"name": "v", "wieght": 1}]}},
                "prices": {"m": {"promt": 1, "per_token": 1}},
                "mcp_servers": [
                    {"name": "m", "command": ["x"], "tools": {"t": {"requires_aproval": 1}}}
                ],
            }
        )
    message = str(info.value)
    for line in (
        "profiles.p.max_stpes: unknown key; did you mean 'max_steps'?",
        "profiles.p.variants[0].wieght: unknown key; did you mean 'weight'?",
        "mcp_servers[0].tools.t.requires_aproval: unknown key; did you mean 'requires_approval'?",
        "prices.m.promt: unknown key; did you mean 'prompt'?",
        "prices.m.per_token: unknown key (its section takes cached_prompt, completion, prompt)",
    ):
        assert line in message, message
