"""``tool_servers`` and ``mcp_servers``: the gRPC tool servers and the MCP servers the
sidecar calls."""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    model_validator,
)

from sidecar.config.base import (
    _ENV_NAME,
    _HEADER_NAME,
    BreakerPolicy,
    ClientTlsConfig,
    HedgePolicy,
    RetryPolicy,
    _Strict,
)


class ToolServerConfig(_Strict):
    """One tool server the sidecar discovers tools from and dispatches calls to."""

    name: str = Field(pattern=r"^[a-zA-Z][a-zA-Z0-9_-]{0,31}$")
    """A short name, used in logs, metrics and to namespace colliding tool names."""
    address: str = Field(min_length=1)
    """``host:port`` of the server's gRPC endpoint."""
    timeout: float = Field(10.0, gt=0)
    """Seconds one call may take unless the tool declares a shorter default."""
    retry: RetryPolicy = RetryPolicy()
    """Retries for idempotent tools on UNAVAILABLE / RESOURCE_EXHAUSTED; others never retry."""
    breaker: BreakerPolicy = BreakerPolicy()
    """The server's circuit breaker."""
    hedge: HedgePolicy | None = None
    """Hedged calls to the server's idempotent tools; unset: a call is sent once (and
    retried only after a failure)."""
    discovery_timeout: float = Field(5.0, gt=0)
    """Seconds to wait for the server's tool list at start before starting without it."""
    version_of: str | None = None
    """This server is a new version of the named one: it serves that server's tools
    (its own tool list is not offered under its name), and takes ``weight`` of their
    calls. Unset: a server of its own."""
    weight: float = Field(1.0, ge=0)
    """Its share of the calls to its tools among the versions of one server (the first
    server and each ``version_of`` it), relative to theirs; reloaded without a restart."""
    tls: ClientTlsConfig | None = None
    """TLS to the server (with ``cert_file``, mutual TLS); unset: plaintext."""
    token_env: str | None = None
    """Environment variable holding a bearer token the sidecar sends the server on every
    call (for a server that requires it)."""
    token_file: str | None = None
    """File holding that token, read at start."""
    keepalive_time: float = Field(300.0, ge=0.1)
    """Seconds between the pings that check an idle connection is alive. Default 300: the
    most often a gRPC server that sets no keepalive policy accepts (Python's, Go's and
    Java's defaults); oftener, and it answers GOAWAY ``too_many_pings`` and drops the
    connection. SDK tool servers accept a ping every 10 s: set it lower for them."""
    call_stream: bool = True
    """Send the server's calls on one long-lived ``CallTools`` stream when it offers one
    (``ListToolsResponse.call_stream``; the Python SDK does), instead of one ``CallTool``
    per call: the same calls, deadlines, cancellation and metadata, for a fraction of the
    CPU on both sides. Off, or for a server that does not offer it: one call each."""
    max_result_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    """Largest response accepted from the server; a larger tool result is that call's
    error (the model is told to ask for less), never retried, and never counted against
    the server's breaker."""


class McpToolConfig(_Strict):
    """What the configuration decides about one tool of an MCP server, over its annotations.

    Every key left unset keeps what the server's trust decides (``trust_annotations``,
    ``approval``)."""

    read_only: bool | None = None
    """The tool changes nothing: it may start while the model still streams, and share a
    step with others that read what it reads."""
    idempotent: bool | None = None
    """Calling it twice does what calling it once does: a failed call is retried."""
    destructive: bool | None = None
    """It may destroy or overwrite something (shown with its approval)."""
    requires_approval: bool | None = None
    """Each call waits for the caller's approval."""
    timeout: float | None = Field(None, gt=0)
    """Seconds one call may take, under the server's ``timeout``."""
    max_attempts: int | None = Field(None, ge=1, le=20)
    """Attempts in all for an idempotent call that failed UNAVAILABLE; unset: the server's
    ``retry.max_attempts``."""
    read_keys: list[str] = Field(default_factory=list)
    """Resource keys the tool reads (``"repo:{repo_path}"``): calls writing them wait."""
    write_keys: list[str] = Field(default_factory=list)
    """Resource keys the tool writes: calls reading or writing them wait for each other."""


class McpServerConfig(_Strict):
    """An MCP server the sidecar uses as a tool server, through its bridge (``docs/mcp.md``).

    Either ``command`` (a process the sidecar starts and speaks stdio to) or ``url`` (a
    Streamable HTTP endpoint)."""

    name: str = Field(pattern=r"^[a-zA-Z][a-zA-Z0-9_-]{0,31}$")
    """A short name, unique among ``tool_servers`` and ``mcp_servers``: logs, metrics, the
    audit record, a profile's ``server.tool`` entries."""
    command: str | None = Field(None, min_length=1)
    """The program that serves MCP on its stdin and stdout (started by the sidecar)."""
    args: list[str] = Field(default_factory=list)
    """Its arguments."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables it gets, besides ``PATH``, ``HOME``, ``LANG`` and ``TZ`` of
    the sidecar's own; nothing else of the sidecar's environment is passed on."""
    env_from: dict[str, str] = Field(default_factory=dict)
    """Secrets it gets as environment variables: its variable's name to the name of the
    sidecar's variable holding the value (``{GITHUB_TOKEN: SIDECAR_GITHUB_TOKEN}``)."""
    cwd: str | None = None
    """Its working directory; unset: the sidecar's."""
    url: str | None = None
    """The Streamable HTTP endpoint (``https://host/mcp``); plain ``http`` only to loopback
    unless ``server.insecure``."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Headers sent with every request (not secret)."""
    headers_from_env: dict[str, str] = Field(default_factory=dict)
    """Secret headers: a header's name to the environment variable holding its value
    (``{Authorization: GITHUB_MCP_AUTH}``, the variable holding ``Bearer …``)."""
    tls: ClientTlsConfig | None = None
    """TLS to an ``https`` URL: the CA bundle (unset: the system's), a client certificate
    for mutual TLS, the name to verify. ``server_name`` is not supported here."""
    protocol: Literal["auto", "legacy", "2026-07-28"] = "auto"
    """The revision spoken: ``auto`` asks ``server/discover`` and falls back to the 2025
    handshake (``initialize``); ``legacy`` always uses the handshake; ``2026-07-28`` only
    the stateless revision."""
    timeout: float = Field(30.0, gt=0)
    """Seconds one call may take unless a tool's ``timeout`` is shorter; the run's remaining
    time caps it, and a task is polled at most this long."""
    retry: RetryPolicy = RetryPolicy()
    """Retries of idempotent tools' calls that failed UNAVAILABLE (the server down or
    restarting); others never retry."""
    breaker: BreakerPolicy = BreakerPolicy()
    """The server's circuit breaker."""
    discovery_timeout: float = Field(10.0, gt=0)
    """Seconds to wait at start for the server's tool list (and for a start, a connect or a
    re-list later) before going on without it."""
    health_interval: float = Field(10.0, ge=0.1)
    """Seconds between health probes while the server is idle (a ping on the 2025 revisions,
    ``server/discover`` on 2026-07-28); a probe unanswered within ``discovery_timeout``
    marks it NOT_SERVING and a started server is restarted."""
    restart_backoff: float = Field(0.5, gt=0)
    """Seconds before the first restart of a started server that exited or hung, or the
    first reconnect to a URL; each further attempt waits twice as long."""
    max_restart_backoff: float = Field(30.0, gt=0)
    """The longest wait between restarts or reconnects."""
    min_relist_interval: float = Field(1.0, ge=0)
    """Seconds between re-listings at least: a storm of ``list_changed`` notifications
    costs one listing per interval."""
    max_result_bytes: int = Field(1024 * 1024, ge=1024)
    """Largest message accepted from the server (one line on stdio, one response over
    HTTP), and largest result passed on; a larger result is the call's error."""
    max_tools: int = Field(512, ge=1, le=4096)
    """Tools taken from the server's list at most; the rest are left out (logged)."""
    trust_annotations: bool = False
    """Believe the server's ``readOnlyHint`` and ``idempotentHint`` (early starts, retries)
    and a ``destructiveHint`` of false (no approval). Off: its tools are neither read-only
    nor idempotent, and each may be destructive."""
    approval: Literal["destructive", "always", "never"] = "destructive"
    """Which calls wait for the caller's approval: ``destructive`` those of tools that may
    be destructive (all of them, unless annotations are trusted or a tool is configured),
    ``always`` every call, ``never`` none. A tool's ``requires_approval`` wins."""
    elicitation: Literal["approval", "refuse"] = "approval"
    """A server's question during a call (elicitation): asked of the caller through the
    approval flow (``approval``), or declined at once (``refuse``). Unary runs, which
    nobody can answer, decline it."""
    identity: bool = True
    """Send who a call serves (principal, session, run, call, labels, and the signed
    assertion when ``auth.tool_assertion`` is set) in each call's ``_meta``."""
    allow_tools: list[str] | None = None
    """The server's tools the sidecar offers, by their names on the server; unset: all."""
    tools: dict[str, McpToolConfig] = Field(default_factory=dict)
    """Per tool, by its name on the server: trust, approval, timeout, retries, keys."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("set command (stdio) or url (Streamable HTTP), not both")
        if self.url is None and (self.headers or self.headers_from_env or self.tls):
            raise ValueError("headers, headers_from_env and tls go with url")
        if self.command is None and (self.args or self.env or self.env_from or self.cwd):
            raise ValueError("args, env, env_from and cwd go with command")
        if self.url is not None:
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError("url must be an http or https URL with a host")
            if parts.username or parts.password:
                raise ValueError("url must not carry credentials: use headers_from_env")
            if self.tls is not None and parts.scheme != "https":
                raise ValueError("tls needs an https url")
            if self.tls is not None and self.tls.server_name is not None:
                raise ValueError("tls.server_name is not supported for MCP servers")
        for header in [*self.headers, *self.headers_from_env]:
            if not re.fullmatch(_HEADER_NAME, header):
                raise ValueError(f"{header[:40]!r} is not an HTTP header name")
        for name in [*self.env_from, *self.env_from.values(), *self.headers_from_env.values()]:
            if not re.fullmatch(_ENV_NAME, name):
                raise ValueError(f"{name[:40]!r} is not an environment variable name")
        if self.max_restart_backoff < self.restart_backoff:
            raise ValueError("max_restart_backoff must be at least restart_backoff")
        return self
