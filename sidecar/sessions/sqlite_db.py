"""Statements the SQLite session store and the run store beside it share: a transaction,
and a turn written over its start record or its report."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator

from sidecar.sessions.records import encode_turn
from sidecar.types import Turn


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
