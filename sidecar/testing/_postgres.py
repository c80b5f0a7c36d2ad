"""A private PostgreSQL server for tests and benchmarks: its own data directory under /tmp,
a non-default port on 127.0.0.1, started and stopped by its user (the test session, a
benchmark), and a fresh namespace (a schema) per test.

It runs Debian's server binaries (``make postgres`` installs them; ``.ci/run`` does through
``make test``). As root, the server runs as the ``postgres`` user, since PostgreSQL refuses
to run as root. When the binaries are missing, the tests that need them fail and say how
to get them: a test of the shared store never passes by being skipped.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

__all__ = [
    "POSTGRES_MISSING",
    "PostgresServer",
    "create_database",
    "drop_database",
    "postgres_binaries",
]

POSTGRES_MISSING = (
    "the PostgreSQL server binaries (initdb, pg_ctl) were not found; run `make postgres` "
    "(installs Debian's postgresql package) or put them on PATH"
)


def postgres_binaries() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, newest version first."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).parent
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
        reverse=True,
    )
    return candidates[0].parent if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One throwaway PostgreSQL server; ``dsn(name)`` addresses a database on it."""

    def __init__(self, binaries: Path) -> None:
        self._bin = binaries
        root = os.geteuid() == 0
        # As root, under /tmp itself: the postgres user must be able to reach the directory.
        self.base = Path(tempfile.mkdtemp(prefix="sidecar-pg-", dir="/tmp" if root else None))
        self.data = self.base / "data"
        self.port = _free_port()
        self._as_user: list[str] = []
        if root:
            try:
                shutil.chown(self.base, "postgres", "postgres")
            except LookupError:
                raise RuntimeError(
                    "PostgreSQL refuses to run as root and there is no 'postgres' user to run "
                    "it as; run `make postgres` (Debian's package creates the user)"
                ) from None
            runuser = shutil.which("runuser") or "/usr/sbin/runuser"
            self._as_user = [runuser, "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        subprocess.run(
            [*self._as_user, *args], check=True, capture_output=True, text=True, timeout=120
        )

    def start(self) -> None:
        self._run(
            str(self._bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        # fsync off: these tests kill the sidecar, never the database's machine.
        options = (
            f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            str(self._bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.base / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        try:
            self._run(str(self._bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


async def create_database(server: PostgresServer) -> str:
    """A fresh, empty namespace for one test: a schema, selected by the DSN's
    ``search_path`` (a schema is made in milliseconds; a database takes far longer)."""
    import asyncpg

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(server.dsn())
    try:
        await admin.execute(f"CREATE SCHEMA {name}")
    finally:
        await admin.close()
    return f"{server.dsn()}?search_path={name}"


async def drop_database(server: PostgresServer, dsn: str) -> None:
    """Drop a namespace made by :func:`create_database`."""
    import asyncpg

    admin = await asyncpg.connect(server.dsn())
    try:
        await admin.execute(f"DROP SCHEMA {dsn.rsplit('=', 1)[1]} CASCADE")
    finally:
        await admin.close()
