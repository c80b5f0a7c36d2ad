"""The tool-author SDK: write tools as plain functions, serve them over gRPC.

A complete tool server::

    from toolservers import ToolServer

    server = ToolServer("orders")

    @server.tool(read_only=True, idempotent=True, cache_ttl=30)
    async def get_order_status(order_id: str) -> dict[str, str]:
        \"\"\"Look up an order's status by its id.

        Args:
            order_id: The order number, e.g. "20250101".
        \"\"\"
        return {"order_id": order_id, "status": "shipped"}

    if __name__ == "__main__":
        server.run()

See ``docs/tool-servers.md`` for the decorator's arguments, the two error
channels, deadlines, progress, who a call serves (``ctx.identity``) and shutdown.
"""

from agentsidecar.grpc_io import load_grpc

load_grpc()  # before the SDK's modules import grpc (docs/tool-servers.md, "gRPC's I/O")

from toolservers._context import ToolContext
from toolservers._exceptions import ToolDefinitionError, ToolFailure, ToolServerError
from toolservers._identity import CallerIdentity
from toolservers._options import ServeOptions
from toolservers._server import ToolServer
from toolservers._tool import Tool

__all__ = [
    "CallerIdentity",
    "ServeOptions",
    "Tool",
    "ToolContext",
    "ToolDefinitionError",
    "ToolFailure",
    "ToolServer",
    "ToolServerError",
]
