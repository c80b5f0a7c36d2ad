"""``agent-sidecar check --config FILE``: would this configuration start, and find its tools?

It checks what ``serve`` checks at start, without binding a port or starting anything: the
file validates; the exposure rules; every secret it names is set (the model's key, the
keys of model variants and tiers, principals' and tool servers' tokens, MCP servers'
secrets, the identity signing key); TLS files load. Then, unless ``--offline``, it asks
each tool server for its tools (within the server's discovery timeout, with the same TLS
and token as ``serve``), and each MCP server through the bridge (starting the process of
one that has a command), and looks up every name in the profiles' ``tools`` lists, the way
the sidecar resolves them (by name, or ``server.name``; the first server configured owns a
name).

It also reads each model endpoint's model list (``GET /models``, when a key is set or the
endpoint is keyless; unless ``--offline``) and refuses a model section naming a model the
endpoint does not serve, and warns about every model the retirement schedule
(``sidecar.catalog``) says is deprecated or shut down.

It prints one line per finding and exits 0 when the sidecar would start and every tool is
found, 1 when a tool server cannot be reached or a profile names a tool no server offers,
2 when the sidecar would refuse to start.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentsidecar.v1 import tool_pb2
from sidecar.agent.runtime import tool_server_token
from sidecar.config import (
    GROQ_BASE_URL,
    McpServerConfig,
    ModelConfig,
    SidecarConfig,
    model_sections,
    resolve_model,
)
from sidecar.errors import StartupError
from sidecar.llm.openai_model import OpenAICompatibleModel
from sidecar.llm.served import retirement_warnings, unserved
from sidecar.security.exposure import check_exposure
from sidecar.security.identity import Authenticator
from sidecar.security.tls import channel_credentials, server_credentials
from sidecar.security.tool_identity import ToolIdentity
from sidecar.tools.catalog import ToolCatalog
from sidecar.tools.connection import ToolServerConnection

__all__ = ["Findings", "check_config"]


@dataclass(slots=True)
class Findings:
    """What a check found."""

    refused: list[str] = field(default_factory=list)
    """Why the sidecar would not start (exit 2)."""
    problems: list[str] = field(default_factory=list)
    """What it would start with but not as meant: an unreachable tool server, a tool a
    profile names and no server offers (exit 1)."""
    warnings: list[str] = field(default_factory=list)
    """What it would say at start (an accepted exposure)."""

    @property
    def exit_code(self) -> int:
        return 2 if self.refused else 1 if self.problems else 0

    def lines(self) -> list[str]:
        return (
            [f"refused: {r}" for r in self.refused]
            + [f"problem: {p}" for p in self.problems]
            + [f"warning: {w}" for w in self.warnings]
        )


def _startable(
    config: SidecarConfig, environ: Mapping[str, str], api_key: str | None, found: Findings
) -> None:
    def refused(exc: StartupError) -> None:
        found.refused.append(exc.message)

    try:
        found.warnings += check_exposure(config)
    except StartupError as exc:
        refused(exc)
    model = config.model
    if model.base_url is not None and api_key is None and not model.keyless:
        found.refused.append(
            f"model.base_url is {model.base_url} but the environment variable "
            f"{model.api_key_env} is unset or empty (or set model.keyless: true)"
        )
    simulated = model.base_url is None and api_key is None  # the built-in simulator
    for name, profile in config.profiles.items():
        overrides = [profile.tools_model, profile.context.memory_model]
        overrides += [v.model for v in profile.variants]
        overrides += [v.tools_model for v in profile.variants]
        for override in overrides:
            if not override:
                continue
            resolved = resolve_model(model, override)
            own_key = resolved.api_key_env != model.api_key_env
            if resolved.keyless or not own_key or simulated:
                continue
            if not environ.get(resolved.api_key_env):
                found.refused.append(
                    f"profile {name}: a model names {resolved.api_key_env}, which is unset or empty"
                )
    for attempt in (
        lambda: Authenticator(config.auth, environ),
        lambda: ToolIdentity.from_config(config.auth.tool_assertion),
        lambda: config.server.tls is not None and server_credentials(config.server.tls),
    ):
        try:
            attempt()
        except StartupError as exc:
            refused(exc)
    for server in config.tool_servers:
        try:
            tool_server_token(server, environ)
            channel_credentials(f"tool server {server.name}", server.tls)
        except StartupError as exc:
            refused(exc)
    if config.mcp_servers:
        from sidecar.tools.mcp.transport import child_environment, http_client

        for mcp in config.mcp_servers:
            try:
                if mcp.command is not None:
                    child_environment(mcp, environ)
                else:
                    http_client(mcp, environ)  # secret headers and TLS files; not used
            except StartupError as exc:
                refused(exc)


async def _discover(config: SidecarConfig, environ: Mapping[str, str], found: Findings) -> None:
    catalog = ToolCatalog()
    catalog.set_server_order(
        [s.name for s in config.tool_servers] + [s.name for s in config.mcp_servers]
    )

    async def listed(server: str, response: tool_pb2.ListToolsResponse, *_: Any) -> None:
        catalog.update(server, response)

    async def ask(connection: ToolServerConnection) -> None:
        try:
            if not await connection.discover(connection.config.discovery_timeout):
                found.problems.append(
                    f"tool server {connection.name} ({connection.config.address}) did not "
                    f"list its tools: {connection.last_error}"
                )
        finally:
            await connection.close()

    connections = [
        ToolServerConnection(s, on_discovered=listed, token=tool_server_token(s, environ))
        for s in config.tool_servers
        if s.version_of is None  # a version serves its original's tools
    ]
    await asyncio.gather(
        *(ask(c) for c in connections),
        *(_ask_mcp(m, config, environ, listed, found) for m in config.mcp_servers),
    )
    for name, profile in config.profiles.items():
        for tool in catalog.unknown(profile.tools or []):
            found.problems.append(
                f"profile {name} names tool {tool!r}, which no tool server offers"
                + catalog.spelt_like(tool)
            )
        allowed = frozenset(profile.tools) if profile.tools is not None else None
        count = len(catalog.definitions(name, allowed, frozenset()))
        cap = config.model.max_tools_per_request
        if count > cap:
            found.refused.append(
                f"profile {name} allows {count} tools, more than one model request may "
                f"carry (model.max_tools_per_request: {cap}): list fewer in its tools"
            )


async def _ask_mcp(
    server: McpServerConfig,
    config: SidecarConfig,
    environ: Mapping[str, str],
    listed: Callable[..., Awaitable[None]],
    found: Findings,
) -> None:
    """List an MCP server's tools through the bridge (starting its process, if it has one)."""
    from sidecar.tools.mcp import McpServerConnection

    connection = McpServerConnection(server, on_discovered=listed, environ=environ)
    connection.start()
    try:
        async with asyncio.timeout(server.discovery_timeout):
            await connection.discovered.wait()
    except TimeoutError:
        found.problems.append(
            f"MCP server {server.name} ({connection.where}) did not list its tools: "
            f"{connection.last_error or 'no answer within discovery_timeout'}"
        )
    finally:
        await connection.close()


async def check_config(
    config: SidecarConfig,
    environ: Mapping[str, str],
    api_key: str | None,
    *,
    offline: bool = False,
) -> Findings:
    """Check ``config`` as ``serve`` would at start, then (unless ``offline``) its tools.

    Args:
        config: The validated configuration.
        environ: The environment variables it names for secrets.
        api_key: The model's API key, if set.
        offline: Skip asking the tool servers for their tools.
    """
    found = Findings()
    _startable(config, environ, api_key, found)
    named = [
        (where, resolve_model(config.model, override or {}))
        for where, override in model_sections(config)
    ]
    found.warnings += retirement_warnings(((w, m.model) for w, m in named), dt.date.today())
    if not offline and not found.refused:
        await _ask_models(config, named, environ, api_key, found)
        await _discover(config, environ, found)
    return found


async def _ask_models(
    config: SidecarConfig,
    named: list[tuple[str, ModelConfig]],
    environ: Mapping[str, str],
    api_key: str | None,
    found: Findings,
) -> None:
    """Ask each model endpoint with a key (or keyless) for its model list, as ``serve``
    does at start: a model it does not serve is a refusal."""
    by_endpoint: dict[tuple[str, str | None], list[tuple[str, str]]] = {}
    for where, model in named:
        key = (
            None
            if model.keyless
            else environ.get(model.api_key_env)
            or (api_key if model.api_key_env == config.model.api_key_env else None)
        )
        base = model.base_url or (GROQ_BASE_URL if key else None)
        if base is None or (key is None and not model.keyless):
            continue  # the built-in simulator, or no key to ask with
        by_endpoint.setdefault((base, key), []).append((where, model.model))
    for (base, key), pairs in by_endpoint.items():
        client = OpenAICompatibleModel(
            base_url=base,
            api_key=key,
            model=pairs[0][1],
            retry=config.model.retry,
            timeout=config.model.timeout,
            transport=config.model.transport,
            ca_file=config.model.ca_file,
            cert_file=config.model.cert_file,
            key_file=config.model.key_file,
            pacing=False,
        )
        try:
            served = await client.served(min(config.model.timeout, 10.0))
        finally:
            await client.close()
        if served.ids is None:
            found.warnings.append(
                f"the model endpoint {base} gave no model list ({served.why}): "
                "its model names are not checked"
            )
        else:
            found.refused += unserved(pairs, served.ids)
