"""A tool server for sidecar tests, written against the raw protocol (no SDK).

It doubles as proof that the protocol is implementable from the protos alone. Its tools
misbehave on request, and it counts what it saw so tests can assert on the server side:

- ``slow_read(tag, ms)``: read-only, idempotent; sleeps, then echoes its tag.
- ``flaky_read(token, failures)``: idempotent; the first ``failures`` calls per token fail
  with UNAVAILABLE.
- ``flaky_write(token, failures)``: like flaky_read, but not idempotent.
- ``reserve(sku, ms)``: writes key ``sku:{sku}``; records overlapping calls per SKU, and
  its start and end in ``order``.
- ``stock(sku, ms)``: reads key ``sku:{sku}``; records its start and end in ``order``.
- ``fail_with(code, token)``: idempotent; the first call per token fails with the named
  gRPC status code, later ones answer.
- ``hang()``: never returns; counts the calls that were cancelled.
- ``broken()``: fails with UNAVAILABLE while the server is in "broken" mode.
- ``refund(order)``: destructive, requires approval.
- ``cached_read(key, ms)``: read-only, cached for 60 s, declares ``result_fields`` (key,
  value): its output also carries a bulky ``debug`` field the model never needs.
- ``short_cached_read(key)``: read-only, cached for 0.4 s.
- ``cached_write(key)``: declares a cache TTL but is not read-only: never cached.
- ``big_read(tag, size)``: read-only; JSON output of about ``size`` characters.
- ``stats()`` / ``set_broken(broken)``: for the test itself, not for the model.

Run: ``python tests/support/scripted_toolserver.py --port 0``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import grpc
import orjson
from google.protobuf.duration_pb2 import Duration
from grpc_health.v1 import health, health_pb2_grpc

from agentsidecar.v1 import tool_pb2, tool_pb2_grpc


def _tool(
    name: str, properties: dict[str, Any], optional: tuple[str, ...] = (), **facts: Any
) -> tool_pb2.ToolDescriptor:
    required = [p for p in properties if p not in optional]
    schema = {"type": "object", "properties": properties, "required": required}
    return tool_pb2.ToolDescriptor(
        name=name,
        description=f"Test tool {name}.",
        input_schema=orjson.dumps(schema).decode(),
        **facts,
    )


STR = {"type": "string"}
INT = {"type": "integer", "minimum": 0}
TOOLS = [
    _tool("slow_read", {"tag": STR, "ms": INT}, read_only=True, idempotent=True),
    _tool("flaky_read", {"token": STR, "failures": INT}, read_only=True, idempotent=True),
    _tool("flaky_write", {"token": STR, "failures": INT}),
    _tool("reserve", {"sku": STR, "ms": INT}, write_keys=["sku:{sku}"]),
    _tool("stock", {"sku": STR, "ms": INT}, ("ms",), read_only=True, read_keys=["sku:{sku}"]),
    _tool("fail_with", {"code": STR, "token": STR}, read_only=True, idempotent=True),
    _tool("hang", {}, read_only=True),
    _tool("broken", {}, read_only=True),
    _tool("refund", {"order": STR}, destructive=True, requires_approval=True),
    _tool(
        "cached_read",
        {"key": STR, "ms": INT},
        read_only=True,
        idempotent=True,
        cache_ttl=Duration(seconds=60),
        version="1",
        result_fields=["key", "value"],
    ),
    _tool("short_cached_read", {"key": STR}, read_only=True, cache_ttl=Duration(nanos=400_000_000)),
    _tool("cached_write", {"key": STR}, cache_ttl=Duration(seconds=60)),
    _tool("big_read", {"tag": STR, "size": INT}, read_only=True, idempotent=True),
    _tool("stats", {}, read_only=True),
    _tool("set_broken", {"broken": {"type": "boolean"}}),
]


class ScriptedTools(tool_pb2_grpc.ToolServiceServicer):
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.failures_left: dict[str, int] = {}
        self.cancelled = 0
        self.active: Counter[str] = Counter()
        self.max_active: Counter[str] = Counter()
        self.order: list[str] = []
        self.broken = False

    async def ListTools(self, request: Any, context: Any) -> tool_pb2.ListToolsResponse:
        return tool_pb2.ListToolsResponse(tools=TOOLS, tool_set_version="scripted-1")

    async def CallTool(self, request: Any, context: Any) -> tool_pb2.CallToolResponse:
        started = time.perf_counter()
        name = request.tool_name
        args = orjson.loads(request.arguments or "{}")
        self.calls[name] += 1
        result = tool_pb2.ToolResult(call_id=request.call_id)
        if name == "slow_read":
            await asyncio.sleep(args["ms"] / 1000)
            result.output = f"read {args['tag']}"
        elif name in ("flaky_read", "flaky_write"):
            key = f"{name}:{args['token']}"
            left = self.failures_left.setdefault(key, args["failures"])
            if left > 0:
                self.failures_left[key] = left - 1
                await context.abort(grpc.StatusCode.UNAVAILABLE, "flaky on purpose")
            result.output = f"{name} ok after {self.calls[name]} calls"
        elif name == "reserve":
            sku = args["sku"]
            self.order.append(f"{sku}:{request.call_id}")
            self.active[sku] += 1
            self.max_active[sku] = max(self.max_active[sku], self.active[sku])
            try:
                await asyncio.sleep(args["ms"] / 1000)
            finally:
                self.active[sku] -= 1
                self.order.append(f"reserved {sku}:{request.call_id}")
            result.output = f"reserved {sku}"
        elif name == "stock":
            self.order.append(f"stock {args['sku']}:{request.call_id}")
            await asyncio.sleep(args.get("ms", 0) / 1000)
            self.order.append(f"stocked {args['sku']}:{request.call_id}")
            result.output = f"stock of {args['sku']}"
        elif name == "fail_with":
            key = f"fail_with:{args['token']}"
            if self.failures_left.setdefault(key, 1) > 0:
                self.failures_left[key] = 0
                await context.abort(getattr(grpc.StatusCode, args["code"]), "failing on purpose")
            result.output = f"answered after {self.calls[name]} calls"
        elif name == "hang":
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        elif name == "broken":
            if self.broken:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "broken on purpose")
            await asyncio.sleep(0.2)
            result.output = "fine"
        elif name == "cached_read":
            await asyncio.sleep(args["ms"] / 1000)
            result.output = orjson.dumps(
                {"key": args["key"], "value": f"value of {args['key']}", "debug": "d" * 2000}
            ).decode()
        elif name in ("short_cached_read", "cached_write"):
            result.output = f"{name} {args['key']} #{self.calls[name]}"
        elif name == "big_read":
            rows = [f"{args['tag']} row {i:05d} " + "x" * 40 for i in range(args["size"] // 56)]
            result.output = orjson.dumps({"tag": args["tag"], "rows": rows}).decode()
        elif name == "refund":
            self.order.append(f"refund {args['order']}")
            result.output = f"refunded {args['order']}"
        elif name == "stats":
            result.output = orjson.dumps(
                {
                    "calls": self.calls,
                    "cancelled": self.cancelled,
                    "max_active": self.max_active,
                    "order": self.order,
                }
            ).decode()
        elif name == "set_broken":
            self.broken = bool(args["broken"])
            result.output = "ok"
        else:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no tool {name}")
        result.handler_duration.FromTimedelta(timedelta(seconds=time.perf_counter() - started))
        return tool_pb2.CallToolResponse(result=result)


async def main(port: int) -> None:
    server = grpc.aio.server()
    tool_pb2_grpc.add_ToolServiceServicer_to_server(ScriptedTools(), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"listening on 127.0.0.1:{bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await health_servicer.enter_graceful_shutdown()
    await server.stop(5)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(main(parser.parse_args().port))
