"""MCP's ``tools/list`` and ``tools/call`` over the agent: what the front serves.

A host sees the tools the front's profile allows and can call now (native and bridged
alike), with their facts as annotations (these the sidecar vouches for: they come from
its configuration, not from a server it does not trust). A call goes through the agent's
direct calls (:mod:`sidecar.agent.direct`): the profile, the schema, approval, the
breaker, the deadline (``mcp.call_timeout``), retries, identity and the audit record.

Approval is an elicitation: on the 2025 revisions a request of the server's own during
the call; on 2026-07-28 an input-required result before the call starts, which the host
answers by sending the call again (no state is kept between the two: the second request
carries the call and the answer). A running tool's question reaches the host the same way
on the 2025 revisions; on 2026-07-28, where a call cannot wait across requests without
state, it is declined. Progress reports go to a host that sent a progress token.

The caller is the principal of the request's credentials (:mod:`sidecar.mcp_server.guard`
checked them at the door; they are read again per request, as the gRPC front does).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

import mcp_types as types
import orjson
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError

from sidecar.agent.agent import Agent
from sidecar.agent.direct import CallerChannel
from sidecar.config import McpEndpointConfig
from sidecar.errors import Draining, PermissionDenied, ProfileNotFound
from sidecar.mcp_server.agent_tool import AGENT_TOOL, AgentTool
from sidecar.security.identity import Principal
from sidecar.tools.catalog import CatalogTool
from sidecar.types import Decision, ToolCallStatus, ToolQuestion

__all__ = ["build_server"]

log = logging.getLogger(__name__)

_APPROVAL = "approve"
"""The key of the approval question in an input-required result."""
_MODERN = "2026-07-28"
_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
_OK = frozenset({ToolCallStatus.OK, ToolCallStatus.CACHED})

PrincipalOf = Callable[[Any], Principal]
"""The principal of a request's context (raises Unauthenticated)."""


def _annotations(tool: CatalogTool) -> types.ToolAnnotations:
    return types.ToolAnnotations(
        read_only_hint=tool.read_only,
        destructive_hint=tool.destructive,
        idempotent_hint=tool.idempotent,
    )


def _elicits(ctx: Any) -> bool:
    """Whether the host says it answers elicitations on this request's revision."""
    if ctx.protocol_version == _MODERN:
        capabilities = (ctx.meta or {}).get(_CAPABILITIES)
        return isinstance(capabilities, Mapping) and "elicitation" in capabilities
    client = ctx.session.client_capabilities
    return client is not None and client.elicitation is not None


def _error(exc: Exception) -> MCPError:
    if isinstance(exc, Draining):
        return MCPError(types.INTERNAL_ERROR, str(exc), {"reason": "DRAINING"})
    if isinstance(exc, PermissionDenied):
        return MCPError(types.INVALID_REQUEST, str(exc), {"reason": "PERMISSION_DENIED"})
    return MCPError(types.INVALID_PARAMS, str(exc), {"reason": "PROFILE_NOT_FOUND"})


def _approval_question(tool: CatalogTool, arguments: str) -> types.ElicitRequestFormParams:
    what = "It may change or destroy data. " if tool.destructive else ""
    return types.ElicitRequestFormParams(
        message=f"Run {tool.name} with {arguments[:2000]}? {what}Accept to run it.",
        requested_schema={"type": "object", "properties": {}},
    )


def build_server(
    agent: Agent, config: McpEndpointConfig, principal_of: PrincipalOf, version: str
) -> Server[Any]:
    """The MCP server a front serves (over HTTP or stdio)."""
    profile = config.profile
    agent_tool = AgentTool(agent, profile) if config.agent_tool else None
    pending: set[asyncio.Task[None]] = set()

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> Any:
        principal = principal_of(ctx)
        try:
            offered = agent.direct.tools(principal, profile)
        except (PermissionDenied, ProfileNotFound) as exc:
            raise _error(exc) from None
        tools = [
            types.Tool(
                name=o.tool.name,
                description=o.definition.get("description") or None,
                input_schema=o.definition["parameters"],
                annotations=_annotations(o.tool),
            )
            for o in offered
        ]
        if agent_tool is not None:
            tools.append(AGENT_TOOL)
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        principal = principal_of(ctx)
        arguments = orjson.dumps(params.arguments or {}).decode()
        if agent_tool is not None and params.name == AGENT_TOOL.name:
            return await agent_tool.call(principal, params.arguments or {}, config.call_timeout)
        modern = ctx.protocol_version == _MODERN
        elicits = _elicits(ctx)
        approve = ask = None
        if modern:
            answered = (params.input_responses or {}).get(_APPROVAL)
            accepted = getattr(answered, "action", None) == "accept"
            required = _needs_approval(agent, params.name)
            if required is not None and answered is None:
                if not elicits:
                    return _denied(params.name, "the host cannot approve it (no elicitation)")
                request = types.ElicitRequest(params=_approval_question(required, arguments))
                return types.InputRequiredResult(input_requests={_APPROVAL: request})

            async def approve_modern(tool: CatalogTool, text: str) -> bool:
                return accepted

            approve = approve_modern
        elif elicits:

            async def approve_legacy(tool: CatalogTool, text: str) -> bool:
                question = _approval_question(tool, text)
                reply = await ctx.session.elicit_form(
                    question.message, question.requested_schema, ctx.request_id
                )
                return bool(reply.action == "accept")

            async def ask_legacy(question: ToolQuestion) -> Decision:
                reply = await ctx.session.elicit_form(
                    question.message, question.requested_schema, ctx.request_id
                )
                if reply.action != "accept":
                    return Decision(False, f"the host's answer: {reply.action}")
                return Decision(True, answer=dict(reply.content or {}))

            approve, ask = approve_legacy, ask_legacy
        progress = None
        meta = ctx.meta or {}
        if meta.get("progress_token", meta.get("progressToken")) is not None:

            def progress(done: float, total: float | None, message: str) -> None:
                task = asyncio.get_running_loop().create_task(
                    ctx.session.report_progress(done, total, message or None)
                )
                pending.add(task)
                task.add_done_callback(pending.discard)

        try:
            outcome = await agent.direct.call(
                principal,
                profile,
                params.name,
                arguments,
                timeout=config.call_timeout,
                channel=CallerChannel(approve=approve, ask=ask, progress=progress),
            )
        except (Draining, PermissionDenied, ProfileNotFound) as exc:
            raise _error(exc) from None
        if outcome.status is ToolCallStatus.UNKNOWN_TOOL:
            raise MCPError(types.INVALID_PARAMS, outcome.content)
        return types.CallToolResult(
            content=[types.TextContent(text=outcome.content)],
            is_error=outcome.status not in _OK,
        )

    return Server(
        "agent-sidecar",
        version=version,
        instructions=f"The tools of the agent-sidecar profile {profile!r}.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _needs_approval(agent: Agent, name: str) -> CatalogTool | None:
    """The tool, when it exists and its calls need approval."""
    tool = agent.direct.catalog_tool(name)
    return tool if tool is not None and tool.requires_approval else None


def _denied(name: str, why: str) -> types.CallToolResult:
    text = f"the call to {name} was denied: {why}"
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
