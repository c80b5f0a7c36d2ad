"""How a background run's events and results become bytes: given by the front that stores
them, so the agent never imports a wire format.

The stored form is the front's (the gRPC front stores ``StreamRunResponse`` messages, so a
watcher's events go out as they were stored, converted once); the agent hands the codec
plain events, in the order the run produced them, with the sequence each is stored under.
"""

from __future__ import annotations

from typing import Protocol

from sidecar.types import RunEvent, RunOutcome, RunRecord

__all__ = ["RunCodec"]


class RunCodec(Protocol):
    """Encodes a background run's events, its result and its callback's body."""

    def event(self, run_id: str, sequence: int, event: RunEvent, cap: int) -> bytes:
        """One event (:data:`~sidecar.types.RunEvent`). Text fields beyond ``cap`` bytes
        are cut with a marker saying how much."""
        ...

    def result(self, outcome: RunOutcome) -> bytes:
        """A finished run's result."""
        ...

    def rejected(self, code: str, message: str) -> bytes:
        """The result of a run that never started: an error, no stop reason."""
        ...

    def finished(self, run_id: str, sequence: int, result: bytes) -> bytes:
        """The last event, carrying ``result``."""
        ...

    def callback_body(self, run: RunRecord, session_id: str) -> bytes:
        """What a finished run's completion callback delivers: its final state."""
        ...
