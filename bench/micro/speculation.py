"""Speculative prefetch on repeated realistic turns: latency saved, hit rate, waste.

Starts the LLM simulator (50 ms a model call) with a scenario for complaints (answered
without tools), the example orders and logistics tool servers (30 ms a call), and two
sidecars on them: one whose profile speculates (``speculation.enabled``, the defaults but
learning every second) and one that does not. The workload is a support desk's turns,
each in a session of its own, each order number new (a tool-result cache never helps):

- 80% "Where is order N?" (the model looks the order up),
- 10% "What is the status of order N, and where is its parcel?" (the order and the parcel),
- 5% "I want to complain about order N" (the model answers at once: a speculation here is
  waste),
- 5% "Hello, what can you do?" (nothing to predict).

First ``--learn`` turns teach the speculating sidecar (its store's history), until it has
a rule; then both sidecars run the same ``--runs`` turns, ``--concurrency`` at a time, in
interleaved rounds. Reported: latency at the client (P50, P99) of each, and what it saved;
speculated calls per run, the share the model asked for (hits), the calls wasted, and the
extra calls the tool servers got.

Writes ``bench/results/speculation.json`` and ``.md`` (quoted in ``docs/benchmarks.md``).

``python -m bench.micro.speculation [--runs 400] [--learn 200] [--concurrency 4]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from bench import processes
from bench.stats import median, percentile
from sidecar.testing import ServerProcess

OUT = processes.ROOT / "bench/results/speculation.json"
MODEL_MS, TOOL_MS = 50, 30
MIX = (
    (0.80, "Where is order {n}?"),
    (0.10, "What is the status of order {n}, and where is its parcel?"),
    (0.05, "I want to complain about order {n}"),
    (0.05, "Hello, what can you do?"),
)


def _inputs(count: int, rng: random.Random, first: int) -> list[str]:
    texts = []
    for i in range(count):
        point, chosen = rng.random(), MIX[-1][1]
        for share, text in MIX:
            if point < share:
                chosen = text
                break
            point -= share
        texts.append(chosen.format(n=first + i))
    return texts


async def _runs(address: str, texts: list[str], concurrency: int) -> list[tuple[float, Any]]:
    found: list[tuple[float, Any]] = []
    async with AgentClient(address) as client:
        await client.wait_ready(20)

        async def worker(offset: int) -> None:
            for text in texts[offset::concurrency]:
                session = await client.create_session()
                started = time.perf_counter()
                response = await client.run(session.session_id, text, timeout=30)
                found.append(((time.perf_counter() - started) * 1000, response.result))

        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return found


async def _metric(side: ServerProcess, name: str, **labels: str) -> float:
    address = side.announced("metrics on ")
    async with aiohttp.ClientSession() as http, http.get(f"http://{address}/metrics") as r:
        text = await r.text()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


async def _until_learned(side: ServerProcess) -> None:
    async with asyncio.timeout(60):
        while not await _metric(side, "agent_sidecar_speculation_rules", profile="default"):  # noqa: ASYNC110
            await asyncio.sleep(0.5)


def measure(runs: int, learn: int, concurrency: int, rounds: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        scenario = workdir / "complaints.yaml"
        scenario.write_text(
            yaml.safe_dump(
                [{"match": "complain", "steps": [{"text": "I am sorry; I have noted it."}]}]
            )
        )
        sim = processes.simulator("--scenario", str(scenario), "--ttft-ms", str(MODEL_MS))
        orders = processes.tool_server("orders", TOOL_MS)
        logistics = processes.tool_server("logistics", TOOL_MS)
        tools = [("orders", orders), ("logistics", logistics)]
        speculate = {"enabled": True, "relearn_interval": 1.0}
        metrics = {"metrics": {"enabled": True, "port": 0}}
        on = processes.sidecar(
            sim, tools, workdir, profiles={"default": {"speculation": speculate}}, telemetry=metrics
        )
        off = processes.sidecar(sim, tools, workdir, telemetry=metrics)
        try:
            asyncio.run(_runs(on.address, _inputs(learn, rng, 10_000_000), concurrency))
            asyncio.run(_until_learned(on))
            counted = ("agent_sidecar_speculated_calls_total",)
            before = {
                kind: asyncio.run(_metric(on, *counted, result=kind)) for kind in ("used", "wasted")
            }
            texts = _inputs(runs, rng, 20_000_000)
            results: dict[str, list[tuple[float, Any]]] = {"on": [], "off": []}
            tool_cpu = {"on": 0.0, "off": 0.0}
            chunk = len(texts) // rounds
            for r in range(rounds):
                part = texts[r * chunk : (r + 1) * chunk]
                pair = [("on", on), ("off", off)]
                for name, side in pair if r % 2 == 0 else pair[::-1]:
                    cpu = orders.cpu_seconds() + logistics.cpu_seconds()
                    results[name] += asyncio.run(_runs(side.address, part, concurrency))
                    tool_cpu[name] += orders.cpu_seconds() + logistics.cpu_seconds() - cpu
            used, wasted = (
                asyncio.run(_metric(on, *counted, result=kind)) - before[kind]
                for kind in ("used", "wasted")
            )
        finally:
            for server in (on, off, orders, logistics, sim):
                server.stop()
    found: dict[str, Any] = {"runs": len(results["on"]), "concurrency": concurrency}
    for name, got in results.items():
        latencies = [ms for ms, _ in got]
        calls = sum(r.tool_calls for _, r in got)
        found[name] = {
            "p50_ms": median(latencies),
            "p99_ms": percentile(latencies, 99),
            "tool_calls": calls,
            "tool_server_cpu_ms_per_run": tool_cpu[name] / len(got) * 1000,
            "speculated_stages": sum(
                1
                for _, r in got
                for s in r.timeline.stages
                if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL and s.tool_call.speculated
            ),
            "answered": sum(1 for _, r in got if r.stop_reason == agent_pb2.STOP_REASON_ANSWERED),
        }
    found["speculation"] = {"used": used, "wasted": wasted}
    return found


def report(found: dict[str, Any], learn: int) -> str:
    on, off, spec = found["on"], found["off"], found["speculation"]
    runs = found["runs"]
    used, wasted = spec["used"], spec["wasted"]
    precision = used / max(1.0, used + wasted)
    return "\n".join(
        [
            f"{runs} support-desk turns per sidecar ({learn} more taught the speculating one "
            f"first), {found['concurrency']} at a time, interleaved; model calls "
            f"{MODEL_MS} ms, tool calls {TOOL_MS} ms; latency at the client.",
            "",
            "| speculation | P50 ms | P99 ms | tool calls | speculated calls used | "
            "tool servers' CPU per run ms |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
            f"| on | {on['p50_ms']:.1f} | {on['p99_ms']:.1f} | {on['tool_calls']} | "
            f"{on['speculated_stages']} | {on['tool_server_cpu_ms_per_run']:.2f} |",
            f"| off | {off['p50_ms']:.1f} | {off['p99_ms']:.1f} | {off['tool_calls']} | 0 | "
            f"{off['tool_server_cpu_ms_per_run']:.2f} |",
            "",
            f"Saved per run: {off['p50_ms'] - on['p50_ms']:.1f} ms at the P50, "
            f"{off['p99_ms'] - on['p99_ms']:.1f} ms at the P99. Of the calls speculated in the "
            f"measured turns the model asked for {used:.0f} and not for {wasted:.0f}: a hit "
            f"rate of {precision:.1%}; "
            f"{on['speculated_stages'] / runs:.0%} of the measured turns were answered from "
            f"a speculation, and the tool servers got {wasted / max(1.0, used + wasted):.1%} "
            "more calls than the model made.",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400, help="measured turns per sidecar")
    parser.add_argument("--learn", type=int, default=200, help="turns that teach it first")
    parser.add_argument("--concurrency", type=int, default=4, help="turns at a time")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds")
    parser.add_argument("--seed", type=int, default=11, help="seed of the turns' mix")
    args = parser.parse_args()
    started = time.time()
    found = measure(args.runs, args.learn, args.concurrency, args.rounds, args.seed)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({**found, "seconds": time.time() - started}, indent=2))
    text = report(found, args.learn)
    OUT.with_suffix(".md").write_text(text + "\n")  # bench.peers quotes it
    print(text)


if __name__ == "__main__":
    main()
