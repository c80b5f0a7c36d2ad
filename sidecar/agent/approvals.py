"""Tool calls waiting for a caller's decision, and the decisions that release them.

A call whose tool requires approval waits here (as its run streams an
``approval_required`` event) until a caller decides it, its time runs out, or its run
ends. Each decision reaches exactly the call waiting under its session and call id.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sidecar.errors import CallNotPending

__all__ = ["Approvals", "Decision"]


@dataclass(frozen=True, slots=True)
class Decision:
    """A caller's decision on one call."""

    approved: bool
    reason: str = ""
    """Why, shown to the model when the call is denied."""


class Approvals:
    """The calls waiting for a decision, by (session id, call id)."""

    def __init__(self) -> None:
        self._waiting: dict[tuple[str, str], asyncio.Future[Decision]] = {}

    async def wait(self, session_id: str, call_id: str, timeout: float) -> Decision:
        """Wait up to ``timeout`` seconds for the call's decision; a call nobody decides
        in time is denied."""
        key = (session_id, call_id)
        future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        try:
            async with asyncio.timeout(max(0.0, timeout)):
                return await future
        except TimeoutError:
            return Decision(False, "no decision arrived in time")
        finally:
            self._waiting.pop(key, None)

    def decide(self, session_id: str, call_id: str, decision: Decision) -> None:
        """Deliver a decision to the call waiting for it.

        Raises:
            CallNotPending: no such call is waiting (never asked, decided, or timed out).
        """
        future = self._waiting.get((session_id, call_id))
        if future is None or future.done():
            raise CallNotPending(session_id, call_id)
        future.set_result(decision)

    def deny_session(self, session_id: str, reason: str) -> None:
        """Deny every call of ``session_id`` still waiting for a decision."""
        for (session, _), future in list(self._waiting.items()):
            if session == session_id and not future.done():
                future.set_result(Decision(False, reason))
