"""What the PostgreSQL session store and the run store beside it share: the database's
pool, this replica's name and lease, the start records this replica holds, and the schema
brought up to date once by whichever replica starts first."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from sidecar.errors import SessionStoreError

__all__ = ["PostgresDatabase"]

# Any constant works; it keeps replicas that start together from racing the DDL.
_SCHEMA_LOCK = 0x5E5510


class PostgresDatabase:
    """One PostgreSQL database shared by the replicas, as this replica holds it.

    Args:
        dsn: The connection string.
        pool_size: Connections kept open.
        connect_timeout: Seconds to wait for the server at :meth:`open`.
        lease: Seconds a running turn (or run) stays claimed without a heartbeat.
        replica_id: This replica's stable name, or None for a random one per start.
    """

    def __init__(
        self,
        dsn: str,
        *,
        pool_size: int,
        connect_timeout: float,
        lease: float,
        replica_id: str | None,
    ) -> None:
        self.dsn = dsn
        self._pool_size = pool_size
        self._connect_timeout = connect_timeout
        self.lease = lease
        self.owner = replica_id or f"replica-{uuid.uuid4().hex[:12]}"
        self.stable_owner = replica_id is not None
        """The name outlives a restart: what the last process with it held is its own."""
        self.held: set[str] = set()
        """Runs whose start records this replica holds. Only these are renewed: a record
        whose turn could not be stored lapses, and is then reported as interrupted."""
        self._pool: asyncpg.Pool | None = None

    @property
    def pool(self) -> asyncpg.Pool:
        """The connection pool (also for other users of the database: the result cache)."""
        if self._pool is None:
            raise SessionStoreError("the PostgreSQL session store is not open")
        return self._pool

    async def open(self, schema: str, version: int) -> None:
        """Connect, and create the schema (``schema``, at ``version``) where it is missing.

        Raises:
            SessionStoreError: the server cannot be reached in time, or the schema is newer
                than this code.
        """
        try:
            async with asyncio.timeout(self._connect_timeout):
                self._pool = await asyncpg.create_pool(
                    self.dsn, min_size=1, max_size=self._pool_size
                )
        except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
            raise SessionStoreError(
                f"cannot reach the PostgreSQL session store within "
                f"{self._connect_timeout:g}s: {exc or type(exc).__name__}; check "
                "sessions.postgres.dsn (or the variable named by sessions.postgres.dsn_env)"
            ) from None
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
                await conn.execute(schema)
                found = await conn.fetchval("SELECT max(version) FROM agent_schema")
                if found is None:
                    await conn.execute("INSERT INTO agent_schema VALUES ($1)", version)
                elif found > version:
                    raise SessionStoreError(
                        f"the PostgreSQL session store was written by a newer sidecar "
                        f"(schema {found}, this one knows {version})"
                    )
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
