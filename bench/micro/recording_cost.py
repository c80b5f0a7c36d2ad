"""What recording costs: the same runs on a sidecar that records none, one that records
every turn, and one with recording configured that draws none of its turns.

Starts the LLM simulator (instant), the example shop tool server (no simulated latency)
and three sidecars against them:

- ``off``: no ``recording`` section (the default);
- ``drawn 0%``: ``recording.path`` set, the profile's ``record: 0``: a turn is drawn and
  not recorded (what every turn outside the sampled share costs);
- ``every turn``: ``record: 1``: each turn captured, redacted, bounded and written.

Every run is the benchmark workload (two model calls, three concurrent tool calls). Runs go
one at a time in batches that alternate between the sidecars round after round (drift on a
shared machine hits all alike); each batch reads the sidecar's CPU time before and after.
Prints and writes (``bench/results/recording_cost.json`` and ``.md``) the CPU per run of
each, the cost of one recorded run (``every turn`` minus ``off``), the bytes a recorded
turn writes, and what a share of 5% costs a run on average::

    python -m bench.micro.recording_cost                  # about a minute
    python -m bench.micro.recording_cost --rounds 6 --batch 20
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from bench.processes import ROOT, configured_sidecar, simulator, tool_server
from bench.workload import PROMPT
from sidecar.testing import ServerProcess

OUT = ROOT / "bench/results/recording_cost"
SHARE = 0.05
"""The share of turns a team might record, for the average cost per run."""


async def _batch(client: AgentClient, proc: ServerProcess, runs: int) -> float:
    """Run ``runs`` runs one at a time; return the sidecar's CPU seconds for them."""
    sessions = [(await client.create_session()).session_id for _ in range(runs)]
    cpu = proc.cpu_seconds()
    for session in sessions:
        result = (await client.run(session, PROMPT, timeout=30)).result
        if result.stop_reason != agent_pb2.STOP_REASON_ANSWERED or result.tool_calls != 3:
            raise RuntimeError(f"unexpected run: {result}")
    return proc.cpu_seconds() - cpu


async def _measure(
    sidecars: dict[str, ServerProcess], rounds: int, batch: int, warmup: int
) -> dict[str, list[float]]:
    """Each sidecar's CPU per run, one figure per round."""
    per_run: dict[str, list[float]] = {name: [] for name in sidecars}
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
                cpu = await _batch(clients[name], sidecars[name], batch)
                per_run[name].append(cpu / batch)
    return per_run


def _report(per_run: dict[str, list[float]], turn_bytes: float, runs: int) -> dict[str, Any]:
    medians = {name: statistics.median(values) * 1000 for name, values in per_run.items()}
    recorded = medians["every turn"] - medians["off"]
    return {
        "runs_per_sidecar": runs,
        "cpu_ms_per_run": medians,
        "cpu_ms_per_run_rounds": {k: [v * 1000 for v in vs] for k, vs in per_run.items()},
        "recorded_run_extra_cpu_ms": recorded,
        "not_drawn_extra_cpu_ms": medians["drawn 0%"] - medians["off"],
        "bytes_per_recorded_turn": turn_bytes,
        "share": SHARE,
        "average_extra_cpu_ms_at_share": recorded * SHARE,
    }


def _quartiles(values: list[float]) -> tuple[float, float]:
    q1, _, q3 = statistics.quantiles(values, n=4)
    return q1, q3


def _markdown(found: dict[str, Any]) -> str:
    cpu, rounds = found["cpu_ms_per_run"], found["cpu_ms_per_run_rounds"]
    off = cpu["off"]
    lines = [
        "| sidecar | CPU per run (ms, median of rounds) | rounds' P25 to P75 | against off |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, value in cpu.items():
        q1, q3 = _quartiles(rounds[name])
        lines.append(f"| {name} | {value:.3f} | {q1:.3f} to {q3:.3f} | {value - off:+.3f} ms |")
    q1, q3 = _quartiles(rounds["off"])
    not_drawn = found["not_drawn_extra_cpu_ms"]
    noise = "inside" if abs(not_drawn) <= (q3 - q1) else "outside"
    lines += [
        "",
        f"A recorded run costs {found['recorded_run_extra_cpu_ms']:.3f} ms of sidecar CPU "
        f"more than a run with recording off and writes "
        f"{found['bytes_per_recorded_turn'] / 1024:.1f} KiB; recording "
        f"{found['share']:.0%} of turns costs a run {found['average_extra_cpu_ms_at_share']:.3f}"
        f" ms on average. A turn not drawn measured {not_drawn:+.3f} ms, {noise} the spread "
        f"of the off sidecar's rounds ({q3 - q1:.3f} ms from P25 to P75).",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="rounds of one batch per sidecar")
    parser.add_argument("--batch", type=int, default=40, help="runs per batch")
    parser.add_argument("--warmup", type=int, default=30, help="runs per sidecar before measuring")
    args = parser.parse_args()
    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        sim = stack.enter_context(simulator())
        tools = {"shop": stack.enter_context(tool_server("shop", 0))}

        def recording(share: float, name: str) -> dict[str, Any]:
            return {
                "recording": {"path": str(directory / name)},
                "profiles": {"default": {"record": share}},
            }

        sidecars = {
            "off": stack.enter_context(configured_sidecar(sim, tools)),
            "drawn 0%": stack.enter_context(
                configured_sidecar(sim, tools, **recording(0.0, "none"))
            ),
            "every turn": stack.enter_context(
                configured_sidecar(sim, tools, **recording(1.0, "all"))
            ),
        }
        per_run = asyncio.run(_measure(sidecars, args.rounds, args.batch, args.warmup))
        written = list((directory / "all").glob("*.jsonl"))
        lines = sum(len(p.read_bytes().splitlines()) for p in written)
        size = sum(p.stat().st_size for p in written)
    runs = args.rounds * args.batch
    found = _report(per_run, size / lines if lines else 0.0, runs)
    print(
        f"recording cost: {runs} runs per sidecar (2 model calls + 3 tool calls each), "
        f"{args.rounds} interleaved rounds of {args.batch}, "
        f"{time.monotonic() - began:.0f} s in all\n"
    )
    table = _markdown(found)
    print(table, end="")
    OUT.with_suffix(".json").write_text(json.dumps(found, indent=2) + "\n")
    OUT.with_suffix(".md").write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
