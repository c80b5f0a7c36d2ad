"""The cost guard: what runs cost with and without a cap, what the guard costs, a day's quota.

Starts the zero-latency LLM simulator with a scenario of research runs that go 1 to 6
tool steps deep (each step fetches a ~4 KB report, so each model call's prompt is larger
than the last: a deep run costs several times a shallow one), the report tool server
(:mod:`bench.micro.report_tools`), and sidecars pricing the model at Groq's list price of
``openai/gpt-oss-120b``. Depths are drawn at random (seeded), the same sequence for
every sidecar:

1. **Off and on, never reached**: one sidecar without limits and one whose
   ``cost.per_run`` is far above any run, interleaved: the cost of each run, and the
   sidecar's CPU per run (what pricing each call before it is made costs).
2. **Capped**: ``cost.per_run`` at the median cost of phase 1: how many runs stop
   (STOP_REASON_COST_LIMIT), what they cost, and by how much any run passed the cap.
3. **A day's quota**: a principal whose ``quota.daily_cost`` is twenty median runs: runs
   until the first refusal (QUOTA_EXCEEDED), and the day's total against the quota.

Writes ``bench/results/cost_guard.json`` and ``.md`` (quoted in ``docs/benchmarks.md``).

``python -m bench.micro.cost_guard [--runs 300]``
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import yaml

from agentsidecar.client import AgentClient
from agentsidecar.errors import error_details
from agentsidecar.v1 import agent_pb2
from bench import processes
from bench.stats import median, percentile
from sidecar.testing import ServerProcess

OUT = processes.ROOT / "bench/results/cost_guard.json"
MODEL = "openai/gpt-oss-120b"
PRICE = {"prompt": 0.15, "completion": 0.60}  # USD per million tokens, Groq's list price
DEPTHS = range(1, 7)
TOKEN = "bench-principal-token"


def _scenario(path: Path) -> None:
    rules = [
        {
            "match": f"research depth {depth}$",
            "steps": [
                *(
                    {"tool_calls": [{"name": "fetch_report", "arguments": {"topic": f"t{i}"}}]}
                    for i in range(depth)
                ),
                {"text": f"researched {depth} reports"},
            ],
        }
        for depth in DEPTHS
    ]
    path.write_text(yaml.safe_dump(rules))


async def _runs(
    address: str, depths: list[int], token: str | None = None
) -> tuple[list[agent_pb2.RunResult], grpc.aio.AioRpcError | None]:
    """Runs of these depths, one at a time; stops at the first refusal."""
    results: list[agent_pb2.RunResult] = []
    async with AgentClient(address, token=token) as client:
        await client.wait_ready(20)
        for depth in depths:
            # A session each: a run's cost depends on its depth alone.
            session = await client.create_session()
            try:
                response = await client.run(session.session_id, f"research depth {depth}")
            except grpc.aio.AioRpcError as exc:
                return results, exc
            results.append(response.result)
    return results, None


def _costs(results: list[agent_pb2.RunResult]) -> list[float]:
    return [r.cost.total_usd for r in results]


def _sidecar(
    sim: ServerProcess,
    tools: ServerProcess,
    workdir: Path,
    cost: dict[str, Any] | None = None,
    auth: dict[str, Any] | None = None,
) -> ServerProcess:
    return processes.sidecar(
        sim,
        [("reports", tools)],
        workdir,
        model={"model": MODEL},
        profiles={"default": {"max_steps": 10, "cost": cost or {}}},
        auth=auth,
        prices={MODEL: PRICE},
    )


def measure(runs: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    depths = [rng.choice(DEPTHS) for _ in range(runs)]
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        scenario = workdir / "research.yaml"
        _scenario(scenario)
        sim = processes.simulator("--scenario", str(scenario))
        tools = processes.start(
            "bench/micro/report_tools.py", "--port", "0", "--log-level", "WARNING"
        )
        try:
            off = _sidecar(sim, tools, workdir)
            loose = _sidecar(sim, tools, workdir, cost={"per_run": 1000.0})
            try:
                cpu = {"off": 0.0, "on, never reached": 0.0}
                results: dict[str, list[agent_pb2.RunResult]] = {n: [] for n in cpu}
                rounds = 6
                chunk = runs // rounds
                for r in range(rounds):
                    part = depths[r * chunk : (r + 1) * chunk]
                    pair = [("off", off), ("on, never reached", loose)]
                    for name, side in pair if r % 2 == 0 else pair[::-1]:
                        before = side.cpu_seconds()
                        got, _ = asyncio.run(_runs(side.address, part))
                        cpu[name] += side.cpu_seconds() - before
                        results[name] += got
                for name, got in results.items():
                    costs = _costs(got)
                    found[name] = {
                        "runs": len(got),
                        "cost_p50": median(costs),
                        "cost_max": max(costs),
                        "cost_sum": sum(costs),
                        "sidecar_cpu_ms": cpu[name] / len(got) * 1000,
                    }
            finally:
                off.stop()
                loose.stop()
            cap = found["off"]["cost_p50"]
            capped = _sidecar(sim, tools, workdir, cost={"per_run": cap})
            try:
                got, _ = asyncio.run(_runs(capped.address, depths))
            finally:
                capped.stop()
            costs = _costs(got)
            stopped = [r for r in got if r.stop_reason == agent_pb2.STOP_REASON_COST_LIMIT]
            found["capped"] = {
                "cap": cap,
                "runs": len(got),
                "stopped": len(stopped),
                "cost_p50": median(costs),
                "cost_p99": percentile(costs, 99),
                "cost_max": max(costs),
                "cost_sum": sum(costs),
                "over_cap": sum(1 for c in costs if c > cap),
                "largest_overshoot": max(0.0, max(costs) - cap),
            }
            quota = round(20 * cap, 6)
            principal = {
                "name": "bench",
                "token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest(),
                "quota": {"daily_cost": quota},
            }
            daily = _sidecar(sim, tools, workdir, auth={"principals": [principal]})
            try:
                got, refused = asyncio.run(_runs(daily.address, depths * 2, token=TOKEN))
            finally:
                daily.stop()
            found["daily"] = {
                "quota": quota,
                "runs_before_refusal": len(got),
                "day_total": sum(_costs(got)),
                "refusal": error_details(refused).reason if refused is not None else None,
                "retry_delay_s": error_details(refused).retry_delay if refused else None,
            }
        finally:
            tools.stop()
            sim.stop()
    return found


def report(found: dict[str, Any], runs: int) -> str:
    off, loose, capped, daily = (
        found["off"],
        found["on, never reached"],
        found["capped"],
        found["daily"],
    )
    return "\n".join(
        [
            f"{runs} research runs, 1 to 6 tool steps deep (drawn at random, the same "
            f"sequence for each sidecar), priced at {MODEL}'s list price; one run at a time.",
            "",
            "| sidecar | runs | cost P50 USD | cost max USD | sidecar CPU per run ms |",
            "| --- | ---: | ---: | ---: | ---: |",
            f"| off | {off['runs']} | {off['cost_p50']:.6f} | {off['cost_max']:.6f} | "
            f"{off['sidecar_cpu_ms']:.2f} |",
            f"| `cost.per_run` far above any run | {loose['runs']} | {loose['cost_p50']:.6f} | "
            f"{loose['cost_max']:.6f} | {loose['sidecar_cpu_ms']:.2f} |",
            "",
            f"Capped at the median run's cost (`cost.per_run: {capped['cap']:.6f}`): "
            f"{capped['stopped']} of {capped['runs']} runs stopped with "
            f"`STOP_REASON_COST_LIMIT`; cost P50 {capped['cost_p50']:.6f}, P99 "
            f"{capped['cost_p99']:.6f}, max {capped['cost_max']:.6f} USD; "
            f"{capped['over_cap']} runs ended above the cap, by at most "
            f"{capped['largest_overshoot']:.6f} USD "
            f"({capped['largest_overshoot'] / capped['cap']:.2%} of it); all runs together cost "
            f"{capped['cost_sum']:.4f} USD against {off['cost_sum']:.4f} uncapped.",
            "",
            f"A principal with `quota.daily_cost: {daily['quota']:.6f}` (twenty median runs): "
            f"{daily['runs_before_refusal']} runs answered, their day's total "
            f"{daily['day_total']:.6f} USD, then `{daily['refusal']}` "
            f"(retry in {daily['retry_delay_s'] or 0:.0f} s, at midnight UTC).",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300, help="runs per sidecar")
    parser.add_argument("--seed", type=int, default=7, help="seed of the runs' depths")
    args = parser.parse_args()
    started = time.time()
    found = measure(args.runs, args.seed)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({**found, "seconds": time.time() - started}, indent=2))
    text = report(found, args.runs)
    OUT.with_suffix(".md").write_text(text + "\n")  # bench.peers quotes it
    print(text)


if __name__ == "__main__":
    main()
