"""MCP both ways, measured: the bridge against native tools, the endpoint against direct.

**The bridge.** One small ``echo`` call, made by this process (in the sidecar's place)
through the connection the sidecar would use, three ways:

- *native*: a gRPC tool server of the Python SDK (on its ``CallTools`` stream);
- *bridge in the sidecar* (what ships): an MCP server on stdio, spoken to by the bridge
  in this process;
- *bridge process*: the other placement, a process per MCP server serving the tool
  protocol (unary ``CallTool``) and speaking MCP to the server
  (``bench/micro/mcp_bridge_process.py``).

**The endpoint.** An MCP host (the ``mcp`` SDK's client, Streamable HTTP, 2026-07-28) calls
through a sidecar: a gRPC tool's ``echo`` and a bridged MCP server's ``mcp_echo``; next to
the same tools called directly (the gRPC tool server by a gRPC client, the MCP server by
the same MCP client over HTTP).

Batches alternate between the variants round after round (drift on a shared machine hits
all alike), one call at a time. Each batch reads the CPU of this process
(``time.process_time``) and of every other process involved (their CPU clocks). Writes
``bench/results/mcp.md``::

    python -m bench.micro.mcp                 # make bench-mcp; about two minutes
    python -m bench.micro.mcp --rounds 4 --batch 100
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agentsidecar.v1 import tool_pb2
from bench.processes import ROOT, simulator, start
from bench.stats import percentile
from sidecar import testing
from sidecar.config import McpServerConfig, ToolServerConfig
from sidecar.tools.connection import ToolServerConnection
from sidecar.tools.mcp import McpServerConnection

OUT = ROOT / "bench/results/mcp.md"
MCP_ECHO = [sys.executable, "-m", "bench.micro.mcp_servers", "mcp"]

Call = Callable[[], Awaitable[Any]]


def _cpu(pid: int) -> float:
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except OSError:
        return 0.0


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


@dataclass
class Figures:
    """One variant's samples: latencies, and CPU per batch by process."""

    latency: list[float] = field(default_factory=list)
    cpu: dict[str, list[float]] = field(default_factory=dict)
    calls: int = 0


@dataclass
class Variant:
    name: str
    call: Call
    processes: dict[str, int]
    """Other processes whose CPU counts, by role: their pids."""
    figures: Figures = field(default_factory=Figures)


async def _batch(variant: Variant, runs: int, measured: bool) -> None:
    latencies = []
    before = {role: _cpu(pid) for role, pid in variant.processes.items()}
    own = time.process_time()
    for _ in range(runs):
        started = time.perf_counter()
        await variant.call()
        latencies.append(time.perf_counter() - started)
    own = time.process_time() - own
    if not measured:
        return
    figures = variant.figures
    figures.latency += latencies
    figures.calls += runs
    figures.cpu.setdefault("caller", []).append(own)
    for role, pid in variant.processes.items():
        figures.cpu.setdefault(role, []).append(_cpu(pid) - before[role])


async def _measure(variants: list[Variant], rounds: int, batch: int) -> None:
    for variant in variants:
        await _batch(variant, batch // 2, measured=False)  # warm up
    for _ in range(rounds):
        for variant in variants:
            await _batch(variant, batch, measured=True)


def _request(tool: str) -> tool_pb2.CallToolRequest:
    return tool_pb2.CallToolRequest(call_id="c", tool_name=tool, arguments='{"text": "hello"}')


async def _nothing(*args: Any) -> None:
    return None


async def bridge_variants(stack: contextlib.ExitStack) -> tuple[list[Variant], list[Any]]:
    native = stack.enter_context(start("-m", "bench.micro.mcp_servers", "grpc", "--port", "0"))
    bridge = stack.enter_context(
        start("-m", "bench.micro.mcp_bridge_process", "--port", "0", "--", *MCP_ECHO)
    )
    native_link = ToolServerConnection(
        ToolServerConfig(name="native", address=native.address), on_discovered=_nothing
    )
    await native_link.discover(10)
    process_link = ToolServerConnection(
        ToolServerConfig(name="process", address=bridge.address), on_discovered=_nothing
    )
    await process_link.discover(10)
    config = McpServerConfig(
        name="inproc", command=MCP_ECHO[0], args=MCP_ECHO[1:], trust_annotations=True
    )
    before = set(_children(os.getpid()))
    inproc = McpServerConnection(config, on_discovered=_nothing, environ={})
    inproc.start()
    await asyncio.wait_for(inproc.discovered.wait(), 30)
    [mcp_child] = set(_children(os.getpid())) - before
    [bridged_child] = _children(bridge.pid)

    def caller(link: Any, tool: str) -> Call:
        request = _request(tool)
        return lambda: link.call(request, 10.0, ())

    return [
        Variant("native gRPC tool", caller(native_link, "echo"), {"tool server": native.pid}),
        Variant(
            "MCP, bridge in the sidecar",
            caller(inproc, "mcp_echo"),
            {"MCP server": mcp_child},
        ),
        Variant(
            "MCP, bridge process",
            caller(process_link, "mcp_echo"),
            {"bridge": bridge.pid, "MCP server": bridged_child},
        ),
    ], [native_link, process_link, inproc]


@contextlib.asynccontextmanager
async def _host(url: str) -> Any:
    async with httpx2.AsyncClient(timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http), cache=None) as client:
            yield client


async def endpoint_variants(
    stack: contextlib.ExitStack, exits: contextlib.AsyncExitStack, workdir: Path
) -> tuple[list[Variant], list[Any]]:
    sim = stack.enter_context(simulator())
    native = stack.enter_context(start("-m", "bench.micro.mcp_servers", "grpc", "--port", "0"))
    direct_mcp = stack.enter_context(start("-m", "bench.micro.mcp_servers", "mcp-http"))
    config = testing.sidecar_config(
        sim.address,
        {"tools": native.address},
        mcp_servers=[
            {
                "name": "bridged",
                "command": MCP_ECHO[0],
                "args": MCP_ECHO[1:],
                "trust_annotations": True,
            }
        ],
        mcp={"port": 0},
        sessions={"store": "memory"},
    )
    side = stack.enter_context(testing.sidecar(config, workdir, cwd=ROOT))
    testing.wait_serving(side.address)
    [bridged_child] = _children(side.pid)
    via = await exits.enter_async_context(_host(side.announced("mcp on ")))
    direct = await exits.enter_async_context(_host(f"http://{direct_mcp.address}/mcp"))
    grpc_link = ToolServerConnection(
        ToolServerConfig(name="direct", address=native.address), on_discovered=_nothing
    )
    await grpc_link.discover(10)
    request = _request("echo")
    arguments = {"text": "hello"}
    return [
        Variant(
            "host → sidecar → gRPC tool",
            lambda: via.call_tool("echo", arguments),
            {"sidecar": side.pid, "tool server": native.pid},
        ),
        Variant(
            "gRPC caller → gRPC tool, direct",
            lambda: grpc_link.call(request, 10.0, ()),
            {"tool server": native.pid},
        ),
        Variant(
            "host → sidecar → bridged MCP tool",
            lambda: via.call_tool("mcp_echo", arguments),
            {"sidecar": side.pid, "MCP server": bridged_child},
        ),
        Variant(
            "host → MCP tool (HTTP), direct",
            lambda: direct.call_tool("mcp_echo", arguments),
            {"MCP server": direct_mcp.pid},
        ),
    ], [grpc_link]


def _row(variant: Variant, baseline: Variant) -> str:
    f = variant.figures
    median = statistics.median(f.latency) * 1e3
    p99 = percentile(f.latency, 99) * 1e3
    ratio = median / (statistics.median(baseline.figures.latency) * 1e3)
    cpu = {role: sum(values) / f.calls * 1e6 for role, values in f.cpu.items()}
    total = sum(cpu.values())
    spent = ", ".join(f"{role} {us:.0f}" for role, us in cpu.items())
    return f"| {variant.name} | {median:.3f} | {p99:.3f} | {ratio:.2f}x | {total:.0f} | {spent} |"


def _table(title: str, variants: list[Variant], baseline: Variant) -> list[str]:
    lines = [
        f"### {title}",
        "",
        f"| path | median (ms) | P99 (ms) | median ÷ {baseline.name}'s "
        "| CPU per call, all processes (µs) "
        "| by process (µs) |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    lines += [_row(v, baseline) for v in variants]
    return [*lines, ""]


async def main(rounds: int, batch: int) -> str:
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as work:
        async with contextlib.AsyncExitStack() as exits:
            bridge, links = await bridge_variants(stack)
            await _measure(bridge, rounds, batch)
            endpoint, more = await endpoint_variants(stack, exits, Path(work))
            await _measure(endpoint, rounds, batch)
            for link in [*links, *more]:
                await link.close()
    lines = [
        "# MCP both ways: what it costs",
        "",
        f"`python -m bench.micro.mcp --rounds {rounds} --batch {batch}` (`make bench-mcp`), "
        f"{os.cpu_count()} cores; one call at a time, {rounds} interleaved rounds of "
        f"{batch} calls per path. The caller is this process: in the bridge table it "
        "stands in the sidecar's place (the bridge in the sidecar runs in it), in the "
        "endpoint table it is the host.",
        "",
        *_table("The bridge: a tool call from the sidecar", bridge, bridge[0]),
        *_table("The endpoint: an MCP host's call", endpoint, endpoint[1]),
    ]
    return "\n".join(lines)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    text = asyncio.run(main(args.rounds, args.batch))
    args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    cli()
