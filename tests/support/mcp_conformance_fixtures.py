"""The tools the MCP conformance suite's server scenarios call, served over stdio by an MCP
server of ours, for the sidecar to bridge and offer on its own endpoint: the suite then
tests the sidecar's endpoint and its bridge together (``tests/mcp_server/test_conformance.py``).
Each tool does what the suite's scenario text asks of it.

Two sets: the default one for a bridge speaking the 2025 handshake (its tools ask with
requests of their own, and the tasks extension's fixtures, which the endpoint runs as
tasks), and ``--set 2026`` for a bridge speaking 2026-07-28 (the multi-round-trip
fixtures, which ask with input-required results that the endpoint relays to the host)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

_NONE: dict[str, Any] = {"type": "object", "properties": {}}
_SCHEMA_2020 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}
_DEFAULTS = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "John Doe"},
        "age": {"type": "integer", "default": 30},
        "score": {"type": "number", "default": 95.5},
        "status": {
            "type": "string",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "default": True},
    },
}
_ENUMS = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                ]
            },
        },
    },
}


def _tool(name: str, schema: dict[str, Any] = _NONE) -> types.Tool:
    return types.Tool(name=name, description=f"Conformance fixture {name}.", input_schema=schema)


TOOLS = [
    _tool("test_simple_text"),
    _tool("test_error_handling"),
    _tool("test_tool_with_progress"),
    _tool("test_elicitation", {"type": "object", "properties": {"message": {"type": "string"}}}),
    _tool("test_elicitation_sep1034_defaults"),
    _tool("test_elicitation_sep1330_enums"),
    _tool("json_schema_2020_12_tool", _SCHEMA_2020),
    # The tasks extension's fixtures (the endpoint runs the last five as tasks).
    _tool("greet", {"type": "object", "properties": {"name": {"type": "string"}}}),
    _tool(
        "slow_compute",
        {
            "type": "object",
            "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}},
        },
    ),
    _tool("failing_job"),
    _tool("protocol_error_job"),
    _tool("confirm_delete"),
    _tool("multi_input"),
    # The suite's hook to change the tool list: the endpoint must tell its listeners.
    _tool("test_trigger_tool_change"),
]

_NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
_COLOR = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}
_OK = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
TOOLS_2026 = [
    _tool("test_input_required_result_elicitation"),
    _tool("test_input_required_result_request_state"),
    _tool("test_input_required_result_multiple_inputs"),
    _tool("test_input_required_result_multi_round"),
    _tool("test_input_required_result_tampered_state"),
    _tool("test_input_required_result_capabilities"),
    _tool("test_input_required_result_sampling"),
    _tool("test_input_required_result_list_roots"),
    _tool("test_missing_capability"),
    _tool("test_streaming_elicitation"),
    _tool("test_logging_tool"),
    _tool(
        "regional_echo",
        {
            "type": "object",
            "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
            "required": ["region"],
        },
    ),
]


def _text(text: str, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=error)


async def _elicited(ctx: Any, message: str, schema: dict[str, Any]) -> types.CallToolResult:
    reply = await ctx.session.elicit_form(message, schema, ctx.request_id)
    return _text(f"Elicitation completed: action={reply.action}, content={reply.content}")


def _elicit(message: str, schema: dict[str, Any]) -> types.ElicitRequest:
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=message, requested_schema=schema)
    )


def _answered(params: types.CallToolRequestParams, key: str) -> dict[str, Any] | None:
    """The content of the host's accepted answer to ``key``, if it gave one."""
    reply = (params.input_responses or {}).get(key)
    if isinstance(reply, types.ElicitResult) and reply.action == "accept":
        return dict(reply.content or {})
    return None


def _asking(requests: dict[str, Any], state: str | None = None) -> types.InputRequiredResult:
    return types.InputRequiredResult(input_requests=requests, request_state=state)


def _sampling(text: str, max_tokens: int) -> types.CreateMessageRequest:
    return types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(
            messages=[types.SamplingMessage(role="user", content=types.TextContent(text=text))],
            max_tokens=max_tokens,
        )
    )


def _call_2026(ctx: Any, params: types.CallToolRequestParams) -> Any:
    """The multi-round-trip fixtures: each asks with an input-required result."""
    name, state = params.name, params.request_state
    responses = params.input_responses or {}
    if name == "test_input_required_result_elicitation":
        answer = _answered(params, "user_name")
        if answer is None:
            return _asking({"user_name": _elicit("What is your name?", _NAME)})
        return _text(f"Hello, {answer.get('name', 'stranger')}!")
    if name in (
        "test_input_required_result_request_state",
        "test_input_required_result_tampered_state",
    ):
        if state == "fixture-state-1" and "confirm" in responses:
            return _text("state-ok: the request state came back as it was sent")
        return _asking({"confirm": _elicit("Please confirm", _OK)}, "fixture-state-1")
    if name == "test_input_required_result_multiple_inputs":
        if state == "fixture-multi" and {"user_name", "greeting", "client_roots"} <= set(responses):
            return _text("every input arrived")
        sampling = _sampling("Generate a greeting", 50)
        return _asking(
            {
                "user_name": _elicit("What is your name?", _NAME),
                "greeting": sampling,
                "client_roots": types.ListRootsRequest(),
            },
            "fixture-multi",
        )
    if name == "test_input_required_result_multi_round":
        if state == "fixture-round-2" and _answered(params, "step2") is not None:
            return _text(f"done: {_answered(params, 'step2')}")
        if state == "fixture-round-1" and _answered(params, "step1") is not None:
            return _asking(
                {"step2": _elicit("Step 2: What is your favorite color?", _COLOR)},
                "fixture-round-2",
            )
        return _asking({"step1": _elicit("Step 1: What is your name?", _NAME)}, "fixture-round-1")
    if name == "test_input_required_result_sampling":
        if "capital_question" in responses:
            reply = responses["capital_question"]
            text = getattr(getattr(reply, "content", None), "text", None)
            return _text(f"the host's model said: {text}")
        return _asking({"capital_question": _sampling("What is the capital of France?", 100)})
    if name == "test_input_required_result_list_roots":
        reply = responses.get("client_roots")
        if reply is not None:
            roots = [str(root.uri) for root in getattr(reply, "roots", [])]
            return _text(f"the host's roots: {', '.join(roots)}")
        return _asking({"client_roots": types.ListRootsRequest()})
    if name == "test_missing_capability":  # needs the host's model: sampling
        if "greeting" in responses:
            return _text("sampled")
        return _asking({"greeting": _sampling("Generate a greeting", 50)})
    if name == "test_streaming_elicitation":
        answer = _answered(params, "user_name")
        if answer is None:
            return _asking({"user_name": _elicit("What is your name?", _NAME)})
        return _text(f"Hello, {answer.get('name', 'stranger')}!")
    if name == "test_logging_tool":
        return _text("a tool that would log")
    if name == "regional_echo":
        return _text(f"region {(params.arguments or {}).get('region')}")
    if name == "test_input_required_result_capabilities":
        declared = (ctx.meta or {}).get("io.modelcontextprotocol/clientCapabilities") or {}
        if responses:
            return _text("answered")
        requests: dict[str, Any] = {}
        if "elicitation" in declared:
            requests["user_name"] = _elicit("What is your name?", _NAME)
        if "roots" in declared:
            requests["client_roots"] = types.ListRootsRequest()
        return _asking(requests) if requests else _text("nothing to ask")
    return _text(f"unknown tool {name}", error=True)


def build_2026() -> Server[Any]:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS_2026)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        return _call_2026(ctx, params)

    return Server(
        "conformance-fixtures-2026", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool
    )


def build() -> Server[Any]:
    tools = list(TOOLS)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        name = params.name
        if name == "test_trigger_tool_change":
            tools.append(_tool(f"test_added_tool_{len(tools)}"))
            await ctx.session.send_tool_list_changed()
            return _text("the tool list changed")
        if name == "test_simple_text":
            return _text("This is a simple text response for testing.")
        if name == "test_error_handling":
            return _text("This tool intentionally returns an error for testing", error=True)
        if name == "test_tool_with_progress":
            for done in (0, 50, 100):
                await ctx.session.report_progress(done, 100)
                await anyio.sleep(0.05)
            return _text("Progress test completed")
        if name == "test_elicitation":
            schema = {
                "type": "object",
                "properties": {"username": {"type": "string"}, "email": {"type": "string"}},
                "required": ["username", "email"],
            }
            message = (params.arguments or {}).get("message", "Please provide your information")
            return await _elicited(ctx, message, schema)
        if name == "test_elicitation_sep1034_defaults":
            return await _elicited(ctx, "Please review and update the form fields", _DEFAULTS)
        if name == "test_elicitation_sep1330_enums":
            return await _elicited(ctx, "Please select options", _ENUMS)
        if name == "json_schema_2020_12_tool":
            return _text(f"received {params.arguments}")
        arguments = params.arguments or {}
        if name == "greet":
            return _text(f"Hello, {arguments.get('name', 'World')}!")
        if name == "slow_compute":
            await anyio.sleep(float(arguments.get("seconds", 1)))
            return _text(f"computed {arguments.get('label', '')}".strip())
        if name == "failing_job":
            await anyio.sleep(1)
            return _text("the job failed, as it always does", error=True)
        if name == "protocol_error_job":
            raise MCPError(types.INTERNAL_ERROR, "the job broke the protocol, as it always does")
        if name == "confirm_delete":
            reply = await ctx.session.elicit_form("Delete it?", _OK, ctx.request_id)
            return _text(f"delete: {reply.action} {reply.content}")
        if name == "multi_input":
            first, second = await asyncio.gather(
                ctx.session.elicit_form("Your name?", _NAME, ctx.request_id),
                ctx.session.elicit_form("Your color?", _COLOR, ctx.request_id),
            )
            return _text(f"name {first.content}, color {second.content}")
        return _text(f"unknown tool {name}", error=True)

    return Server(
        "conformance-fixtures", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool
    )


async def main() -> None:
    server = build_2026() if sys.argv[1:] == ["--set", "2026"] else build()
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


if __name__ == "__main__":
    asyncio.run(main())
