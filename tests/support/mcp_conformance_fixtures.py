"""The tools the MCP conformance suite's server scenarios call, served over stdio by an MCP
server of ours, for the sidecar to bridge and offer on its own endpoint: the suite then
tests the sidecar's endpoint and its bridge together (``tests/mcp_server/test_conformance.py``).
Each tool does what the suite's scenario text asks of it."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server

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
]


def _text(text: str, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=error)


async def _elicited(ctx: Any, message: str, schema: dict[str, Any]) -> types.CallToolResult:
    reply = await ctx.session.elicit_form(message, schema, ctx.request_id)
    return _text(f"Elicitation completed: action={reply.action}, content={reply.content}")


def build() -> Server[Any]:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        name = params.name
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
        return _text(f"unknown tool {name}", error=True)

    return Server(
        "conformance-fixtures", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool
    )


async def main() -> None:
    server = build()
    options = server.create_initialization_options(NotificationOptions())
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


if __name__ == "__main__":
    asyncio.run(main())
