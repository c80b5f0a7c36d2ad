"""MCP's ``tools/list`` and ``tools/call`` over the agent: what the front serves.

A host sees the tools the front's profile allows and can call now (native and bridged
alike), with their facts as annotations (these the sidecar vouches for: they come from
its configuration, not from a server it does not trust). A call goes through the agent's
direct calls (:mod:`sidecar.agent.direct`): the profile, the schema, approval, the
breaker, the deadline (``mcp.call_timeout``), retries, identity and the audit record.

Approval is an elicitation: on the 2025 revisions a request of the server's own during
the call; on 2026-07-28 an input-required result before the call starts, which the host
answers by sending the call again. A bridged MCP server of 2026-07-28 that asks (its own
input-required result) is relayed the same way, its questions and state passed through:
the host's next round goes on to the server with the answers. The state the host echoes
is sealed (:class:`~mcp.server.request_state.RequestStateBoundary`: encrypted, bound to
the call, its arguments and the principal, expiring), carries the approval given, and is
taken once (an accepted approval sent again runs nothing again); an approval counts only
as the answer to the endpoint's own question.
A running tool's question reaches the host as a request of the server's own on the 2025
revisions, and as a task's question (:mod:`sidecar.mcp_server.tasks`) on 2026-07-28 for a
tool run as a task; otherwise it is declined. Progress reports go to a host that sent a
progress token.

The caller is the principal of the request's credentials (:mod:`sidecar.mcp_server.guard`
checked them at the door; they are read again per request, as the gRPC front does).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import orjson
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError

from sidecar.agent.agent import Agent
from sidecar.agent.direct import CallerChannel
from sidecar.config import McpEndpointConfig
from sidecar.errors import (
    Draining,
    PermissionDenied,
    ProfileNotFound,
    RequestError,
    StartupError,
)
from sidecar.mcp_server.agent_tool import AGENT_TOOL, AgentTool
from sidecar.mcp_server.changes import ToolListChanges
from sidecar.mcp_server.tasks import (
    EXTENSION,
    EndpointTask,
    TaskBoard,
    TaskLimit,
    missing_extension,
)
from sidecar.security.callers import CallerCheck
from sidecar.security.identity import Principal
from sidecar.tools.catalog import CatalogTool
from sidecar.tools.link import InputRelay
from sidecar.types import Decision, ToolCallStatus, ToolQuestion

__all__ = ["build_server", "state_key", "task_board"]

log = logging.getLogger(__name__)

_APPROVAL = "approve"
"""The key of the approval question in an input-required result."""
_MODERN = "2026-07-28"
_STATE_TTL = 600.0
"""Seconds a host has to answer a round, beyond ``mcp.call_timeout``."""
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


def _declared(ctx: Any) -> Mapping[str, Any]:
    """The capabilities a 2026-07-28 request declares (its ``_meta``)."""
    capabilities = (ctx.meta or {}).get(_CAPABILITIES)
    return capabilities if isinstance(capabilities, Mapping) else {}


def _elicits(ctx: Any) -> bool:
    """Whether the host says it answers elicitations on this request's revision."""
    if ctx.protocol_version == _MODERN:
        return "elicitation" in _declared(ctx)
    client = ctx.session.client_capabilities
    return client is not None and client.elicitation is not None


def _takes_tasks(ctx: Any) -> bool:
    """Whether the request declares MCP's tasks extension (2026-07-28 only)."""
    if ctx.protocol_version != _MODERN:
        return False
    extensions = _declared(ctx).get("extensions")
    return isinstance(extensions, Mapping) and EXTENSION in extensions


class _TaskParams(types.RequestParams):
    """The params of ``tasks/get``, ``tasks/update`` and ``tasks/cancel``."""

    task_id: str
    input_responses: dict[str, Any] | None = None


_INVALID_STATE = "Invalid or expired requestState"


@dataclass(frozen=True, slots=True)
class _Round:
    """What the endpoint's own ``requestState`` (already unsealed) says of the round
    before: the approval given, whether this endpoint asked for it, the server's state."""

    approved: bool = False
    asked_approval: bool = False
    inner: str | None = None


class _Rounds:
    """The rounds the endpoint opened (each ``requestState`` it sent names one) and no
    host has answered yet: a state is taken once, so an accepted approval sent again
    runs nothing again. Process-local: replicas sharing ``mcp.request_state_key_env``
    each take a state once."""

    def __init__(self, ttl: float, limit: int = 65_536) -> None:
        self._ttl = ttl
        self._limit = limit
        self._open: collections.OrderedDict[str, float] = collections.OrderedDict()

    def state(self, round_: _Round) -> str:
        """The ``requestState`` of a new round."""
        now = time.monotonic()
        while self._open and (
            next(iter(self._open.values())) <= now or len(self._open) >= self._limit
        ):
            self._open.popitem(last=False)  # expired (they expire in order), or too many
        nonce = secrets.token_urlsafe(16)
        self._open[nonce] = now + self._ttl
        state = {"a": round_.approved, "q": round_.asked_approval, "s": round_.inner, "n": nonce}
        return orjson.dumps(state).decode()

    def take(self, text: str | None) -> _Round:
        """The round ``text`` answers, taken; no state: a first round.

        Raises:
            MCPError: the state is not one this endpoint sent, or was answered already.
        """
        if not text:
            return _Round()
        try:
            state = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise MCPError(types.INVALID_PARAMS, _INVALID_STATE) from None
        if not isinstance(state, dict):
            raise MCPError(types.INVALID_PARAMS, _INVALID_STATE)
        nonce = state.get("n")
        expiry = self._open.pop(nonce, None) if isinstance(nonce, str) else None
        if expiry is None or expiry <= time.monotonic():
            raise MCPError(types.INVALID_PARAMS, _INVALID_STATE)
        inner = state.get("s")
        return _Round(
            approved=state.get("a") is True,
            asked_approval=state.get("q") is True,
            inner=inner if isinstance(inner, str) else None,
        )


def _elicitation(message: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """An ``elicitation/create`` request as a task's question carries it."""
    return {
        "method": "elicitation/create",
        "params": {"mode": "form", "message": message, "requestedSchema": dict(schema)},
    }


_MCP_CODES = {
    "UNAVAILABLE": types.INTERNAL_ERROR,
    "PERMISSION_DENIED": types.INVALID_REQUEST,
    "NOT_FOUND": types.INVALID_PARAMS,
}
"""The JSON-RPC error of each canonical code a call of the endpoint may meet."""


def _error(exc: RequestError) -> MCPError:
    code = _MCP_CODES.get(exc.code, types.INTERNAL_ERROR)
    return MCPError(code, str(exc), {"reason": exc.reason})


def _approval_question(tool: CatalogTool, arguments: str) -> types.ElicitRequestFormParams:
    what = "It may change or destroy data. " if tool.destructive else ""
    return types.ElicitRequestFormParams(
        message=f"Run {tool.name} with {arguments[:2000]}? {what}Accept to run it.",
        requested_schema={"type": "object", "properties": {}},
    )


class _Server(Server[Any]):
    """The SDK's server, declaring ``tools.listChanged`` to 2025 hosts (2026-07-28 hosts
    learn it from ``subscriptions/listen`` being served)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


def state_key(config: McpEndpointConfig) -> bytes | None:
    """The secret of ``mcp.request_state_key_env``; None when none is configured.

    Raises:
        StartupError: the variable is unset, or holds fewer than 32 bytes.
    """
    name = config.request_state_key_env
    if name is None:
        return None
    value = os.environ.get(name, "").encode()
    if len(value) < 32:
        raise StartupError(
            f"mcp.request_state_key_env: {name} must hold a secret of 32 bytes or more"
        )
    return value


def task_board(config: McpEndpointConfig) -> TaskBoard:
    """The tasks of an endpoint configured so."""
    tasks = config.tasks
    return TaskBoard(
        ttl=tasks.ttl,
        poll_interval=tasks.poll_interval,
        max_per_principal=tasks.max_per_principal,
        max_tasks=tasks.max_tasks,
    )


def build_server(
    agent: Agent,
    config: McpEndpointConfig,
    principal_of: PrincipalOf,
    version: str,
    *,
    state_key: bytes | None,
    tasks: TaskBoard,
    changes: ToolListChanges,
    ready: Callable[[], Awaitable[object]] | None = None,
) -> Server[Any]:
    """The MCP server a front serves (over HTTP or stdio).

    Args:
        state_key: The secret sealing ``requestState``; None: one made now.
        tasks: Where tasks the server starts live.
        changes: Where hosts are told the tool list changed.
        ready: Awaited before a list or a call is answered: the tools are known.
    """
    profile = config.profile
    callers = CallerCheck(None, agent.audit)  # the caller is named by then: refusals only
    task_tools = config.tasks.tools
    agent_tool = AgentTool(agent, profile) if config.agent_tool else None
    pending: set[asyncio.Task[None]] = set()
    rounds = _Rounds(ttl=_STATE_TTL + config.call_timeout)

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> Any:
        if ready is not None:
            await ready()  # never an empty list because discovery has not finished
        if ctx.protocol_version != _MODERN:
            request = getattr(ctx, "request", None)
            changes.listed(
                request.headers.get("mcp-session-id", "") if request is not None else "",
                ctx.session,
            )
        principal = principal_of(ctx)
        try:
            offered = agent.direct.tools(principal, profile)
        except (PermissionDenied, ProfileNotFound) as exc:
            callers.refused(principal, "tools/list", exc)
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

    async def run(
        principal: Principal, name: str, arguments: str, timeout: float, channel: CallerChannel
    ) -> types.CallToolResult:
        try:
            outcome = await agent.direct.call(
                principal, profile, name, arguments, timeout=timeout, channel=channel
            )
        except (Draining, PermissionDenied, ProfileNotFound) as exc:
            callers.refused(principal, "tools/call", exc)
            raise _error(exc) from None
        if outcome.status is ToolCallStatus.UNKNOWN_TOOL:
            raise MCPError(types.INVALID_PARAMS, outcome.content)
        return types.CallToolResult(
            content=[types.TextContent(text=outcome.content)],
            is_error=outcome.status not in _OK,
        )

    def progress_of(ctx: Any) -> Callable[[float, float | None, str], None] | None:
        meta = ctx.meta or {}
        if meta.get("progress_token", meta.get("progressToken")) is None:
            return None

        def progress(done: float, total: float | None, message: str) -> None:
            task = asyncio.get_running_loop().create_task(
                ctx.session.report_progress(done, total, message or None)
            )
            pending.add(task)
            task.add_done_callback(pending.discard)

        return progress

    def as_task(principal: Principal, name: str, arguments: str) -> dict[str, Any]:
        """Start the call as a task; its handle. Its questions are the task's."""

        async def work(task: EndpointTask) -> dict[str, Any]:
            async def approve(tool: CatalogTool, text: str) -> bool:
                question = _approval_question(tool, text)
                reply = await task.ask(_elicitation(question.message, question.requested_schema))
                return reply.get("action") == "accept"

            async def ask(question: ToolQuestion) -> Decision:
                reply = await task.ask(_elicitation(question.message, question.requested_schema))
                if reply.get("action") != "accept":
                    return Decision(False, f"the host's answer: {reply.get('action')}")
                content = reply.get("content")
                return Decision(True, answer=content if isinstance(content, dict) else {})

            channel = CallerChannel(approve=approve, ask=ask)
            result = await run(principal, name, arguments, config.tasks.timeout, channel)
            return result.model_dump(by_alias=True, mode="json", exclude_none=True)

        return tasks.start(principal.name, work)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        if ready is not None:
            await ready()
        principal = principal_of(ctx)
        arguments = orjson.dumps(params.arguments or {}).decode()
        if agent_tool is not None and params.name == AGENT_TOOL.name:
            return await agent_tool.call(principal, params.arguments or {}, config.call_timeout)
        modern = ctx.protocol_version == _MODERN
        support = task_tools.get(params.name)
        if support is not None and agent.direct.catalog_tool(params.name) is None:
            support = None  # no such tool (now): the call says so, at once
        if support is not None and modern and _takes_tasks(ctx):
            with contextlib.suppress(TaskLimit):
                return as_task(principal, params.name, arguments)
            if support == "required":
                raise MCPError(
                    types.INVALID_REQUEST,
                    "the caller holds as many tasks as it may",
                    {"reason": "RESOURCE_EXHAUSTED"},
                )
        elif support == "required" and modern:
            raise missing_extension()
        elicits = _elicits(ctx)
        approve = ask = None
        relay = None
        if modern:
            before = rounds.take(params.request_state)
            inner = before.inner
            responses = dict(params.input_responses or {})
            # An approval counts only as the answer to this endpoint's question.
            answered = responses.pop(_APPROVAL, None) if before.asked_approval else None
            approved = before.approved or getattr(answered, "action", None) == "accept"
            required = _needs_approval(agent, params.name)
            if required is not None and not approved and answered is None:
                if not elicits:
                    return _denied(params.name, "the host cannot approve it (no elicitation)")
                request = types.ElicitRequest(params=_approval_question(required, arguments))
                return types.InputRequiredResult(
                    input_requests={_APPROVAL: request},
                    request_state=rounds.state(_Round(asked_approval=True, inner=inner)),
                )

            async def approve_modern(tool: CatalogTool, text: str) -> bool:
                return approved

            approve = approve_modern
            relay = InputRelay(responses or None, inner)
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
        channel = CallerChannel(approve=approve, ask=ask, progress=progress_of(ctx), relay=relay)
        result = await run(principal, params.name, arguments, config.call_timeout, channel)
        if relay is not None and relay.required is not None:
            asked: types.InputRequiredResult = relay.required
            _check_declared(ctx, asked)
            return types.InputRequiredResult(
                input_requests=asked.input_requests,
                request_state=rounds.state(_Round(approved, inner=asked.request_state)),
            )
        return result

    def task_method(handle: Callable[[str, _TaskParams], Any]) -> Any:
        async def handler(ctx: Any, params: _TaskParams) -> Any:
            if not _takes_tasks(ctx):
                raise missing_extension()
            request = getattr(ctx, "request", None)
            if request is not None and request.headers.get("mcp-name") != params.task_id:
                # The extension routes on it: a balancer must never see one task, the
                # body another.
                raise MCPError(types.HEADER_MISMATCH, "the Mcp-Name header must be the taskId")
            return handle(principal_of(ctx).name, params) or {}

        return handler

    server: Server[Any] = _Server(
        "agent-sidecar",
        version=version,
        instructions=f"The tools of the agent-sidecar profile {profile!r}.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=changes.listen,
    )
    server.add_request_handler(
        "tasks/get", _TaskParams, task_method(lambda who, p: tasks.get(who, p.task_id))
    )
    server.add_request_handler(
        "tasks/update",
        _TaskParams,
        task_method(lambda who, p: tasks.update(who, p.task_id, p.input_responses or {})),
    )
    server.add_request_handler(
        "tasks/cancel", _TaskParams, task_method(lambda who, p: tasks.cancel(who, p.task_id))
    )
    if task_tools:
        server.extensions[EXTENSION] = {}
    security = RequestStateSecurity(
        keys=[state_key if state_key is not None else os.urandom(32)],
        ttl=config.call_timeout + _STATE_TTL,
        bind_principal=lambda ctx: principal_of(ctx).name,
    )
    server.middleware.append(RequestStateBoundary(security, default_audience="agent-sidecar"))
    return server


_NEEDS = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}


def _check_declared(ctx: Any, asked: types.InputRequiredResult) -> None:
    """A bridged server's questions go only to a host that declared it answers their kind.

    Raises:
        MCPError: ``-32021`` naming the capabilities the questions need.
    """
    declared = _declared(ctx)
    missing = {
        _NEEDS.get(request.method, request.method)
        for request in (asked.input_requests or {}).values()
        if _NEEDS.get(request.method, request.method) not in declared
    }
    if missing:
        raise MCPError(
            types.MISSING_REQUIRED_CLIENT_CAPABILITY,
            "Missing required client capability",
            {"requiredCapabilities": {need: {} for need in sorted(missing)}},
        )


def _needs_approval(agent: Agent, name: str) -> CatalogTool | None:
    """The tool, when it exists and its calls need approval."""
    tool = agent.direct.catalog_tool(name)
    return tool if tool is not None and tool.requires_approval else None


def _denied(name: str, why: str) -> types.CallToolResult:
    text = f"the call to {name} was denied: {why}"
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
