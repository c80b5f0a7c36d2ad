"""The MCP front: the sidecar as an MCP server for MCP hosts, beside the gRPC front.

:class:`McpFront` serves Streamable HTTP (both revisions) and :func:`serve_stdio` one host
on stdio (``agent-sidecar mcp-stdio``); both offer the tools a profile allows, native and
bridged, through the agent's dispatch, and an optional ``agent`` tool. It calls the
runtime as the gRPC front does, and never the gRPC front itself.
"""

from sidecar.mcp_server.server import McpFront
from sidecar.mcp_server.stdio import serve_stdio

__all__ = ["McpFront", "serve_stdio"]
