"""``sessions`` and ``cache``: the session store (memory, SQLite, PostgreSQL) and the tool-
result cache."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
)

from sidecar.config.base import _Strict


class SqliteConfig(_Strict):
    """The embedded session store: one SQLite file, used by one sidecar process."""

    path: str = "agent-sidecar.db"
    """The database file, relative to the working directory unless absolute. A lock file
    next to it (``PATH.lock``) keeps a second sidecar from using the same file."""
    synchronous: Literal["normal", "full"] = "normal"
    """SQLite's ``synchronous`` setting in WAL mode. ``normal``: a finished turn survives
    the process being killed; ``full``: it also survives a power loss, at one fsync per
    turn."""


class PostgresConfig(_Strict):
    """The shared session store: PostgreSQL, for several sidecar replicas."""

    dsn: str | None = None
    """Connection string, e.g. ``postgresql://sidecar@db:5432/sidecar``. Put no password
    here: the environment variable named by ``dsn_env`` wins when it is set."""
    dsn_env: str = "SIDECAR_POSTGRES_DSN"
    """Environment variable holding the connection string (with its password)."""
    pool_size: int = Field(4, ge=1, le=100)
    """Connections kept open to the server."""
    connect_timeout: float = Field(10.0, gt=0)
    """Seconds to wait for the server at start before the sidecar gives up."""
    lease: float = Field(15.0, ge=0.1)
    """Seconds a turn in progress stays claimed without a heartbeat. The sidecar renews
    the claims of its running turns every third of this; a claim not renewed in time
    belongs to a replica that died, and its turn is reported as interrupted."""


class SessionsConfig(_Strict):
    """Where sessions are kept, and for how long."""

    store: Literal["sqlite", "postgres", "memory"] = "sqlite"
    """``sqlite`` (embedded, one process), ``postgres`` (shared by replicas) or
    ``memory`` (gone when the process ends; for tests and demos)."""
    sqlite: SqliteConfig = SqliteConfig()
    """Settings of the SQLite store."""
    postgres: PostgresConfig = PostgresConfig()
    """Settings of the PostgreSQL store."""
    idle_ttl: float | None = Field(None, gt=0)
    """Seconds after its last turn a session expires and is deleted. Unset: never."""
    max_sessions: int | None = Field(100_000, ge=1)
    """Sessions the store may hold; creating one more is refused with RESOURCE_EXHAUSTED
    (reason TOO_MANY_SESSIONS). Counted about every second, so a burst may pass it by a
    few. ``null``: no limit."""
    sweep_interval: float = Field(60.0, gt=0)
    """Seconds between sweeps for expired sessions and cached results."""
    replica_id: str | None = Field(None, min_length=1, max_length=128)
    """A name for this replica that stays the same across its restarts (a StatefulSet
    pod's name, say). With it, a restarted replica reports its own cut-off turns as
    interrupted at once, instead of after their lease runs out. Two live replicas must
    never share one. Unset: a new random id at every start."""


class CacheConfig(_Strict):
    """The tool-result cache."""

    tool_results: bool = True
    """Cache results of read-only tools that declare a ``cache_ttl``."""
    max_entries: int = Field(10_000, ge=1)
    """Results kept in this process's memory; the least recently used go first."""
    shared: bool = False
    """Also keep results in the shared store, so replicas reuse each other's results.
    Needs ``sessions.store: postgres``."""
