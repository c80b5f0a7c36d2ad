"""Whether a configuration exposes the sidecar, or a token, to a network unprotected.

Loopback is the one place where plaintext and anonymous callers are the default: the
demo, the tests and a laptop. Anything else needs TLS and caller authentication, or an
explicit ``insecure: true`` that the sidecar repeats as a warning at every start.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from agentsidecar.addresses import is_loopback
from sidecar.config import SidecarConfig
from sidecar.errors import ConfigError, StartupError

__all__ = ["check_exposure", "check_reload"]

log = logging.getLogger(__name__)


def _host(address: str) -> str:
    if address.startswith("unix:"):
        return address
    host, _, _ = address.rpartition(":")
    return host or address


def check_exposure(config: SidecarConfig) -> list[str]:
    """What is exposed; refuse to start when it is not allowed.

    Returns:
        The warnings to log (with ``server.insecure``), one per unprotected exposure.

    Raises:
        StartupError: a non-loopback address without TLS or without authentication
            and no ``server.insecure``; a token that would travel in plaintext beyond
            loopback (a principal's to the sidecar, or the sidecar's to a tool server),
            ``server.insecure`` or not.
    """
    server = config.server
    problems: list[str] = []
    tokens = [
        p.name for p in config.auth.principals if p.token_sha256 or p.token_env or p.token_file
    ]
    # Every listener follows the gRPC port's rules, with the same TLS (server.tls) and the
    # same principals: the MCP endpoint and the A2A front's HTTP binding.
    listeners = [("server.host", server.host)]
    if config.mcp.port is not None:
        listeners.append(("mcp.host", config.mcp.host))
    if config.a2a is not None and config.a2a.http is not None:
        listeners.append(("a2a.http.host", config.a2a.http.host or server.host))
    for mcp_server in config.mcp_servers:
        url = urlsplit(mcp_server.url or "")
        if url.scheme != "http" or is_loopback(url.hostname):
            continue
        if mcp_server.headers_from_env:
            # Not waivable: secret headers sent in plaintext are secrets given away.
            raise StartupError(
                f"MCP server {mcp_server.name}: headers_from_env is set but {mcp_server.url} "
                "is plain http beyond loopback; secrets travel only over https (or loopback)"
            )
        problems.append(f"MCP server {mcp_server.name}: {mcp_server.url} is plain http")
    for key, host in listeners:
        if not is_loopback(host) and server.tls is None and tokens:
            # Not waivable, server.insecure or not: a bearer token sent in plaintext is a
            # token given away.
            raise StartupError(
                f"{key} {host} is not loopback, server.tls is unset and principals "
                f"prove who they are with bearer tokens ({', '.join(tokens[:5])}): their "
                "tokens would cross the network in plaintext; set server.tls "
                "(docs/security.md)"
            )
        if not is_loopback(host):
            if server.tls is None:
                problems.append(f"{key} {host} is not loopback and server.tls is unset")
            if not config.auth.principals:
                problems.append(
                    f"{key} {host} is not loopback and auth.principals is empty "
                    "(every caller is anonymous)"
                )
    for tool_server in config.tool_servers:
        has_token = tool_server.token_env or tool_server.token_file
        if has_token and tool_server.tls is None and not is_loopback(_host(tool_server.address)):
            # Not waivable: a token sent in plaintext is a token given away.
            raise StartupError(
                f"tool server {tool_server.name}: a token is set but the address "
                f"{tool_server.address} is not loopback and tls is unset; a token travels "
                "only over TLS (or loopback)"
            )
    if problems and not server.insecure:
        raise StartupError(
            "; ".join(problems)
            + ": set server.tls and auth.principals (docs/security.md), or server.insecure: "
            "true to accept the exposure"
        )
    return [f"insecure: {p}" for p in problems]


def check_reload(old: SidecarConfig, new: SidecarConfig) -> list[str]:
    """What a reload from ``old`` to ``new`` would expose; refuse it when that is not
    allowed. Every check that guards start guards a reload: the same exposure rules, and
    one more, since a reload happens unattended (a file watcher may catch a file half
    written): caller authentication, once on, is switched off only by a restart.

    Returns:
        The warnings to log, as :func:`check_exposure` gives them.

    Raises:
        ConfigError: ``new`` lists no principals where ``old`` did.
        StartupError: ``new`` fails the start-time exposure check.
    """
    if old.auth.principals and not new.auth.principals:
        raise ConfigError(
            "auth.principals is empty: a reload cannot switch caller authentication off "
            "(every caller would be anonymous); restart the sidecar to apply that"
        )
    return check_exposure(new)
