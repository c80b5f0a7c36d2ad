"""Who waits for which background run to change, in this process.

A watcher subscribes before it reads what is stored, then waits; whoever stores something
for a run (this process's journal, or a notification from another replica) publishes the
run's id, and every waiter of that run wakes and reads again. A wake-up carries nothing:
what changed is always read from the store, so a missed or doubled one costs a read, never
an event.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

__all__ = ["Feed"]


class Feed:
    """Wake-ups by run id."""

    def __init__(self) -> None:
        self._waiting: dict[str, set[asyncio.Event]] = {}

    def publish(self, run_id: str) -> None:
        """Something of ``run_id`` was stored: wake its watchers."""
        for event in self._waiting.get(run_id, ()):
            event.set()

    def publish_all(self) -> None:
        """Wake every watcher (a notification may have been missed)."""
        for events in self._waiting.values():
            for event in events:
                event.set()

    @contextlib.contextmanager
    def subscribe(self, run_id: str) -> Iterator[asyncio.Event]:
        """An event set at each publication for ``run_id`` until the block ends; clear it
        before each read."""
        event = asyncio.Event()
        self._waiting.setdefault(run_id, set()).add(event)
        try:
            yield event
        finally:
            waiting = self._waiting.get(run_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._waiting[run_id]
