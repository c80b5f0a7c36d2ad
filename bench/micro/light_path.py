"""A load ramp against a sidecar with and without a light path: answered or refused.

Starts two LLM simulators, the profile's model (``--ttft-ms 300``: the pre-sales run's two
model calls take 600 ms) and a light variant's (``--ttft-ms 30``), the example shop tool
server (tools of 30, 20 and 10 ms), and two sidecars taking at most
``--max-runs`` runs at once, with the same profile and latency budget (``budget.total``
1.5 s): one as today, whose runs past its capacity are refused with OVERLOADED, and one
whose profile names the light variant (``profiles.NAME.light``), which new runs take from
half its capacity in flight until a quarter (``server.light_path`` defaults).

Each sidecar gets the same ramp, one after the other: runs arrive at a steady rate (open
loop: a run starts on time whether or not the earlier ones ended), for ``--seconds`` at
each rate. Per rate: runs answered, refused (OVERLOADED), answered within the budget,
answered on the light path, and the latency of the answered runs at the client.

Writes ``bench/results/light_path.json`` and ``.md`` (quoted in ``docs/benchmarks.md``).

``python -m bench.micro.light_path [--rates 10,20,30,45,60] [--seconds 8] [--max-runs 16]``
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from agentsidecar.client import AgentClient
from agentsidecar.errors import error_details
from agentsidecar.v1 import agent_pb2
from bench import processes
from bench.stats import median, percentile
from bench.workload import PROMPT, REALISTIC

OUT = processes.ROOT / "bench/results/light_path.json"
FULL_MS, LIGHT_MS = 300, 30
BUDGET = 1.5
LIGHT_MODEL = "bench-light-model"


async def _ramp(address: str, rates: list[int], seconds: float) -> list[dict[str, Any]]:
    stages = []
    async with AgentClient(address) as client:
        await client.wait_ready(20)
        # More sessions than runs in flight: a session is free again long before its turn.
        sessions = [(await client.create_session()).session_id for _ in range(400)]
        pool = itertools.cycle(sessions)
        for rate in rates:
            outcomes: list[tuple[str, float, int]] = []

            async def one(session_id: str, outcomes: list[tuple[str, float, int]]) -> None:
                started = time.perf_counter()
                try:
                    response = await client.run(session_id, PROMPT, timeout=30)
                except grpc.aio.AioRpcError as exc:
                    outcomes.append((error_details(exc).reason or exc.code().name, 0.0, 0))
                    return
                result = response.result
                kind = (
                    "answered"
                    if result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
                    else (agent_pb2.StopReason.Name(result.stop_reason))
                )
                outcomes.append((kind, time.perf_counter() - started, result.path))

            tasks = []
            begin = time.perf_counter()
            for i in range(int(rate * seconds)):
                # On time, whatever the earlier runs are doing.
                await asyncio.sleep(max(0.0, begin + i / rate - time.perf_counter()))
                tasks.append(asyncio.create_task(one(next(pool), outcomes)))
            await asyncio.gather(*tasks)
            answered = [o for o in outcomes if o[0] == "answered"]
            latencies = [o[1] * 1000 for o in answered]
            stages.append(
                {
                    "rate": rate,
                    "runs": len(outcomes),
                    "answered": len(answered),
                    "refused": sum(1 for o in outcomes if o[0] == "OVERLOADED"),
                    "other": sorted({o[0] for o in outcomes} - {"answered", "OVERLOADED"}),
                    "within_budget": sum(1 for o in answered if o[1] <= BUDGET),
                    "light": sum(1 for o in answered if o[2] == agent_pb2.RUN_PATH_LIGHT),
                    "p50_ms": median(latencies) if latencies else 0.0,
                    "p99_ms": percentile(latencies, 99) if latencies else 0.0,
                }
            )
            print(f"{address}: {rate} runs/s: {stages[-1]}", flush=True)
            await asyncio.sleep(1.0)  # the last runs drain before the next rate
    return stages


def measure(rates: list[int], seconds: float, max_runs: int) -> dict[str, Any]:
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        full = processes.simulator("--ttft-ms", str(FULL_MS))
        light = processes.simulator("--ttft-ms", str(LIGHT_MS))
        shop = processes.shop(REALISTIC.tool_ms)
        profile = {"budget": {"total": BUDGET}}
        variant = {"model": {"model": LIGHT_MODEL, "base_url": f"http://{light.address}/openai/v1"}}
        try:
            for name, profiles in (
                ("no light path (today)", {"default": profile}),
                ("light path", {"default": {**profile, "light": variant}}),
            ):
                side = processes.sidecar(
                    full,
                    [("shop", shop)],
                    Path(tmp),
                    server={"max_concurrent_runs": max_runs},
                    profiles=profiles,
                )
                try:
                    found[name] = asyncio.run(_ramp(side.address, rates, seconds))
                finally:
                    side.stop()
        finally:
            for server in (shop, light, full):
                server.stop()
    return found


def report(found: dict[str, Any], seconds: float, max_runs: int) -> str:
    lines = [
        f"The pre-sales run (two model calls, three tools) arriving at a steady rate for "
        f"{seconds:g} s per rate, open loop; the sidecar takes {max_runs} runs at once; the "
        f"profile's model answers in {FULL_MS} ms, its light variant's in {LIGHT_MS} ms; "
        f"latency budget {BUDGET:g} s. Latency of the answered runs at the client.",
        "",
        "| sidecar | runs/s | runs | answered | refused OVERLOADED | within budget | "
        "on the light path | P50 ms | P99 ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, stages in found.items():
        for s in stages:
            lines.append(
                f"| {name} | {s['rate']} | {s['runs']} | {s['answered']} | {s['refused']} | "
                f"{s['within_budget']} | {s['light']} | {s['p50_ms']:.0f} | {s['p99_ms']:.0f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="10,20,30,45,60", help="runs per second, in order")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds at each rate")
    parser.add_argument("--max-runs", type=int, default=16, help="server.max_concurrent_runs")
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    started = time.time()
    found = measure(rates, args.seconds, args.max_runs)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"ramps": found, "seconds": time.time() - started}, indent=2))
    text = report(found, args.seconds, args.max_runs)
    OUT.with_suffix(".md").write_text(text + "\n")  # bench.peers quotes it
    print(text)


if __name__ == "__main__":
    main()
