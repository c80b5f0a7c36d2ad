"""Whether a tool can be called now: its server serving, its breaker letting calls through.

The model's tool list leaves out the tools of servers that cannot take a call (health
pruning), and ``ListSessionTools`` says why each tool is or is not available. Both read
it here, from the connections' health and breakers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentsidecar.v1 import tool_pb2
from sidecar.tools.catalog import CatalogTool, ListedTool, ToolCatalog, allows
from sidecar.tools.link import ToolLink
from sidecar.types import ToolAvailability

__all__ = ["ToolAccess"]


class ToolAccess:
    """The catalog's tools as a profile may use them now.

    Args:
        catalog: Every discovered tool.
        connections: The tool servers' connections, by name.
    """

    def __init__(self, catalog: ToolCatalog, connections: Mapping[str, ToolLink]) -> None:
        self.catalog = catalog
        self._connections = connections

    def unavailable_servers(self) -> frozenset[str]:
        """The servers that would not take a call now."""
        return frozenset(n for n, c in self._connections.items() if not c.available)

    def definitions(self, profile: str, allowed: frozenset[str] | None) -> list[dict[str, Any]]:
        """The tool list the model sees: allowed, on a server that takes calls now (the same
        list object while nothing changes, so its bytes stay the same)."""
        return self.catalog.definitions(profile, allowed, self.unavailable_servers())

    def session_tools(
        self, allowed: frozenset[str] | None, named: Sequence[str] = ()
    ) -> list[tuple[CatalogTool | ListedTool, ToolAvailability]]:
        """The tools ``allowed`` lets a session use, each with whether it can be called now;
        a tool whose name another server owns is listed as NAME_TAKEN, and a name of the
        profile's list (``named``) that no server offers as NOT_OFFERED."""
        entries: list[tuple[CatalogTool | ListedTool, ToolAvailability]] = []
        for tool in self.catalog.tools():
            if allows(allowed, tool):
                entries.append((tool, self._availability(self._connections[tool.server])))
        for taken in self.catalog.taken:
            if allows(allowed, taken):
                entries.append((taken, ToolAvailability.NAME_TAKEN))
        for name in self.catalog.unknown(named):
            missing = ListedTool(
                name=name, server="", descriptor=tool_pb2.ToolDescriptor(name=name), owner=""
            )
            entries.append((missing, ToolAvailability.NOT_OFFERED))
        return entries

    def unavailable(self, named: Sequence[str]) -> tuple[tuple[str, ToolAvailability], ...]:
        """The names of a profile's ``tools`` list the model cannot be offered now, each
        with why: no server offers it (NOT_OFFERED), or its server would not take a call."""
        found = []
        for name in named:
            tool = self.catalog.listed(name)
            if tool is None:
                found.append((name, ToolAvailability.NOT_OFFERED))
                continue
            availability = self._availability(self._connections[tool.server])
            if availability is not ToolAvailability.AVAILABLE:
                found.append((name, availability))
        return tuple(found)

    @staticmethod
    def _availability(connection: ToolLink) -> ToolAvailability:
        if not connection.serving:
            return ToolAvailability.SERVER_UNAVAILABLE
        if not connection.breaker.allows_calls():
            return ToolAvailability.BREAKER_OPEN
        return ToolAvailability.AVAILABLE
