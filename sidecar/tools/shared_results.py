"""Tool results shared by replicas, in the PostgreSQL database that holds the sessions.

Rows are keyed by a hash of the cache key and carry their expiry (by the database's
clock); a read never returns an expired row, and a periodic sweep deletes them.
"""

from __future__ import annotations

import hashlib

import asyncpg

from sidecar.periodic import Periodic

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agent_tool_results (
    key        text PRIMARY KEY,
    output     text NOT NULL,
    duration   double precision NOT NULL,
    expires_at timestamptz NOT NULL
);
"""
_GET = """
SELECT output, duration, extract(epoch FROM expires_at - now()) AS left_s
FROM agent_tool_results WHERE key = $1 AND expires_at > now()
"""
_PUT = """
INSERT INTO agent_tool_results (key, output, duration, expires_at)
VALUES ($1, $2, $3, now() + make_interval(secs => $4))
ON CONFLICT (key) DO UPDATE
SET output = EXCLUDED.output, duration = EXCLUDED.duration, expires_at = EXCLUDED.expires_at
"""
_SCHEMA_LOCK = 0x5E5511


def _digest(key: str) -> str:
    return hashlib.blake2b(key.encode(), digest_size=20).hexdigest()


class PostgresSharedResults:
    """A :class:`~sidecar.tools.result_cache.SharedResults` on PostgreSQL.

    Args:
        pool: a connection pool to the database (the session store's).
        sweep_interval: seconds between deletions of expired rows.
    """

    def __init__(self, pool: asyncpg.Pool, *, sweep_interval: float = 60.0) -> None:
        self._pool = pool
        self._sweeper = Periodic("tool-result-sweep", sweep_interval, self.sweep)

    async def open(self) -> None:
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
            await conn.execute(_SCHEMA)
        self._sweeper.start()

    async def close(self) -> None:
        await self._sweeper.stop()

    async def get(self, key: str) -> tuple[str, float, float] | None:
        row = await self._pool.fetchrow(_GET, _digest(key))
        if row is None:
            return None
        return row["output"], row["duration"], float(row["left_s"])

    async def put(self, key: str, output: str, duration: float, ttl: float) -> None:
        await self._pool.execute(_PUT, _digest(key), output, duration, ttl)

    async def sweep(self) -> None:
        """Delete expired results."""
        await self._pool.execute("DELETE FROM agent_tool_results WHERE expires_at <= now()")
