"""Sessions survive the sidecar: SIGKILL it between turns and mid-turn, start it again.

The same tests run against the embedded store (SQLite) and the shared one (PostgreSQL),
through real sidecar processes. What only replicas sharing a store can show (a live
replica's turn is never taken; a dead one's is) runs against PostgreSQL alone.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar.testing import PostgresServer, ServerProcess, create_database, drop_database
from tests.support.stack import (
    SimControl,
    eventually,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
)

ANSWERED = agent_pb2.STOP_REASON_ANSWERED
INTERRUPTED = agent_pb2.STOP_REASON_INTERRUPTED
CANCELLED = agent_pb2.STOP_REASON_CANCELLED


@pytest.fixture(scope="module")
def processes() -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with simulator() as sim, scripted_toolserver() as tools:
        yield sim, tools


@pytest.fixture(params=["sqlite", "postgres"])
async def sessions(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """The ``sessions`` configuration of one store kind, over a fresh database."""
    if request.param == "sqlite":
        yield {"sqlite": {"path": str(tmp_path / "sessions.db")}}
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    dsn = await create_database(server)
    yield {
        "store": "postgres",
        "postgres": {"dsn": dsn, "lease": 1.0},
        "replica_id": "replica-1",
    }
    await drop_database(server, dsn)


def _config(processes: tuple[ServerProcess, ServerProcess], **sections: Any) -> dict[str, Any]:
    sim, tools = processes
    return sidecar_config(sim, [{"name": "scripted", "address": tools.address}], **sections)


async def _stop_reasons(client: AgentClient, session_id: str) -> list[int]:
    return [t.stop_reason for t in (await client.get_session(session_id)).turns]


async def test_finished_turns_survive_a_sigkill_between_turns(
    processes: tuple[ServerProcess, ServerProcess], sessions: dict[str, Any], tmp_path: Path
) -> None:
    config = _config(processes, sessions=sessions)
    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            await client.wait_ready(20)
            session = await client.create_session(labels={"team": "support"})
            first = await client.run(session.session_id, "hello there", timeout=30)
            second = await client.run(session.session_id, "two reads", timeout=30)
        side.kill()

    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            await client.wait_ready(20)
            stored = await client.get_session(session.session_id)
            assert stored.labels["team"] == "support"
            assert [(t.run_id, t.answer, t.stop_reason) for t in stored.turns] == [
                (first.run_id, first.result.answer, ANSWERED),
                (second.run_id, second.result.answer, ANSWERED),
            ]
            # The restored conversation goes to the model with the next turn.
            await client.run(session.session_id, "and hello again", timeout=30)
            sent = (await SimControl(processes[0].address).stats())["last_request"]
            users = [m["content"] for m in sent["messages"] if m["role"] == "user"]
            assert users == ["hello there", "two reads", "and hello again"]
            tool_results = [m for m in sent["messages"] if m["role"] == "tool"]
            assert len(tool_results) == 2


# Mid-turn kill points: the run has started (its tool will hang); one of two tool calls
# has finished and the other runs for a minute. The turn can never finish before the kill
# (three calls of the same length could all finish while a busy machine delivers it).
KILL_POINTS = [
    ("hang please", "run_started"),
    ("a quick read beside a slow one", "tool_call_finished"),
]


async def test_a_turn_cut_off_by_sigkill_is_reported_as_interrupted_never_half_written(
    processes: tuple[ServerProcess, ServerProcess], sessions: dict[str, Any], tmp_path: Path
) -> None:
    config = _config(processes, sessions=sessions)
    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            await client.wait_ready(20)
            session = await client.create_session()
            session_id = session.session_id
            await client.run(session_id, "hello there", timeout=30)
    expected = [ANSWERED]
    for text, kill_at in KILL_POINTS:
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                await client.wait_ready(20)
                async with asyncio.timeout(20):
                    async for event in client.stream(session_id, text):
                        if event.WhichOneof("event") == kill_at:
                            side.kill()
                            break
        expected.append(INTERRUPTED)

    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            await client.wait_ready(20)
            stored = await client.get_session(session_id)
            assert [t.stop_reason for t in stored.turns] == expected
            assert [t.input for t in stored.turns[1:]] == [text for text, _ in KILL_POINTS]
            assert all(not t.answer for t in stored.turns[1:])
            # Nothing of a cut-off turn reached the conversation, and the session is free.
            result = await client.run(session_id, "and hello again", timeout=30)
            assert result.result.stop_reason == ANSWERED
            sent = (await SimControl(processes[0].address).stats())["last_request"]
            assert [m["content"] for m in sent["messages"] if m["role"] == "user"] == [
                "hello there",
                "and hello again",
            ]
            assert not [m for m in sent["messages"] if m["role"] == "tool"]


async def test_a_caller_that_leaves_while_its_turn_claims_the_session_leaves_it_free(
    processes: tuple[ServerProcess, ServerProcess], tmp_path: Path
) -> None:
    path = tmp_path / "sessions.db"
    config = _config(processes, sessions={"sqlite": {"path": str(path)}})
    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            await client.wait_ready(20)
            session_id = (await client.create_session()).session_id
            # Another connection holds the write lock: the turn's start record waits for it
            # (on the store's thread) past the caller's deadline.
            holder = sqlite3.connect(path, isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")
            try:
                with pytest.raises(grpc.aio.AioRpcError) as left:
                    await client.run(session_id, "hello there", timeout=0.5)
                assert left.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            finally:
                holder.rollback()
                holder.close()

            # The start record was written after the caller left; the turn is then closed
            # as cancelled rather than left holding the session.
            async def cancelled() -> bool:
                return await _stop_reasons(client, session_id) == [CANCELLED]

            await eventually(cancelled)
            result = await client.run(session_id, "hello again", timeout=30)
            assert result.result.stop_reason == ANSWERED
            assert await _stop_reasons(client, session_id) == [CANCELLED, ANSWERED]


async def test_an_idle_session_expires_after_the_configured_time(
    processes: tuple[ServerProcess, ServerProcess], sessions: dict[str, Any], tmp_path: Path
) -> None:
    config = _config(processes, sessions={**sessions, "idle_ttl": 0.5, "sweep_interval": 0.2})
    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            await client.wait_ready(20)
            session = await client.create_session()
            await client.run(session.session_id, "hello there", timeout=30)

            async def gone() -> bool:
                try:
                    await client.get_session(session.session_id)
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == grpc.StatusCode.NOT_FOUND
                    return True
                return False

            await eventually(gone)


async def test_replicas_share_sessions_and_only_a_dead_replicas_turn_is_interrupted(
    processes: tuple[ServerProcess, ServerProcess],
    postgres_server: PostgresServer,
    tmp_path: Path,
) -> None:
    dsn = await create_database(postgres_server)
    # No replica ids: each process is a new replica, as in a Deployment.
    shared = {"store": "postgres", "postgres": {"dsn": dsn, "lease": 0.6}}
    config = _config(processes, sessions=shared)
    db = await asyncpg.connect(dsn)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    try:
        with sidecar(config, tmp_path / "a") as a, sidecar(config, tmp_path / "b") as b:
            async with AgentClient(a.address) as on_a, AgentClient(b.address) as on_b:
                await on_a.wait_ready(20)
                await on_b.wait_ready(20)
                session = await on_a.create_session()
                sid = session.session_id
                await on_a.run(sid, "hello there", timeout=30)
                # The next turn runs on the other replica, with the same history.
                await on_b.run(sid, "and hello again", timeout=30)
                assert await _stop_reasons(on_a, sid) == [ANSWERED, ANSWERED]

                stream = on_a.stream(sid, "hang please")
                async with asyncio.timeout(20):
                    async for event in stream:
                        if event.WhichOneof("event") == "tool_call_started":
                            break
                claimed = await db.fetchval("SELECT lease_until FROM agent_pending_turns")

                async def renewed_past_two_leases() -> bool:
                    lease = await db.fetchval("SELECT lease_until FROM agent_pending_turns")
                    return bool((lease - claimed).total_seconds() >= 1.2)

                await eventually(renewed_past_two_leases)
                # A's turn is alive: B neither reports it nor runs the session meanwhile.
                assert await _stop_reasons(on_b, sid) == [ANSWERED, ANSWERED]
                with pytest.raises(grpc.aio.AioRpcError) as busy:
                    await on_b.run(sid, "let me in", timeout=10)
                assert busy.value.code() == grpc.StatusCode.FAILED_PRECONDITION

                a.kill()

                async def reported() -> bool:
                    return await _stop_reasons(on_b, sid) == [ANSWERED, ANSWERED, INTERRUPTED]

                await eventually(reported)
                result = await on_b.run(sid, "and hello again", timeout=30)
                assert result.result.stop_reason == ANSWERED
                await stream.aclose()  # type: ignore[attr-defined]
    finally:
        await db.close()
        await drop_database(postgres_server, dsn)


async def test_a_claim_refused_by_another_replica_gives_its_run_quota_back(
    processes: tuple[ServerProcess, ServerProcess],
    postgres_server: PostgresServer,
    tmp_path: Path,
) -> None:
    # dan may run one turn at a time (a quota each replica counts for itself). His session
    # held by a turn on replica A is busy on replica B: the refused claim on B must not
    # keep B's one slot, or dan could run nothing more there.
    dsn = await create_database(postgres_server)
    token = "dan-token-quota"
    auth = {
        "principals": [
            {
                "name": "dan",
                "token_sha256": hashlib.sha256(token.encode()).hexdigest(),
                "quota": {"concurrent_runs": 1},
            }
        ]
    }
    config = _config(processes, sessions={"store": "postgres", "postgres": {"dsn": dsn}}, auth=auth)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    try:
        with sidecar(config, tmp_path / "a") as a, sidecar(config, tmp_path / "b") as b:
            async with (
                AgentClient(a.address, token=token) as on_a,
                AgentClient(b.address, token=token) as on_b,
            ):
                held, other = await on_a.create_session(), await on_a.create_session()
                stream = on_a.stream(held.session_id, "hang please")
                async with asyncio.timeout(20):
                    async for event in stream:
                        if event.WhichOneof("event") == "tool_call_started":
                            break
                for _ in range(3):
                    with pytest.raises(grpc.aio.AioRpcError) as busy:
                        await on_b.run(held.session_id, "let me in", timeout=10)
                    assert busy.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                result = await on_b.run(other.session_id, "hello", timeout=30)
                assert result.result.stop_reason == ANSWERED
                await stream.aclose()  # type: ignore[attr-defined]
    finally:
        await drop_database(postgres_server, dsn)
