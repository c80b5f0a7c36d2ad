"""``mcp``: the sidecar as an MCP server (sessions, tasks, its HTTP listener)."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from sidecar.config.base import _ENV_NAME, HttpLimits, _Strict


class McpTasksConfig(_Strict):
    """Tasks of the MCP endpoint (the tasks extension of 2026-07-28): which tools a host
    that declares it gets as tasks, and how long they are kept (``docs/mcp.md``)."""

    tools: dict[str, Literal["optional", "required"]] = Field(default_factory=dict)
    """Tools, by the names the endpoint lists, that run as tasks for a host declaring the
    extension: ``optional`` ones run synchronously for other hosts, ``required`` ones are
    refused to them (``-32021``)."""
    timeout: float = Field(3600.0, gt=0)
    """Seconds a task's call may take (``mcp.call_timeout`` is for calls answered at
    once); approvals and questions included."""
    ttl: float = Field(3600.0, gt=0)
    """Seconds a task is kept from its creation (its ``ttlMs``); then it is forgotten, and
    cancelled if it still runs. At least ``timeout``."""
    poll_interval: float = Field(0.5, gt=0, le=60)
    """Seconds between polls suggested to hosts (``pollIntervalMs``)."""
    max_per_principal: int = Field(64, ge=1)
    """Tasks one principal may hold at once; past it a call runs synchronously, or is
    refused if its tool requires a task."""
    max_tasks: int = Field(4096, ge=1)
    """Tasks the process holds at once."""

    @model_validator(mode="after")
    def _kept_while_running(self) -> McpTasksConfig:
        if self.ttl < self.timeout:
            raise ValueError("ttl must be at least timeout: a task is kept while it may run")
        return self


class McpSessionsConfig(_Strict):
    """The Streamable HTTP endpoint's sessions (the 2025 revisions' ``Mcp-Session-Id``;
    2026-07-28 has none): how many, and for how long (``docs/mcp.md``)."""

    max_per_principal: int = Field(32, ge=1, le=100_000)
    """Sessions one principal may hold open (a principal's ``quota.mcp_sessions`` says
    otherwise); one more is refused 429 with ``Retry-After``."""
    max_sessions: int = Field(1024, ge=1, le=100_000)
    """Sessions the process holds open. When full, a principal holding fewer than the
    biggest holder takes that holder's least recently used idle session (closed; its host
    opens another); when none can give one up, 503."""
    idle_timeout: float = Field(300.0, gt=0, le=86_400)
    """Seconds a session may go with no request in flight (an open GET stream counts)
    before it is closed; its host then gets 404 and opens another, as MCP says."""


class McpEndpointConfig(_Strict):
    """The sidecar as an MCP server: the tools a profile allows, for MCP hosts, over
    Streamable HTTP (both revisions) and ``agent-sidecar mcp-stdio``. Its callers are the
    gRPC port's principals, with the same tokens and the same TLS (``server.tls``)."""

    port: int | None = Field(None, ge=0, le=65535)
    """Port of the Streamable HTTP endpoint; 0 picks a free one (printed as
    ``mcp on http://HOST:PORT/mcp``); unset: no endpoint."""
    host: str = "127.0.0.1"
    """Interface it binds; beyond loopback the rules of ``server.host`` apply (TLS and
    principals, or ``server.insecure``)."""
    path: str = Field("/mcp", pattern=r"^/[A-Za-z0-9._~/-]{0,127}$")
    """The endpoint's path."""
    profile: str = "default"
    """The profile whose tools it offers; a principal must be allowed it."""
    call_timeout: float = Field(60.0, gt=0)
    """Seconds a host's tool call may take (MCP carries no deadline); approvals included."""
    allowed_origins: list[str] = Field(default_factory=list)
    """Browser origins allowed to call it besides loopback ones (``https://app.example``):
    any other ``Origin`` is refused 403, against DNS rebinding."""
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    """Largest request body accepted (413 beyond)."""
    read_timeout: float = Field(30.0, gt=0)
    """Seconds a request may take to arrive whole once its connection is open or its
    previous response sent; a slower connection is closed (a response or an SSE stream
    being served is not bounded by it)."""
    max_connections: int = Field(1000, ge=1)
    """Open connections at most; one beyond is closed as it is accepted."""
    agent_tool: bool = False
    """Also offer ``agent``: a tool that runs one turn of the profile on a session of the
    caller's (the whole loop, its model calls and tools), for hosts that delegate a task."""
    tasks: McpTasksConfig = McpTasksConfig()
    """Tools run as tasks for hosts that declare MCP's tasks extension (2026-07-28)."""
    sessions: McpSessionsConfig = McpSessionsConfig()
    """Bounds of the sessions hosts on the 2025 revisions open."""

    @property
    def limits(self) -> HttpLimits:
        """What its listener lets a connection hold."""
        return HttpLimits(
            read_timeout=self.read_timeout,
            max_body_bytes=self.max_body_bytes,
            max_connections=self.max_connections,
        )

    request_state_key_env: str | None = Field(None, pattern=_ENV_NAME)
    """Environment variable holding the secret (32 bytes or more) that seals the
    ``requestState`` of a multi-round call (an approval, a bridged server's questions) on
    2026-07-28; replicas behind one address share it. Unset: a key made at start, so a
    host's next round must reach the same process."""

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        for origin in origins:
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.path:
                raise ValueError(f"{origin[:60]!r} is not an origin (scheme://host[:port])")
        return origins
