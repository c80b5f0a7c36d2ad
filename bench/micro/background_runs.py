"""What a background run costs against a streamed one, and what replicas on one PostgreSQL run.

Two measurements, each through real processes on 127.0.0.1 (the LLM simulator and the
example shop tool server answering at once, so what is left is the sidecar's own work):

- **cost**: one sidecar in its default configuration (SQLite). Rounds that alternate between
  the same run streamed (``StreamRun`` read to its end) and started in the background
  (``StartRun``, then ``WatchRun`` read to its end), one run at a time, each in a new
  session. Per run: the sidecar's CPU (``/proc/PID/stat``, every thread), the tool
  server's, and the latency at the caller, from the request to the last event.
- **throughput**: ``--runs`` background runs started at once (``--concurrency`` callers
  submitting), each in a new session, on one sidecar and then on two replicas sharing one
  private PostgreSQL server (started here), submissions spread over the replicas; runs
  finished per second, from the first submission to the last run's end (read from the
  store), and every run accounted for.

Writes ``bench/results/background_runs.md`` (quoted by ``make bench`` in
docs/benchmarks.md) and ``background_runs.json``::

    python -m bench.micro.background_runs           # make bench-background; a few minutes
    python -m bench.micro.background_runs --rounds 4 --batch 40 --runs 200
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg

from agentsidecar.client import AgentClient
from bench.processes import ROOT, configured_sidecar, shop, simulator
from bench.stats import percentile
from bench.workload import PROMPT, ZERO
from sidecar.testing import (
    POSTGRES_MISSING,
    PostgresServer,
    ServerProcess,
    create_database,
    postgres_binaries,
)

OUT = ROOT / "bench/results/background_runs.md"
FINISHED = (3, 4, 5, 7)  # RunState: COMPLETED, FAILED, CANCELED, REJECTED


# -- cost -----------------------------------------------------------------------------------


async def _streamed(client: AgentClient) -> float:
    session = await client.create_session()
    start = time.perf_counter()
    async for event in client.stream(session.session_id, PROMPT, timeout=30):
        if event.HasField("run_finished") and event.run_finished.tool_calls != 3:
            raise RuntimeError(f"unexpected run: {event.run_finished}")
    return time.perf_counter() - start


async def _background(client: AgentClient) -> float:
    session = await client.create_session()
    start = time.perf_counter()
    run = await client.start_run(session.session_id, PROMPT)
    async for event in client.watch_run(run.run_id, timeout=30):
        if event.HasField("run_finished") and event.run_finished.tool_calls != 3:
            raise RuntimeError(f"unexpected run: {event.run_finished}")
    return time.perf_counter() - start


async def cost(
    side: ServerProcess, tools: ServerProcess, rounds: int, batch: int
) -> dict[str, Any]:
    kinds = {"streamed": _streamed, "background": _background}
    found: dict[str, dict[str, list[float]]] = {
        k: {"latency_ms": [], "sidecar_ms": [], "tools_ms": []} for k in kinds
    }
    async with AgentClient(side.address) as client:
        await client.wait_ready(30)
        for kind in kinds.values():  # warm up: connections, caches, first-call costs
            for _ in range(10):
                await kind(client)
        for number in range(rounds):
            order = list(kinds.items())
            if number % 2:
                order.reverse()  # neither always goes first
            for name, kind in order:
                cpu0, tools0 = side.cpu_seconds(), tools.cpu_seconds()
                latencies = [await kind(client) for _ in range(batch)]
                found[name]["sidecar_ms"].append((side.cpu_seconds() - cpu0) / batch * 1000)
                found[name]["tools_ms"].append((tools.cpu_seconds() - tools0) / batch * 1000)
                found[name]["latency_ms"] += [s * 1000 for s in latencies]
            print(f"cost: round {number + 1}/{rounds}", flush=True)
    return found


# -- throughput -----------------------------------------------------------------------------


@contextlib.contextmanager
def _postgres() -> Iterator[PostgresServer]:
    binaries = postgres_binaries()
    if binaries is None:
        raise SystemExit(POSTGRES_MISSING)
    server = PostgresServer(binaries)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def _replicas(
    sim: ServerProcess, tools: ServerProcess, dsn: str, count: int
) -> AsyncIterator[list[ServerProcess]]:
    sessions = {"store": "postgres", "postgres": {"dsn": dsn, "pool_size": 8}}
    with contextlib.ExitStack() as stack:
        sides = [
            stack.enter_context(configured_sidecar(sim, {"shop": tools}, sessions=sessions))
            for _ in range(count)
        ]
        yield sides


async def throughput(
    sim: ServerProcess,
    tools: ServerProcess,
    server: PostgresServer,
    replicas: int,
    runs: int,
    concurrency: int,
) -> dict[str, Any]:
    dsn = await create_database(server)
    async with _replicas(sim, tools, dsn, replicas) as sides:
        clients = [AgentClient(s.address) for s in sides]
        db = await asyncpg.connect(dsn)
        try:
            for client in clients:
                await client.wait_ready(30)
            sessions = []
            for i in range(runs):
                client = clients[i % replicas]
                sessions.append((client, (await client.create_session()).session_id))
            queue = list(sessions)
            cpu0 = [s.cpu_seconds() for s in sides]
            start = time.perf_counter()

            async def submit() -> None:
                while queue:
                    client, session_id = queue.pop()
                    await client.start_run(session_id, PROMPT)

            await asyncio.gather(*(submit() for _ in range(concurrency)))
            submitted = time.perf_counter() - start
            finished = 0
            while finished < runs:
                await asyncio.sleep(0.05)
                finished = await db.fetchval(
                    f"SELECT count(*) FROM agent_runs WHERE state IN {FINISHED}"
                )
            elapsed = time.perf_counter() - start
            completed = await db.fetchval("SELECT count(*) FROM agent_runs WHERE state = 3")
            cpu = [(s.cpu_seconds() - c) / runs * 1000 for s, c in zip(sides, cpu0, strict=True)]
        finally:
            await db.close()
            for client in clients:
                await client.close()
    print(f"throughput: {replicas} replica(s): {runs / elapsed:.0f} runs/s", flush=True)
    return {
        "replicas": replicas,
        "runs": runs,
        "completed": completed,
        "seconds": elapsed,
        "submitted_seconds": submitted,
        "runs_per_second": runs / elapsed,
        "sidecar_cpu_ms_per_run": sum(cpu),
    }


# -- report ---------------------------------------------------------------------------------


def _report(found: dict[str, Any], took: float, args: argparse.Namespace) -> str:
    cost_, scaled = found["cost"], found["throughput"]

    def med(kind: str, key: str) -> float:
        return float(statistics.median(cost_[kind][key]))

    rows = []
    for label, key in (("sidecar CPU", "sidecar_ms"), ("tool server CPU", "tools_ms")):
        s, b = med("streamed", key), med("background", key)
        rows.append(f"| {label} (ms) | {s:.2f} | {b:.2f} | {b / s:.2f} |")
    for label, q in (("latency, median", 50), ("latency, P99", 99)):
        s = percentile(cost_["streamed"]["latency_ms"], q)
        b = percentile(cost_["background"]["latency_ms"], q)
        rows.append(f"| {label} (ms) | {s:.1f} | {b:.1f} | {b / s:.2f} |")
    lines = [
        f"`python -m bench.micro.background_runs --rounds {args.rounds} --batch {args.batch} "
        f"--runs {args.runs} --concurrency {args.concurrency}` ({took:.0f} s).",
        "",
        f"The pre-sales run (2 model calls + 3 tool calls, all instant), one at a time, each in "
        f"a new session; {args.rounds} interleaved rounds of {args.batch} runs each way. One "
        "sidecar, default configuration (SQLite). Medians of the per-round figures; latency "
        "from the request to the last event, at the caller.",
        "",
        "| per run | streamed | background | background/streamed |",
        "| --- | ---: | ---: | ---: |",
        *rows,
        "",
        f"Throughput: {args.runs} background runs started at once ({args.concurrency} callers "
        "submitting, each run in a new session), until the last one finished; PostgreSQL on "
        "the same machine.",
        "",
        "| replicas on one PostgreSQL | runs/s | completed | sidecar CPU per run (ms) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for row in scaled:
        lines.append(
            f"| {row['replicas']} | {row['runs_per_second']:.0f} | "
            f"{row['completed']}/{row['runs']} | {row['sidecar_cpu_ms_per_run']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8, help="interleaved rounds (cost)")
    parser.add_argument("--batch", type=int, default=60, help="runs per round and kind")
    parser.add_argument("--runs", type=int, default=400, help="background runs (throughput)")
    parser.add_argument("--concurrency", type=int, default=16, help="callers submitting")
    args = parser.parse_args()
    started = time.time()
    sim = simulator()
    tools = shop(ZERO.tool_ms)
    found: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sessions = {"sqlite": {"path": f"{tmp}/sessions.db"}}
            with configured_sidecar(sim, {"shop": tools}, sessions=sessions) as side:
                found["cost"] = asyncio.run(cost(side, tools, args.rounds, args.batch))
        with _postgres() as server:
            found["throughput"] = [
                asyncio.run(throughput(sim, tools, server, n, args.runs, args.concurrency))
                for n in (1, 2)
            ]
    finally:
        tools.stop()
        sim.stop()
    took = time.time() - started
    text = _report(found, took, args)
    OUT.write_text(text)
    OUT.with_suffix(".json").write_text(json.dumps(found, indent=1))
    print(text)


if __name__ == "__main__":
    main()
