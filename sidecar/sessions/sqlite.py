"""The embedded session store: one SQLite file in WAL mode, used by one sidecar process.

Where the work runs depends on ``synchronous``:

- ``normal`` (the default): statements run on the event loop itself. In WAL mode a commit
  then only writes to the page cache (tens of microseconds), which costs less than handing
  the work to a thread and back (a futex wake, a loop wake-up, and the GIL passed to and
  fro). What does touch the disk — the checkpoint that copies the WAL into the database
  and fsyncs it — never runs on the loop: automatic checkpoints are off, and a checkpoint
  runs on the store's own thread, over its own connection, after writes. A passive
  checkpoint alone never lets the WAL start over while writes keep coming (it is never
  fully copied at the moment the next write begins), so each pass ends with a restarting
  one that holds the write lock for the last few pages, after which the next write starts
  the WAL over from its beginning (the file is reused, not regrown, and cut back to
  ``_WAL_SIZE_LIMIT`` if a burst made it larger). The loop never waits for that
  lock: its connection does not wait at all, and an operation that finds the database
  busy is handed to the store's thread instead, queued behind the checkpoint, as is every
  operation until the thread has caught up.
- ``full``: every commit waits for an fsync, so every operation (a whole transaction) is
  one hop to the store's thread, which owns the connection.

One process per file: a lock file (``PATH.lock``, ``flock``) keeps a second sidecar out.
So at start every *turn started* record left in the file belongs to a process that died
(killed, or its machine lost), and each becomes an interrupted turn before the store
serves anything. The kernel releases the lock when a process dies, however it dies.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from sidecar.errors import SessionBusy, SessionExists, SessionNotFound
from sidecar.periodic import Periodic
from sidecar.sessions.records import decode_labels, decode_turn, encode_labels, encode_turn
from sidecar.sessions.sqlite_db import SqliteDatabase, transaction, upsert_turn
from sidecar.sessions.sqlite_runs import (
    ACTIVE,
    RUNS_CALLBACK_ID,
    RUNS_CALLBACK_SHAPE,
    RUNS_REQUEST_ID,
    RUNS_SCHEMA,
    SqliteRunStore,
)
from sidecar.sessions.store import interrupted_turn
from sidecar.types import Session, Turn

T = TypeVar("T")
log = logging.getLogger(__name__)

SCHEMA_VERSION = 8
CHECKPOINT_INTERVAL = 1.0
"""Seconds between checkpoints while turns are being written (``synchronous: normal``)."""
SWEEP_BATCH = 500
"""Expired sessions deleted per statement: a big sweep never holds the loop for long."""
# Each principal's spend per day, for the cost guard's daily quotas: a row per principal
# and day.
_SPEND = """
CREATE TABLE spend (
    principal TEXT NOT NULL,
    day       TEXT NOT NULL,
    cost      REAL NOT NULL,
    tokens    INTEGER NOT NULL,
    PRIMARY KEY (principal, day)
) WITHOUT ROWID;
"""
# The operator's change to each profile's variants (VariantService).
_VARIANT_CHANGES = """
CREATE TABLE variant_changes (
    profile TEXT PRIMARY KEY,
    change  TEXT NOT NULL
) WITHOUT ROWID;
"""
_SCHEMA = (
    """
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
CREATE TABLE pending_turns (
    session_id TEXT PRIMARY KEY REFERENCES sessions (session_id) ON DELETE CASCADE,
    run_id     TEXT NOT NULL,
    input      TEXT NOT NULL,
    start_time REAL NOT NULL
) WITHOUT ROWID;
"""
    + RUNS_SCHEMA
    + _SPEND
    + RUNS_CALLBACK_SHAPE
    + RUNS_REQUEST_ID
    + RUNS_CALLBACK_ID
    + _VARIANT_CHANGES
)
# Each page a commit changes is written to the WAL whole, so a turn's cost is counted in
# B-trees touched: the start record is one (a table without rowid keeps its rows in its
# key's tree) and a turn's lookup by session uses the (session_id, run_id) index.
_MIGRATIONS = {
    # 1 → 2: the start record in one tree instead of two, and no second index on turns:
    # about 9 pages written to the WAL per turn instead of 12 (counted with strace).
    1: """
CREATE TABLE pending_turns_2 (
    session_id TEXT PRIMARY KEY REFERENCES sessions (session_id) ON DELETE CASCADE,
    run_id     TEXT NOT NULL,
    input      TEXT NOT NULL,
    start_time REAL NOT NULL
) WITHOUT ROWID;
INSERT INTO pending_turns_2 SELECT session_id, run_id, input, start_time FROM pending_turns;
DROP TABLE pending_turns;
ALTER TABLE pending_turns_2 RENAME TO pending_turns;
DROP INDEX turns_by_session;
""",
    # 2 → 3: background runs and their events.
    2: RUNS_SCHEMA,
    # 3 → 4: each principal's spend per day (the cost guard's daily quotas).
    3: _SPEND,
    # 4 → 5: what a run's completion callback delivers (an A2A task for A2A's pushes).
    4: RUNS_CALLBACK_SHAPE,
    # 5 → 6: the caller's key of the request that started a run (StartRun, A2A messageId).
    5: RUNS_REQUEST_ID,
    # 6 → 7: the id a caller gave a run's callback (A2A push configs).
    6: RUNS_CALLBACK_ID,
    # 7 → 8: the operator's change to each profile's variants.
    7: _VARIANT_CHANGES,
}


class SqliteSessionStore:
    """Sessions in one SQLite file.

    Args:
        path: the database file; created with its directory when missing.
        synchronous: ``normal`` (a finished turn survives the process dying; statements run
            on the event loop) or ``full`` (it also survives power loss, at an fsync per
            turn; statements run on the store's thread).
        idle_ttl: seconds after its last turn a session expires; None: never.
        sweep_interval: seconds between sweeps that delete expired sessions (and finished
            background runs past their retention).
        retention: seconds a finished background run is kept.
        clock: wall-clock time source, seconds since the epoch.
    """

    shared = False  # the file's lock keeps other processes out

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "normal",
        idle_ttl: float | None = None,
        sweep_interval: float = 60.0,
        retention: float = 86_400.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self._idle_ttl = idle_ttl
        self._clock = clock
        self.db = SqliteDatabase(
            self.path,
            synchronous=synchronous,
            schema=_SCHEMA,
            version=SCHEMA_VERSION,
            migrations=_MIGRATIONS,
        )
        """The file, shared with the run store beside it."""
        self._sweeper = Periodic("session-expiry", sweep_interval, self.sweep)
        self._checkpointer = Periodic("session-checkpoint", CHECKPOINT_INTERVAL, self.checkpoint)
        self._runs = SqliteRunStore(self.db, retention=retention, clock=clock)

    @property
    def runs(self) -> SqliteRunStore:
        return self._runs

    async def checkpoint(self) -> None:
        """Copy the WAL into the database (see :meth:`SqliteDatabase.checkpoint`)."""
        await self.db.checkpoint()

    # -- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        await self.db.open()
        try:
            await self.db.execute(self._interrupt_all_sync)
        except BaseException:
            await self.db.close()
            raise
        self._sweeper.start()  # expired sessions, and finished runs past their retention
        if self.db.inline:
            self._checkpointer.start()

    def _interrupt_all_sync(self) -> None:
        # The lock says no other process is alive on this file: every start record left
        # behind belongs to a run that was cut off.
        db = self.db.connection()
        now = self._clock()
        with transaction(db):
            rows = db.execute(
                "SELECT session_id, run_id, input, start_time FROM pending_turns"
            ).fetchall()
            for session_id, run_id, user_input, start in rows:
                turn = interrupted_turn(run_id, user_input, start, now)
                upsert_turn(db, session_id, turn)
                db.execute(
                    "UPDATE sessions SET update_time = ? WHERE session_id = ?", (now, session_id)
                )
            db.execute("DELETE FROM pending_turns")
            # Runs the dead process owned are anyone's again (the run store resumes them).
            db.execute("UPDATE runs SET owner = NULL WHERE owner IS NOT NULL")
        if rows:
            log.warning(
                "%d turn(s) cut off when the last process died reported as interrupted: %s",
                len(rows),
                ", ".join(f"{session_id}/{run_id}" for session_id, run_id, _, _ in rows),
            )

    async def close(self) -> None:
        await self._sweeper.stop()
        await self._checkpointer.stop()
        await self.db.close()

    # -- sessions -----------------------------------------------------------------------

    async def create(self, profile: str, session_id: str, labels: Mapping[str, str]) -> Session:
        now = self._clock()
        session = Session(
            session_id=session_id or uuid.uuid4().hex,
            profile=profile,
            labels=dict(labels),
            create_time=now,
            update_time=now,
        )
        await self.db.execute_write(self._create_sync, session)
        return session

    def _create_sync(self, s: Session) -> None:
        db = self.db.connection()
        with transaction(db):
            self._expire_sync(s.session_id)
            try:
                db.execute(
                    "INSERT INTO sessions (session_id, profile, labels, create_time, update_time)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (
                        s.session_id,
                        s.profile,
                        encode_labels(s.labels),
                        s.create_time,
                        s.create_time,
                    ),
                )
            except sqlite3.IntegrityError:
                raise SessionExists(s.session_id) from None

    async def get(self, session_id: str) -> Session | None:
        return await self.db.execute(self._get_sync, session_id)

    async def count(self, prefix: str = "") -> int:
        return await self.db.execute(self._count_sync, prefix)

    def _count_sync(self, prefix: str) -> int:
        # substr, not LIKE: a prefix may hold LIKE's wildcards (_ is allowed in names).
        row = (
            self.db.connection()
            .execute(
                "SELECT count(*) FROM sessions WHERE substr(session_id, 1, ?) = ?",
                (len(prefix), prefix),
            )
            .fetchone()
            if prefix
            else self.db.connection().execute("SELECT count(*) FROM sessions").fetchone()
        )
        return int(row[0])

    def _get_sync(self, session_id: str) -> Session | None:
        db = self.db.connection()
        # Without expiry this only reads: no write lock, so a checkpoint never makes it busy.
        with transaction(db, write=self._idle_ttl is not None):
            if self._expire_sync(session_id):
                return None
            row = db.execute(
                "SELECT profile, labels, create_time, update_time, memory, memory_turns"
                " FROM sessions WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            if row is None:
                return None
            turns = db.execute(
                "SELECT data FROM turns WHERE session_id = ? ORDER BY id", (session_id,)
            ).fetchall()
        profile, labels, created, updated, memory, memory_turns = row
        return Session(
            session_id=session_id,
            profile=profile,
            labels=decode_labels(labels),
            create_time=created,
            update_time=updated,
            turns=[decode_turn(data) for (data,) in turns],
            memory=memory,
            memory_turns=memory_turns,
        )

    def _expire_sync(self, session_id: str) -> bool:
        """Delete the session when it has expired (inside the caller's transaction)."""
        if self._idle_ttl is None:
            return False
        cursor = self.db.connection().execute(
            "DELETE FROM sessions WHERE session_id = ? AND update_time < ?"
            " AND session_id NOT IN (SELECT session_id FROM pending_turns)"
            f" AND session_id NOT IN (SELECT session_id FROM runs WHERE state IN {ACTIVE})",
            (session_id, self._clock() - self._idle_ttl),
        )
        return cursor.rowcount > 0

    async def delete(self, session_id: str) -> bool:
        return await self.db.execute_write(self._delete_sync, session_id)

    def _delete_sync(self, session_id: str) -> bool:
        cursor = self.db.connection().execute(
            "DELETE FROM sessions WHERE session_id = ?", (session_id,)
        )
        return cursor.rowcount > 0

    async def sweep(self) -> int:
        """Delete every expired session and every finished run past its retention; return
        how many sessions."""
        await self._runs.sweep()
        if self._idle_ttl is None:
            return 0
        cutoff, deleted = self._clock() - self._idle_ttl, 0
        while True:
            batch = await self.db.execute_write(self._sweep_sync, cutoff)
            deleted += batch
            if batch < SWEEP_BATCH:
                return deleted
            await asyncio.sleep(0)  # let runs through between batches

    def _sweep_sync(self, cutoff: float) -> int:
        cursor = self.db.connection().execute(
            "DELETE FROM sessions WHERE session_id IN (SELECT session_id FROM sessions"
            " WHERE update_time < ?"
            " AND session_id NOT IN (SELECT session_id FROM pending_turns)"
            f" AND session_id NOT IN (SELECT session_id FROM runs WHERE state IN {ACTIVE})"
            " LIMIT ?)",
            (cutoff, SWEEP_BATCH),
        )
        return cursor.rowcount

    # -- turns --------------------------------------------------------------------------

    async def begin_turn(
        self, session_id: str, run_id: str, user_input: str, start_time: float
    ) -> None:
        await self.db.execute_write(self._begin_sync, session_id, run_id, user_input, start_time)

    def _begin_sync(self, session_id: str, run_id: str, user_input: str, start: float) -> None:
        db = self.db.connection()
        try:
            db.execute(
                "INSERT INTO pending_turns (session_id, run_id, input, start_time)"
                " VALUES (?, ?, ?, ?)",
                (session_id, run_id, user_input, start),
            )
        except sqlite3.IntegrityError as exc:
            if "FOREIGN KEY" in str(exc):
                raise SessionNotFound(session_id) from None
            raise SessionBusy(session_id) from None

    async def resume_turn(
        self, session_id: str, run_id: str, user_input: str, start_time: float
    ) -> None:
        # One process per file: a start record of this run is its own, left by the run
        # it takes up again in this process; any other holds the session.
        await self.db.execute_write(self._resume_sync, session_id, run_id, user_input, start_time)

    def _resume_sync(self, session_id: str, run_id: str, user_input: str, start: float) -> None:
        held = (
            self.db.connection()
            .execute("SELECT run_id FROM pending_turns WHERE session_id = ?", (session_id,))
            .fetchone()
        )
        if held is not None and held[0] == run_id:
            return
        self._begin_sync(session_id, run_id, user_input, start)

    async def release_turn(self, session_id: str, run_id: str) -> None:
        return None  # the record stays; the next process to open the file reports it

    async def finish_turn(self, session_id: str, turn: Turn) -> None:
        data = encode_turn(turn)  # serialised here, not on the store's thread
        await self.db.execute_write(self._finish_sync, session_id, turn, data)

    def _finish_sync(self, session_id: str, turn: Turn, data: bytes) -> None:
        db = self.db.connection()
        with transaction(db):
            db.execute(
                "DELETE FROM pending_turns WHERE session_id = ? AND run_id = ?",
                (session_id, turn.run_id),
            )
            touched = db.execute(
                "UPDATE sessions SET update_time = ? WHERE session_id = ?",
                (turn.end_time, session_id),
            )
            if touched.rowcount:
                upsert_turn(db, session_id, turn, data)

    async def set_memory(self, session_id: str, memory: str, memory_turns: int) -> bool:
        return await self.db.execute_write(self._set_memory_sync, session_id, memory, memory_turns)

    def _set_memory_sync(self, session_id: str, memory: str, memory_turns: int) -> bool:
        cursor = self.db.connection().execute(
            "UPDATE sessions SET memory = ?, memory_turns = ?"
            " WHERE session_id = ? AND memory_turns < ?",
            (memory, memory_turns, session_id, memory_turns),
        )
        return cursor.rowcount > 0

    async def recent_turns(self, profile: str, limit: int) -> list[Turn]:
        rows = await self.db.execute(self._recent_sync, profile, limit)
        return [decode_turn(data) for (data,) in reversed(rows)]

    def _recent_sync(self, profile: str, limit: int) -> list[tuple[bytes]]:
        # Newest first by the turns' own key: the query stops after ``limit`` rows.
        return (
            self.db.connection()
            .execute(
                "SELECT t.data FROM turns t JOIN sessions s ON s.session_id = t.session_id"
                " WHERE s.profile = ? ORDER BY t.id DESC LIMIT ?",
                (profile, limit),
            )
            .fetchall()
        )

    # -- spend --------------------------------------------------------------------------

    async def spent(self, principal: str, day: str) -> tuple[float, int]:
        return await self.db.execute(self._spent_sync, principal, day)

    def _spent_sync(self, principal: str, day: str) -> tuple[float, int]:
        row = (
            self.db.connection()
            .execute(
                "SELECT cost, tokens FROM spend WHERE principal = ? AND day = ?", (principal, day)
            )
            .fetchone()
        )
        return (float(row[0]), int(row[1])) if row is not None else (0.0, 0)

    async def add_spend(
        self, principal: str, day: str, cost: float, tokens: int
    ) -> tuple[float, int]:
        return await self.db.execute_write(self._add_spend_sync, principal, day, cost, tokens)

    def _add_spend_sync(
        self, principal: str, day: str, cost: float, tokens: int
    ) -> tuple[float, int]:
        row = (
            self.db.connection()
            .execute(
                "INSERT INTO spend (principal, day, cost, tokens) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (principal, day) DO UPDATE"
                " SET cost = cost + excluded.cost, tokens = tokens + excluded.tokens"
                " RETURNING cost, tokens",
                (principal, day, cost, tokens),
            )
            .fetchone()
        )
        return float(row[0]), int(row[1])

    # -- the operator's variant changes -------------------------------------------------

    async def variant_changes(self) -> dict[str, str]:
        return await self.db.execute(self._variant_changes_sync)

    def _variant_changes_sync(self) -> dict[str, str]:
        rows = (
            self.db.connection().execute("SELECT profile, change FROM variant_changes").fetchall()
        )
        return {str(profile): str(change) for profile, change in rows}

    async def set_variant_change(self, profile: str, change: str | None) -> None:
        await self.db.execute_write(self._set_variant_change_sync, profile, change)

    def _set_variant_change_sync(self, profile: str, change: str | None) -> None:
        db = self.db.connection()
        with transaction(db):
            if change is None:
                db.execute("DELETE FROM variant_changes WHERE profile = ?", (profile,))
            else:
                db.execute(
                    "INSERT INTO variant_changes (profile, change) VALUES (?, ?)"
                    " ON CONFLICT (profile) DO UPDATE SET change = excluded.change",
                    (profile, change),
                )
