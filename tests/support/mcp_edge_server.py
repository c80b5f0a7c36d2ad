"""An MCP server of our own whose tools misbehave on request: the bridge's edge cases.

Stdio by default (the bridge starts it); ``--http`` serves Streamable HTTP on 127.0.0.1
(HTTPS with ``--tls-cert`` and ``--tls-key``) and prints ``listening on HOST:PORT``. Both
revisions (2026-07-28 and the 2025 handshake), whichever the client speaks. Tools:

- ``echo`` (read-only, idempotent): the text back.
- ``slow``: sleeps ``ms`` in ``steps`` steps, reporting progress after each.
- ``fail``: an ``isError`` result with ``message``.
- ``huge``: ``size`` characters of text.
- ``crash``: the process exits mid-call.
- ``hang``: the whole process blocks (its event loop too), as a wedged server does.
- ``mixed``: text, an image, audio, a resource link, embedded text and binary resources.
- ``structured``: structured content for its output schema, or (``good`` false) not.
- ``ask``: asks its caller for a name (elicitation: a request of its own on the 2025
  revisions, an input-required result on 2026-07-28).
- ``whoami``: the request's ``_meta``, as JSON.
- ``add_tool``: offers a tool ``extra_NAME`` from now on, and says the list changed.
- ``storm``: says the list changed ``count`` times.
- ``long_line``: writes ``size`` bytes to stdout with no newline (stdio only).
- ``unreadable``: answers its request with a line no JSON-RPC reader takes (stdio only):
  ``how`` ``deep``, a result nested ``depth`` levels; ``broken``, JSON cut off.
- ``listings``: how many times the tool list was asked for (its first page).

``--hostile`` adds tools that break the bridge's rules (names, schemas, lying
annotations, a huge description); ``--many N`` adds N more plain tools; ``--page-size N``
pages the tool list.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import time
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.subscriptions import ToolsListChanged

_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}
_READ = types.ToolAnnotations(read_only_hint=True, idempotent_hint=True, destructive_hint=False)
_WIRE = [1]
"""The protocol's descriptor: a copy of stdout taken before the SDK points fd 1 at stderr."""
_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5E"
    "rkJggg=="
)


def _tool(name: str, properties: dict[str, Any] | None = None, **extra: Any) -> types.Tool:
    schema = {"type": "object", "properties": properties or {}}
    return types.Tool(name=name, description=f"The {name} tool.", input_schema=schema, **extra)


def _tools(args: argparse.Namespace, extra: list[str]) -> list[types.Tool]:
    tools = [
        _tool("echo", {"text": {"type": "string"}}, annotations=_READ),
        _tool("slow", {"ms": {"type": "integer"}, "steps": {"type": "integer"}}),
        _tool("fail", {"message": {"type": "string"}}),
        _tool("huge", {"size": {"type": "integer"}}),
        _tool("crash"),
        _tool("hang"),
        _tool("mixed", annotations=_READ),
        _tool(
            "structured",
            {"good": {"type": "boolean"}},
            output_schema={
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "required": ["n"],
            },
        ),
        _tool("ask"),
        _tool("whoami", annotations=_READ),
        _tool("add_tool", {"name": {"type": "string"}}),
        _tool("storm", {"count": {"type": "integer"}}),
        _tool("long_line", {"size": {"type": "integer"}}),
        _tool("unreadable", {"how": {"type": "string"}, "depth": {"type": "integer"}}),
        _tool("listings", annotations=_READ),
    ]
    tools += [_tool(f"extra_{name}", annotations=_READ) for name in extra]
    tools += [_tool(f"many_{i}", annotations=_READ) for i in range(args.many)]
    if args.hostile:
        tools += [
            _tool("dotted.name"),
            _tool("n" * 100),
            types.Tool(
                name="remote_ref",
                input_schema={"type": "object", "$ref": "http://127.0.0.1:9/schema.json"},
            ),
            types.Tool(
                name="bad_output",
                input_schema=_OBJECT,
                output_schema={"$ref": "https://127.0.0.1:9/out.json"},
            ),
            types.Tool(
                name="big_schema",
                input_schema={
                    "type": "object",
                    "properties": {f"p{i}": {"type": "string"} for i in range(5000)},
                },
            ),
            _tool(
                "wipe",
                annotations=types.ToolAnnotations(
                    read_only_hint=True, destructive_hint=False, idempotent_hint=True
                ),
            ),
            types.Tool(name="wordy", description="w" * 20_000, input_schema=_OBJECT),
        ]
    return tools


def build(args: argparse.Namespace) -> tuple[Server[Any], InMemorySubscriptionBus]:
    bus = InMemorySubscriptionBus()
    extra: list[str] = []
    listings = [0]

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> Any:
        tools = _tools(args, extra)
        start = int(params.cursor) if params is not None and params.cursor else 0
        listings[0] += start == 0
        size = args.page_size or len(tools)
        page = tools[start : start + size]
        more = start + size < len(tools)
        return types.ListToolsResult(tools=page, next_cursor=str(start + size) if more else None)

    async def changed(ctx: Any) -> None:
        await bus.publish(ToolsListChanged())
        if ctx.protocol_version != "2026-07-28":
            await ctx.session.send_tool_list_changed()

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        name, a = params.name, params.arguments or {}
        text = types.TextContent
        if name == "echo" or name.startswith(("extra_", "many_")) or name == "wipe":
            return types.CallToolResult(content=[text(text=f"{name}: {a.get('text', '')}")])
        if name == "slow":
            steps = max(1, int(a.get("steps", 1)))
            for i in range(steps):
                await anyio.sleep(int(a.get("ms", 100)) / 1000 / steps)
                await ctx.session.report_progress(i + 1, steps, f"step {i + 1}")
            return types.CallToolResult(content=[text(text="slept")])
        if name == "fail":
            message = a.get("message", "it failed")
            return types.CallToolResult(content=[text(text=message)], is_error=True)
        if name == "huge":
            return types.CallToolResult(content=[text(text="x" * int(a.get("size", 0)))])
        if name == "crash":
            os._exit(3)
        if name == "hang":
            time.sleep(3600)  # noqa: ASYNC251 - the point: a wedged server's blocked loop
        if name == "mixed":
            return types.CallToolResult(
                content=[
                    text(text="here is everything"),
                    types.ImageContent(data=_PNG, mime_type="image/png"),
                    types.AudioContent(data="AAAA", mime_type="audio/wav"),
                    types.ResourceLink(
                        name="readme", uri="file:///readme.md", mime_type="text/markdown"
                    ),
                    types.EmbeddedResource(
                        resource=types.TextResourceContents(
                            uri="file:///notes.txt", mime_type="text/plain", text="a note"
                        )
                    ),
                    types.EmbeddedResource(
                        resource=types.BlobResourceContents(
                            uri="file:///blob.bin",
                            mime_type="application/octet-stream",
                            blob="AAAA",
                        )
                    ),
                ]
            )
        if name == "structured":
            value = {"n": 1} if a.get("good", True) else {"n": "one"}
            return types.CallToolResult(
                content=[text(text=json.dumps(value))], structured_content=value
            )
        if name == "ask":
            schema = {"type": "object", "properties": {"name": {"type": "string"}}}
            question = "What is your name?"
            if ctx.protocol_version == "2026-07-28":
                answers = params.input_responses or {}
                if "name" not in answers:
                    request = types.ElicitRequest(
                        params=types.ElicitRequestFormParams(
                            message=question, requested_schema=schema
                        )
                    )
                    return types.InputRequiredResult(input_requests={"name": request})
                reply = answers["name"]
            else:
                reply = await ctx.session.elicit_form(question, schema, ctx.request_id)
            if getattr(reply, "action", None) != "accept":
                return types.CallToolResult(content=[text(text="no answer")])
            content = getattr(reply, "content", None) or {}
            return types.CallToolResult(content=[text(text=f"hello {content.get('name')}")])
        if name == "whoami":
            meta = dict(params.meta or {})
            return types.CallToolResult(content=[text(text=json.dumps(meta, default=str))])
        if name == "add_tool":
            extra.append(str(a.get("name", "x")))
            await changed(ctx)
            return types.CallToolResult(content=[text(text="added")])
        if name == "storm":
            for _ in range(int(a.get("count", 100))):
                await changed(ctx)
            return types.CallToolResult(content=[text(text="stormed")])
        if name == "listings":
            return types.CallToolResult(content=[text(text=str(listings[0]))])
        if name == "long_line":
            os.write(_WIRE[0], b"x" * int(a.get("size", 0)))
            await anyio.sleep(3600)
        if name == "unreadable":
            head = b'{"jsonrpc":"2.0","id":' + json.dumps(ctx.request_id).encode() + b',"result":'
            if a.get("how") == "deep":
                depth = int(a.get("depth", 50_000))
                body = b'{"content":[],"structuredContent":' + b'{"a":' * depth + b"1"
                body += b"}" * (depth + 1) + b"}"
            else:
                body = b'{"content":[{"type":"text","text":"cut'
            os.write(_WIRE[0], head + body + b"\n")
            await anyio.sleep(3600)
        raise ValueError(f"unknown tool {name}")

    server: Server[Any] = Server(
        "edge",
        version="1.0",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=ListenHandler(bus),
    )
    return server, bus


async def _stdio(server: Server[Any]) -> None:
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


async def _http(server: Server[Any], cert: str | None, key: str | None) -> None:
    import uvicorn

    app = server.streamable_http_app(host="127.0.0.1")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", ssl_certfile=cert, ssl_keyfile=key
    )
    http = uvicorn.Server(config)
    print(f"listening on 127.0.0.1:{sock.getsockname()[1]}", flush=True)
    await http.serve(sockets=[sock])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--port", type=int, default=0)  # the launcher's flag; port 0 only
    parser.add_argument("--hostile", action="store_true")
    parser.add_argument("--many", type=int, default=0)
    parser.add_argument("--page-size", type=int, default=0)
    parser.add_argument("--tls-cert", help="serve HTTPS with this PEM certificate (--http)")
    parser.add_argument("--tls-key", help="the certificate's PEM private key")
    args = parser.parse_args()
    _WIRE[0] = os.dup(1)
    server, _bus = build(args)
    if args.http:
        asyncio.run(_http(server, args.tls_cert, args.tls_key))
    else:
        asyncio.run(_stdio(server))


if __name__ == "__main__":
    main()
