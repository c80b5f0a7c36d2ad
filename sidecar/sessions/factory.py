"""The session store the configuration asks for."""

from __future__ import annotations

from sidecar.config import SessionsConfig
from sidecar.errors import SessionStoreError
from sidecar.sessions.store import MemorySessionStore, SessionStore


def store_from_config(
    config: SessionsConfig, *, postgres_dsn: str | None, retention: float = 86_400.0
) -> SessionStore:
    """Build (not open) the configured store, with its background runs beside it.

    Args:
        config: the ``sessions`` section.
        postgres_dsn: the resolved connection string, for ``store: postgres``.
        retention: seconds a finished background run is kept (``background.retention``).

    Raises:
        SessionStoreError: ``store: postgres`` without a connection string.
    """
    if config.store == "memory":
        return MemorySessionStore(idle_ttl=config.idle_ttl, retention=retention)
    if config.store == "sqlite":
        from sidecar.sessions.sqlite import SqliteSessionStore

        return SqliteSessionStore(
            config.sqlite.path,
            synchronous=config.sqlite.synchronous,
            idle_ttl=config.idle_ttl,
            sweep_interval=config.sweep_interval,
            retention=retention,
        )
    if not postgres_dsn:
        raise SessionStoreError(
            "sessions.store is postgres but no connection string is set: set "
            f"sessions.postgres.dsn or the environment variable {config.postgres.dsn_env}"
        )
    from sidecar.sessions.postgres import PostgresSessionStore

    pg = config.postgres
    return PostgresSessionStore(
        postgres_dsn,
        pool_size=pg.pool_size,
        connect_timeout=pg.connect_timeout,
        lease=pg.lease,
        replica_id=config.replica_id,
        idle_ttl=config.idle_ttl,
        sweep_interval=config.sweep_interval,
        retention=retention,
    )
