"""Background runs in PostgreSQL, shared by replicas: leased ownership, notifications.

A run's owner holds it by a lease (``agent_runs.lease_until``, the database's clock), which
it renews with its session-turn leases; a replica that stops renewing loses its runs to the
first replica that claims them (:meth:`PostgresRunStore.claim`: ``FOR UPDATE SKIP LOCKED``,
so replicas claiming at once never take the same run, and never wait for each other). The
claim bumps the run's ``attempts``, and every write of an owner is fenced by it: a replica
that stalled past its lease writes nothing after another took its run over.

Every write that another replica may be waiting for sends a notification on the channel
``agent_runs`` in its transaction (delivered when it commits): ``e:RUN`` (events or state
stored: watchers read), ``c:RUN`` (a cancellation or a decision for the owner), ``q`` (a
run waits for a replica). :meth:`PostgresRunStore.listen` hands them to the agent; a
notification missed (a dropped connection) is made up by the agent's periodic looks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

import asyncpg
import orjson

from sidecar.errors import SessionBusy, SessionNotFound
from sidecar.sessions.postgres_db import PostgresDatabase
from sidecar.sessions.records import encode_turn
from sidecar.sessions.runs import (
    RunBounds,
    RunChange,
    Signals,
    StoredDecision,
    decode_pending,
    encode_pending,
)
from sidecar.types import ACTIVE_STATES, CallbackStatus, RunRecord, RunState, Turn

__all__ = ["CHANNEL", "RUNS_SCHEMA", "PostgresRunStore"]

log = logging.getLogger(__name__)

CHANNEL = "agent_runs"
_ACTIVE = "(" + ", ".join(str(int(s)) for s in ACTIVE_STATES) + ")"
_DUE = f"(state IN {_ACTIVE} OR callback_status = {int(CallbackStatus.PENDING)})"
"""Runs a replica may have to take up: active ones, and finished ones still to call back."""
_LOCK = 0x5E5511  # serialises submissions, so the bounds hold exactly
RUNS_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS agent_runs (
    ordinal           bigserial PRIMARY KEY,
    run_id            text NOT NULL UNIQUE,
    session_id        text NOT NULL REFERENCES agent_sessions ON DELETE CASCADE,
    principal         text NOT NULL,
    input             text NOT NULL,
    structured        boolean NOT NULL,
    state             smallint NOT NULL,
    create_time       double precision NOT NULL,
    update_time       double precision NOT NULL,
    end_time          double precision NOT NULL DEFAULT 0,
    last_sequence     integer NOT NULL DEFAULT 0,
    result            bytea NOT NULL DEFAULT '',
    pending           bytea NOT NULL DEFAULT '',
    decisions         jsonb NOT NULL DEFAULT '[]',
    callback_url      text NOT NULL DEFAULT '',
    callback_status   smallint NOT NULL DEFAULT 0,
    callback_attempts integer NOT NULL DEFAULT 0,
    attempts          integer NOT NULL DEFAULT 0,
    checkpoint        bytea NOT NULL DEFAULT '',
    checkpoint_step   integer NOT NULL DEFAULT 0,
    unsafe_step       integer NOT NULL DEFAULT 0,
    cancel_requested  boolean NOT NULL DEFAULT false,
    owner             text,
    lease_until       timestamptz,
    not_before        double precision NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS agent_runs_by_session ON agent_runs (session_id, ordinal);
CREATE INDEX IF NOT EXISTS agent_runs_due ON agent_runs (ordinal) WHERE {_DUE};
CREATE INDEX IF NOT EXISTS agent_runs_finished ON agent_runs (end_time) WHERE end_time > 0;
CREATE INDEX IF NOT EXISTS agent_runs_by_owner ON agent_runs (owner) WHERE owner IS NOT NULL;
CREATE TABLE IF NOT EXISTS agent_run_events (
    run_id   text NOT NULL REFERENCES agent_runs (run_id) ON DELETE CASCADE,
    sequence integer NOT NULL,
    data     bytea NOT NULL,
    PRIMARY KEY (run_id, sequence)
);
ALTER TABLE agent_runs ADD COLUMN IF NOT EXISTS callback_shape text NOT NULL DEFAULT '';
ALTER TABLE agent_runs ADD COLUMN IF NOT EXISTS callback_token text NOT NULL DEFAULT '';
ALTER TABLE agent_runs ADD COLUMN IF NOT EXISTS callback_auth bytea NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS agent_runs_by_principal ON agent_runs (principal, ordinal);
ALTER TABLE agent_runs ADD COLUMN IF NOT EXISTS request_id text NOT NULL DEFAULT '';
ALTER TABLE agent_runs ADD COLUMN IF NOT EXISTS message_id text NOT NULL DEFAULT '';
CREATE UNIQUE INDEX IF NOT EXISTS agent_runs_by_request ON agent_runs (principal, request_id)
    WHERE request_id <> '';
ALTER TABLE agent_runs ADD COLUMN IF NOT EXISTS callback_id text NOT NULL DEFAULT '';
"""
_COLUMNS = (
    "ordinal, run_id, session_id, principal, input, structured, state, create_time,"
    " update_time, end_time, last_sequence, result, pending, callback_url, callback_status,"
    " callback_attempts, attempts, checkpoint, checkpoint_step, unsafe_step, cancel_requested,"
    " callback_shape, callback_token, callback_auth, request_id, message_id, callback_id"
)
_LIGHT = _COLUMNS.replace("result,", "''::bytea AS result,").replace(
    "checkpoint,", "''::bytea AS checkpoint,"
)
_NOT_EXPIRED = "(end_time = 0 OR end_time >= $2)"
_STARTED = (
    f"SELECT {_COLUMNS} FROM agent_runs WHERE principal = $1 AND request_id = $2"
    " AND (end_time = 0 OR end_time >= $3)"
)
_OWNS = "SELECT 1 FROM agent_runs WHERE run_id = $1 AND owner = $2 AND attempts = $3 FOR UPDATE"
_STORE = """
UPDATE agent_runs SET update_time = $2, last_sequence = greatest(last_sequence, $3),
    state = coalesce($4, state)
WHERE run_id = $1
"""
_UNOWNED = "(owner IS NULL OR lease_until < now()) AND not_before <= $3"
_CLAIM = f"""
WITH runs AS (
    SELECT run_id FROM agent_runs
    WHERE {_DUE} AND state IN {_ACTIVE} AND {_UNOWNED}
    ORDER BY ordinal LIMIT $2
    FOR UPDATE SKIP LOCKED
), calls AS (
    SELECT run_id FROM agent_runs
    WHERE {_DUE} AND state NOT IN {_ACTIVE} AND {_UNOWNED}
    ORDER BY ordinal LIMIT $5
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT run_id FROM runs UNION ALL SELECT run_id FROM calls
)
UPDATE agent_runs r SET owner = $1, lease_until = now() + make_interval(secs => $4),
    attempts = CASE WHEN r.state IN {_ACTIVE} THEN r.attempts + 1 ELSE r.attempts END
FROM picked WHERE r.run_id = picked.run_id
RETURNING {", ".join("r." + c.strip() for c in _COLUMNS.split(","))}
"""
_RENEW = """
WITH renewed AS (
    SELECT run_id, decisions FROM agent_runs
    WHERE owner = $1 AND run_id = ANY($2::text[])
    FOR UPDATE
)
UPDATE agent_runs r SET lease_until = now() + make_interval(secs => $3), decisions = '[]'
FROM renewed WHERE r.run_id = renewed.run_id
RETURNING r.run_id, r.cancel_requested, renewed.decisions
"""


def _record(row: asyncpg.Record) -> RunRecord:
    return RunRecord(
        ordinal=row["ordinal"],
        run_id=row["run_id"],
        session_key=row["session_id"],
        principal=row["principal"],
        input=row["input"],
        structured=row["structured"],
        state=RunState(row["state"]),
        create_time=row["create_time"],
        update_time=row["update_time"],
        end_time=row["end_time"],
        last_sequence=row["last_sequence"],
        result=bytes(row["result"]),
        pending=decode_pending(row["pending"]),
        callback_url=row["callback_url"],
        callback_status=CallbackStatus(row["callback_status"]),
        callback_attempts=row["callback_attempts"],
        attempts=row["attempts"],
        checkpoint=bytes(row["checkpoint"]),
        checkpoint_step=row["checkpoint_step"],
        unsafe_step=row["unsafe_step"],
        cancel_requested=row["cancel_requested"],
        callback_shape=row["callback_shape"],
        callback_token=row["callback_token"],
        callback_auth=bytes(row["callback_auth"]),
        request_id=row["request_id"],
        message_id=row["message_id"],
        callback_id=row["callback_id"],
    )


class PostgresRunStore:
    """Background runs beside a :class:`~sidecar.sessions.postgres.PostgresSessionStore`.

    Args:
        database: The database the session store beside it uses (its pool, this
            replica's name and lease, the start records it holds).
        retention: Seconds a finished run is kept.
        clock: Wall-clock time, seconds since the epoch.
    """

    shared = True

    def __init__(
        self,
        database: PostgresDatabase,
        *,
        retention: float = 86_400.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._database = database
        self._retention = retention
        self._clock = clock
        self._listener: asyncpg.Connection | None = None

    @property
    def owner(self) -> str:
        return self._database.owner

    @property
    def lease(self) -> float:
        return self._database.lease

    @property
    def _pool(self) -> asyncpg.Pool:
        return self._database.pool

    def _expired(self) -> float:
        return self._clock() - self._retention

    # -- notifications ----------------------------------------------------------------

    async def listen(self, on_notice: Callable[[str], None]) -> None:
        """Hand every notification's payload to ``on_notice`` from now on (again, over a
        new connection, after the last one dropped)."""
        if self._listener is not None and not self._listener.is_closed():
            return
        connection = await asyncpg.connect(self._database.dsn)

        def deliver(_conn: object, _pid: int, _channel: str, payload: object) -> None:
            on_notice(str(payload))

        await connection.add_listener(CHANNEL, deliver)
        self._listener = connection

    async def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None and not listener.is_closed():
            await listener.close()

    # -- reads ------------------------------------------------------------------------

    async def get(self, run_id: str) -> RunRecord | None:
        row = await self._pool.fetchrow(
            f"SELECT {_COLUMNS} FROM agent_runs WHERE run_id = $1 AND {_NOT_EXPIRED}",
            run_id,
            self._expired(),
        )
        return _record(row) if row is not None else None

    async def page_of(self, principal: str, *, before: int | None, limit: int) -> list[RunRecord]:
        return await self._page("principal", principal, before, limit)

    async def page(self, session_key: str, *, before: int | None, limit: int) -> list[RunRecord]:
        return await self._page("session_id", session_key, before, limit)

    async def _page(
        self, column: str, value: str, before: int | None, limit: int
    ) -> list[RunRecord]:
        """A listing of the runs whose ``column`` (``session_id`` or ``principal``, each
        indexed with the ordinal) is ``value``."""
        rows = await self._pool.fetch(
            f"SELECT {_LIGHT} FROM agent_runs WHERE {column} = $1 AND {_NOT_EXPIRED}"
            " AND ordinal < $3 ORDER BY ordinal DESC LIMIT $4",
            value,
            self._expired(),
            before if before is not None else 2**62,
            limit,
        )
        return [_record(row) for row in rows]

    async def events(self, run_id: str, after: int, limit: int) -> list[tuple[int, bytes]]:
        rows = await self._pool.fetch(
            "SELECT sequence, data FROM agent_run_events WHERE run_id = $1 AND sequence > $2"
            " ORDER BY sequence LIMIT $3",
            run_id,
            after,
            limit,
        )
        return [(row["sequence"], bytes(row["data"])) for row in rows]

    # -- a new run --------------------------------------------------------------------

    async def submit(
        self, run: RunRecord, *, owner: str | None, bounds: RunBounds
    ) -> RunRecord | None:
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK)
            if run.request_id:
                row = await conn.fetchrow(_STARTED, run.principal, run.request_id, self._expired())
                if row is not None:
                    return _record(row)
                # An expired run of that key not swept yet gives its key up.
                await conn.execute(
                    "UPDATE agent_runs SET request_id = '' WHERE principal = $1"
                    " AND request_id = $2",
                    run.principal,
                    run.request_id,
                )
            active = f"SELECT count(*) FROM agent_runs WHERE state IN {_ACTIVE}"
            if await conn.fetchval(f"{active} AND session_id = $1", run.session_key):
                raise SessionBusy(run.session_key)
            mine = (
                await conn.fetchval(f"{active} AND principal = $1", run.principal)
                if bounds.principal is not None
                else None
            )
            bounds.admit(run.principal, await conn.fetchval(active), mine)
            try:
                run.ordinal = await conn.fetchval(
                    "INSERT INTO agent_runs (run_id, session_id, principal, input, structured,"
                    " state, create_time, update_time, callback_url, callback_status, attempts,"
                    " owner, lease_until, callback_shape, callback_token, callback_auth,"
                    " request_id, message_id, callback_id)"
                    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,"
                    " CASE WHEN $12::text IS NULL THEN NULL"
                    " ELSE now() + make_interval(secs => $13) END, $14, $15, $16, $17, $18, $19)"
                    " RETURNING ordinal",
                    run.run_id,
                    run.session_key,
                    run.principal,
                    run.input,
                    run.structured,
                    int(run.state),
                    run.create_time,
                    run.update_time,
                    run.callback_url,
                    int(run.callback_status),
                    1 if owner else 0,
                    owner,
                    self._database.lease,
                    run.callback_shape,
                    run.callback_token,
                    run.callback_auth,
                    run.request_id,
                    run.message_id,
                    run.callback_id,
                )
            except asyncpg.ForeignKeyViolationError:
                raise SessionNotFound(run.session_key) from None
            if owner is None:
                await _notify(conn, "q")
        run.attempts = 1 if owner else 0
        return None

    # -- the owner's writes -----------------------------------------------------------

    async def claim(self, owner: str, limit: int, callbacks: int | None = None) -> list[RunRecord]:
        rows = await self._pool.fetch(
            _CLAIM,
            owner,
            limit,
            self._clock(),
            self._database.lease,
            limit if callbacks is None else callbacks,
        )
        return sorted((_record(row) for row in rows), key=lambda r: r.ordinal)

    async def _store_events(
        self,
        conn: Any,
        run_id: str,
        events: Sequence[tuple[int, bytes]],
        state: RunState | None,
    ) -> None:
        if events:
            await conn.executemany(
                "INSERT INTO agent_run_events (run_id, sequence, data) VALUES ($1, $2, $3)",
                [(run_id, seq, data) for seq, data in events],
            )
        await conn.execute(
            _STORE,
            run_id,
            self._clock(),
            events[-1][0] if events else 0,
            int(state) if state is not None else None,
        )

    async def write(self, run_id: str, owner: str, attempt: int, change: RunChange) -> bool:
        async with self._pool.acquire() as conn, conn.transaction():
            if await conn.fetchval(_OWNS, run_id, owner, attempt) is None:
                return False
            await self._store_events(conn, run_id, change.events, change.state)
            if change.pending is not None:
                await conn.execute(
                    "UPDATE agent_runs SET pending = $2, decisions = '[]' WHERE run_id = $1",
                    run_id,
                    encode_pending(change.pending),
                )
            if change.checkpoint is not None:
                step, data = change.checkpoint
                await conn.execute(
                    "UPDATE agent_runs SET checkpoint = $2, checkpoint_step = $3 WHERE run_id = $1",
                    run_id,
                    data,
                    step,
                )
            if change.unsafe_step is not None:
                await conn.execute(
                    "UPDATE agent_runs SET unsafe_step = greatest(unsafe_step, $2)"
                    " WHERE run_id = $1",
                    run_id,
                    change.unsafe_step,
                )
            if change.events or change.state is not None:
                await _notify(conn, f"e:{run_id}")
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
        async with self._pool.acquire() as conn, conn.transaction():
            if await conn.fetchval(_OWNS, run_id, owner, attempt) is None:
                return False
            await self._finish(conn, run_id, state, result, events)
            if turn is not None and data is not None:
                session = await conn.fetchval(
                    "SELECT session_id FROM agent_runs WHERE run_id = $1", run_id
                )
                await conn.execute(
                    "DELETE FROM agent_pending_turns WHERE session_id = $1 AND run_id = $2",
                    session,
                    turn.run_id,
                )
                touched = await conn.fetchval(
                    "UPDATE agent_sessions SET update_time = $2 WHERE session_id = $1"
                    " RETURNING session_id",
                    session,
                    turn.end_time,
                )
                if touched is not None:
                    await conn.execute(
                        "INSERT INTO agent_turns (session_id, run_id, data) VALUES ($1, $2, $3)"
                        " ON CONFLICT (session_id, run_id) DO UPDATE SET data = EXCLUDED.data",
                        session,
                        turn.run_id,
                        data,
                    )
        self._database.held.discard(run_id)  # stored: no longer renewed
        return True

    async def _finish(
        self,
        conn: Any,
        run_id: str,
        state: RunState,
        result: bytes,
        events: Sequence[tuple[int, bytes]],
    ) -> None:
        await self._store_events(conn, run_id, events, state)
        # A run with a callback stays its owner's, who delivers it next.
        await conn.execute(
            "UPDATE agent_runs SET result = $2, pending = '', checkpoint = '', end_time = $3,"
            " decisions = '[]',"
            " callback_status = CASE WHEN callback_url = '' THEN 0 ELSE $4 END,"
            " owner = CASE WHEN callback_url = '' THEN NULL ELSE owner END"
            " WHERE run_id = $1",
            run_id,
            result,
            self._clock(),
            int(CallbackStatus.PENDING),
        )
        await _notify(conn, f"e:{run_id}")

    async def release(
        self, run_id: str, owner: str, attempt: int, *, not_before: float = 0.0
    ) -> None:
        async with self._pool.acquire() as conn, conn.transaction():
            status = await conn.execute(
                "UPDATE agent_runs SET owner = NULL, lease_until = NULL, not_before = $4"
                " WHERE run_id = $1 AND owner = $2 AND attempts = $3",
                run_id,
                owner,
                attempt,
                not_before,
            )
            if status != "UPDATE 0":
                await _notify(conn, "q")

    async def renew(self, owner: str, run_ids: Collection[str]) -> Signals:
        if not run_ids:
            return Signals()
        rows = await self._pool.fetch(_RENEW, owner, list(run_ids), self._database.lease)
        held = {row["run_id"] for row in rows}
        decisions = []
        for row in rows:
            for item in orjson.loads(row["decisions"]) or ():
                call_id, approved, reason = item
                decisions.append(StoredDecision(row["run_id"], call_id, approved, reason))
        return Signals(
            lost=frozenset(set(run_ids) - held),
            cancel=frozenset(row["run_id"] for row in rows if row["cancel_requested"]),
            decisions=tuple(decisions),
        )

    # -- others' requests -------------------------------------------------------------

    async def request_cancel(self, run_id: str) -> None:
        async with self._pool.acquire() as conn, conn.transaction():
            status = await conn.execute(
                "UPDATE agent_runs SET cancel_requested = true"
                f" WHERE run_id = $1 AND state IN {_ACTIVE}",
                run_id,
            )
            if status != "UPDATE 0":
                await _notify(conn, f"c:{run_id}")

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
        done = await self._pool.execute(
            "UPDATE agent_runs SET callback_url = $2, callback_shape = $3, callback_token = $4,"
            " callback_auth = $6, callback_id = $7,"
            " callback_status = CASE WHEN end_time = 0 THEN $5 ELSE callback_status END"
            " WHERE run_id = $1 AND (end_time = 0 OR ($8 AND callback_status <> $9))"
            " AND ($2 = '' OR callback_url IN ('', $2))",
            run_id,
            url,
            shape,
            token,
            status,
            auth,
            callback_id,
            after_end,
            int(CallbackStatus.PENDING),
        )
        return bool(done != "UPDATE 0")

    async def cancel_submitted(self, run_id: str, *, result: bytes, event: bytes) -> bool:
        async with self._pool.acquire() as conn, conn.transaction():
            found = await conn.fetchval(
                "SELECT 1 FROM agent_runs WHERE run_id = $1 AND state = $2"
                " AND (owner IS NULL OR lease_until < now()) FOR UPDATE",
                run_id,
                int(RunState.SUBMITTED),
            )
            if found is None:
                return False
            await conn.execute(
                "UPDATE agent_runs SET owner = NULL, lease_until = NULL WHERE run_id = $1",
                run_id,
            )
            await self._finish(conn, run_id, RunState.CANCELED, result, [(1, event)])
            await _notify(conn, "q")  # a callback to deliver, for whoever claims it
        return True

    async def decide(self, run_id: str, call_id: str, approved: bool, reason: str) -> bool:
        async with self._pool.acquire() as conn, conn.transaction():
            pending = await conn.fetchval(
                "SELECT pending FROM agent_runs WHERE run_id = $1 AND state = $2 FOR UPDATE",
                run_id,
                int(RunState.INPUT_REQUIRED),
            )
            if pending is None or not any(p.call_id == call_id for p in decode_pending(pending)):
                return False
            await conn.execute(
                "UPDATE agent_runs SET decisions = decisions || $2::jsonb WHERE run_id = $1",
                run_id,
                orjson.dumps([[call_id, approved, reason]]).decode(),
            )
            await _notify(conn, f"c:{run_id}")
        return True

    async def callback_done(
        self,
        run_id: str,
        owner: str,
        *,
        status: CallbackStatus,
        attempts: int,
        not_before: float = 0.0,
    ) -> None:
        async with self._pool.acquire() as conn, conn.transaction():
            changed = await conn.execute(
                "UPDATE agent_runs SET callback_status = $3, callback_attempts = $4,"
                " owner = NULL, lease_until = NULL, not_before = $5"
                " WHERE run_id = $1 AND owner = $2",
                run_id,
                owner,
                int(status),
                attempts,
                not_before,
            )
            if status is CallbackStatus.PENDING and changed != "UPDATE 0":
                await _notify(conn, "q")

    async def sweep(self) -> int:
        status = await self._pool.execute(
            "DELETE FROM agent_runs WHERE end_time > 0 AND end_time < $1"
            " AND NOT (callback_status = $2 AND owner IS NOT NULL AND lease_until >= now())",
            self._expired(),
            int(CallbackStatus.PENDING),
        )
        return int(status.split()[-1])


async def _notify(conn: Any, payload: str) -> None:
    await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, payload)
