"""The background-run soak: hundreds of runs across two replicas on one PostgreSQL, one
replica SIGKILLed halfway, and nothing lost.

``python -m bench.soak.background`` (``make soak-background``; part of ``make soak``)
starts a private PostgreSQL server, the LLM simulator (``--model-ms`` to the first token of
each call, so a run lasts about twice that), the example shop tool server (30/20/10 ms
read tools, 500 ms reservations) and two sidecar replicas, A and B, sharing the store (a
lease of ``--lease`` seconds, ``--slots`` runs at once each, so runs queue and the kill
finds many in flight). It starts ``--runs`` background runs, each in a session of its own,
on A and B in turn (``--concurrency`` callers starting them). Every fifth is a reservation
(``reserve_stock``: a call that is not safe to repeat), the rest the pre-sales turn (three
read-only calls). A's reservations and a sample of its other runs are watched live from B.
When half the runs have finished and one of A's reservations is being sent (or 10 s later),
A is SIGKILLed; B takes A's runs over as their leases lapse.

Then every run is judged from B, through the API alone:

- it reached a final state, within ``--deadline`` seconds of the kill;
- its stored events run from 1 without a gap, each once, ``run_finished`` last and alone,
  and its result is that event's;
- a pre-sales run completed (every call of it is safe to repeat: one cut off went on);
  a reservation completed, or, when the kill cut it off after its reservation was sent,
  failed as interrupted (never resumed: nothing not idempotent runs twice);
- each live watcher on B saw every event of its run once, across the takeover.

Results go to ``bench/results/background_soak.md`` and ``.json``; the exit status is 1
when any run was lost or broke a rule.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import yaml

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from bench.processes import ROOT, SERVE_BENCH_MODELS, configured_sidecar, shop, start
from bench.soak.stack import TOOL_MS
from bench.workload import PROMPT
from sidecar.testing import (
    POSTGRES_MISSING,
    PostgresServer,
    ServerProcess,
    create_database,
    postgres_binaries,
)

OUT = ROOT / "bench/results/background_soak.md"
RESERVE = "Reserve one SKU-RED-MUG for my order"
RESERVE_MS = 500.0
"""How long a reservation takes at the tool server: the kill may land while one is sent."""
FINAL = {
    agent_pb2.RUN_STATE_COMPLETED,
    agent_pb2.RUN_STATE_FAILED,
    agent_pb2.RUN_STATE_CANCELED,
    agent_pb2.RUN_STATE_REJECTED,
}
_SCENARIO = [
    {
        "match": "^Reserve one SKU-RED-MUG",
        "steps": [
            {
                "tool_calls": [
                    {"name": "reserve_stock", "arguments": {"sku": "SKU-RED-MUG", "quantity": 1}}
                ]
            },
            {"text": "reserved"},
        ],
    }
]


class Soak:
    """The runs started, what the live watchers saw, and the verdicts."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, str, str]] = []  # (run id, kind, replica)
        self.watched: dict[str, list[int]] = {}  # run id -> sequences a live watcher saw
        self.sending: dict[str, float] = {}  # reservations sending their call: since when
        self.problems: list[str] = []


async def _start_runs(
    soak: Soak, clients: dict[str, AgentClient], runs: int, concurrency: int
) -> None:
    plan = [
        ("reservation" if i % 5 == 4 else "pre-sales", "a" if i % 2 == 0 else "b")
        for i in range(runs)
    ]
    queue = list(reversed(plan))

    async def starter() -> None:
        while queue:
            kind, replica = queue.pop()
            client = clients[replica]
            session = await client.create_session()
            text = RESERVE if kind == "reservation" else PROMPT
            run = await client.start_run(session.session_id, text)
            soak.runs.append((run.run_id, kind, replica))

    await asyncio.gather(*(starter() for _ in range(concurrency)))


async def _watch_live(soak: Soak, client: AgentClient, run_id: str) -> None:
    seen = soak.watched.setdefault(run_id, [])
    with contextlib.suppress(Exception):  # judged afterwards from what it saw
        async for event in client.watch_run(run_id, timeout=600):
            seen.append(event.sequence)
            if event.HasField("tool_call_started"):
                soak.sending[run_id] = time.perf_counter()
            elif event.HasField("tool_call_finished"):
                soak.sending.pop(run_id, None)


async def _finished(db: asyncpg.Connection) -> int:
    """Runs finished so far (read from the store: the soak's clock, not its verdict)."""
    final = ", ".join(str(int(s)) for s in FINAL)
    return int(await db.fetchval(f"SELECT count(*) FROM agent_runs WHERE state IN ({final})"))


async def _judge(soak: Soak, client: AgentClient) -> dict[str, int]:
    counts = {
        "completed": 0,
        "resumed": 0,
        "resumed_reservations": 0,
        "interrupted": 0,
        "other": 0,
    }
    for run_id, kind, _ in soak.runs:
        run = await client.get_run(run_id)
        if run.state not in FINAL:
            soak.problems.append(f"{run_id} ({kind}) never finished: {run.state}")
            continue
        events = [e async for e in client.watch_run(run_id, timeout=60)]
        sequences = [e.sequence for e in events]
        if sequences != list(range(1, len(events) + 1)):
            soak.problems.append(f"{run_id}: events out of order or missing: {sequences}")
        finished = [e for e in events if e.HasField("run_finished")]
        if len(finished) != 1 or events[-1] is not finished[-1]:
            soak.problems.append(f"{run_id}: {len(finished)} run_finished, not last and alone")
        elif finished[0].run_finished != run.result:
            soak.problems.append(f"{run_id}: the result differs from the last event's")
        resumed = any(e.HasField("run_resumed") for e in events)
        if run.state == agent_pb2.RUN_STATE_COMPLETED:
            counts["completed"] += 1
            counts["resumed"] += resumed
            counts["resumed_reservations"] += resumed and kind == "reservation"
            if resumed and kind == "reservation" and run.attempts > 1:
                # Resuming a reservation is allowed only when its call had not been sent.
                started = [e for e in events if e.HasField("tool_call_started")]
                if len(started) > 1:
                    soak.problems.append(f"{run_id}: a reservation was sent twice")
        elif (
            run.state == agent_pb2.RUN_STATE_FAILED
            and run.result.stop_reason == agent_pb2.STOP_REASON_INTERRUPTED
        ):
            counts["interrupted"] += 1
            if kind != "reservation":
                soak.problems.append(f"{run_id}: a pre-sales run (safe to repeat) interrupted")
        else:
            counts["other"] += 1
            soak.problems.append(f"{run_id} ({kind}) ended {run.state}: {run.result.error}")
    for run_id, seen in soak.watched.items():
        if seen != list(range(1, len(seen) + 1)):
            soak.problems.append(f"{run_id}: the live watcher saw {seen}")
    return counts


async def _soak(
    args: argparse.Namespace, replicas: dict[str, ServerProcess], dsn: str
) -> dict[str, Any]:
    soak = Soak()
    clients = {name: AgentClient(side.address) for name, side in replicas.items()}
    db = await asyncpg.connect(dsn)
    try:
        for client in clients.values():
            await client.wait_ready(30)
        started = time.perf_counter()
        await _start_runs(soak, clients, args.runs, args.concurrency)
        submitted = time.perf_counter() - started
        on_a = [(r, kind) for r, kind, replica in soak.runs if replica == "a"]
        live = [r for r, kind in on_a if kind == "reservation"]
        live += [r for r, kind in on_a if kind != "reservation"][-args.watched :]
        watchers = [asyncio.create_task(_watch_live(soak, clients["b"], r)) for r in live]
        # The state is in the store, written by other processes: polled.
        while await _finished(db) < args.runs // 2:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        # Then wait (10 s at most) for a reservation seen starting its call a moment ago:
        # its 500 ms call is then surely under way, and the kill cuts it off.
        fresh = 0
        for _ in range(1000):
            now = time.perf_counter()
            fresh = sum(1 for since in soak.sending.values() if now - since < RESERVE_MS / 5000)
            if fresh:
                break
            await asyncio.sleep(0.01)
        replicas["a"].kill()
        killed = time.perf_counter()
        print(f"replica A killed after {killed - started:.1f} s", flush=True)
        while await _finished(db) < args.runs:
            if time.perf_counter() - killed > args.deadline:
                break
            await asyncio.sleep(0.1)
        recovered = time.perf_counter() - killed
        await asyncio.wait(watchers, timeout=30)
        for task in watchers:
            task.cancel()
        counts = await _judge(soak, clients["b"])
    finally:
        await db.close()
        for client in clients.values():
            await client.close()
    return {
        "runs": args.runs,
        "submitted_seconds": submitted,
        "recovered_seconds": recovered,
        "watched_live": len(soak.watched),
        "reservations_being_sent_at_the_kill": fresh,
        **counts,
        "problems": soak.problems,
    }


def _report(result: dict[str, Any], args: argparse.Namespace, took: float) -> str:
    lost = len(result["problems"])
    lines = [
        f"`python -m bench.soak.background --runs {args.runs} --lease {args.lease:g} "
        f"--slots {args.slots} --model-ms {args.model_ms:g}` "
        f"({took:.0f} s): {args.runs} background runs across two replicas on one PostgreSQL, "
        "one replica SIGKILLed when half had finished.",
        "",
        "| what | count |",
        "| --- | ---: |",
        f"| runs started (in {result['submitted_seconds']:.1f} s) | {result['runs']} |",
        f"| completed | {result['completed']} |",
        f"| of which resumed on the survivor after the kill | {result['resumed']} |",
        f"| of those, reservations (cut off before their call, or after it had finished) | "
        f"{result['resumed_reservations']} |",
        f"| failed as interrupted (a reservation cut off after it was sent) | "
        f"{result['interrupted']} |",
        f"| ended otherwise | {result['other']} |",
        f"| watched live across the takeover | {result['watched_live']} |",
        f"| reservations seen starting their call just before A was killed | "
        f"{result['reservations_being_sent_at_the_kill']} |",
        f"| lost, or against the rules | {lost} |",
        "",
        f"Every run had finished {result['recovered_seconds']:.1f} s after the kill (lease "
        f"{args.lease:g} s).",
    ]
    lines += [f"- {p}" for p in result["problems"][:20]]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=16, help="callers starting runs")
    parser.add_argument(
        "--watched", type=int, default=20, help="A's other runs watched live from B"
    )
    parser.add_argument("--lease", type=float, default=2.0, help="sessions.postgres.lease")
    parser.add_argument("--slots", type=int, default=32, help="background.max_running")
    parser.add_argument("--model-ms", type=float, default=1000.0, help="first-token delay")
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds to recover")
    args = parser.parse_args()
    began = time.time()
    binaries = postgres_binaries()
    if binaries is None:
        raise SystemExit(POSTGRES_MISSING)
    server = PostgresServer(binaries)
    server.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            scenario = Path(tmp) / "scenario.yaml"
            scenario.write_text(yaml.safe_dump(_SCENARIO))
            sim = start(
                *("-m", "llmsim", "--port", "0", "--scenario", str(scenario)),
                *SERVE_BENCH_MODELS,
                *("--ttft-ms", f"{args.model_ms:g}"),
            )
            tools = shop({**TOOL_MS, "reserve_stock": RESERVE_MS})
            dsn = asyncio.run(create_database(server))
            sections: dict[str, Any] = {
                "sessions": {"store": "postgres", "postgres": {"dsn": dsn, "lease": args.lease}},
                "background": {"poll_interval": 0.25, "max_running": args.slots},
            }
            try:
                with (
                    configured_sidecar(sim, {"shop": tools}, **sections) as a,
                    configured_sidecar(sim, {"shop": tools}, **sections) as b,
                ):
                    result = asyncio.run(_soak(args, {"a": a, "b": b}, dsn))
            finally:
                tools.stop()
                sim.stop()
    finally:
        server.stop()
    text = _report(result, args, time.time() - began)
    OUT.write_text(text)
    OUT.with_suffix(".json").write_text(json.dumps(result, indent=1))
    print(text)
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
