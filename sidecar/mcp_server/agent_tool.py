"""The ``agent`` tool (``mcp.agent_tool``): one turn of the front's profile for a host that
delegates a whole task to the sidecar's loop.

Off by default: it spends model tokens on the host's behalf and nests one agent loop in
another, so cost and latency compound, and a host usually plans with its own model. On, a
host hands the profile a task and gets its answer, with the profile's tools, budgets,
limits and audit record; ``session_id`` continues a conversation (each principal's own).
The turn runs as a unary run does: calls that need approval are denied.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from sidecar.agent.agent import Agent
from sidecar.errors import RequestError
from sidecar.security.identity import Principal

__all__ = ["AGENT_TOOL", "AgentTool"]

AGENT_TOOL = types.Tool(
    name="agent",
    description=(
        "Hand a task to the agent: it runs one turn (its own model calls and tools) and "
        "answers. Pass the session_id of an earlier answer to continue that conversation."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "input": {"type": "string", "description": "The task or question."},
            "session_id": {"type": "string", "description": "A conversation to continue."},
        },
        "required": ["input"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {
            "answer": {"type": "string"},
            "session_id": {"type": "string"},
            "stop_reason": {"type": "string"},
            "unavailable_tools": {
                "type": "array",
                "description": "Tools the profile names that the run could not offer the model",
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "availability": {"type": "string"}},
                    "required": ["name", "availability"],
                },
            },
        },
        "required": ["answer", "session_id", "stop_reason"],
    },
    annotations=types.ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True
    ),
)


class AgentTool:
    """Runs the ``agent`` tool's turns on the front's profile."""

    def __init__(self, agent: Agent, profile: str) -> None:
        self._agent = agent
        self._profile = profile

    async def call(
        self, principal: Principal, arguments: dict[str, Any], timeout: float
    ) -> types.CallToolResult:
        text, session_id = arguments.get("input"), arguments.get("session_id")
        if not isinstance(text, str) or not isinstance(session_id, str | None):
            return _failed("input must be a string, and session_id a string when given")
        agent = self._agent
        try:
            if session_id is None:
                session = await agent.create_session(principal, self._profile, "", {})
                session_id = session.session_id
            turn = await agent.begin_turn(principal, session_id, text)
            outcome = await agent.run_turn(
                turn, structured=False, sink=None, time_remaining=timeout, method="tools/call"
            )
        except RequestError as exc:
            return _failed(str(exc))
        result: dict[str, Any] = {
            "answer": outcome.answer,
            "session_id": session_id,
            "stop_reason": outcome.stop_reason.name,
        }
        if outcome.unavailable_tools:
            result["unavailable_tools"] = [
                {"name": name, "availability": availability.name}
                for name, availability in outcome.unavailable_tools
            ]
        body = outcome.answer or (outcome.error.message if outcome.error else "")
        return types.CallToolResult(
            content=[types.TextContent(text=body)],
            structured_content=result,
            is_error=outcome.error is not None,
        )


def _failed(why: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=why)], is_error=True)
