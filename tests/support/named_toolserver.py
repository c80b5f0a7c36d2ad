"""A tool server offering tools of any names, each answering with its server's label.

Run: ``python tests/support/named_toolserver.py --port 0 --label bad --tools get_x,own``
(``--schema get_x='{...}'`` gives a tool its input schema).
A test sees from a result which server ran a call.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2_grpc

from agentsidecar.v1 import tool_pb2, tool_pb2_grpc


class NamedTools(tool_pb2_grpc.ToolServiceServicer):
    def __init__(
        self, label: str, names: list[str], schemas: dict[str, str], keys: dict[str, str]
    ) -> None:
        self.label = label
        self.tools = [
            tool_pb2.ToolDescriptor(
                name=n,
                description=f"Tool {n}.",
                input_schema=schemas.get(n, '{"type":"object"}'),
                read_only=n not in keys,
                write_keys=[keys[n]] if n in keys else [],
            )
            for n in names
        ]

    async def ListTools(self, request: Any, context: Any) -> tool_pb2.ListToolsResponse:
        return tool_pb2.ListToolsResponse(tools=self.tools, tool_set_version=self.label)

    async def CallTool(self, request: Any, context: Any) -> tool_pb2.CallToolResponse:
        output = f"{self.label} ran {request.tool_name}"
        return tool_pb2.CallToolResponse(
            result=tool_pb2.ToolResult(call_id=request.call_id, output=output)
        )


async def main(
    port: int, label: str, names: list[str], schemas: dict[str, str], keys: dict[str, str]
) -> None:
    server = grpc.aio.server()
    tools = NamedTools(label, names, schemas, keys)
    tool_pb2_grpc.add_ToolServiceServicer_to_server(tools, server)
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"listening on 127.0.0.1:{bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--label", required=True)
    parser.add_argument("--tools", required=True, help="comma-separated tool names")
    parser.add_argument(
        "--schema", action="append", default=[], help="NAME=JSON: that tool's input schema"
    )
    parser.add_argument(
        "--write-key", action="append", default=[], help="NAME=TEMPLATE: that tool's write key"
    )
    args = parser.parse_args()
    schemas = dict(item.split("=", 1) for item in args.schema)
    keys = dict(item.split("=", 1) for item in args.write_key)
    asyncio.run(main(args.port, args.label, args.tools.split(","), schemas, keys))
