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
import fcntl
import logging
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from sidecar.errors import SessionBusy, SessionExists, SessionNotFound, SessionStoreError
from sidecar.periodic import Periodic
from sidecar.sessions.records import decode_labels, decode_turn, encode_labels, encode_turn
from sidecar.sessions.sqlite_db import transaction, upsert_turn
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
_CHECKPOINT_LOCK_WAIT_MS = 200  # how long a restarting checkpoint waits for the write lock
_WAL_SIZE_LIMIT = 64 * 1024 * 1024  # bytes a WAL file keeps when it starts over
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
        self._synchronous = synchronous.upper()
        self._idle_ttl = idle_ttl
        self._clock = clock
        self._inline = self._synchronous == "NORMAL"
        self._executor: ThreadPoolExecutor | None = None
        self._db: sqlite3.Connection | None = None
        self._checkpoint_db: sqlite3.Connection | None = None
        self._writes_since_checkpoint = 0
        self._on_thread = 0  # operations handed to the thread and not yet back
        self._lock_fd: int | None = None
        self._sweeper = Periodic("session-expiry", sweep_interval, self.sweep)
        self._checkpointer = Periodic("session-checkpoint", CHECKPOINT_INTERVAL, self.checkpoint)
        self._runs = SqliteRunStore(self, retention=retention, clock=clock)

    @property
    def runs(self) -> SqliteRunStore:
        return self._runs

    # -- for the run store beside it ----------------------------------------------------

    async def execute(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the store's connection, where the store runs its own reads."""
        return await self._call(fn, *args)

    async def execute_write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the store's connection as one of the store's writes."""
        return await self._write(fn, *args)

    def connection(self) -> sqlite3.Connection:
        """The connection; only from inside :meth:`execute` or :meth:`execute_write`."""
        return self._conn()

    # -- where the work runs ------------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        executor = self._executor
        if executor is None:
            raise SessionStoreError(f"the session store {self.path} is not open")
        loop = asyncio.get_running_loop()
        if not self._inline:
            return await loop.run_in_executor(executor, fn, *args)
        if self._on_thread == 0:  # the connection is the loop's alone right now
            try:
                return fn(*args)
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
                    raise
                # A checkpoint holds the write lock; nothing of fn took effect (each
                # operation is one statement or one transaction that failed to begin).
        self._on_thread += 1
        try:
            return await loop.run_in_executor(executor, self._waiting, fn, *args)
        finally:
            self._on_thread -= 1

    def _waiting(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` on the store's thread, waiting for a lock the way the loop cannot."""
        db = self._conn()
        db.execute("PRAGMA busy_timeout=5000")
        try:
            return fn(*args)
        finally:
            db.execute("PRAGMA busy_timeout=0")

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        result = await self._call(fn, *args)
        self._writes_since_checkpoint += 1
        return result

    async def checkpoint(self) -> None:
        """Copy the WAL into the database on the store's thread, if anything was written.

        Only with ``synchronous: normal``; with ``full`` SQLite checkpoints on its own
        thread as it goes.
        """
        written = self._writes_since_checkpoint
        if not self._inline or written == 0 or self._executor is None:
            return
        await asyncio.get_running_loop().run_in_executor(self._executor, self._checkpoint_sync)
        self._writes_since_checkpoint -= written  # writes made meanwhile wait for the next

    def _checkpoint_sync(self) -> None:
        db = self._checkpoint_db
        if db is None:
            db = self._checkpoint_db = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False
            )
            db.execute(f"PRAGMA busy_timeout={_CHECKPOINT_LOCK_WAIT_MS}")
        # PASSIVE copies the bulk without blocking the loop's writes; RESTART then takes
        # the write lock for the few pages written meanwhile, so the WAL starts over.
        db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        db.execute("PRAGMA wal_checkpoint(RESTART)")

    def _conn(self) -> sqlite3.Connection:
        assert self._db is not None
        return self._db

    # -- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._lock_fd, 32, 0).decode(errors="replace").strip()
            os.close(self._lock_fd)
            self._lock_fd = None
            by = f"sidecar process {holder}" if holder.isdigit() else "another sidecar process"
            raise SessionStoreError(
                f"the session store {self.path.resolve()} is in use by {by}; give each "
                "process its own sessions.sqlite.path (the default, agent-sidecar.db, is in "
                "the working directory), or share sessions through sessions.store: postgres"
            ) from None
        os.ftruncate(self._lock_fd, 0)
        os.pwrite(self._lock_fd, str(os.getpid()).encode(), 0)  # who holds it, for the next
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="sqlite-sessions")
        try:
            await self._call(self._open_sync)
        except BaseException:
            await self.close()
            raise
        self._sweeper.start()  # expired sessions, and finished runs past their retention
        if self._inline:
            self._checkpointer.start()

    def _open_sync(self) -> None:
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise SessionStoreError(f"cannot open the session store {self.path}: {exc}") from None
        self._db = db
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={self._synchronous}")
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("PRAGMA busy_timeout=5000")
        if self._inline:
            db.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints run off the loop
            db.execute("PRAGMA busy_timeout=0")  # the loop never waits for a lock
            db.execute(f"PRAGMA journal_size_limit={_WAL_SIZE_LIMIT}")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            db.executescript(
                f"BEGIN IMMEDIATE;{_SCHEMA}PRAGMA user_version={SCHEMA_VERSION};COMMIT;"
            )
            version = SCHEMA_VERSION
        elif version > SCHEMA_VERSION:
            raise SessionStoreError(
                f"the session store {self.path} was written by a newer sidecar "
                f"(schema {version}, this one knows {SCHEMA_VERSION})"
            )
        while version < SCHEMA_VERSION:
            try:
                db.executescript(
                    f"BEGIN IMMEDIATE;{_MIGRATIONS[version]}"
                    f"PRAGMA user_version={version + 1};COMMIT;"
                )
            except sqlite3.Error as exc:
                if db.in_transaction:
                    db.rollback()
                raise SessionStoreError(
                    f"cannot upgrade the session store {self.path} from schema {version}: {exc}"
                ) from None
            log.info("session store %s: schema %d upgraded to %d", self.path, version, version + 1)
            version += 1
        self._interrupt_all_sync()

    def _interrupt_all_sync(self) -> None:
        # The lock says no other process is alive on this file: every start record left
        # behind belongs to a run that was cut off.
        db = self._conn()
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
        executor, self._executor = self._executor, None
        if executor is not None:
            loop = asyncio.get_running_loop()
            for db in (self._checkpoint_db, self._db):
                if db is not None:
                    # The last connection to close checkpoints the WAL and removes it.
                    await loop.run_in_executor(executor, db.close)
            self._checkpoint_db = self._db = None
            executor.shutdown(wait=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

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
        await self._write(self._create_sync, session)
        return session

    def _create_sync(self, s: Session) -> None:
        db = self._conn()
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
        return await self._call(self._get_sync, session_id)

    async def count(self, prefix: str = "") -> int:
        return await self._call(self._count_sync, prefix)

    def _count_sync(self, prefix: str) -> int:
        # substr, not LIKE: a prefix may hold LIKE's wildcards (_ is allowed in names).
        row = (
            self._conn()
            .execute(
                "SELECT count(*) FROM sessions WHERE substr(session_id, 1, ?) = ?",
                (len(prefix), prefix),
            )
            .fetchone()
            if prefix
            else self._conn().execute("SELECT count(*) FROM sessions").fetchone()
        )
        return int(row[0])

    def _get_sync(self, session_id: str) -> Session | None:
        db = self._conn()
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
        cursor = self._conn().execute(
            "DELETE FROM sessions WHERE session_id = ? AND update_time < ?"
            " AND session_id NOT IN (SELECT session_id FROM pending_turns)"
            f" AND session_id NOT IN (SELECT session_id FROM runs WHERE state IN {ACTIVE})",
            (session_id, self._clock() - self._idle_ttl),
        )
        return cursor.rowcount > 0

    async def delete(self, session_id: str) -> bool:
        return await self._write(self._delete_sync, session_id)

    def _delete_sync(self, session_id: str) -> bool:
        cursor = self._conn().execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
        return cursor.rowcount > 0

    async def sweep(self) -> int:
        """Delete every expired session and every finished run past its retention; return
        how many sessions."""
        await self._runs.sweep()
        if self._idle_ttl is None:
            return 0
        cutoff, deleted = self._clock() - self._idle_ttl, 0
        while True:
            batch = await self._write(self._sweep_sync, cutoff)
            deleted += batch
            if batch < SWEEP_BATCH:
                return deleted
            await asyncio.sleep(0)  # let runs through between batches

    def _sweep_sync(self, cutoff: float) -> int:
        cursor = self._conn().execute(
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
        await self._write(self._begin_sync, session_id, run_id, user_input, start_time)

    def _begin_sync(self, session_id: str, run_id: str, user_input: str, start: float) -> None:
        db = self._conn()
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
        await self._write(self._resume_sync, session_id, run_id, user_input, start_time)

    def _resume_sync(self, session_id: str, run_id: str, user_input: str, start: float) -> None:
        held = (
            self._conn()
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
        await self._write(self._finish_sync, session_id, turn, data)

    def _finish_sync(self, session_id: str, turn: Turn, data: bytes) -> None:
        db = self._conn()
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
        return await self._write(self._set_memory_sync, session_id, memory, memory_turns)

    def _set_memory_sync(self, session_id: str, memory: str, memory_turns: int) -> bool:
        cursor = self._conn().execute(
            "UPDATE sessions SET memory = ?, memory_turns = ?"
            " WHERE session_id = ? AND memory_turns < ?",
            (memory, memory_turns, session_id, memory_turns),
        )
        return cursor.rowcount > 0

    async def recent_turns(self, profile: str, limit: int) -> list[Turn]:
        rows = await self._call(self._recent_sync, profile, limit)
        return [decode_turn(data) for (data,) in reversed(rows)]

    def _recent_sync(self, profile: str, limit: int) -> list[tuple[bytes]]:
        # Newest first by the turns' own key: the query stops after ``limit`` rows.
        return (
            self._conn()
            .execute(
                "SELECT t.data FROM turns t JOIN sessions s ON s.session_id = t.session_id"
                " WHERE s.profile = ? ORDER BY t.id DESC LIMIT ?",
                (profile, limit),
            )
            .fetchall()
        )

    # -- spend --------------------------------------------------------------------------

    async def spent(self, principal: str, day: str) -> tuple[float, int]:
        return await self._call(self._spent_sync, principal, day)

    def _spent_sync(self, principal: str, day: str) -> tuple[float, int]:
        row = (
            self._conn()
            .execute(
                "SELECT cost, tokens FROM spend WHERE principal = ? AND day = ?", (principal, day)
            )
            .fetchone()
        )
        return (float(row[0]), int(row[1])) if row is not None else (0.0, 0)

    async def add_spend(
        self, principal: str, day: str, cost: float, tokens: int
    ) -> tuple[float, int]:
        return await self._write(self._add_spend_sync, principal, day, cost, tokens)

    def _add_spend_sync(
        self, principal: str, day: str, cost: float, tokens: int
    ) -> tuple[float, int]:
        row = (
            self._conn()
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
        return await self._call(self._variant_changes_sync)

    def _variant_changes_sync(self) -> dict[str, str]:
        rows = self._conn().execute("SELECT profile, change FROM variant_changes").fetchall()
        return {str(profile): str(change) for profile, change in rows}

    async def set_variant_change(self, profile: str, change: str | None) -> None:
        await self._write(self._set_variant_change_sync, profile, change)

    def _set_variant_change_sync(self, profile: str, change: str | None) -> None:
        db = self._conn()
        with transaction(db):
            if change is None:
                db.execute("DELETE FROM variant_changes WHERE profile = ?", (profile,))
            else:
                db.execute(
                    "INSERT INTO variant_changes (profile, change) VALUES (?, ?)"
                    " ON CONFLICT (profile) DO UPDATE SET change = excluded.change",
                    (profile, change),
                )
