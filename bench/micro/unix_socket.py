"""A Unix domain socket against loopback TCP: the same calls, the caller's link the only change.

In the chart's sidecar mode the application can reach its sidecar over a Unix socket in
a shared ``emptyDir`` (``socket.enabled``) instead of ``127.0.0.1``. This measures what
that changes. It starts the LLM simulator (instant), the example shop tool server (no
simulated latency) and one sidecar that listens on a loopback TCP port and on a Unix
socket (``server.unix_socket``), then drives it through two clients of this process, one
per address, each with a channel of its own. One sidecar for both, so its state, caches
and links to the simulator and the tool server (loopback TCP either way) are the same.

Two workloads, each measured in batches that alternate between the transports round
after round (so drift on a shared machine hits both alike), one call at a time:

- ``run``: the pre-sales run, two model calls and three concurrent tool calls; what a
  caller sees end to end.
- ``call``: ``GetSession`` of a session holding one turn; one small round trip, the
  link's own cost with the least else around it.

Each batch reads the sidecar's CPU time (``/proc/PID/stat``, every thread) and this
process's (the client's, ``time.process_time``) before and after. Prints median and P99
latency, sidecar and client CPU per call, for each transport and their ratio, and the
range of the per-round ratios of the median::

    python -m bench.micro.unix_socket                  # make bench-unix; about a minute
    python -m bench.micro.unix_socket --rounds 20 --batch 50
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from bench.processes import configured_sidecar, simulator, tool_server
from bench.stats import percentile
from sidecar.testing import ServerProcess

PRE_SALES = "Is SKU X-100 in inventory, what is its price, and is there a discount?"
TRANSPORTS = ("tcp", "unix")
OUT = Path(__file__).resolve().parents[2] / "bench/results/unix_socket.md"

Call = Callable[[], Awaitable[None]]


class Figures:
    """One transport's samples for one workload."""

    def __init__(self) -> None:
        self.latency: list[float] = []
        self.sidecar_cpu: list[float] = []  # per batch
        self.client_cpu: list[float] = []  # per batch
        self.round_medians: list[float] = []


async def _batch(call: Call, proc: ServerProcess, runs: int, figures: Figures | None) -> None:
    """``runs`` calls one at a time; their figures go to ``figures`` (None: a warm-up)."""
    latencies = []
    sidecar_cpu, client_cpu = proc.cpu_seconds(), time.process_time()
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        latencies.append(time.perf_counter() - started)
    sidecar_cpu, client_cpu = proc.cpu_seconds() - sidecar_cpu, time.process_time() - client_cpu
    if figures is not None:
        figures.latency += latencies
        figures.sidecar_cpu.append(sidecar_cpu)
        figures.client_cpu.append(client_cpu)
        figures.round_medians.append(statistics.median(latencies))


def _run_call(client: AgentClient) -> Call:
    async def call() -> None:
        session = await client.create_session()
        result = (await client.run(session.session_id, PRE_SALES, timeout=30)).result
        if result.stop_reason != agent_pb2.STOP_REASON_ANSWERED or result.tool_calls != 3:
            raise RuntimeError(f"unexpected run: {result}")

    return call


async def _get_call(client: AgentClient) -> Call:
    session = await client.create_session()
    await client.run(session.session_id, PRE_SALES, timeout=30)

    async def call() -> None:
        got = await client.get_session(session.session_id)
        if len(got.turns) != 1:
            raise RuntimeError(f"unexpected session: {got}")

    return call


async def _measure(
    proc: ServerProcess, targets: dict[str, str], rounds: int, batches: dict[str, int], warmup: int
) -> dict[str, dict[str, Figures]]:
    figures = {w: {t: Figures() for t in TRANSPORTS} for w in ("run", "call")}
    async with contextlib.AsyncExitStack() as stack:
        calls: dict[str, dict[str, Call]] = {"run": {}, "call": {}}
        for transport, target in targets.items():
            client = await stack.enter_async_context(AgentClient(target))
            await client.wait_ready(30)
            calls["run"][transport] = _run_call(client)
            calls["call"][transport] = await _get_call(client)
        for workload, by_transport in calls.items():
            for call in by_transport.values():
                await _batch(call, proc, warmup, None)
            for round_ in range(rounds):
                order = TRANSPORTS if round_ % 2 == 0 else TRANSPORTS[::-1]
                for transport in order:
                    await _batch(
                        by_transport[transport],
                        proc,
                        batches[workload],
                        figures[workload][transport],
                    )
    return figures


def _table(figures: dict[str, Figures], batch: int, unit: str) -> str:
    tcp, unix = figures["tcp"], figures["unix"]
    scale = 1e3 if unit == "ms" else 1e6

    def row(name: str, a: float, b: float) -> str:
        return f"| {name:<34} | {a * scale:>9.1f} | {b * scale:>9.1f} | {b / a:>9.2f} |"

    def per_call(cpu: list[float]) -> float:
        return sum(cpu) / (len(cpu) * batch)

    lat_tcp, lat_unix = sorted(tcp.latency), sorted(unix.latency)
    ratios = [u / t for t, u in zip(tcp.round_medians, unix.round_medians, strict=True)]
    lines = [
        f"| {'per call (' + unit + ')':<34} | {'TCP':>9} | {'Unix':>9} | {'Unix/TCP':>9} |",
        f"| {'-' * 34} | {'-' * 8}: | {'-' * 8}: | {'-' * 8}: |",
        row("latency, median", percentile(lat_tcp, 50), percentile(lat_unix, 50)),
        row("latency, P99", percentile(lat_tcp, 99), percentile(lat_unix, 99)),
        row("sidecar CPU", per_call(tcp.sidecar_cpu), per_call(unix.sidecar_cpu)),
        row("client CPU", per_call(tcp.client_cpu), per_call(unix.client_cpu)),
    ]
    lines.append(
        f"\nUnix/TCP of the median, per round: {min(ratios):.2f} to {max(ratios):.2f} "
        f"(median {statistics.median(ratios):.2f}) over {len(ratios)} rounds"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12, help="rounds of one batch per transport")
    parser.add_argument("--batch", type=int, default=40, help="runs per batch")
    parser.add_argument(
        "--call-batch",
        type=int,
        default=400,
        help="GetSession calls per batch (many: CPU time is counted in 10 ms ticks)",
    )
    parser.add_argument("--warmup", type=int, default=30, help="calls per transport first")
    args = parser.parse_args()
    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        # Short: a socket's path holds at most 107 bytes.
        socket_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-"))
        path = Path(socket_dir) / "sidecar.sock"
        sim = stack.enter_context(simulator())
        tools = {"shop": stack.enter_context(tool_server("shop", 0))}
        server = {"port": 0, "grace_period": 2, "unix_socket": str(path)}
        proc = stack.enter_context(configured_sidecar(sim, tools, server=server))
        targets = {"tcp": proc.address, "unix": f"unix:{path}"}
        batches = {"run": args.batch, "call": args.call_batch}
        figures = asyncio.run(_measure(proc, targets, args.rounds, batches, args.warmup))
    text = "\n".join(
        [
            f"One sidecar on both; {args.rounds} interleaved rounds per transport and "
            f"workload, one call at a time, {time.monotonic() - began:.0f} s in all.",
            "",
            f"The pre-sales run (2 model calls + 3 tool calls), a new session each; "
            f"{args.rounds * args.batch} per transport:",
            "",
            _table(figures["run"], args.batch, "ms"),
            "",
            f"`GetSession` of a session with one turn (one small round trip); "
            f"{args.rounds * args.call_batch} per transport:",
            "",
            _table(figures["call"], args.call_batch, "us"),
        ]
    )
    # bench.peers quotes it in docs/benchmarks.md.
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
