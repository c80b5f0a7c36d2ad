"""``agent-sidecar mcp-stdio``: the MCP front for one desktop host, on stdin and stdout.

The host starts the command; the runtime runs in the same process (its tool servers,
bridged MCP servers, model and session store, from the configuration file) and the MCP
server speaks on stdio in the revision the host speaks. Logs go to stderr. The caller is
one principal for the whole connection: anonymous when the configuration lists none,
else the one whose token the host passes in the environment variable the command names.
"""

from __future__ import annotations

from typing import Any

from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.stdio import stdio_server

from sidecar.agent.runtime import Runtime
from sidecar.mcp_server.changes import ToolListChanges
from sidecar.mcp_server.handlers import build_server, state_key, task_board
from sidecar.security.identity import Principal
from sidecar.telemetry import own_version

__all__ = ["serve_stdio"]


async def serve_stdio(runtime: Runtime, principal: Principal) -> None:
    """Serve the MCP front on stdio for ``principal`` until the host closes stdin."""

    def principal_of(ctx: Any) -> Principal:
        return principal

    config = runtime.config.mcp
    tasks = task_board(config)
    changes = ToolListChanges(max_listeners=config.sessions.max_sessions)
    runtime.on_catalog_change(changes.changed)
    server = build_server(
        runtime.agent,
        config,
        principal_of,
        own_version(),
        state_key=state_key(config),
        tasks=tasks,
        changes=changes,
        ready=runtime.became_ready.wait,
    )
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, options)
    finally:
        await changes.close()
        await tasks.close()
