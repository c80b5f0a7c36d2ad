"""Hedged calls against a heavy-tailed tool: the tool stage's P50 and P99, and the cost.

Starts the zero-latency LLM simulator and, for each tail, a tool server whose ``lookup``
answers in 10 ms except a share of calls, at random, that take 200 ms
(:mod:`bench.micro.tail_tools`); then one sidecar per hedging setting on that same
server: hedging off, the defaults (second copy after the tool's P95, at most 5% extra
calls), and P95 with a budget of 10%. Each run asks for one ``lookup``; runs go through the
sidecars in interleaved rounds, ``--concurrency`` at a time, after a warm-up that lets
each sidecar learn the tool's latency. The tool stage is the call's ``TOOL_CALL`` stage
in the run's timeline; extra calls are second copies per call sent.

Writes ``bench/results/hedging.json`` and ``.md`` (quoted in ``docs/benchmarks.md``).

``python -m bench.micro.hedging [--runs 1000] [--rounds 5] [--concurrency 4]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from bench import processes
from bench.stats import median, percentile

OUT = processes.ROOT / "bench/results/hedging.json"
FAST_MS, SLOW_MS = 10, 200
TAILS = (0.05, 0.02)
"""Shares of calls that take ``SLOW_MS``."""
SETTINGS: dict[str, dict[str, Any] | None] = {
    "off": None,
    "P95, budget 5% (defaults)": {},
    "P95, budget 10%": {"budget": 0.1},
}


async def _runs(address: str, runs: int, concurrency: int) -> list[agent_pb2.Stage]:
    """``runs`` runs of one lookup each; their tool stages."""
    stages: list[agent_pb2.Stage] = []
    async with AgentClient(address) as client:
        await client.wait_ready(20)

        async def one(worker: int) -> None:
            session = await client.create_session()
            for i in range(worker, runs, concurrency):
                response = await client.run(session.session_id, f"call lookup key=k{i}")
                result = response.result
                if result.stop_reason != agent_pb2.STOP_REASON_ANSWERED:
                    raise RuntimeError(f"a run ended {result.stop_reason}: {result.error}")
                stages.extend(
                    s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL
                )

        await asyncio.gather(*(one(w) for w in range(concurrency)))
    return stages


def _ms(duration: Any) -> float:
    return float(duration.seconds * 1000 + duration.nanos / 1e6)


def _summary(stages: list[agent_pb2.Stage]) -> dict[str, float]:
    durations = [_ms(s.duration) for s in stages]
    hedged = [s for s in stages if s.tool_call.hedge != agent_pb2.TOOL_HEDGE_UNSPECIFIED]
    won = [s for s in hedged if s.tool_call.hedge == agent_pb2.TOOL_HEDGE_SECOND_WON]
    return {
        "calls": len(stages),
        "p50_ms": median(durations),
        "p99_ms": percentile(durations, 99),
        "max_ms": max(durations),
        "extra_calls": len(hedged) / len(stages),
        "second_won": len(won) / max(1, len(hedged)),
        "hedge_delay_p50_ms": median([_ms(s.tool_call.hedge_delay) for s in hedged])
        if hedged
        else 0.0,
    }


def measure(runs: int, rounds: int, concurrency: int, warmup: int) -> dict[str, Any]:
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        sim = processes.simulator()
        try:
            for share in TAILS:
                tools = processes.start(
                    "-m",
                    "bench.micro.tail_tools",
                    "--port",
                    "0",
                    "--fast-ms",
                    str(FAST_MS),
                    "--slow-ms",
                    str(SLOW_MS),
                    "--tail-share",
                    str(share),
                    "--log-level",
                    "WARNING",
                )
                sidecars = {
                    name: processes.sidecar(
                        sim,
                        [("tail", tools)],
                        Path(tmp),
                        tool_server=None if policy is None else {"hedge": policy},
                    )
                    for name, policy in SETTINGS.items()
                }
                try:
                    for side in sidecars.values():
                        asyncio.run(_runs(side.address, warmup, concurrency))
                    stages: dict[str, list[agent_pb2.Stage]] = {n: [] for n in sidecars}
                    cpu = dict.fromkeys(sidecars, 0.0)
                    names = list(sidecars)
                    for r in range(rounds):
                        for name in names[r % len(names) :] + names[: r % len(names)]:
                            side = sidecars[name]
                            before = side.cpu_seconds()
                            stages[name] += asyncio.run(
                                _runs(side.address, runs // rounds, concurrency)
                            )
                            cpu[name] += side.cpu_seconds() - before
                        print(f"tail {share:.0%}: round {r + 1}/{rounds}", flush=True)
                    found[f"{share:g}"] = {
                        n: {**_summary(s), "sidecar_cpu_ms": cpu[n] / len(s) * 1000}
                        for n, s in stages.items()
                    }
                finally:
                    for side in sidecars.values():
                        side.stop()
                    tools.stop()
        finally:
            sim.stop()
    return found


def report(found: dict[str, Any], runs: int, concurrency: int) -> str:
    lines = [
        f"One `lookup` per run, {runs} runs per setting, {concurrency} at a time, the "
        f"settings interleaved; the tool answers in {FAST_MS} ms, a share of its calls "
        f"(at random) in {SLOW_MS} ms. Tool stage as the run's timeline reports it.",
        "",
        "| slow calls | hedging | tool stage P50 ms | P99 ms | max ms | extra calls | "
        "second copy won | hedge delay P50 ms | sidecar CPU per run ms |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for share, settings in found.items():
        for name, r in settings.items():
            lines.append(
                f"| {float(share):.0%} | {name} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
                f"{r['max_ms']:.1f} | {r['extra_calls']:.1%} | {r['second_won']:.0%} | "
                f"{r['hedge_delay_p50_ms']:.1f} | {r['sidecar_cpu_ms']:.2f} |"
            )
    for share, settings in found.items():
        off = settings["off"]
        for name, r in settings.items():
            if name != "off":
                lines.append(
                    f"\n{float(share):.0%} slow, {name}: P99 {off['p99_ms'] / r['p99_ms']:.1f}x "
                    f"lower for {r['extra_calls']:.1%} extra calls; P50 "
                    f"{r['p50_ms'] - off['p50_ms']:+.1f} ms."
                )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000, help="measured runs per setting")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--concurrency", type=int, default=4, help="runs at a time")
    parser.add_argument("--warmup", type=int, default=100, help="runs before measuring")
    args = parser.parse_args()
    started = time.time()
    found = measure(args.runs, args.rounds, args.concurrency, args.warmup)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"settings": found, "seconds": time.time() - started}, indent=2))
    text = report(found, args.runs, args.concurrency)
    OUT.with_suffix(".md").write_text(text + "\n")  # bench.peers quotes it
    print(text)


if __name__ == "__main__":
    main()
