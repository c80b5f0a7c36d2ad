"""The MCP bridge: MCP servers as tool servers, through the official ``mcp`` SDK's client.

:class:`McpServerConnection` is a tool link (:mod:`sidecar.tools.link`) like a gRPC tool
server's connection, so the catalog, the dispatcher, breakers, deadlines, approvals and
the audit record treat an MCP tool as any other. Beneath it: the transports (a started
process on stdio, or Streamable HTTP), the tool list with the trust the configuration
gives, and results rendered for the model.
"""

from sidecar.tools.mcp.connection import META_PREFIX, McpServerConnection

__all__ = ["META_PREFIX", "McpServerConnection"]
