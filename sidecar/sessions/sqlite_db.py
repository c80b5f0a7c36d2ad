"""What the SQLite session store and the run store beside it share: the database (one
file, one connection, the thread its slow work runs on, its checkpoints), a transaction,
and a turn written over its start record or its report."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from sidecar.errors import SessionStoreError
from sidecar.sessions.records import encode_turn
from sidecar.types import Turn

T = TypeVar("T")
log = logging.getLogger(__name__)

_CHECKPOINT_LOCK_WAIT_MS = 200  # how long a restarting checkpoint waits for the write lock
_WAL_SIZE_LIMIT = 64 * 1024 * 1024  # bytes a WAL file keeps when it starts over


class SqliteDatabase:
    """One SQLite file, held by this process alone (a lock file says so), its schema kept
    current, and where each statement runs.

    With ``synchronous: normal`` statements run on the event loop (a commit costs no
    fsync) and checkpoints on the database's thread; a statement that meets a lock goes to
    the thread and waits there, never on the loop. With ``full`` every statement runs on
    the thread.

    Args:
        path: The file; created with its directory when missing.
        synchronous: ``normal`` or ``full``.
        schema: The whole schema, for a new file.
        version: Its version (``PRAGMA user_version``).
        migrations: From each older version, the statements that make it the next.
    """

    def __init__(
        self,
        path: Path,
        *,
        synchronous: str,
        schema: str,
        version: int,
        migrations: Mapping[int, str],
    ) -> None:
        self.path = path
        self._synchronous = synchronous.upper()
        self.inline = self._synchronous == "NORMAL"
        self._schema, self._version, self._migrations = schema, version, migrations
        self._executor: ThreadPoolExecutor | None = None
        self._db: sqlite3.Connection | None = None
        self._checkpoint_db: sqlite3.Connection | None = None
        self._writes_since_checkpoint = 0
        self._on_thread = 0  # operations handed to the thread and not yet back
        self._lock_fd: int | None = None

    # -- where the work runs ------------------------------------------------------------

    async def execute(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the connection (:meth:`connection` inside it)."""
        executor = self._executor
        if executor is None:
            raise SessionStoreError(f"the session store {self.path} is not open")
        loop = asyncio.get_running_loop()
        if not self.inline:
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
        """Run ``fn`` on the thread, waiting for a lock the way the loop cannot."""
        db = self.connection()
        db.execute("PRAGMA busy_timeout=5000")
        try:
            return fn(*args)
        finally:
            db.execute("PRAGMA busy_timeout=0")

    async def execute_write(self, fn: Callable[..., T], *args: Any) -> T:
        """:meth:`execute` for a write: the next checkpoint has it to copy."""
        result = await self.execute(fn, *args)
        self._writes_since_checkpoint += 1
        return result

    def connection(self) -> sqlite3.Connection:
        """The connection; only from inside :meth:`execute` or :meth:`execute_write`."""
        assert self._db is not None
        return self._db

    async def checkpoint(self) -> None:
        """Copy the WAL into the database on the thread, if anything was written.

        Only with ``synchronous: normal``; with ``full`` SQLite checkpoints on its own
        thread as it goes.
        """
        written = self._writes_since_checkpoint
        if not self.inline or written == 0 or self._executor is None:
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

    # -- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        """Take the file's lock, connect, and bring the schema up to date.

        Raises:
            SessionStoreError: another process holds the file, or it cannot be opened,
                is newer than this code, or cannot be upgraded.
        """
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
            await self.execute(self._open_sync)
        except BaseException:
            await self.close()
            raise

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
        if self.inline:
            db.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints run off the loop
            db.execute("PRAGMA busy_timeout=0")  # the loop never waits for a lock
            db.execute(f"PRAGMA journal_size_limit={_WAL_SIZE_LIMIT}")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            db.executescript(
                f"BEGIN IMMEDIATE;{self._schema}PRAGMA user_version={self._version};COMMIT;"
            )
            version = self._version
        elif version > self._version:
            raise SessionStoreError(
                f"the session store {self.path} was written by a newer sidecar "
                f"(schema {version}, this one knows {self._version})"
            )
        while version < self._version:
            try:
                db.executescript(
                    f"BEGIN IMMEDIATE;{self._migrations[version]}"
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

    async def close(self) -> None:
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


def upsert_turn(
    db: sqlite3.Connection, session_id: str, turn: Turn, data: bytes | None = None
) -> None:
    # A run's turn is written once; the upsert only matters when a turn reported as
    # interrupted finishes after all, which then replaces the report in place.
    db.execute(
        "INSERT INTO turns (session_id, run_id, data) VALUES (?, ?, ?)"
        " ON CONFLICT (session_id, run_id) DO UPDATE SET data = excluded.data",
        (session_id, turn.run_id, data if data is not None else encode_turn(turn)),
    )


@contextlib.contextmanager
def transaction(db: sqlite3.Connection, write: bool = True) -> Iterator[None]:
    """BEGIN IMMEDIATE (``write``) or BEGIN … COMMIT, or ROLLBACK on any exception; nested
    use is a no-op."""
    if db.in_transaction:
        yield
        return
    db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        yield
    except BaseException:
        db.rollback()
        raise
    db.execute("COMMIT")
