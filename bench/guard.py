"""The speed guard: a run's CPU (sidecar + its tool server) against the in-process floor.

``python -m bench.guard`` (``make bench-guard``) starts a zero-latency LLM simulator, the
example shop tool server and a sidecar in its default configuration (SQLite, the aiohttp
transport), and two contender workers: the sidecar's client and the floor (a hand-written
asyncio + aiohttp loop with the same tools in-process). Then, ``--rounds`` times, each runs
``--runs`` turns of the workload at concurrency 1, interleaved, and the round's ratio is

    (sidecar CPU + tool server CPU) per run  /  floor CPU per run

CPU time, never wall time (each process's own CPU clock, to the nanosecond): the machine's
load moves both sides alike, and a ratio within one round cancels the machine's speed. The
guard prints every round and the medians, and fails (exit 1) when the median ratio is
above the budget committed in ``bench/guard.json``. The budget only goes down: a change
that speeds the hot path lowers it in the same commit.

``--baseline DIR`` runs a second sidecar and tool server from another source tree (an older
commit checked out there) in the same rounds: a before and after measured side by side.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import processes
from bench.workload import ZERO
from sidecar.testing import ServerProcess

BUDGET_FILE = Path(__file__).with_name("guard.json")


class _Stack:
    """A sidecar and its tool server, from this tree or another."""

    def __init__(self, sim: ServerProcess, workdir: Path, source: Path | None) -> None:
        self.tools = processes.shop(ZERO.tool_ms, source=source)
        self.sidecar = processes.sidecar(sim, [("shop", self.tools)], workdir, source=source)

    def stop(self) -> None:
        self.sidecar.stop()
        self.tools.stop()


def _sidecar_round(stack: _Stack, worker: processes.Worker, runs: int) -> dict[str, float]:
    command = {"mode": ZERO.name, "target": stack.sidecar.address, "concurrency": 1}
    worker.command(op="prepare", runs=runs, **command)
    cpu0, tools0 = stack.sidecar.cpu_seconds(), stack.tools.cpu_seconds()
    result = worker.command(op="batch", runs=runs, **command)
    return {
        "sidecar_ms": (stack.sidecar.cpu_seconds() - cpu0) / runs * 1000,
        "tools_ms": (stack.tools.cpu_seconds() - tools0) / runs * 1000,
        "client_ms": result["cpu_s"] / runs * 1000,
    }


def _floor_round(worker: processes.Worker, sim_url: str, runs: int) -> float:
    command = {"mode": ZERO.name, "target": sim_url, "concurrency": 1}
    result = worker.command(op="batch", runs=runs, **command)
    return float(result["cpu_s"]) / runs * 1000


def run(
    rounds: int, runs: int, warmup: int, baseline: Path | None = None
) -> list[dict[str, float]]:
    """Measure ``rounds`` interleaved rounds; return each round's figures (with
    ``baseline``, its sidecar's under ``baseline_*``)."""
    with tempfile.TemporaryDirectory() as tmp:
        sim = processes.simulator()
        stacks = {"": _Stack(sim, Path(tmp), None)}
        if baseline is not None:
            stacks["baseline_"] = _Stack(sim, Path(tmp), baseline)
        workers = {name: processes.Worker(name) for name in ("sidecar", "floor")}
        sim_url = f"http://{sim.address}/openai/v1"
        try:
            for stack in stacks.values():  # connections, caches, first-call costs
                _sidecar_round(stack, workers["sidecar"], warmup)
            _floor_round(workers["floor"], sim_url, warmup)
            found = []
            for number in range(rounds):
                figures: dict[str, float] = {}
                order = list(stacks.items())
                if number % 2:
                    order.reverse()  # neither stack always runs first
                for prefix, stack in order:
                    measured = _sidecar_round(stack, workers["sidecar"], runs)
                    figures.update({prefix + k: v for k, v in measured.items()})
                figures["floor_ms"] = _floor_round(workers["floor"], sim_url, runs)
                for prefix in stacks:
                    total = figures[prefix + "sidecar_ms"] + figures[prefix + "tools_ms"]
                    figures[prefix + "ratio"] = total / figures["floor_ms"]
                found.append(figures)
                line = ", ".join(
                    f"{label}{figures[p + 'sidecar_ms']:.2f} + {figures[p + 'tools_ms']:.2f} ms "
                    f"= {figures[p + 'ratio']:.2f}x"
                    for p, label in (("", ""), ("baseline_", "baseline "))
                    if p in stacks
                )
                print(
                    f"round {number + 1:2d}/{rounds}: {line} (floor {figures['floor_ms']:.3f} ms)",
                    flush=True,
                )
            return found
        finally:
            for worker in workers.values():
                worker.stop()
            for stack in stacks.values():
                stack.stop()
            sim.stop()


def summary(found: list[dict[str, float]]) -> dict[str, Any]:
    """The medians of every figure over the rounds."""
    return {key: statistics.median(f[key] for f in found) for key in found[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (odd)")
    parser.add_argument("--runs", type=int, default=300, help="turns per contender and round")
    parser.add_argument("--warmup", type=int, default=100, help="turns before measuring")
    parser.add_argument("--budget", type=float, help="fail above this ratio (default: guard.json)")
    parser.add_argument("--baseline", type=Path, help="another source tree, measured alongside")
    parser.add_argument("--json", help="write the rounds and their medians here")
    args = parser.parse_args(argv)
    budget = (
        args.budget if args.budget is not None else json.loads(BUDGET_FILE.read_text())["budget"]
    )
    started = time.perf_counter()
    found = run(args.rounds, args.runs, args.warmup, args.baseline)
    medians = summary(found)
    ratios = [f["ratio"] for f in found]
    print(
        f"median: sidecar {medians['sidecar_ms']:.3f} + tools {medians['tools_ms']:.3f} ms per "
        f"run against the floor's {medians['floor_ms']:.3f} ms: {medians['ratio']:.2f}x "
        f"(rounds from {min(ratios):.2f} to {max(ratios):.2f}); budget {budget:.2f}x; "
        f"{time.perf_counter() - started:.0f} s"
    )
    if args.baseline is not None:
        print(
            f"baseline: sidecar {medians['baseline_sidecar_ms']:.3f} + tools "
            f"{medians['baseline_tools_ms']:.3f} ms per run: {medians['baseline_ratio']:.2f}x"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"rounds": found, "medians": medians}, indent=1))
    if medians["ratio"] > budget:
        print(
            f"bench-guard: CPU per run is {medians['ratio']:.2f}x the floor's, over the budget of "
            f"{budget:.2f}x: a change made the hot path slower (profile it: docs/benchmarks.md)",
            file=sys.stderr,
        )
        return 1
    print("bench-guard: within budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
