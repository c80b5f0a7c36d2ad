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
        self.watches = 0
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
        if request.tool_name == "watches":  # for the test: health watches seen so far
            output = str(self.watches)
            return tool_pb2.CallToolResponse(
                result=tool_pb2.ToolResult(call_id=request.call_id, output=output)
            )
        output = f"{self.label} ran {request.tool_name}"
        return tool_pb2.CallToolResponse(
            result=tool_pb2.ToolResult(call_id=request.call_id, output=output)
        )


class CountingHealth(health.aio.HealthServicer):  # type: ignore[misc]
    """grpc's health service, counting the Watch streams it was asked for."""

    def __init__(self, tools: NamedTools) -> None:
        super().__init__()
        self._tools = tools

    async def Watch(self, request: Any, context: Any) -> None:
        self._tools.watches += 1
        await super().Watch(request, context)


async def main(
    port: int,
    label: str,
    names: list[str],
    schemas: dict[str, str],
    keys: dict[str, str],
    min_ping_ms: int | None,
    grace: float,
) -> None:
    # No keepalive options: grpc's defaults, the way a tool server that sets nothing runs;
    # --min-ping-ms scales its ping policy down (default: one per 5 minutes) for a test.
    options = []
    if min_ping_ms is not None:
        options.append(("grpc.http2.min_ping_interval_without_data_ms", min_ping_ms))
    server = grpc.aio.server(options=options)
    tools = NamedTools(label, names, schemas, keys)
    tool_pb2_grpc.add_ToolServiceServicer_to_server(tools, server)
    health_servicer = CountingHealth(tools)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"listening on 127.0.0.1:{bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await health_servicer.enter_graceful_shutdown()
    await server.stop(grace)  # waits for every call, a health watch included


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
    parser.add_argument("--min-ping-ms", type=int, help="the server's ping policy, scaled down")
    parser.add_argument("--grace", type=float, default=1.0, help="seconds to drain on SIGTERM")
    args = parser.parse_args()
    schemas = dict(item.split("=", 1) for item in args.schema)
    keys = dict(item.split("=", 1) for item in args.write_key)
    names = args.tools.split(",")
    asyncio.run(main(args.port, args.label, names, schemas, keys, args.min_ping_ms, args.grace))
