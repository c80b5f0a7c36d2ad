"""Do control-plane calls queue behind turns? CreateSession and GetSession under load.

Starts the zero-latency LLM simulator, the example shop tool server and a sidecar in its
default configuration; measures ``CreateSession`` and ``GetSession`` (of a session with
one turn) from a separate client, one call every 20 ms, first on an idle sidecar, then
while a worker keeps ``--concurrency`` turns running. Prints the latency P50 and P99 of
each, idle and loaded, and writes ``bench/results/control_plane.json`` (and ``.md``).

``python -m bench.micro.control_plane [--calls 150] [--concurrency 32]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from agentsidecar.client import AgentClient
from bench import processes
from bench.stats import median, percentile
from bench.workload import PROMPT, ZERO

OUT = processes.ROOT / "bench/results/control_plane.json"


async def _latencies(address: str, calls: int) -> dict[str, list[float]]:
    async with AgentClient(address) as client:
        seen = await client.create_session()
        await client.run(seen.session_id, PROMPT)
        found: dict[str, list[float]] = {"CreateSession": [], "GetSession": []}
        for _ in range(calls):
            start = time.perf_counter()
            await client.create_session()
            found["CreateSession"].append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            await client.get_session(seen.session_id)
            found["GetSession"].append((time.perf_counter() - start) * 1000)
            await asyncio.sleep(0.02)
        return found


def _load(address: str, concurrency: int, stop: threading.Event, ready: threading.Event) -> None:
    worker = processes.Worker("sidecar")
    command = {"mode": ZERO.name, "target": address, "concurrency": concurrency}
    try:
        while not stop.is_set():
            worker.command(op="prepare", runs=concurrency * 10, **command)
            ready.set()
            worker.command(op="batch", runs=concurrency * 10, **command)
    finally:
        ready.set()
        worker.stop()


def measure(calls: int, concurrency: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        sim = processes.simulator()
        tools = processes.shop(ZERO.tool_ms)
        sidecar = processes.sidecar(sim, [("shop", tools)], Path(tmp))
        try:
            idle = asyncio.run(_latencies(sidecar.address, calls))
            stop, ready = threading.Event(), threading.Event()
            load = threading.Thread(target=_load, args=(sidecar.address, concurrency, stop, ready))
            load.start()
            try:
                ready.wait()
                time.sleep(1.0)  # the turns under way
                loaded = asyncio.run(_latencies(sidecar.address, calls))
            finally:
                stop.set()
                load.join()
        finally:
            sidecar.stop()
            tools.stop()
            sim.stop()
    return {
        f"{rpc} {state}": {"p50_ms": median(values), "p99_ms": percentile(values, 99)}
        for state, found in (("idle", idle), (f"beside {concurrency} turns", loaded))
        for rpc, values in found.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=150, help="calls of each RPC per state")
    parser.add_argument("--concurrency", type=int, default=32, help="turns kept running")
    args = parser.parse_args()
    found = measure(args.calls, args.concurrency)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(found, indent=2) + "\n")
    lines = [
        f"{args.calls} calls of each, one every 20 ms, from a client of their own:",
        "",
        "| call | P50 ms | P99 ms |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| {n} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} |" for n, r in found.items()]
    text = "\n".join(lines)
    # bench.peers quotes it in docs/benchmarks.md.
    OUT.with_suffix(".md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
