"""The other placement of the MCP bridge, for the benchmark only: a process of its own per
MCP server, serving the tool protocol (``ListTools``, unary ``CallTool``, health) to the
sidecar and speaking MCP to the server through the same connection the in-process bridge
uses. ``docs/adr/004-mcp-bridge-in-the-sidecar.md`` compares the two.

::

    python -m bench.micro.mcp_bridge_process --port 0 -- COMMAND ARGS...
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from agentsidecar.v1 import tool_pb2, tool_pb2_grpc
from sidecar.config import McpServerConfig, RetryPolicy
from sidecar.tools.call_stream import StreamedCallError
from sidecar.tools.mcp import McpServerConnection


class _Bridge(tool_pb2_grpc.ToolServiceServicer):
    def __init__(self, connection: McpServerConnection) -> None:
        self.connection = connection
        self.tools = tool_pb2.ListToolsResponse()

    async def discovered(
        self, name: str, response: tool_pb2.ListToolsResponse, retries: dict[str, RetryPolicy]
    ) -> None:
        self.tools = response

    async def ListTools(self, request: Any, context: Any) -> tool_pb2.ListToolsResponse:
        return self.tools

    async def CallTool(self, request: Any, context: Any) -> tool_pb2.CallToolResponse:
        timeout = context.time_remaining() or 30.0
        try:
            result = await self.connection.call(request, timeout, ())
        except StreamedCallError as exc:
            await context.abort(exc.code(), exc.details())
        return tool_pb2.CallToolResponse(result=result)


async def _serve(port: int, command: list[str]) -> None:
    config = McpServerConfig(
        name="bridged",
        command=command[0],
        args=command[1:],
        trust_annotations=True,
        health_interval=0.5,
        discovery_timeout=5.0,
        restart_backoff=0.2,
        max_restart_backoff=1.0,
        max_result_bytes=4 * 1024 * 1024,
    )
    bridge: _Bridge

    async def discovered(*args: Any) -> None:
        await bridge.discovered(*args)

    connection = McpServerConnection(config, on_discovered=discovered, environ={})
    bridge = _Bridge(connection)
    connection.start()
    await connection.discovered.wait()
    server = grpc.aio.server()
    tool_pb2_grpc.add_ToolServiceServicer_to_server(bridge, server)
    checks = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    await checks.set("", health_pb2.HealthCheckResponse.SERVING)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"listening on 127.0.0.1:{bound}", flush=True)
    serving = True
    while True:  # health follows the MCP server's, as the in-process bridge's does
        await asyncio.sleep(0.05)
        if connection.serving != serving:
            serving = connection.serving
            status = (
                health_pb2.HealthCheckResponse.SERVING
                if serving
                else (health_pb2.HealthCheckResponse.NOT_SERVING)
            )
            await checks.set("", status)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("command", nargs="+")
    args = parser.parse_args()
    asyncio.run(_serve(args.port, args.command))


if __name__ == "__main__":
    main()
