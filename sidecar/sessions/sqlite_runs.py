"""Background runs in the SQLite file of the session store, one process's.

One process per file (the session store's lock file), so ownership needs no lease: a run is
its process's while it runs, and the next process to open the file finds the runs of the
one that died owned by nobody (the session store clears their owner at open). Every
statement runs where the session store runs its own (on the loop, or its thread).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from sidecar.errors import SessionBusy, SessionNotFound
from sidecar.sessions.records import encode_turn
from sidecar.sessions.runs import (
    RunBounds,
    RunChange,
    Signals,
    decode_pending,
    encode_pending,
)
from sidecar.sessions.sqlite_db import SqliteDatabase, transaction, upsert_turn
from sidecar.types import ACTIVE_STATES, CallbackStatus, RunRecord, RunState, Turn

__all__ = ["ACTIVE", "RUNS_CALLBACK_SHAPE", "RUNS_SCHEMA", "SqliteRunStore"]

ACTIVE = "(" + ", ".join(str(int(s)) for s in ACTIVE_STATES) + ")"
"""The active states, as SQL."""
RUNS_SCHEMA = f"""
CREATE TABLE runs (
    ordinal           INTEGER PRIMARY KEY,
    run_id            TEXT NOT NULL UNIQUE,
    session_id        TEXT NOT NULL REFERENCES sessions (session_id) ON DELETE CASCADE,
    principal         TEXT NOT NULL,
    input             TEXT NOT NULL,
    structured        INTEGER NOT NULL,
    state             INTEGER NOT NULL,
    create_time       REAL NOT NULL,
    update_time       REAL NOT NULL,
    end_time          REAL NOT NULL DEFAULT 0,
    last_sequence     INTEGER NOT NULL DEFAULT 0,
    result            BLOB NOT NULL DEFAULT x'',
    pending           BLOB NOT NULL DEFAULT x'',
    callback_url      TEXT NOT NULL DEFAULT '',
    callback_status   INTEGER NOT NULL DEFAULT 0,
    callback_attempts INTEGER NOT NULL DEFAULT 0,
    attempts          INTEGER NOT NULL DEFAULT 0,
    checkpoint        BLOB NOT NULL DEFAULT x'',
    checkpoint_step   INTEGER NOT NULL DEFAULT 0,
    unsafe_step       INTEGER NOT NULL DEFAULT 0,
    cancel_requested  INTEGER NOT NULL DEFAULT 0,
    owner             TEXT,
    not_before        REAL NOT NULL DEFAULT 0
);
CREATE INDEX runs_by_session ON runs (session_id, ordinal);
CREATE INDEX runs_active ON runs (state, ordinal) WHERE state IN {ACTIVE};
CREATE INDEX runs_finished ON runs (end_time) WHERE end_time > 0;
CREATE TABLE run_events (
    run_id   TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    sequence INTEGER NOT NULL,
    data     BLOB NOT NULL,
    PRIMARY KEY (run_id, sequence)
) WITHOUT ROWID;
"""
RUNS_CALLBACK_SHAPE = """
ALTER TABLE runs ADD COLUMN callback_shape TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN callback_token TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN callback_auth BLOB NOT NULL DEFAULT x'';
CREATE INDEX runs_by_principal ON runs (principal, ordinal);
"""
"""Schema 5: what a run's callback delivers, the token it carries back and the sealed
credentials it presents; a principal's runs across its sessions, listed."""
RUNS_REQUEST_ID = """
ALTER TABLE runs ADD COLUMN request_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN message_id TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX runs_by_request ON runs (principal, request_id) WHERE request_id != '';
"""
"""Schema 6: the caller's key of the request that started a run, unique per principal,
and the id it gave its input."""
RUNS_CALLBACK_ID = """
ALTER TABLE runs ADD COLUMN callback_id TEXT NOT NULL DEFAULT '';
"""
"""Schema 7: the id a caller gave a run's callback (an A2A push config's)."""
_COLUMNS = (
    "ordinal, run_id, session_id, principal, input, structured, state, create_time,"
    " update_time, end_time, last_sequence, result, pending, callback_url, callback_status,"
    " callback_attempts, attempts, checkpoint, checkpoint_step, unsafe_step, cancel_requested,"
    " callback_shape, callback_token, callback_auth, request_id, message_id, callback_id"
)
_LIGHT = _COLUMNS.replace("result,", "x'',").replace("checkpoint,", "x'',")
"""The columns of a listing: no result, no checkpoint."""


def _record(row: Sequence[Any]) -> RunRecord:
    return RunRecord(
        ordinal=row[0],
        run_id=row[1],
        session_key=row[2],
        principal=row[3],
        input=row[4],
        structured=bool(row[5]),
        state=RunState(row[6]),
        create_time=row[7],
        update_time=row[8],
        end_time=row[9],
        last_sequence=row[10],
        result=bytes(row[11]),
        pending=decode_pending(row[12]),
        callback_url=row[13],
        callback_status=CallbackStatus(row[14]),
        callback_attempts=row[15],
        attempts=row[16],
        checkpoint=bytes(row[17]),
        checkpoint_step=row[18],
        unsafe_step=row[19],
        cancel_requested=bool(row[20]),
        callback_shape=row[21],
        callback_token=row[22],
        callback_auth=bytes(row[23]),
        request_id=row[24],
        message_id=row[25],
        callback_id=row[26],
    )


class SqliteRunStore:
    """Background runs beside a :class:`~sidecar.sessions.sqlite.SqliteSessionStore`.

    Args:
        sessions: The session store whose file and connection it uses.
        retention: Seconds a finished run is kept.
        clock: Wall-clock time, seconds since the epoch.
    """

    shared = False
    lease = None

    def __init__(
        self,
        database: SqliteDatabase,
        *,
        retention: float = 86_400.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.owner = f"process-{os.getpid()}"
        self._database = database
        self._retention = retention
        self._clock = clock

    def _db(self) -> sqlite3.Connection:
        return self._database.connection()

    def _expired(self) -> float:
        return self._clock() - self._retention

    # -- reads ------------------------------------------------------------------------

    async def get(self, run_id: str) -> RunRecord | None:
        return await self._database.execute(self._get_sync, run_id)

    def _started_sync(self, principal: str, request_id: str) -> RunRecord | None:
        row = (
            self._db()
            .execute(
                f"SELECT {_COLUMNS} FROM runs WHERE principal = ? AND request_id = ?"
                " AND (end_time = 0 OR end_time >= ?)",
                (principal, request_id, self._expired()),
            )
            .fetchone()
        )
        return _record(row) if row is not None else None

    def _get_sync(self, run_id: str) -> RunRecord | None:
        row = (
            self._db()
            .execute(
                f"SELECT {_COLUMNS} FROM runs WHERE run_id = ? AND (end_time = 0 OR end_time >= ?)",
                (run_id, self._expired()),
            )
            .fetchone()
        )
        return _record(row) if row is not None else None

    async def page(self, session_key: str, *, before: int | None, limit: int) -> list[RunRecord]:
        return await self._database.execute(
            self._page_sync, "session_id", session_key, before, limit
        )

    async def page_of(self, principal: str, *, before: int | None, limit: int) -> list[RunRecord]:
        return await self._database.execute(self._page_sync, "principal", principal, before, limit)

    def _page_sync(
        self, column: str, value: str, before: int | None, limit: int
    ) -> list[RunRecord]:
        """A listing of the runs whose ``column`` (``session_id`` or ``principal``, each
        indexed with the ordinal) is ``value``."""
        rows = (
            self._db()
            .execute(
                f"SELECT {_LIGHT} FROM runs WHERE {column} = ? AND ordinal < ?"
                " AND (end_time = 0 OR end_time >= ?) ORDER BY ordinal DESC LIMIT ?",
                (value, before if before is not None else 2**62, self._expired(), limit),
            )
            .fetchall()
        )
        return [_record(row) for row in rows]

    async def events(self, run_id: str, after: int, limit: int) -> list[tuple[int, bytes]]:
        return await self._database.execute(self._events_sync, run_id, after, limit)

    def _events_sync(self, run_id: str, after: int, limit: int) -> list[tuple[int, bytes]]:
        rows = (
            self._db()
            .execute(
                "SELECT sequence, data FROM run_events WHERE run_id = ? AND sequence > ?"
                " ORDER BY sequence LIMIT ?",
                (run_id, after, limit),
            )
            .fetchall()
        )
        return [(seq, bytes(data)) for seq, data in rows]

    # -- a new run --------------------------------------------------------------------

    async def submit(
        self, run: RunRecord, *, owner: str | None, bounds: RunBounds
    ) -> RunRecord | None:
        stored = await self._database.execute_write(self._submit_sync, run, owner, bounds)
        if isinstance(stored, RunRecord):
            return stored
        run.ordinal = stored
        return None

    def _submit_sync(self, run: RunRecord, owner: str | None, bounds: RunBounds) -> int | RunRecord:
        db = self._db()
        with transaction(db):
            if run.request_id:
                first = self._started_sync(run.principal, run.request_id)
                if first is not None:
                    return first
                # An expired run of that key not swept yet gives its key up.
                db.execute(
                    "UPDATE runs SET request_id = '' WHERE principal = ? AND request_id = ?",
                    (run.principal, run.request_id),
                )
            active = f"SELECT count(*) FROM runs WHERE state IN {ACTIVE}"
            if db.execute(f"{active} AND session_id = ?", (run.session_key,)).fetchone()[0]:
                raise SessionBusy(run.session_key)
            mine = (
                db.execute(f"{active} AND principal = ?", (run.principal,)).fetchone()[0]
                if bounds.principal is not None
                else None
            )
            bounds.admit(run.principal, db.execute(active).fetchone()[0], mine)
            try:
                cursor = db.execute(
                    "INSERT INTO runs (run_id, session_id, principal, input, structured, state,"
                    " create_time, update_time, callback_url, callback_status, attempts, owner,"
                    " callback_shape, callback_token, callback_auth, request_id, message_id,"
                    " callback_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        run.run_id,
                        run.session_key,
                        run.principal,
                        run.input,
                        int(run.structured),
                        int(run.state),
                        run.create_time,
                        run.update_time,
                        run.callback_url,
                        int(run.callback_status),
                        1 if owner else 0,
                        owner,
                        run.callback_shape,
                        run.callback_token,
                        run.callback_auth,
                        run.request_id,
                        run.message_id,
                        run.callback_id,
                    ),
                )
            except sqlite3.IntegrityError:
                raise SessionNotFound(run.session_key) from None
        run.attempts = 1 if owner else 0
        return int(cursor.lastrowid or 0)

    # -- the owner's writes -----------------------------------------------------------

    async def claim(self, owner: str, limit: int, callbacks: int | None = None) -> list[RunRecord]:
        calls = limit if callbacks is None else callbacks
        return await self._database.execute_write(self._claim_sync, owner, limit, calls)

    def _claim_sync(self, owner: str, limit: int, callbacks: int) -> list[RunRecord]:
        db = self._db()
        with transaction(db):
            unowned = "owner IS NULL AND not_before <= ?"
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM runs WHERE {unowned} AND state IN {ACTIVE}"
                " ORDER BY ordinal LIMIT ?",
                (self._clock(), limit),
            ).fetchall()
            rows += db.execute(
                f"SELECT {_COLUMNS} FROM runs WHERE {unowned} AND state NOT IN {ACTIVE}"
                " AND callback_status = ? ORDER BY ordinal LIMIT ?",
                (self._clock(), int(CallbackStatus.PENDING), callbacks),
            ).fetchall()
            claimed = []
            for row in rows:
                record = _record(row)
                if not record.state.finished:
                    record.attempts += 1
                db.execute(
                    "UPDATE runs SET owner = ?, attempts = ? WHERE run_id = ?",
                    (owner, record.attempts, record.run_id),
                )
                claimed.append(record)
        return claimed

    def _owns(self, run_id: str, owner: str, attempt: int) -> bool:
        row = (
            self._db()
            .execute(
                "SELECT 1 FROM runs WHERE run_id = ? AND owner = ? AND attempts = ?",
                (run_id, owner, attempt),
            )
            .fetchone()
        )
        return row is not None

    def _store_events(
        self, run_id: str, events: Sequence[tuple[int, bytes]], state: RunState | None
    ) -> None:
        db = self._db()
        if events:
            db.executemany(
                "INSERT INTO run_events (run_id, sequence, data) VALUES (?, ?, ?)",
                [(run_id, seq, data) for seq, data in events],
            )
        db.execute(
            "UPDATE runs SET update_time = ?, last_sequence = max(last_sequence, ?),"
            " state = coalesce(?, state) WHERE run_id = ?",
            (
                self._clock(),
                events[-1][0] if events else 0,
                int(state) if state is not None else None,
                run_id,
            ),
        )

    async def write(self, run_id: str, owner: str, attempt: int, change: RunChange) -> bool:
        return await self._database.execute_write(self._write_sync, run_id, owner, attempt, change)

    def _write_sync(self, run_id: str, owner: str, attempt: int, change: RunChange) -> bool:
        db = self._db()
        with transaction(db):
            if not self._owns(run_id, owner, attempt):
                return False
            self._store_events(run_id, change.events, change.state)
            if change.pending is not None:
                db.execute(
                    "UPDATE runs SET pending = ? WHERE run_id = ?",
                    (encode_pending(change.pending), run_id),
                )
            if change.checkpoint is not None:
                step, data = change.checkpoint
                db.execute(
                    "UPDATE runs SET checkpoint = ?, checkpoint_step = ? WHERE run_id = ?",
                    (data, step, run_id),
                )
            if change.unsafe_step is not None:
                db.execute(
                    "UPDATE runs SET unsafe_step = max(unsafe_step, ?) WHERE run_id = ?",
                    (change.unsafe_step, run_id),
                )
        return True

    async def finish(
        self,
        run_id: str,
        owner: str,
        attempt: int,
        *,
        state: RunState,
        result: bytes,
        events: Sequence[tuple[int, bytes]],
        turn: Turn | None,
    ) -> bool:
        data = encode_turn(turn) if turn is not None else None
        return await self._database.execute_write(
            self._finish_sync, run_id, owner, attempt, state, result, events, turn, data
        )

    def _finish_sync(
        self,
        run_id: str,
        owner: str | None,
        attempt: int,
        state: RunState,
        result: bytes,
        events: Sequence[tuple[int, bytes]],
        turn: Turn | None,
        data: bytes | None,
    ) -> bool:
        db = self._db()
        with transaction(db):
            if owner is not None and not self._owns(run_id, owner, attempt):
                return False
            self._store_events(run_id, events, state)
            # A run with a callback stays its owner's, who delivers it next.
            db.execute(
                "UPDATE runs SET result = ?, pending = x'', checkpoint = x'', end_time = ?,"
                " callback_status = CASE WHEN callback_url = '' THEN 0 ELSE ? END,"
                " owner = CASE WHEN callback_url = '' THEN NULL ELSE owner END"
                " WHERE run_id = ?",
                (result, self._clock(), int(CallbackStatus.PENDING), run_id),
            )
            if turn is not None:
                session = db.execute(
                    "SELECT session_id FROM runs WHERE run_id = ?", (run_id,)
                ).fetchone()[0]
                db.execute(
                    "DELETE FROM pending_turns WHERE session_id = ? AND run_id = ?",
                    (session, turn.run_id),
                )
                touched = db.execute(
                    "UPDATE sessions SET update_time = ? WHERE session_id = ?",
                    (turn.end_time, session),
                )
                if touched.rowcount:
                    upsert_turn(db, session, turn, data)
        return True

    async def release(
        self, run_id: str, owner: str, attempt: int, *, not_before: float = 0.0
    ) -> None:
        await self._database.execute_write(self._release_sync, run_id, owner, attempt, not_before)

    def _release_sync(self, run_id: str, owner: str, attempt: int, not_before: float) -> None:
        self._db().execute(
            "UPDATE runs SET owner = NULL, not_before = ?"
            " WHERE run_id = ? AND owner = ? AND attempts = ?",
            (not_before, run_id, owner, attempt),
        )

    async def renew(self, owner: str, run_ids: Collection[str]) -> Signals:
        if not run_ids:
            return Signals()
        return await self._database.execute(self._renew_sync, owner, list(run_ids))

    def _renew_sync(self, owner: str, run_ids: list[str]) -> Signals:
        # One process: nobody else writes its runs, but a run may have gone with its
        # session, or expired.
        marks = ", ".join("?" * len(run_ids))
        rows = (
            self._db()
            .execute(
                f"SELECT run_id, cancel_requested FROM runs WHERE owner = ?"
                f" AND run_id IN ({marks})",
                (owner, *run_ids),
            )
            .fetchall()
        )
        held = {run_id for run_id, _ in rows}
        return Signals(
            lost=frozenset(set(run_ids) - held),
            cancel=frozenset(run_id for run_id, cancel in rows if cancel),
        )

    # -- others' requests -------------------------------------------------------------

    async def request_cancel(self, run_id: str) -> None:
        await self._database.execute_write(
            lambda: self._db().execute(
                f"UPDATE runs SET cancel_requested = 1 WHERE run_id = ? AND state IN {ACTIVE}",
                (run_id,),
            )
        )

    async def set_callback(
        self,
        run_id: str,
        url: str,
        shape: str,
        token: str,
        auth: bytes = b"",
        *,
        callback_id: str = "",
        after_end: bool = False,
    ) -> bool:
        status = int(CallbackStatus.PENDING if url else CallbackStatus.NONE)
        cursor = await self._database.execute_write(
            lambda: self._db().execute(
                "UPDATE runs SET callback_url = ?, callback_shape = ?, callback_token = ?,"
                " callback_auth = ?, callback_id = ?,"
                " callback_status = CASE WHEN end_time = 0 THEN ? ELSE callback_status END"
                " WHERE run_id = ? AND (end_time = 0 OR (? AND callback_status != ?))"
                " AND (? = '' OR callback_url IN ('', ?))",
                (
                    url,
                    shape,
                    token,
                    auth,
                    callback_id,
                    status,
                    run_id,
                    after_end,
                    int(CallbackStatus.PENDING),
                    url,
                    url,
                ),
            )
        )
        return bool(cursor.rowcount)

    async def cancel_submitted(self, run_id: str, *, result: bytes, event: bytes) -> bool:
        return await self._database.execute_write(
            self._cancel_submitted_sync, run_id, result, event
        )

    def _cancel_submitted_sync(self, run_id: str, result: bytes, event: bytes) -> bool:
        db = self._db()
        with transaction(db):
            row = db.execute(
                "SELECT 1 FROM runs WHERE run_id = ? AND owner IS NULL AND state = ?",
                (run_id, int(RunState.SUBMITTED)),
            ).fetchone()
            if row is None:
                return False
            return self._finish_sync(
                run_id, None, 0, RunState.CANCELED, result, [(1, event)], None, None
            )

    async def decide(self, run_id: str, call_id: str, approved: bool, reason: str) -> bool:
        return False  # one process: a waiting call is always this process's own

    async def callback_done(
        self,
        run_id: str,
        owner: str,
        *,
        status: CallbackStatus,
        attempts: int,
        not_before: float = 0.0,
    ) -> None:
        await self._database.execute_write(
            lambda: self._db().execute(
                "UPDATE runs SET callback_status = ?, callback_attempts = ?, owner = NULL,"
                " not_before = ? WHERE run_id = ? AND owner = ?",
                (int(status), attempts, not_before, run_id, owner),
            )
        )

    async def listen(self, on_notice: Callable[[str], None]) -> None:
        return None  # one process: nobody else writes

    async def sweep(self) -> int:
        return await self._database.execute_write(self._sweep_sync)

    def _sweep_sync(self) -> int:
        cursor = self._db().execute(
            "DELETE FROM runs WHERE end_time > 0 AND end_time < ?"
            " AND (owner IS NULL OR callback_status != ?)",
            (self._expired(), int(CallbackStatus.PENDING)),
        )
        return cursor.rowcount
