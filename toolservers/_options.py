"""How a tool server is served, and the command line that sets it."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentsidecar.logs import FORMATS, LEVELS


@dataclass(frozen=True)
class ServeOptions:
    """Settings for serving a ``ToolServer``.

    Attributes:
        host: Interface to listen on. Default ``127.0.0.1``: a sidecar's tools are
            local unless deliberately exposed.
        port: Port to listen on. Default 0: any free port, announced on stdout.
        grace: Seconds that running calls get to finish after SIGTERM before they
            are cancelled. Default 10.
        latency: Simulated latency in seconds added to every call, for demos and
            benchmarks. Default 0.
        tool_latency: Per-tool simulated latency in seconds, overriding ``latency``.
            Default none.
        sync_workers: Threads that run sync tools; more concurrent sync calls
            queue. Default 32.
        handle_signals: Drain on SIGTERM and SIGINT. Default True; turn off when
            embedding the server in a program that handles signals itself.
        otlp_endpoint: ``host:port`` of an OTLP/gRPC receiver. When set, each call
            continues the caller's trace (W3C ``traceparent`` in the gRPC metadata)
            in a span of its own, exported there. Default none: no tracing. Needs
            ``pip install 'agent-sidecar[tracing]'``.
        tls_cert_file: PEM certificate chain to serve TLS with (with ``tls_key_file``).
            The files are reread when they change; calls in flight keep their
            connection. Default none: plaintext.
        tls_key_file: PEM private key of ``tls_cert_file``.
        tls_client_ca_file: PEM CA bundle the caller's certificate must chain to: with
            it, only a caller holding such a certificate (the sidecar, with
            ``tool_servers[].tls.cert_file``) gets through (mutual TLS).
        token: A bearer token every tool call must carry (the sidecar sends it with
            ``tool_servers[].token_env`` or ``token_file``); health and reflection stay
            open. Default none. On the command line: ``--token-env`` or ``--token-file``.
        unix_socket: The path of a Unix domain socket to listen on besides the TCP port,
            with the same TLS and token; the sidecar dials it as
            ``tool_servers[].address: unix:PATH``. Created mode 0660; a socket left by a
            process that died is replaced, one a live process listens on is an error.
            Default none. On the command line: ``--unix PATH``.
        identity_keys_file: The sidecar's public keys (a JWKS, as ``agent-sidecar identity
            jwks`` prints it, or a PEM public key): every call's signed identity
            assertion is verified before its tool runs, and a call whose assertion fails
            (tampered with, expired, for another server, contradicted by the plain
            metadata) ends UNAUTHENTICATED. Reread within a second of a change. Default
            none: handlers see the plain, unverified identity. On the command line:
            ``--identity-keys FILE``.
        identity_keys_from: The sidecar to fetch those keys from instead (its gRPC
            address, ``HOST:PORT`` or ``unix:PATH``; its ``IdentityKeysService``), in the
            background from the start and again as they age (docs/tool-servers.md, "The
            signed assertion"). Plaintext to this machine only; any other address is
            dialled with TLS. On the command line: ``--identity-keys-from TARGET``.
        identity_keys_ca: The CA bundle that TLS to ``identity_keys_from`` is verified
            against; none: the system's roots. On the command line:
            ``--identity-keys-ca FILE``.
        identity_audience: This server's name in the sidecar's configuration
            (``tool_servers[].name``); needed with ``identity_keys_file`` or
            ``identity_keys_from``. On the command line: ``--identity-audience NAME``.
        identity_issuer: The issuer the sidecar signs as (``auth.tool_assertion.issuer``).
            Default ``agent-sidecar``. On the command line: ``--identity-issuer NAME``.
        identity_required: Refuse calls that carry no assertion (UNAUTHENTICATED). Default
            False: they run, with the plain identity (``ctx.identity.verified`` False).
            On the command line: ``--require-identity``.
        identity_leeway: Seconds the clocks of the sidecar and this server may be apart
            when an assertion's lifetime is checked. Default 10.
    """

    host: str = "127.0.0.1"
    port: int = 0
    grace: float = 10.0
    latency: float = 0.0
    tool_latency: Mapping[str, float] = field(default_factory=dict)
    sync_workers: int = 32
    handle_signals: bool = True
    otlp_endpoint: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_client_ca_file: str | None = None
    token: str | None = field(default=None, repr=False)
    unix_socket: str | None = None
    identity_keys_file: str | None = None
    identity_keys_from: str | None = None
    identity_keys_ca: str | None = None
    identity_audience: str | None = None
    identity_issuer: str = "agent-sidecar"
    identity_required: bool = False
    identity_leeway: float = 10.0

    def __post_init__(self) -> None:
        if self.unix_socket is not None and (
            not self.unix_socket or self.unix_socket.startswith("unix:")
        ):
            raise ValueError("unix_socket is a path, without the unix: prefix callers dial")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError("tls_client_ca_file needs tls_cert_file and tls_key_file")
        if self.token is not None and not self.token.strip():
            raise ValueError("token is empty")
        if self.identity_keys_file is not None and self.identity_keys_from is not None:
            raise ValueError("identity_keys_file and identity_keys_from: give one of them")
        keys = self.identity_keys_file or self.identity_keys_from
        if keys is not None and not self.identity_audience:
            raise ValueError(
                "identity_keys_file needs identity_audience: this server's name in the "
                "sidecar's configuration (tool_servers[].name)"
            )
        if self.identity_keys_ca is not None and self.identity_keys_from is None:
            raise ValueError("identity_keys_ca needs identity_keys_from to dial")
        if self.identity_required and keys is None:
            raise ValueError("identity_required needs identity_keys_file to verify with")
        if self.identity_leeway < 0:
            raise ValueError("identity_leeway is negative")

    def latency_for(self, tool_name: str) -> float:
        """The simulated latency of one tool, in seconds."""
        return self.tool_latency.get(tool_name, self.latency)


def parse_serve_args(
    prog: str, argv: Sequence[str] | None, tool_names: Sequence[str]
) -> tuple[ServeOptions, str, str]:
    """Parse a tool server's command line into options, a log level and a log format.

    Exits with a usage message (argparse's behaviour) on a bad flag, including
    a ``--latency`` naming a tool the server does not offer.
    """
    parser = argparse.ArgumentParser(prog=prog, description=f"Serve the {prog} tools over gRPC.")
    parser.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default 0: any free port)")
    parser.add_argument(
        "--grace", type=float, default=10.0, help="seconds to finish calls on SIGTERM (default 10)"
    )
    parser.add_argument(
        "--latency-ms", type=float, default=0.0, help="simulated latency added to every tool call"
    )
    parser.add_argument(
        "--latency",
        action="append",
        default=[],
        metavar="TOOL=MS",
        help="simulated latency for one tool (repeatable)",
    )
    parser.add_argument("--sync-workers", type=int, default=32, help="threads for sync tools")
    parser.add_argument(
        "--otlp-endpoint",
        metavar="HOST:PORT",
        help="trace each call and export the spans to this OTLP/gRPC receiver",
    )
    parser.add_argument("--tls-cert", metavar="FILE", help="serve TLS with this PEM certificate")
    parser.add_argument("--tls-key", metavar="FILE", help="the PEM private key of --tls-cert")
    parser.add_argument(
        "--tls-client-ca",
        metavar="FILE",
        help="require callers' certificates to chain to this PEM CA (mutual TLS)",
    )
    parser.add_argument(
        "--unix",
        metavar="PATH",
        help="also listen on this Unix domain socket (callers dial unix:PATH)",
    )
    tokens = parser.add_mutually_exclusive_group()
    tokens.add_argument(
        "--token-env", metavar="NAME", help="require the bearer token held by this variable"
    )
    tokens.add_argument(
        "--token-file", metavar="FILE", help="require the bearer token held in this file"
    )
    parser.add_argument(
        "--identity-keys",
        metavar="FILE",
        help="verify each call's identity assertion with the sidecar's public keys "
        "(a JWKS from 'agent-sidecar identity jwks', or a PEM public key)",
    )
    parser.add_argument(
        "--identity-keys-from",
        metavar="TARGET",
        help="fetch those keys from the sidecar at TARGET (its gRPC address) instead, and "
        "keep them fresh",
    )
    parser.add_argument(
        "--identity-keys-ca",
        metavar="FILE",
        help="CA bundle for TLS to --identity-keys-from (default: the system's roots)",
    )
    parser.add_argument(
        "--identity-audience",
        metavar="NAME",
        help="this server's name in the sidecar's configuration (tool_servers[].name)",
    )
    parser.add_argument(
        "--identity-issuer",
        metavar="NAME",
        default="agent-sidecar",
        help="the issuer the sidecar signs as (default agent-sidecar)",
    )
    parser.add_argument(
        "--require-identity",
        action="store_true",
        help="refuse calls without a verified identity assertion",
    )
    parser.add_argument(
        "--identity-leeway",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="clock difference allowed when checking an assertion's lifetime (default 10)",
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LEVELS,
        default="INFO",
        help="stderr log level (default INFO)",
    )
    parser.add_argument(
        "--log-format", choices=FORMATS, default="text", help="text (default) or json lines"
    )
    args = parser.parse_args(argv)
    per_tool: dict[str, float] = {}
    for item in args.latency:
        tool, sep, millis = item.partition("=")
        if not sep or tool not in tool_names:
            parser.error(
                f"--latency {item!r}: expected TOOL=MS with TOOL one of {list(tool_names)}"
            )
        try:
            per_tool[tool] = float(millis) / 1000
        except ValueError:
            parser.error(f"--latency {item!r}: {millis!r} is not a number of milliseconds")
    token = None
    if args.token_env:
        token = os.environ.get(args.token_env, "").strip()
        if not token:
            parser.error(f"--token-env {args.token_env}: the variable is unset or empty")
    elif args.token_file:
        try:
            token = Path(args.token_file).read_text().strip()
        except OSError as exc:
            parser.error(f"--token-file {args.token_file}: {exc.strerror}")
        if not token:
            parser.error(f"--token-file {args.token_file}: the file is empty")
    try:
        options = ServeOptions(
            host=args.host,
            port=args.port,
            grace=args.grace,
            latency=args.latency_ms / 1000,
            tool_latency=per_tool,
            sync_workers=args.sync_workers,
            otlp_endpoint=args.otlp_endpoint,
            tls_cert_file=args.tls_cert,
            tls_key_file=args.tls_key,
            tls_client_ca_file=args.tls_client_ca,
            token=token,
            unix_socket=args.unix,
            identity_keys_file=args.identity_keys,
            identity_keys_from=args.identity_keys_from,
            identity_keys_ca=args.identity_keys_ca,
            identity_audience=args.identity_audience,
            identity_issuer=args.identity_issuer,
            identity_required=args.require_identity,
            identity_leeway=args.identity_leeway,
        )
    except ValueError as exc:
        parser.error(
            str(exc)
            .replace("tls_cert_file", "--tls-cert")
            .replace("tls_key_file", "--tls-key")
            .replace("tls_client_ca_file", "--tls-client-ca")
            .replace("unix_socket", "--unix")
            .replace("identity_keys_file", "--identity-keys")
            .replace("identity_keys_from", "--identity-keys-from")
            .replace("identity_keys_ca", "--identity-keys-ca")
            .replace("identity_audience", "--identity-audience")
            .replace("identity_required", "--require-identity")
            .replace("identity_leeway", "--identity-leeway")
        )
    return options, str(args.log_level), str(args.log_format)
