"""The servers the MCP benchmark calls: one ``echo`` tool, served three ways.

- ``grpc``: a tool server of the Python SDK (the native path);
- ``mcp``: an MCP server on stdio (the bridge starts it), its tool named ``mcp_echo`` (so
  one sidecar can offer both); with ``size``, it answers that many characters instead;
- ``mcp-http``: the same MCP server on Streamable HTTP (prints ``listening on HOST:PORT``).

::

    python -m bench.micro.mcp_servers grpc --port 0
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any

ANSWER = "x" * 200  # a small result, as most tool results are


def _grpc() -> None:
    from toolservers import ToolServer

    server = ToolServer("echo")

    @server.tool(read_only=True, idempotent=True)
    async def echo(text: str) -> str:
        """Answer with the text and a short tail."""
        return text + ANSWER

    sys.argv = [sys.argv[0], *sys.argv[2:]]
    server.run()


def _mcp_server() -> Any:
    import mcp_types as types
    from mcp.server.lowlevel.server import Server

    tool = types.Tool(
        name="mcp_echo",
        description="Answer with the text and a short tail.",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string"}, "size": {"type": "integer"}},
        },
        annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    )

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = params.arguments or {}
        size = arguments.get("size")
        text = "x" * size if isinstance(size, int) else str(arguments.get("text", "")) + ANSWER
        return types.CallToolResult(content=[types.TextContent(text=text)])

    return Server("echo", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def _mcp_stdio() -> None:
    from mcp.server.lowlevel.server import NotificationOptions
    from mcp.server.stdio import stdio_server

    server = _mcp_server()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(NotificationOptions()))


async def _mcp_http() -> None:
    import uvicorn

    app = _mcp_server().streamable_http_app(host="127.0.0.1")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(f"listening on 127.0.0.1:{sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])


def main() -> None:
    mode = sys.argv[1]
    if mode == "grpc":
        _grpc()
    elif mode == "mcp":
        asyncio.run(_mcp_stdio())
    else:
        asyncio.run(_mcp_http())


if __name__ == "__main__":
    main()
