"""A contender's process: runs batches of the workload on command, reports what it measured.

The orchestrator talks to it over stdin/stdout, one JSON object per line:
``{"op": "batch", "mode": "zero", "target": URL_OR_ADDRESS, "runs": 200, "concurrency": 32}``
→ ``{"latencies_ms": [...], "wall_s": ..., "cpu_s": ...}``; ``{"op": "prepare", ...}`` lets
a contender make per-run state ahead (``→ {"prepared": N}``). The process stays up between
batches so imports and connection setup are never measured; ``cpu_s`` is this process's
own CPU time (user + system) during the measured runs.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.workload import MODES, Mode


def _cpu() -> float:
    return time.process_time()  # user + system of this process, all threads


async def _batch_async(
    contender: Any, mode: Mode, target: str, runs: int, concurrency: int
) -> tuple[list[float], float, float]:
    latencies: list[float] = []
    queue = iter(range(runs))

    async def lane() -> None:
        for _ in queue:
            start = time.perf_counter()
            await contender.run_once(mode, target)
            latencies.append((time.perf_counter() - start) * 1000)

    cpu0, wall0 = _cpu(), time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(lane())
    return latencies, time.perf_counter() - wall0, _cpu() - cpu0


def _batch_sync(
    contender: Any, mode: Mode, target: str, runs: int, concurrency: int
) -> tuple[list[float], float, float]:
    latencies: list[float] = []

    def one(_: int) -> None:
        start = time.perf_counter()
        contender.run_once(mode, target)
        latencies.append((time.perf_counter() - start) * 1000)

    cpu0, wall0 = _cpu(), time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(runs)))
    return latencies, time.perf_counter() - wall0, _cpu() - cpu0


async def _serve(contender: Any, is_async: bool) -> None:
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        command = json.loads(line)
        mode = MODES[command["mode"]]
        target, runs = command["target"], command["runs"]
        if command["op"] == "prepare":
            # Per-run state made ahead (the sidecar's sessions), outside any measurement.
            prepare = getattr(contender, "prepare", None)
            if prepare is not None:
                await prepare(mode, target, runs)
            print(json.dumps({"prepared": runs}), flush=True)
            continue
        concurrency = command["concurrency"]
        take_breakdowns = getattr(contender, "take_breakdowns", None)
        if take_breakdowns is not None:
            take_breakdowns()  # forget the warm-up's
        if is_async:
            result = await _batch_async(contender, mode, target, runs, concurrency)
        else:
            result = await asyncio.to_thread(
                _batch_sync, contender, mode, target, runs, concurrency
            )
        latencies, wall, cpu = result
        reply: dict[str, Any] = {"latencies_ms": latencies, "wall_s": wall, "cpu_s": cpu}
        if take_breakdowns is not None:
            reply["breakdowns"] = take_breakdowns()  # the sidecar's: where overhead went
        print(json.dumps(reply), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("contender", help="module under bench.peers.contenders")
    parser.add_argument("--uvloop", action="store_true")
    args = parser.parse_args()
    module = importlib.import_module(f"bench.peers.contenders.{args.contender}")
    contender = module.Contender()
    is_async = asyncio.iscoroutinefunction(contender.run_once)
    print(json.dumps({"ready": args.contender}), flush=True)
    if args.uvloop:
        import uvloop

        uvloop.run(_serve(contender, is_async))
    else:
        asyncio.run(_serve(contender, is_async))


if __name__ == "__main__":
    main()
