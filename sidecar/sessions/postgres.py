"""The shared session store: PostgreSQL, for several sidecar replicas.

Replicas share sessions, so any replica can serve any session's next turn, and the
*turn started* record is the session's lock across all of them.

Which turns were cut off? Each start record names its owner (the replica's id) and
carries a lease. The owner renews the leases of its running turns every third of the
lease; a replica that dies stops renewing. A start record whose lease has run out belongs
to a dead replica: the first reader (a ``get``, a ``begin_turn`` on that session, or the
periodic sweep) turns it into an interrupted turn, inside one transaction that holds the
row. A live replica's running turn is never taken, however long it runs, as long as it
heartbeats. A replica started with a stable ``replica_id`` also reports its own leftover
turns as interrupted the moment it starts, without waiting for their leases: a replica
never runs twice at once under one id (that is the contract of the setting).

Leases are timed by the database's clock, so replicas' clocks need not agree.

Each principal's spend per day (the cost guard's daily quotas) is one row, added to by
one upsert: replicas' runs add to one total.

Hot path: ``get`` is one query (the session, its turns and its start record, joined),
``begin_turn`` one insert, ``finish_turn`` one statement whose data-modifying CTEs run in
one implicit transaction: the turn is all written or not written.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import asyncpg

from sidecar.errors import SessionBusy, SessionExists, SessionNotFound
from sidecar.periodic import Periodic
from sidecar.sessions.postgres_db import PostgresDatabase
from sidecar.sessions.postgres_runs import RUNS_SCHEMA, PostgresRunStore
from sidecar.sessions.records import decode_labels, decode_turn, encode_labels, encode_turn
from sidecar.sessions.store import interrupted_turn
from sidecar.types import Session, Turn

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS agent_schema (version integer NOT NULL);
CREATE TABLE IF NOT EXISTS agent_sessions (
    session_id   text PRIMARY KEY,
    profile      text NOT NULL,
    labels       bytea NOT NULL,
    create_time  double precision NOT NULL,
    update_time  double precision NOT NULL,
    memory       text NOT NULL DEFAULT '',
    memory_turns integer NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS agent_sessions_by_update_time ON agent_sessions (update_time);
CREATE TABLE IF NOT EXISTS agent_turns (
    id         bigserial PRIMARY KEY,
    session_id text NOT NULL REFERENCES agent_sessions ON DELETE CASCADE,
    run_id     text NOT NULL,
    data       bytea NOT NULL,
    UNIQUE (session_id, run_id)
);
CREATE INDEX IF NOT EXISTS agent_turns_by_session ON agent_turns (session_id, id);
CREATE TABLE IF NOT EXISTS agent_pending_turns (
    session_id  text PRIMARY KEY REFERENCES agent_sessions ON DELETE CASCADE,
    run_id      text NOT NULL,
    input       text NOT NULL,
    start_time  double precision NOT NULL,
    owner       text NOT NULL,
    lease_until timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS agent_pending_turns_by_owner ON agent_pending_turns (owner);
CREATE TABLE IF NOT EXISTS agent_spend (
    principal text NOT NULL,
    day       text NOT NULL,
    cost      double precision NOT NULL,
    tokens    bigint NOT NULL,
    PRIMARY KEY (principal, day)
);
CREATE TABLE IF NOT EXISTS agent_variant_changes (
    profile text PRIMARY KEY,
    change  text NOT NULL
);
"""
    + RUNS_SCHEMA
)

_GET = """
SELECT s.profile, s.labels, s.create_time, s.update_time, s.memory, s.memory_turns,
       ARRAY(SELECT t.data FROM agent_turns t
             WHERE t.session_id = s.session_id ORDER BY t.id) AS turns,
       p.run_id IS NOT NULL AS running, p.lease_until < now() AS lapsed
FROM agent_sessions s LEFT JOIN agent_pending_turns p ON p.session_id = s.session_id
WHERE s.session_id = $1
"""
_BEGIN = """
INSERT INTO agent_pending_turns (session_id, run_id, input, start_time, owner, lease_until)
VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))
ON CONFLICT (session_id) DO NOTHING
RETURNING 1
"""
_FINISH = """
WITH cleared AS (
    DELETE FROM agent_pending_turns WHERE session_id = $1 AND run_id = $2
), touched AS (
    UPDATE agent_sessions SET update_time = $3 WHERE session_id = $1 RETURNING session_id
)
INSERT INTO agent_turns (session_id, run_id, data)
SELECT session_id, $2, $4 FROM touched
ON CONFLICT (session_id, run_id) DO UPDATE SET data = EXCLUDED.data
"""
_UPSERT_TURN = """
INSERT INTO agent_turns (session_id, run_id, data) VALUES ($1, $2, $3)
ON CONFLICT (session_id, run_id) DO UPDATE SET data = EXCLUDED.data
"""
_ADD_SPEND = """
INSERT INTO agent_spend (principal, day, cost, tokens) VALUES ($1, $2, $3, $4)
ON CONFLICT (principal, day) DO UPDATE
SET cost = agent_spend.cost + EXCLUDED.cost, tokens = agent_spend.tokens + EXCLUDED.tokens
RETURNING cost, tokens
"""
_RENEW = """
UPDATE agent_pending_turns SET lease_until = now() + make_interval(secs => $2)
WHERE owner = $1 AND run_id = ANY($3::text[])
"""
_IDLE = """
AND NOT EXISTS (SELECT 1 FROM agent_pending_turns p WHERE p.session_id = s.session_id)
AND NOT EXISTS (SELECT 1 FROM agent_runs r WHERE r.session_id = s.session_id
                AND r.state IN (1, 2, 6))
"""
_EXPIRE_ONE = "DELETE FROM agent_sessions s WHERE s.session_id = $1 AND s.update_time < $2" + _IDLE
_EXPIRE_ALL = "DELETE FROM agent_sessions s WHERE s.update_time < $1" + _IDLE
_RESUME = """
INSERT INTO agent_pending_turns (session_id, run_id, input, start_time, owner, lease_until)
VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))
ON CONFLICT (session_id) DO UPDATE SET owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until
WHERE agent_pending_turns.run_id = EXCLUDED.run_id
RETURNING 1
"""


class PostgresSessionStore:
    """Sessions in PostgreSQL, shared by replicas.

    Args:
        dsn: the connection string.
        pool_size: connections kept open.
        connect_timeout: seconds to wait for the server at :meth:`open`.
        lease: seconds a running turn stays claimed without a heartbeat.
        replica_id: this replica's stable name, or None for a random one per start.
        idle_ttl: seconds after its last turn a session expires; None: never.
        sweep_interval: seconds between sweeps (expired sessions, lapsed leases, finished
            background runs past their retention).
        retention: seconds a finished background run is kept.
        clock: wall-clock time source for session times, seconds since the epoch.
    """

    shared = True

    def __init__(
        self,
        dsn: str,
        *,
        pool_size: int = 4,
        connect_timeout: float = 10.0,
        lease: float = 15.0,
        replica_id: str | None = None,
        idle_ttl: float | None = None,
        sweep_interval: float = 60.0,
        retention: float = 86_400.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = PostgresDatabase(
            dsn,
            pool_size=pool_size,
            connect_timeout=connect_timeout,
            lease=lease,
            replica_id=replica_id,
        )
        """The database, shared with the run store beside it."""
        self.dsn, self.lease, self.owner = dsn, lease, self.db.owner
        self._idle_ttl = idle_ttl
        self._clock = clock
        self._held = self.db.held
        self._heartbeat = Periodic("session-leases", lease / 3, self.renew_leases)
        self._sweeper = Periodic("session-sweep", sweep_interval, self.sweep)
        self._runs = PostgresRunStore(self.db, retention=retention, clock=clock)

    @property
    def runs(self) -> PostgresRunStore:
        return self._runs

    @property
    def pool(self) -> asyncpg.Pool:
        """The connection pool, for other users of the same database (the result cache)."""
        return self.db.pool

    # -- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        await self.db.open(_SCHEMA, SCHEMA_VERSION)
        try:
            if self.db.stable_owner:
                await self._interrupt_where("owner = $1", self.owner)
        except BaseException:
            await self.close()
            raise
        self._heartbeat.start()
        self._sweeper.start()

    async def close(self) -> None:
        await self._heartbeat.stop()
        await self._sweeper.stop()
        await self._runs.close()
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
        async with self.pool.acquire() as conn, conn.transaction():
            await self._expire(conn, session.session_id)
            try:
                await conn.execute(
                    "INSERT INTO agent_sessions"
                    " (session_id, profile, labels, create_time, update_time)"
                    " VALUES ($1, $2, $3, $4, $4)",
                    session.session_id,
                    profile,
                    encode_labels(session.labels),
                    now,
                )
            except asyncpg.UniqueViolationError:
                raise SessionExists(session.session_id) from None
        return session

    async def get(self, session_id: str) -> Session | None:
        row = await self.pool.fetchrow(_GET, session_id)
        if row is None:
            return None
        if row["lapsed"]:
            # A dead replica's turn: report it as interrupted, then read again.
            await self._interrupt_where("session_id = $1 AND lease_until < now()", session_id)
            row = await self.pool.fetchrow(_GET, session_id)
            if row is None:
                return None
        if (
            self._idle_ttl is not None
            and not row["running"]
            and row["update_time"] < self._clock() - self._idle_ttl
        ):
            async with self.pool.acquire() as conn:
                if await self._expire(conn, session_id):
                    return None
        return Session(
            session_id=session_id,
            profile=row["profile"],
            labels=decode_labels(row["labels"]),
            create_time=row["create_time"],
            update_time=row["update_time"],
            turns=[decode_turn(data) for data in row["turns"]],
            memory=row["memory"],
            memory_turns=row["memory_turns"],
        )

    async def _expire(self, conn: Any, session_id: str) -> bool:
        if self._idle_ttl is None:
            return False
        status = await conn.execute(_EXPIRE_ONE, session_id, self._clock() - self._idle_ttl)
        return bool(status != "DELETE 0")

    async def count(self, prefix: str = "") -> int:
        async with self.pool.acquire() as conn:
            if not prefix:
                return int(await conn.fetchval("SELECT count(*) FROM agent_sessions"))
            return int(
                await conn.fetchval(
                    "SELECT count(*) FROM agent_sessions WHERE starts_with(session_id, $1)",
                    prefix,
                )
            )

    async def delete(self, session_id: str) -> bool:
        status = await self.pool.execute(
            "DELETE FROM agent_sessions WHERE session_id = $1", session_id
        )
        return bool(status != "DELETE 0")

    # -- turns --------------------------------------------------------------------------

    async def begin_turn(
        self, session_id: str, run_id: str, user_input: str, start_time: float
    ) -> None:
        args = (session_id, run_id, user_input, start_time, self.owner, self.lease)
        try:
            claimed = await self.pool.fetchval(_BEGIN, *args)
            if claimed is None:
                # Another start record holds the session: take it only if its lease ran out.
                await self._interrupt_where(
                    "session_id = $1 AND lease_until < now()", session_id, then_begin=args
                )
        except asyncpg.ForeignKeyViolationError:
            raise SessionNotFound(session_id) from None
        self._held.add(run_id)

    async def resume_turn(
        self, session_id: str, run_id: str, user_input: str, start_time: float
    ) -> None:
        args = (session_id, run_id, user_input, start_time, self.owner, self.lease)
        try:
            claimed = await self.pool.fetchval(_RESUME, *args)
            if claimed is None:
                # Another run's record: take the session only if that one's lease ran out.
                await self._interrupt_where(
                    "session_id = $1 AND lease_until < now()", session_id, then_begin=args
                )
        except asyncpg.ForeignKeyViolationError:
            raise SessionNotFound(session_id) from None
        self._held.add(run_id)

    async def release_turn(self, session_id: str, run_id: str) -> None:
        self._held.discard(run_id)
        await self.pool.execute(
            "UPDATE agent_pending_turns SET lease_until = now()"
            " WHERE session_id = $1 AND run_id = $2 AND owner = $3",
            session_id,
            run_id,
            self.owner,
        )

    async def finish_turn(self, session_id: str, turn: Turn) -> None:
        data = encode_turn(turn)
        try:
            await self.pool.execute(_FINISH, session_id, turn.run_id, turn.end_time, data)
        finally:
            self._held.discard(turn.run_id)

    async def set_memory(self, session_id: str, memory: str, memory_turns: int) -> bool:
        status = await self.pool.execute(
            "UPDATE agent_sessions SET memory = $2, memory_turns = $3"
            " WHERE session_id = $1 AND memory_turns < $3",
            session_id,
            memory,
            memory_turns,
        )
        return bool(status != "UPDATE 0")

    async def recent_turns(self, profile: str, limit: int) -> list[Turn]:
        rows = await self.pool.fetch(
            "SELECT t.data FROM agent_turns t JOIN agent_sessions s USING (session_id)"
            " WHERE s.profile = $1 ORDER BY t.id DESC LIMIT $2",
            profile,
            limit,
        )
        return [decode_turn(row["data"]) for row in reversed(rows)]

    # -- spend --------------------------------------------------------------------------

    async def spent(self, principal: str, day: str) -> tuple[float, int]:
        row = await self.pool.fetchrow(
            "SELECT cost, tokens FROM agent_spend WHERE principal = $1 AND day = $2",
            principal,
            day,
        )
        return (float(row["cost"]), int(row["tokens"])) if row is not None else (0.0, 0)

    async def add_spend(
        self, principal: str, day: str, cost: float, tokens: int
    ) -> tuple[float, int]:
        # One statement: concurrent replicas' runs add to the same row, none lost.
        row = await self.pool.fetchrow(_ADD_SPEND, principal, day, cost, tokens)
        assert row is not None  # an upsert returns its row
        return float(row["cost"]), int(row["tokens"])

    # -- the operator's variant changes -------------------------------------------------

    async def variant_changes(self) -> dict[str, str]:
        rows = await self.pool.fetch("SELECT profile, change FROM agent_variant_changes")
        return {row["profile"]: row["change"] for row in rows}

    async def set_variant_change(self, profile: str, change: str | None) -> None:
        if change is None:
            await self.pool.execute("DELETE FROM agent_variant_changes WHERE profile = $1", profile)
        else:
            await self.pool.execute(
                "INSERT INTO agent_variant_changes (profile, change) VALUES ($1, $2)"
                " ON CONFLICT (profile) DO UPDATE SET change = EXCLUDED.change",
                profile,
                change,
            )

    async def _interrupt_where(
        self, condition: str, *args: Any, then_begin: tuple[Any, ...] | None = None
    ) -> int:
        """Turn the start records matching ``condition`` into interrupted turns, in one
        transaction holding their rows; with ``then_begin``, claim the session after.

        Raises:
            SessionBusy: ``then_begin`` was given and the session's claim is still live.
        """
        async with self.pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                "SELECT session_id, run_id, input, start_time FROM agent_pending_turns"
                f" WHERE {condition} FOR UPDATE SKIP LOCKED",
                *args,
            )
            now = self._clock()
            for row in rows:
                turn = interrupted_turn(row["run_id"], row["input"], row["start_time"], now)
                await conn.execute(_UPSERT_TURN, row["session_id"], turn.run_id, encode_turn(turn))
                await conn.execute(
                    "UPDATE agent_sessions SET update_time = $2 WHERE session_id = $1",
                    row["session_id"],
                    now,
                )
                await conn.execute(
                    "DELETE FROM agent_pending_turns WHERE session_id = $1 AND run_id = $2",
                    row["session_id"],
                    row["run_id"],
                )
            if rows:
                log.warning(
                    "%d turn(s) of a dead process reported as interrupted: %s",
                    len(rows),
                    ", ".join(f"{r['session_id']}/{r['run_id']}" for r in rows),
                )
            if then_begin is not None:
                if await conn.fetchval(_BEGIN, *then_begin) is None:
                    raise SessionBusy(then_begin[0])
        return len(rows)

    # -- upkeep -------------------------------------------------------------------------

    async def renew_leases(self) -> None:
        """Extend the leases of this replica's running turns (the heartbeat)."""
        if self._held:
            await self.pool.execute(_RENEW, self.owner, self.lease, list(self._held))

    async def sweep(self) -> None:
        """Report lapsed turns of dead replicas as interrupted (but those of background
        runs, which the replica taking the run over settles); delete expired sessions and
        finished runs past their retention."""
        await self._interrupt_where(
            "lease_until < now() AND NOT EXISTS (SELECT 1 FROM agent_runs r"
            " WHERE r.run_id = agent_pending_turns.run_id AND r.state IN (1, 2, 6))"
        )
        await self._runs.sweep()
        if self._idle_ttl is not None:
            await self.pool.execute(_EXPIRE_ALL, self._clock() - self._idle_ttl)
