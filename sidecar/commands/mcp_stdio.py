"""``agent-sidecar mcp-stdio``: one process, its runtime, and the MCP front on stdio.

A desktop host starts it and speaks MCP on its stdin and stdout; the runtime (tool
servers, bridged MCP servers, model, sessions) runs in the same process, the gRPC port is
not served, and logs go to stderr. It ends when the host closes stdin.
"""

from __future__ import annotations

from collections.abc import Mapping

from sidecar.agent.runtime import Runtime
from sidecar.config import SidecarConfig
from sidecar.mcp_server import serve_stdio
from sidecar.redaction import Redactor
from sidecar.security.callers import CallerCheck

__all__ = ["mcp_stdio"]


async def mcp_stdio(
    config: SidecarConfig,
    *,
    api_key: str | None,
    postgres_dsn: str | None,
    redactor: Redactor,
    environ: Mapping[str, str],
    token: str | None,
) -> None:
    """Serve MCP on stdio until the host closes it.

    Args:
        token: The caller's bearer token (the configuration's principals name who it is).

    Raises:
        StartupError: the runtime cannot start.
        Unauthenticated: principals are configured and ``token`` names none.
    """
    runtime = Runtime(
        config, api_key=api_key, postgres_dsn=postgres_dsn, redactor=redactor, environ=environ
    )
    try:
        await runtime.start()
        callers = CallerCheck(lambda: runtime.snapshot.authenticator, runtime.audit)
        metadata = [("authorization", f"Bearer {token}")] if token else []
        principal = callers.principal(metadata, {}, method="mcp-stdio", peer="stdio")
        await runtime.ready()
        await serve_stdio(runtime, principal)
    finally:
        await runtime.close()
