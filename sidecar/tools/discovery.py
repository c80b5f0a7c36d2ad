"""What a tool server's tool list does to the catalog when it is discovered (at start, and
each time the server comes back to SERVING)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from agentsidecar.v1 import tool_pb2
from sidecar.config import RetryPolicy
from sidecar.tools.catalog import ToolCatalog

__all__ = ["Discovery"]

log = logging.getLogger(__name__)


class Discovery:
    """Takes each server's discovered tool list into the catalog.

    Args:
        catalog: The catalog to update.
        version_of: For each server that is a version of another, that other's name: a
            version serves its original's tools under their names and adds none.
        on_change: Told after each change of the catalog.
    """

    def __init__(
        self,
        catalog: ToolCatalog,
        version_of: Mapping[str, str],
        on_change: Callable[[], None],
    ) -> None:
        self._catalog = catalog
        self._version_of = dict(version_of)
        self._on_change = on_change
        self._lock = asyncio.Lock()

    async def discovered(
        self,
        server: str,
        response: tool_pb2.ListToolsResponse,
        retries: Mapping[str, RetryPolicy] | None = None,
    ) -> None:
        """A connection's discovery listener; ``retries``: tools' own retry policies."""
        original = self._version_of.get(server)
        if original is not None:
            log.info(
                "tool server %s (a version of %s): %d tools", server, original, len(response.tools)
            )
            return
        # Schemas compile off the event loop (bounded in size, no remote references),
        # one server's list at a time.
        async with self._lock:
            changed = await asyncio.to_thread(self._catalog.update, server, response, retries)
        if changed:
            log.info("tool server %s: %d tools", server, len(response.tools))
            self._on_change()
