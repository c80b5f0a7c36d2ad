"""The soak: sustained load through a real sidecar, then chaos under that load.

``python -m bench.soak`` (or ``make soak``) starts the LLM simulator (50 ms to first
token), the example ``shop`` tool server (30/20/10 ms tools) and the sidecar as separate
processes, and drives ``--sessions`` concurrent conversations through the sidecar
(:mod:`bench.soak.load`). The baseline runs ``--seconds``; then each chaos phase
(:mod:`bench.soak.phases`) runs ``--chaos-seconds`` under the same load: a tool server
killed and restarted, one that hangs, one that fails half its calls, the model answering
429 / 500, hanging or sending broken tool calls, and the sidecar itself getting SIGTERM.
Every run is judged completed, degraded or lost (:mod:`bench.soak.outcomes`). Last, the memory
an idle session costs is measured on a fresh sidecar holding ``--idle-sessions`` of them.

Results go to ``bench/results/soak.json`` and ``docs/benchmarks-soak.md``; the processes'
logs to ``bench/results/raw/soak/``. The exit status is 1 when any run was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc

from agentsidecar.v1 import agent_pb2, agent_pb2_grpc
from bench.processes import ROOT
from bench.soak import report as soak_report
from bench.soak.load import Load, drive_turn
from bench.soak.outcomes import Tally
from bench.soak.phases import PHASES, Phase, PhaseContext
from bench.soak.stack import SoakStack, machine

WARMUP_S = 5.0
SAMPLE_INTERVAL_S = 0.5


async def run_phase(stack: SoakStack, load: Load, phase: Phase, seconds: float) -> dict[str, Any]:
    """Run one phase under the full load; return its numbers."""
    if stack.tools_kind != phase.tools:
        await stack.swap_tools(phase.tools)
    await stack.ready()
    tally = Tally()
    stop = asyncio.Event()
    stack.sample()
    cpu_before = stack.stats.cpu_seconds()
    client_before = time.process_time()
    sessions_before = load.sessions.copy()
    ctx = PhaseContext(stack, load, seconds)

    async def conduct() -> None:
        if phase.chaos is not None:
            await phase.chaos(ctx)
        await ctx.at(1.0)
        stop.set()
        ctx.note("the load stops; runs in flight finish")

    async def monitor() -> None:
        while True:
            stack.sample()
            await asyncio.sleep(SAMPLE_INTERVAL_S)

    sampler = asyncio.get_running_loop().create_task(monitor())
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(load.run(tally, stop))
            group.create_task(conduct())
    finally:
        sampler.cancel()
    wall = ctx.elapsed()
    ctx.note("every run ended")
    if phase.cleanup is not None:
        await phase.cleanup(ctx)
    stack.sample()
    summary = tally.summary()
    return {
        "name": phase.name,
        "summary": phase.summary,
        "seconds": seconds,
        "wall_s": round(wall, 1),
        **summary,
        "results_per_s": round(len(tally.result_latencies) / wall, 1),
        "sidecar": {
            "cpu_cores": round((stack.stats.cpu_seconds() - cpu_before) / wall, 2),
            "peak_rss_mib": round(stack.stats.peak_rss_mib(), 1),
            "rss_at_end_mib": round(stack.sidecar.current_rss_mib(), 1),
        },
        "client_cpu_cores": round((time.process_time() - client_before) / wall, 2),
        "sessions": dict(load.sessions - sessions_before),
        "events": ctx.events,
        **ctx.extra,
    }


async def warm_up(stack: SoakStack, load: Load) -> None:
    """A few seconds of the full load, not reported: imports, connections, caches."""
    tally = Tally()
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(WARMUP_S, stop.set)
    await load.run(tally, stop)


async def idle_sessions(stack: SoakStack, count: int) -> dict[str, Any]:
    """Memory of ``count`` idle sessions on a freshly started sidecar: empty, then after
    one turn each (VmRSS deltas: allocator reuse makes them approximate)."""
    code, _ = await stack.sigterm_sidecar()
    await asyncio.to_thread(stack.start_sidecar)
    await stack.ready()
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        # ready() ran one turn, so the run path's first-use allocations are behind us;
        # more warm-up would leave freed memory that the new sessions fill unseen.
        rss_before = stack.sidecar.current_rss_mib()
        ids: list[str] = []

        async def create(_: int) -> None:
            response = await stub.CreateSession(agent_pb2.CreateSessionRequest(), timeout=30)
            ids.append(response.session.session_id)

        await _for_each(range(count), 100, create)
        rss_empty = stack.sidecar.current_rss_mib()
        tally = Tally()

        async def one_turn(session_id: str) -> None:
            attempt = await drive_turn(stub, session_id, stream=False, timeout=60)
            tally.add(attempt.outcome)

        await _for_each(ids, 200, one_turn)
        rss_one_turn = stack.sidecar.current_rss_mib()

        async def delete(session_id: str) -> None:
            await stub.DeleteSession(agent_pb2.DeleteSessionRequest(session_id=session_id))

        await _for_each(ids, 100, delete)
        rss_deleted = stack.sidecar.current_rss_mib()
    return {
        "sessions": count,
        "restart_exit_code": code,
        "rss_before_mib": round(rss_before, 1),
        "rss_with_empty_sessions_mib": round(rss_empty, 1),
        "rss_after_one_turn_each_mib": round(rss_one_turn, 1),
        "rss_after_delete_mib": round(rss_deleted, 1),
        "kib_per_empty_session": round((rss_empty - rss_before) * 1024 / count, 2),
        "kib_per_session_after_one_turn": round((rss_one_turn - rss_before) * 1024 / count, 2),
        "turns": tally.summary(),
    }


async def _for_each(items: Any, concurrency: int, work: Any) -> None:
    """Run ``work(item)`` for every item, ``concurrency`` at a time."""
    iterator = iter(items)

    async def lane() -> None:
        for item in iterator:
            await work(item)

    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(lane())


def scan_logs(workdir: Path) -> dict[str, dict[str, Any]]:
    """Warnings, errors and tracebacks each process logged, with a few distinct lines."""
    found: dict[str, dict[str, Any]] = {}
    for log in sorted(workdir.glob("*.log")):
        counts = {"warnings": 0, "errors": 0, "tracebacks": 0}
        samples: dict[str, None] = {}
        for line in log.read_text(errors="replace").splitlines():
            if " WARNING " in line:
                counts["warnings"] += 1
            elif " ERROR " in line or " CRITICAL " in line:
                counts["errors"] += 1
            elif line.startswith("Traceback"):
                counts["tracebacks"] += 1
            else:
                continue
            # Drop the timestamp so repeats of one message collapse.
            samples.setdefault(line.split(" ", 2)[-1][:200], None)
        found[log.stem] = {**counts, "distinct": list(samples)[:8]}
    return found


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    workdir = ROOT / "bench" / "results" / "raw" / "soak"
    workdir.mkdir(parents=True, exist_ok=True)
    for old in workdir.glob("*.log"):
        old.unlink()
    selected = [p for p in PHASES if not args.phases or p.name in args.phases]
    started = datetime.now(UTC)
    info = machine()
    stack = SoakStack(workdir, ttft_ms=args.ttft_ms)
    load = Load(
        stack.address,
        users=args.sessions,
        turns_per_session=args.turns,
        run_timeout=args.run_timeout,
        channels=args.channels,
    )
    phases: list[dict[str, Any]] = []
    idle: dict[str, Any] | None = None
    try:
        await stack.ready()
        await warm_up(stack, load)
        for phase in selected:
            seconds = args.seconds if phase.name == "baseline" else args.chaos_seconds
            result = await run_phase(stack, load, phase, seconds)
            phases.append(result)
            print(soak_report.one_line(result), flush=True)
        if args.idle_sessions:
            idle = await idle_sessions(stack, args.idle_sessions)
            print(soak_report.idle_line(idle), flush=True)
    finally:
        await load.close()
        await stack.close()
    return {
        "command": args.command,
        "started": started.isoformat(timespec="seconds"),
        "machine": info,
        "python": platform.python_version(),
        "options": {
            "sessions": args.sessions,
            "seconds": args.seconds,
            "chaos_seconds": args.chaos_seconds,
            "turns_per_session": args.turns,
            "run_timeout_s": args.run_timeout,
            "channels": args.channels,
            "ttft_ms": args.ttft_ms,
            "idle_sessions": args.idle_sessions,
        },
        "sidecar_config": stack.config,
        "phases": phases,
        "idle_sessions": idle,
        "logs": scan_logs(workdir),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--sessions", type=int, default=500, help="concurrent conversations")
    parser.add_argument("--seconds", type=float, default=60, help="baseline duration")
    parser.add_argument("--chaos-seconds", type=float, default=30, help="each chaos phase")
    parser.add_argument("--turns", type=int, default=5, help="turns per conversation")
    parser.add_argument("--run-timeout", type=float, default=30, help="each run's deadline (s)")
    parser.add_argument("--channels", type=int, default=8, help="client gRPC channels")
    parser.add_argument("--ttft-ms", type=float, default=50, help="simulated model latency")
    parser.add_argument("--idle-sessions", type=int, default=10_000, help="0 skips it")
    parser.add_argument(
        "--phases", type=lambda s: s.split(","), default=[], help="comma list; default all"
    )
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "soak.json")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks-soak.md")
    args = parser.parse_args(argv)
    args.command = shlex.join(["python", "-m", "bench.soak", *(argv or sys.argv[1:])])
    unknown = set(args.phases) - {p.name for p in PHASES}
    if unknown:
        parser.error(f"unknown phases {sorted(unknown)}; known: {[p.name for p in PHASES]}")
    document = asyncio.run(soak(args))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=2) + "\n")
    args.doc.write_text(soak_report.render(document))
    lost = sum(p["lost"] for p in document["phases"])
    print(f"wrote {args.json} and {args.doc}; lost runs: {lost}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
