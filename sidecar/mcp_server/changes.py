"""Telling MCP hosts that the tool list changed (a tool server discovered again, a bridged
server's ``list_changed``), so a host that lists once does not keep a stale list.

- 2026-07-28 hosts hear it on their ``subscriptions/listen`` streams: the SDK's
  :class:`~mcp.server.subscriptions.ListenHandler` over an in-process bus (serving it is
  what makes the endpoint declare ``listChanged`` on that revision);
- 2025 hosts that listed the tools get ``notifications/tools/list_changed`` on their
  session (its GET stream, when the host opened one), and the endpoint declares
  ``tools.listChanged``.

Changes that come in a burst (a server's tools discovered one by one) are told once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

__all__ = ["ToolListChanges"]

log = logging.getLogger(__name__)

_SETTLE = 0.05
"""Seconds a change waits for the rest of its burst before hosts are told."""


class ToolListChanges:
    """Where hosts listen for changes of the tool list, and how they are told.

    Args:
        max_listeners: ``subscriptions/listen`` streams open at once.
    """

    def __init__(self, max_listeners: int) -> None:
        self._bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self._bus, max_subscriptions=max_listeners)
        """The ``subscriptions/listen`` handler (2026-07-28)."""
        self._sessions: dict[str, Any] = {}  # by Mcp-Session-Id
        self._telling: asyncio.Task[None] | None = None

    def listed(self, session_id: str, session: Any) -> None:
        """A 2025 session listed the tools (``session``: the handler's, which can still
        notify once its request is over): it is told when they change."""
        self._sessions[session_id] = session

    def forget(self, session_id: str) -> None:
        """The session ended."""
        self._sessions.pop(session_id, None)

    def changed(self) -> None:
        """The tool list changed: tell every host once the burst is over."""
        if self._telling is None or self._telling.done():
            self._telling = asyncio.get_running_loop().create_task(
                self._tell(), name="mcp-tools-changed"
            )

    async def _tell(self) -> None:
        await asyncio.sleep(_SETTLE)
        await self._bus.publish(ToolsListChanged())
        for session in list(self._sessions.values()):
            # A session whose host went away has nowhere to take it: nothing is lost.
            with contextlib.suppress(Exception):
                await session.send_tool_list_changed()

    async def close(self) -> None:
        if self._telling is not None:
            self._telling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._telling
        self.listen.close()
