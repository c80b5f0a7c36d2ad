"""Session storage: sessions and their turns, durable (SQLite embedded, PostgreSQL shared by
replicas) or in memory; each turn claimed at its start (the session's lock and the record
that a replica's crash is noticed by) and stored at its end.
"""

from sidecar.sessions.factory import store_from_config
from sidecar.sessions.store import MemorySessionStore, SessionStore

__all__ = ["MemorySessionStore", "SessionStore", "store_from_config"]
