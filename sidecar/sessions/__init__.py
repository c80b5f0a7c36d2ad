"""Session storage: sessions and their turns, durable (SQLite embedded, PostgreSQL shared by
replicas) or in memory; each turn claimed at its start (the session's lock and the record
that a replica's crash is noticed by) and stored at its end. Beside each session store, its
background runs (``SessionStore.runs``): their state, events and ownership.
"""

from sidecar.sessions.factory import store_from_config
from sidecar.sessions.runs import RunStore
from sidecar.sessions.store import MemorySessionStore, SessionStore

__all__ = ["MemorySessionStore", "RunStore", "SessionStore", "store_from_config"]
