"""Fixtures shared by several test modules: the PostgreSQL server and its databases."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from pg import MISSING, PostgresServer, create_database, drop_database, server_binaries


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole test session, started on first use."""
    binaries = server_binaries()
    if binaries is None:
        pytest.fail(MISSING)
    server = PostgresServer(binaries)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def postgres_dsn(postgres_server: PostgresServer) -> AsyncIterator[str]:
    """A fresh, empty database for one test."""
    dsn = await create_database(postgres_server)
    yield dsn
    await drop_database(postgres_server, dsn)
