"""The session-store contract, run against every store: memory, SQLite and PostgreSQL.

The SQLite and PostgreSQL stores run against real databases (a file under the test's
temporary directory; the private PostgreSQL server from ``conftest.py``). What only a
shared store can do (replicas, leases) is tested against PostgreSQL alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from sidecar.errors import SessionBusy, SessionExists, SessionNotFound, SessionStoreError
from sidecar.sessions import sqlite as sqlite_store
from sidecar.sessions.postgres import PostgresSessionStore
from sidecar.sessions.records import encode_labels, encode_turn
from sidecar.sessions.sqlite import SqliteSessionStore
from sidecar.sessions.store import MemorySessionStore, SessionStore
from sidecar.testing import PostgresServer, create_database, drop_database
from sidecar.types import StopReason, Turn, Usage
from tests.support.stack import eventually

ALL = ["memory", "sqlite", "sqlite-full", "postgres"]
DURABLE = ["sqlite", "sqlite-full", "postgres"]


class FakeClock:
    """Wall-clock time the test moves by hand, for expiry."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


OpenStore = Callable[..., Awaitable[SessionStore]]


@pytest.fixture
async def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[OpenStore]:
    """Opens stores of the parametrized kind over one shared backing database."""
    kind = request.param
    opened: list[SessionStore] = []
    server: PostgresServer | None = None
    dsn = ""
    if kind == "postgres":
        server = request.getfixturevalue("postgres_server")
        dsn = await create_database(server)

    async def open_(**options: Any) -> SessionStore:
        store: SessionStore
        if kind == "memory":
            options.pop("lease", None)
            options.pop("replica_id", None)
            store = MemorySessionStore(**options)
        elif kind.startswith("sqlite"):
            # "sqlite" runs statements on the loop; "sqlite-full" on the store's thread.
            options.pop("lease", None)
            options.pop("replica_id", None)
            synchronous = "full" if kind == "sqlite-full" else "normal"
            store = SqliteSessionStore(tmp_path / "sessions.db", synchronous=synchronous, **options)
        else:
            store = PostgresSessionStore(dsn, **options)
        await store.open()
        opened.append(store)
        return store

    yield open_
    for store in opened:
        await store.close()
    if server is not None:
        await drop_database(server, dsn)


def _turn(run_id: str, text: str, *, end: float = 1_800_000_001.0) -> Turn:
    return Turn(
        run_id=run_id,
        input=text,
        answer=f"answer to {text}",
        stop_reason=StopReason.ANSWERED,
        start_time=end - 1,
        end_time=end,
        usage=Usage(10, 5, 2),
        messages=[
            {"role": "user", "content": text},
            {"role": "assistant", "content": f"answer to {text}"},
        ],
    )


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_a_created_session_is_read_back_with_its_profile_and_labels(
    open_store: OpenStore,
) -> None:
    store = await open_store()
    created = await store.create("default", "", {"team": "pre-sales"})
    assert created.session_id
    loaded = await store.get(created.session_id)
    assert loaded is not None
    assert (loaded.profile, loaded.labels, loaded.turns) == ("default", {"team": "pre-sales"}, [])
    assert await store.get("nope") is None


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_creating_a_session_whose_id_is_taken_fails(open_store: OpenStore) -> None:
    store = await open_store()
    await store.create("default", "s1", {})
    with pytest.raises(SessionExists):
        await store.create("default", "s1", {})


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_a_finished_turn_is_stored_whole_with_the_messages_it_added(
    open_store: OpenStore,
) -> None:
    store = await open_store()
    await store.create("default", "s1", {})
    for i in range(3):
        await store.begin_turn("s1", f"r{i}", f"question {i}", 1.0)
        await store.finish_turn("s1", _turn(f"r{i}", f"question {i}", end=1_800_000_010.0 + i))
    session = await store.get("s1")
    assert session is not None
    assert [t.run_id for t in session.turns] == ["r0", "r1", "r2"]
    first = session.turns[0]
    assert first.answer == "answer to question 0" and first.usage == Usage(10, 5, 2)
    assert first.stop_reason is StopReason.ANSWERED
    assert [m["content"] for m in session.messages][:2] == ["question 0", "answer to question 0"]
    assert session.update_time == 1_800_000_012.0


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_a_session_holds_one_running_turn_at_a_time(open_store: OpenStore) -> None:
    store = await open_store()
    await store.create("default", "s1", {})
    await store.begin_turn("s1", "r1", "first", 1.0)
    with pytest.raises(SessionBusy):
        await store.begin_turn("s1", "r2", "second", 2.0)
    await store.finish_turn("s1", _turn("r1", "first"))
    await store.begin_turn("s1", "r2", "second", 2.0)
    with pytest.raises(SessionNotFound):
        await store.begin_turn("ghost", "r3", "third", 3.0)


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_a_deleted_session_stays_deleted_when_its_running_turn_finishes(
    open_store: OpenStore,
) -> None:
    store = await open_store()
    await store.create("default", "s1", {})
    await store.begin_turn("s1", "r1", "first", 1.0)
    assert await store.delete("s1")
    await store.finish_turn("s1", _turn("r1", "first"))
    assert await store.get("s1") is None
    assert not await store.delete("s1")


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_an_idle_session_expires_after_the_configured_time(open_store: OpenStore) -> None:
    clock = FakeClock()
    store = await open_store(idle_ttl=60.0, clock=clock)
    await store.create("default", "idle", {})
    await store.create("default", "busy", {})
    await store.begin_turn("busy", "r1", "a long turn", clock.now)
    clock.now += 59
    assert await store.get("idle") is not None
    clock.now += 2
    assert await store.get("idle") is None
    # A running turn keeps its session alive, however long it runs.
    assert await store.get("busy") is not None
    await store.finish_turn("busy", _turn("r1", "a long turn", end=clock.now))
    clock.now += 61
    assert await store.get("busy") is None
    # An expired id can be used again.
    await store.create("default", "idle", {})


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_a_principals_spend_adds_up_per_day_and_concurrent_adds_lose_nothing(
    open_store: OpenStore, request: pytest.FixtureRequest
) -> None:
    store = await open_store()
    # Replicas share only PostgreSQL: there a second store adds to the same rows.
    other = (
        await open_store() if request.node.callspec.params["open_store"] == "postgres" else store
    )
    assert await store.spent("p", "2026-12-01") == (0.0, 0)
    assert await store.add_spend("p", "2026-12-01", 0.25, 0) == (0.25, 0)
    adds = [s.add_spend("p", "2026-12-01", 0.5, 7) for s in (store, other) * 10]
    await asyncio.gather(*adds)
    cost, tokens = await other.spent("p", "2026-12-01")
    assert cost == pytest.approx(10.25) and tokens == 140
    # Days and principals are apart.
    assert await store.spent("p", "2026-12-02") == (0.0, 0)
    assert await store.spent("q", "2026-12-01") == (0.0, 0)


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_the_latest_turns_of_a_profiles_sessions_come_oldest_first(
    open_store: OpenStore,
) -> None:
    store = await open_store()
    for session_id, profile in (("a", "support"), ("b", "other"), ("c", "support")):
        await store.create(profile, session_id, {})
    end = 1_800_000_000.0
    for i, session_id in enumerate(["a", "b", "c", "a", "c"]):
        await store.begin_turn(session_id, f"r{i}", f"turn {i}", end + i - 1)
        await store.finish_turn(session_id, _turn(f"r{i}", f"turn {i}", end=end + i))
    recent = await store.recent_turns("support", 3)
    assert [t.run_id for t in recent] == ["r2", "r3", "r4"]
    assert [t.messages[0]["content"] for t in recent] == ["turn 2", "turn 3", "turn 4"]
    assert [t.run_id for t in await store.recent_turns("other", 10)] == ["r1"]
    assert await store.recent_turns("nobody", 10) == []


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_memory_only_ever_moves_forward(open_store: OpenStore) -> None:
    store = await open_store()
    await store.create("default", "s1", {})
    assert await store.set_memory("s1", "the user likes tea", 4)
    assert not await store.set_memory("s1", "an older summary", 2)
    session = await store.get("s1")
    assert session is not None
    assert (session.memory, session.memory_turns) == ("the user likes tea", 4)


@pytest.mark.parametrize("open_store", DURABLE, indirect=True)
async def test_after_a_restart_finished_turns_are_there_and_a_cut_off_turn_is_interrupted(
    open_store: OpenStore,
) -> None:
    first = await open_store(replica_id="replica-a")
    await first.create("default", "s1", {"k": "v"})
    await first.begin_turn("s1", "r1", "finished", 1.0)
    await first.finish_turn("s1", _turn("r1", "finished"))
    await first.begin_turn("s1", "r2", "cut off", 2.0)
    await first.close()  # the process is gone without finishing r2

    second = await open_store(replica_id="replica-a")
    session = await second.get("s1")
    assert session is not None
    assert [(t.run_id, t.stop_reason) for t in session.turns] == [
        ("r1", StopReason.ANSWERED),
        ("r2", StopReason.INTERRUPTED),
    ]
    assert session.turns[1].input == "cut off" and not session.turns[1].messages
    assert session.labels == {"k": "v"}
    # The session is free again.
    await second.begin_turn("s1", "r3", "next", 3.0)


@pytest.mark.parametrize("open_store", ["sqlite"], indirect=True)
async def test_a_second_process_cannot_open_the_same_sqlite_file(open_store: OpenStore) -> None:
    await open_store()
    with pytest.raises(SessionStoreError, match=f"in use by sidecar process {os.getpid()}"):
        await open_store()


@pytest.mark.parametrize("open_store", ["sqlite"], indirect=True)
async def test_sqlite_checkpoints_move_finished_turns_from_the_wal_into_the_database_file(
    open_store: OpenStore, tmp_path: Path
) -> None:
    def turns_in_database_file_alone() -> int:
        # A copy of the main file without its WAL holds only what was checkpointed.
        copy = tmp_path / "copy.db"
        copy.write_bytes((tmp_path / "sessions.db").read_bytes())
        with contextlib.closing(sqlite3.connect(copy)) as db:
            has_table = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'turns'").fetchone()
            count: int = db.execute("SELECT count(*) FROM turns").fetchone()[0] if has_table else 0
        copy.unlink()
        return count

    store = await open_store()
    assert isinstance(store, SqliteSessionStore)
    await store.create("default", "s1", {})
    await store.begin_turn("s1", "r1", "first", 1.0)
    await store.finish_turn("s1", _turn("r1", "first"))
    assert turns_in_database_file_alone() == 0  # written on the loop, to the WAL only
    await store.checkpoint()
    assert turns_in_database_file_alone() == 1

    # Nobody asks: the store's own checkpointer follows writes within about a second.
    await store.begin_turn("s1", "r2", "second", 2.0)
    await store.finish_turn("s1", _turn("r2", "second"))

    async def checkpointed() -> bool:
        return turns_in_database_file_alone() == 2

    await eventually(checkpointed, interval=0.1)


@pytest.mark.parametrize("open_store", ["sqlite"], indirect=True)
async def test_sqlite_keeps_its_wal_small_while_turns_are_written_without_pause(
    open_store: OpenStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A passive checkpoint alone never lets the WAL start over under continuous writes:
    # it would grow by every page ever written (hundreds of MB in a soak).
    monkeypatch.setattr(sqlite_store, "CHECKPOINT_INTERVAL", 0.05)
    store = await open_store()
    wal = tmp_path / "sessions.db-wal"
    await store.create("default", "s1", {})
    largest = 0
    # A count of turns, not a time: a loaded machine writes them more slowly, and its
    # checkpointer still runs every 50 ms between them.
    for turns in range(1, 1001):
        await store.begin_turn("s1", f"r{turns}", "q", 1.0)
        turn = _turn(f"r{turns}", "q")
        turn.messages.append({"role": "tool", "tool_call_id": "c", "content": "x" * 1500})
        await store.finish_turn("s1", turn)
        await asyncio.sleep(0.001)  # about a thousand turns a second
        if turns % 20 == 0:
            largest = max(largest, wal.stat().st_size if wal.exists() else 0)
    # About ten 4 KiB pages go through the WAL per turn: some 40 MB in all.
    assert largest < 16 * 1024 * 1024


@pytest.mark.parametrize("open_store", ["sqlite"], indirect=True)
async def test_sqlite_work_never_blocks_the_loop_while_another_holds_the_write_lock(
    open_store: OpenStore, tmp_path: Path
) -> None:
    store = await open_store()
    await store.create("default", "s1", {})
    await store.begin_turn("s1", "r1", "first", 1.0)
    # Another connection holds the write lock, as a restarting checkpoint does briefly.
    holder = sqlite3.connect(tmp_path / "sessions.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    loop = asyncio.get_running_loop()
    loop.call_later(0.3, holder.commit)
    gaps: list[float] = []

    async def ticker() -> None:
        last = loop.time()
        while True:
            await asyncio.sleep(0.005)
            gaps.append(loop.time() - last)
            last = loop.time()

    ticking = asyncio.create_task(ticker())
    started = loop.time()
    await store.finish_turn("s1", _turn("r1", "first"))  # waits for the lock, off the loop
    waited = loop.time() - started
    ticking.cancel()
    holder.close()
    assert waited >= 0.25
    assert max(gaps) < 0.1  # the loop kept turning meanwhile
    session = await store.get("s1")
    assert session is not None and [t.run_id for t in session.turns] == ["r1"]


# The schema as sidecars before schema 2 wrote it, kept here as history.
SCHEMA_1 = """
CREATE TABLE sessions (
    session_id   TEXT PRIMARY KEY,
    profile      TEXT NOT NULL,
    labels       BLOB NOT NULL,
    create_time  REAL NOT NULL,
    update_time  REAL NOT NULL,
    memory       TEXT NOT NULL DEFAULT '',
    memory_turns INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_by_update_time ON sessions (update_time);
CREATE TABLE turns (
    id         INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (session_id) ON DELETE CASCADE,
    run_id     TEXT NOT NULL,
    data       BLOB NOT NULL,
    UNIQUE (session_id, run_id)
);
CREATE INDEX turns_by_session ON turns (session_id, id);
CREATE TABLE pending_turns (
    session_id TEXT PRIMARY KEY REFERENCES sessions (session_id) ON DELETE CASCADE,
    run_id     TEXT NOT NULL,
    input      TEXT NOT NULL,
    start_time REAL NOT NULL
);
PRAGMA user_version=1;
"""


@pytest.mark.parametrize("synchronous", ["normal", "full"])
async def test_a_store_of_schema_1_is_upgraded_and_keeps_its_turns_and_running_turns(
    tmp_path: Path, synchronous: str
) -> None:
    path = tmp_path / "sessions.db"
    old = sqlite3.connect(path, isolation_level=None)
    old.executescript(SCHEMA_1)
    old.execute(
        "INSERT INTO sessions VALUES ('s1', 'default', ?, 1.0, 2.0, '', 0)", (encode_labels({}),)
    )
    for run_id in ("r2", "r1"):  # inserted in this order: the turns' order is the rows'
        old.execute(
            "INSERT INTO turns (session_id, run_id, data) VALUES ('s1', ?, ?)",
            (run_id, encode_turn(_turn(run_id, f"question {run_id}"))),
        )
    old.execute("INSERT INTO pending_turns VALUES ('s1', 'r3', 'cut off', 3.0)")
    old.close()

    store = SqliteSessionStore(path, synchronous=synchronous)
    await store.open()
    try:
        session = await store.get("s1")
        assert session is not None
        assert [t.run_id for t in session.turns] == ["r2", "r1", "r3"]
        assert session.turns[2].stop_reason is StopReason.INTERRUPTED
        await store.begin_turn("s1", "r4", "after the upgrade", 4.0)
        with pytest.raises(SessionBusy):
            await store.begin_turn("s1", "r5", "while r4 runs", 4.0)
        await store.finish_turn("s1", _turn("r4", "after the upgrade"))
        session = await store.get("s1")
        assert session is not None and [t.run_id for t in session.turns][-1] == "r4"
    finally:
        await store.close()
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA user_version").fetchone()[0] == sqlite_store.SCHEMA_VERSION == 8
    tables = dict(check.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
    assert tables["variant_changes"].endswith("WITHOUT ROWID")
    assert tables["pending_turns"].endswith("WITHOUT ROWID")
    assert {"runs", "run_events"} <= set(tables)  # schema 3: background runs
    assert "spend" in tables  # schema 4: each principal's spend per day
    indexes = [n for (n,) in check.execute("SELECT name FROM sqlite_master WHERE type='index'")]
    assert "turns_by_session" not in indexes
    assert "runs_by_request" in indexes  # schema 6: a run's request id, unique per principal
    columns = {row[1] for row in check.execute("PRAGMA table_info(runs)")}
    assert {"request_id", "message_id"} <= columns
    assert "callback_id" in columns  # schema 7: the id a caller gave a run's callback
    check.close()


async def test_a_store_written_by_a_newer_sidecar_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    newer = sqlite3.connect(path, isolation_level=None)
    newer.executescript(SCHEMA_1.replace("user_version=1", "user_version=99"))
    newer.close()
    store = SqliteSessionStore(path)
    with pytest.raises(SessionStoreError, match="newer sidecar"):
        await store.open()
    await store.close()


@pytest.mark.parametrize("open_store", ["sqlite", "sqlite-full"], indirect=True)
async def test_loading_a_session_does_not_wait_for_another_connections_write_lock(
    open_store: OpenStore, tmp_path: Path
) -> None:
    store = await open_store()
    await store.create("default", "s1", {})
    await store.begin_turn("s1", "r1", "first", 1.0)
    await store.finish_turn("s1", _turn("r1", "first"))
    holder = sqlite3.connect(tmp_path / "sessions.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # held until the end: a get that needs it never ends
    try:
        session = await asyncio.wait_for(store.get("s1"), 2.0)
    finally:
        holder.rollback()
        holder.close()
    assert session is not None and [t.run_id for t in session.turns] == ["r1"]


@pytest.mark.parametrize("open_store", ["sqlite", "sqlite-full"], indirect=True)
async def test_a_sweep_deletes_every_expired_session_in_batches_and_spares_running_ones(
    open_store: OpenStore,
) -> None:
    clock = FakeClock()
    store = await open_store(idle_ttl=60.0, clock=clock)
    assert isinstance(store, SqliteSessionStore)
    for i in range(1_234):
        await store.create("default", f"s{i}", {})
    await store.begin_turn("s7", "r1", "still running", clock.now)
    clock.now += 61
    await store.create("default", "fresh", {})
    assert await store.sweep() == 1_233
    assert await store.get("s7") is not None
    assert await store.get("fresh") is not None
    assert await store.get("s8") is None


@pytest.mark.parametrize("open_store", ["postgres"], indirect=True)
async def test_a_live_replicas_running_turn_is_never_taken_but_a_dead_ones_is_after_its_lease(
    open_store: OpenStore,
) -> None:
    alive = await open_store(lease=0.3)
    other = await open_store(lease=0.3)
    await alive.create("default", "s1", {})
    await alive.begin_turn("s1", "r1", "long turn", 1.0)
    assert isinstance(alive, PostgresSessionStore)
    db = await asyncpg.connect(alive.dsn)
    try:
        claimed = await db.fetchval("SELECT lease_until FROM agent_pending_turns")

        async def renewed_twice() -> bool:
            lease = await db.fetchval("SELECT lease_until FROM agent_pending_turns")
            return bool((lease - claimed).total_seconds() >= 0.3)

        # Well past the first lease: the heartbeat kept the claim alive.
        await eventually(renewed_twice)
        session = await other.get("s1")
        assert session is not None and session.turns == []
        with pytest.raises(SessionBusy):
            await other.begin_turn("s1", "r2", "steal", 2.0)

        await alive.close()  # dies: no more heartbeats

        async def reported() -> bool:
            session = await other.get("s1")
            return session is not None and len(session.turns) == 1

        await eventually(reported)
        session = await other.get("s1")
        assert session is not None
        assert session.turns[0].stop_reason is StopReason.INTERRUPTED
        assert await db.fetchval("SELECT count(*) FROM agent_pending_turns") == 0
    finally:
        await db.close()
    await other.begin_turn("s1", "r2", "next", 2.0)


@pytest.mark.parametrize("open_store", ["postgres"], indirect=True)
async def test_a_turn_reported_as_interrupted_is_replaced_if_its_run_finishes_after_all(
    open_store: OpenStore,
) -> None:
    stalled = await open_store(lease=0.2)
    reader = await open_store(lease=0.2)
    await stalled.create("default", "s1", {})
    await stalled.begin_turn("s1", "r1", "slow", 1.0)
    await stalled.renew_leases()
    await stalled.close()  # silent for longer than its lease, as if stalled

    async def reported() -> bool:
        session = await reader.get("s1")
        return session is not None and len(session.turns) == 1

    await eventually(reported)
    # The stalled replica comes back and finishes: its answer replaces the report.
    await reader.finish_turn("s1", _turn("r1", "slow"))
    session = await reader.get("s1")
    assert session is not None
    assert [(t.run_id, t.stop_reason) for t in session.turns] == [("r1", StopReason.ANSWERED)]
