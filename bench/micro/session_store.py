"""What a turn costs the session store: CPU and wall time of one turn's store work.

A turn does three store operations: ``get`` (load the session with its history),
``begin_turn`` (the start record) and ``finish_turn`` (the turn, atomically). This runs
them for sessions of 10 turns, each turn with four messages and a 1.5 KB tool result, and
reports per turn the process CPU time (every thread: the SQLite store works on its own)
and the wall time. ``python -m bench.micro.session_store [--postgres DSN]``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from sidecar.sessions.postgres import PostgresSessionStore
from sidecar.sessions.sqlite import SqliteSessionStore
from sidecar.sessions.store import MemorySessionStore, SessionStore
from sidecar.types import StopReason, Turn

ROOT = Path(__file__).resolve().parents[2]

SESSIONS = 60
TURNS = 10


def _turn(i: int) -> Turn:
    call = {"id": f"c{i}", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    return Turn(
        run_id=f"r{i}",
        input=f"question {i}",
        answer=f"answer {i}",
        stop_reason=StopReason.ANSWERED,
        start_time=time.time(),
        end_time=time.time(),
        messages=[
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "x" * 1500},
            {"role": "assistant", "content": f"answer {i}"},
        ],
    )


async def measure(name: str, store: SessionStore) -> str:
    await store.open()
    try:
        ids = [(await store.create("default", "", {})).session_id for _ in range(SESSIONS)]
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for i in range(TURNS):
            for sid in ids:
                session = await store.get(sid)
                assert session is not None and len(session.turns) == i
                await store.begin_turn(sid, f"r{i}", f"question {i}", time.time())
                await store.finish_turn(sid, _turn(i))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        await store.close()
    n = SESSIONS * TURNS
    return f"| {name} | {cpu / n * 1e6:,.0f} | {wall / n * 1e6:,.0f} |"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--postgres", metavar="DSN", help="also measure PostgreSQL at DSN")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(await measure("memory", MemorySessionStore()))
        rows.append(await measure("sqlite", SqliteSessionStore(Path(tmp) / "s.db")))
        if args.postgres:
            rows.append(await measure("postgres", PostgresSessionStore(args.postgres)))
    print(f"store work per turn (get + begin_turn + finish_turn), sessions of up to {TURNS} turns")
    print("| store | CPU µs per turn | wall µs per turn |")
    print("| --- | ---: | ---: |")
    print("\n".join(rows))


if __name__ == "__main__":
    asyncio.run(main())
