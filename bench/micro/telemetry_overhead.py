"""What telemetry costs: the same runs against a sidecar with it off and one with it on.

Starts the LLM simulator (instant), the example shop tool server (no simulated latency)
and two sidecars against them: ``off`` with the defaults, ``on`` with Prometheus
metrics, OpenTelemetry tracing (every run sampled, spans exported over OTLP to a
receiver in this process) and the timeline log. Every run is the pre-sales scenario:
two model calls and three concurrent tool calls. Runs go one at a time, in batches that
alternate between the sidecars round after round (so drift on a shared machine hits
both alike), and each batch reads the sidecar's CPU time from ``/proc/PID/stat``
(utime + stime, every thread, the span exporter's included) before and after.

Prints, side by side: client-side latency (median, P99) and sidecar CPU per run::

    python -m bench.micro.telemetry_overhead                 # about half a minute
    python -m bench.micro.telemetry_overhead --rounds 5 --batch 20

The model is a simulator, so a run costs little besides the sidecar's own work: the
figures are the overhead at its most visible.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from bench.processes import configured_sidecar, simulator, tool_server
from sidecar.commands.report import percentile
from sidecar.testing import ServerProcess

ROOT = Path(__file__).resolve().parents[2]

PRE_SALES = "Is SKU X-100 in inventory, what is its price, and is there a discount?"


class _Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP trace receiver that counts spans and keeps nothing."""

    def __init__(self) -> None:
        self.spans = 0
        self._lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:
        count = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        with self._lock:
            self.spans += count
        return trace_service_pb2.ExportTraceServiceResponse()


@contextlib.contextmanager
def _receiver() -> Any:
    servicer = _Receiver()
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(None).wait()


async def _batch(client: AgentClient, proc: ServerProcess, runs: int) -> tuple[list[float], float]:
    """Run ``runs`` runs one at a time; return their latencies and the sidecar's CPU."""
    sessions = [(await client.create_session()).session_id for _ in range(runs)]
    latencies = []
    cpu = proc.cpu_seconds()
    for session in sessions:
        started = time.perf_counter()
        result = (await client.run(session, PRE_SALES, timeout=30)).result
        latencies.append(time.perf_counter() - started)
        if result.stop_reason != agent_pb2.STOP_REASON_ANSWERED or result.tool_calls != 3:
            raise RuntimeError(f"unexpected run: {result}")
    return latencies, proc.cpu_seconds() - cpu


async def _measure(
    sidecars: dict[str, ServerProcess], rounds: int, batch: int, warmup: int
) -> dict[str, dict[str, list[float]]]:
    figures: dict[str, dict[str, list[float]]] = {
        name: {"latency": [], "cpu": [], "round_cpu": []} for name in sidecars
    }
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        for name, proc in sidecars.items():
            client = await stack.enter_async_context(AgentClient(proc.address))
            await client.wait_ready(30)
            await _batch(client, proc, warmup)
            clients[name] = client
        order = list(sidecars)
        for round_ in range(rounds):
            for name in order if round_ % 2 == 0 else reversed(order):
                latencies, cpu = await _batch(clients[name], sidecars[name], batch)
                figures[name]["latency"] += latencies
                figures[name]["cpu"].append(cpu)
                figures[name]["round_cpu"].append(cpu / batch)
    return figures


def _table(figures: dict[str, dict[str, list[float]]], runs: int) -> str:
    off, on = figures["off"], figures["on"]

    def row(name: str, a: float, b: float) -> str:
        ratio = f"{b / a:.2f}x" if a else ""
        return f"| {name:<36} | {a:>8.3f} | {b:>8.3f} | {ratio:>8} |"

    lat_off, lat_on = sorted(off["latency"]), sorted(on["latency"])
    lines = [
        f"| {'per run':<36} | {'off':>8} | {'on':>8} | {'on/off':>8} |",
        f"| {'-' * 36} | {'-' * 7}: | {'-' * 7}: | {'-' * 7}: |",
        row(
            "client latency, median (ms)",
            percentile(lat_off, 50) * 1e3,
            percentile(lat_on, 50) * 1e3,
        ),
        row(
            "client latency, P99 (ms)", percentile(lat_off, 99) * 1e3, percentile(lat_on, 99) * 1e3
        ),
        row(
            "sidecar CPU, all runs (ms)", sum(off["cpu"]) / runs * 1e3, sum(on["cpu"]) / runs * 1e3
        ),
        row(
            "sidecar CPU, median of rounds (ms)",
            statistics.median(off["round_cpu"]) * 1e3,
            statistics.median(on["round_cpu"]) * 1e3,
        ),
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12, help="rounds of one batch per sidecar")
    parser.add_argument("--batch", type=int, default=50, help="runs per batch")
    parser.add_argument("--warmup", type=int, default=30, help="runs per sidecar before measuring")
    parser.add_argument(
        "--on",
        default="metrics,tracing,log",
        help="what 'on' turns on, comma-separated: metrics, tracing, log (default: all); "
        "'none' turns nothing on",
    )
    parser.add_argument(
        "--sample-ratio", type=float, default=1.0, help="tracing's sample ratio (default 1)"
    )
    parser.add_argument(
        "--off-source",
        type=Path,
        metavar="DIR",
        help="run 'off' from another source tree, e.g. a release without telemetry "
        "(`git archive REV | tar -x -C DIR`), to see what the hooks cost when off",
    )
    args = parser.parse_args()
    parts = set() if args.on == "none" else set(args.on.split(","))
    if not parts <= {"metrics", "tracing", "log"}:
        parser.error(f"--on {args.on!r}: expected metrics, tracing and/or log")
    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        receiver, otlp = stack.enter_context(_receiver())
        log = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "timeline.jsonl"
        sim = stack.enter_context(simulator())
        tools = {"shop": stack.enter_context(tool_server("shop", 0))}
        on: dict[str, Any] = {}
        if "metrics" in parts:
            on["metrics"] = {"enabled": True, "port": 0}
        if "tracing" in parts:
            on["tracing"] = {
                "enabled": True,
                "otlp_endpoint": otlp,
                "sample_ratio": args.sample_ratio,
            }
        if "log" in parts:
            on["timeline_log"] = str(log)
        sidecars = {
            "off": stack.enter_context(configured_sidecar(sim, tools, source=args.off_source)),
            "on": stack.enter_context(configured_sidecar(sim, tools, telemetry=on)),
        }
        figures = asyncio.run(_measure(sidecars, args.rounds, args.batch, args.warmup))
        logged = sum(1 for _ in log.open()) if log.exists() else 0
    runs = args.rounds * args.batch
    print(
        f"telemetry overhead: {runs} runs per sidecar (2 model calls + 3 tool calls each), "
        f"{args.rounds} interleaved rounds of {args.batch}, "
        f"{time.monotonic() - began:.0f} s in all"
    )
    described = {
        "metrics": "metrics",
        "tracing": f"tracing (sample ratio {args.sample_ratio:g}, OTLP export)",
        "log": "timeline log",
    }
    off = f"the code in {args.off_source}" if args.off_source else "telemetry off"
    turned_on = " + ".join(described[p] for p in sorted(parts)) or "telemetry off"
    print(f"off: {off}; on: {turned_on}\n")
    print(_table(figures, runs))
    print(f"\nspans exported by 'on': {receiver.spans}; timeline records: {logged}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
