"""What an MCP server's failures do to the sidecar, with the bridge in the sidecar and with a
bridge process per MCP server (``docs/adr/004-mcp-bridge-in-the-sidecar.md``).

For each placement, this process stands in the sidecar's place, with a native gRPC tool
server and one MCP server behind the bridge:

- **quiet**: native calls, one at a time: their latency and this process's CPU per call;
- **flood**: the same native calls while the MCP server answers 1 MB results as fast as
  the bridge asks: what a heavy MCP server costs the sidecar's other calls;
- **crash**: the MCP server killed (SIGKILL): how the next bridged call ends, and how long
  until a bridged call succeeds again (the server restarted);
- **hang**: the MCP server stopped (SIGSTOP): how a bridged call with a 2 s deadline ends,
  and how long until the bridge has a working server again.

Writes ``bench/results/mcp_failures.md``::

    python -m bench.micro.mcp_failures        # about a minute
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import time
from pathlib import Path
from typing import Any

from agentsidecar.v1 import tool_pb2
from bench.micro.mcp import MCP_ECHO, _children, _nothing
from bench.processes import ROOT, start
from bench.stats import percentile
from sidecar.config import McpServerConfig, ToolServerConfig
from sidecar.tools.call_stream import StreamedCallError
from sidecar.tools.connection import ToolServerConnection
from sidecar.tools.mcp import McpServerConnection

OUT = ROOT / "bench/results/mcp_failures.md"
CALLS = 300
FAST = {
    "health_interval": 0.5,
    "discovery_timeout": 5.0,
    "restart_backoff": 0.2,
    "max_restart_backoff": 1.0,
    "max_result_bytes": 4 * 1024 * 1024,
}


def _call(tool: str, **arguments: Any) -> tool_pb2.CallToolRequest:
    import json

    return tool_pb2.CallToolRequest(call_id="c", tool_name=tool, arguments=json.dumps(arguments))


async def _native_calls(link: Any) -> tuple[float, float, float]:
    """Median and P99 latency (ms) and this process's CPU per call (µs) of CALLS calls."""
    request, latencies = _call("echo", text="hi"), []
    cpu = time.process_time()
    for _ in range(CALLS):
        started = time.perf_counter()
        await link.call(request, 10.0, ())
        latencies.append(time.perf_counter() - started)
    cpu = time.process_time() - cpu
    return statistics.median(latencies) * 1e3, percentile(latencies, 99) * 1e3, cpu / CALLS * 1e6


async def _outcome(link: Any, request: tool_pb2.CallToolRequest, timeout: float) -> str:
    try:
        result = await link.call(request, timeout, ())
    except StreamedCallError as exc:
        return str(exc.code().name)
    except Exception as exc:
        code = getattr(exc, "code", None)
        return str(code().name) if callable(code) else type(exc).__name__
    return "OK" if result.WhichOneof("outcome") == "output" else "ERROR"


async def _until_ok(link: Any, started: float, limit: float = 30.0) -> float:
    request = _call("mcp_echo", text="back?")
    while time.monotonic() - started < limit:
        if await _outcome(link, request, 1.0) == "OK":
            return time.monotonic() - started
        await asyncio.sleep(0.02)
    return float("inf")


async def placement(name: str) -> dict[str, Any]:
    figures: dict[str, Any] = {"placement": name}
    with contextlib.ExitStack() as stack:
        native = stack.enter_context(start("-m", "bench.micro.mcp_servers", "grpc", "--port", "0"))
        native_link = ToolServerConnection(
            ToolServerConfig(name="native", address=native.address), on_discovered=_nothing
        )
        await native_link.discover(10)
        if name == "bridge in the sidecar":
            config = McpServerConfig(
                name="m", command=MCP_ECHO[0], args=MCP_ECHO[1:], trust_annotations=True, **FAST
            )
            link: Any = McpServerConnection(config, on_discovered=_nothing, environ={})
            link.start()
            await asyncio.wait_for(link.discovered.wait(), 30)

            def server_pid() -> int:
                return max(_children(os.getpid()))
        else:
            bridge = stack.enter_context(
                start("-m", "bench.micro.mcp_bridge_process", "--port", "0", "--", *MCP_ECHO)
            )
            link = ToolServerConnection(
                ToolServerConfig(
                    name="bridge",
                    address=bridge.address,
                    max_result_bytes=8 * 1024 * 1024,
                    call_stream=False,
                ),
                on_discovered=_nothing,
            )
            await link.discover(10)
            bridge_pid = bridge.pid

            def server_pid() -> int:
                return max(_children(bridge_pid))

        figures["quiet"] = await _native_calls(native_link)
        flooding = True

        async def flood() -> None:
            request = _call("mcp_echo", size=1024 * 1024)
            while flooding:
                await _outcome(link, request, 10.0)

        flooder = asyncio.get_running_loop().create_task(flood())
        await asyncio.sleep(0.5)
        figures["flood"] = await _native_calls(native_link)
        flooding = False
        await flooder
        os.kill(server_pid(), signal.SIGKILL)
        killed = time.monotonic()
        figures["crash_call"] = await _outcome(link, _call("mcp_echo", text="x"), 5.0)
        figures["crash_back"] = await _until_ok(link, killed)
        pid = server_pid()
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        figures["hang_call"] = await _outcome(link, _call("mcp_echo", text="x"), 2.0)
        figures["hang_back"] = await _until_ok(link, stopped)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        await native_link.close()
        await link.close()
    return figures


def _report(rows: list[dict[str, Any]]) -> str:
    lines = [
        "# MCP server failures: what they cost the sidecar",
        "",
        f"`python -m bench.micro.mcp_failures`, {os.cpu_count()} cores; {CALLS} native "
        "calls per phase, one at a time. The bridges probe every 0.5 s with a 5 s timeout "
        "and restart after 0.2 s (doubling to 1 s): the defaults are 10 s, 10 s, 0.5 s.",
        "",
        "| placement | native call, quiet: median / P99 (ms), sidecar CPU (µs) "
        "| native call during a 1 MB-result flood | killed: next bridged call "
        "| killed: working again after (s) | stopped: a 2 s call ends "
        "| stopped: working again after (s) |",
        "| --- | --- | --- | --- | ---: | --- | ---: |",
    ]
    for row in rows:
        quiet, flood = row["quiet"], row["flood"]
        lines.append(
            f"| {row['placement']} | {quiet[0]:.3f} / {quiet[1]:.3f}, {quiet[2]:.0f} "
            f"| {flood[0]:.3f} / {flood[1]:.3f}, {flood[2]:.0f} | {row['crash_call']} "
            f"| {row['crash_back']:.2f} | {row['hang_call']} | {row['hang_back']:.2f} |"
        )
    return "\n".join([*lines, ""])


async def main() -> str:
    rows = [await placement(name) for name in ("bridge in the sidecar", "bridge process")]
    return _report(rows)


if __name__ == "__main__":
    text = asyncio.run(main())
    Path(OUT).write_text(text)
    print(text)
