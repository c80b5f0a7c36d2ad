"""``agent-sidecar``: serve, run the LLM simulator, run the demo, print a latency bill, or
publish the key tool servers verify the sidecar's identity assertions with.

Configuration is read here, once, validated, and passed down; nothing below this module
reads the environment.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from agentsidecar.logs import FORMATS, LEVELS, configure_logging
from sidecar.telemetry import own_version


def _run(main: Coroutine[Any, Any, Any]) -> Any:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on every platform we ship
        return asyncio.run(main)
    return uvloop.run(main)


def _serve(args: argparse.Namespace) -> int:
    from sidecar.commands.serve import serve
    from sidecar.config import SidecarConfig, load_config, parse_config
    from sidecar.errors import ConfigError, TelemetryUnavailable

    def read() -> SidecarConfig:
        config = load_config(args.config, os.environ) if args.config else parse_config({})
        if args.port is not None:
            config = config.model_copy(
                update={"server": config.server.model_copy(update={"port": args.port})}
            )
        return config

    try:
        config = read()
    except ConfigError as exc:
        print(f"agent-sidecar: {exc}", file=sys.stderr)
        return 2
    from sidecar.errors import SessionStoreError, StartupError

    try:
        api_key, dsn, tokens, redactor = _secrets(config)
        _run(
            serve(
                config,
                api_key=api_key,
                postgres_dsn=dsn,
                redactor=redactor,
                environ=tokens,
                config_path=args.config,
                reread=read,
            )
        )
    except TelemetryUnavailable as exc:
        print(f"agent-sidecar: {exc}", file=sys.stderr)
        return 2
    except SessionStoreError as exc:  # unreachable or in use: may pass on a retry
        print(f"agent-sidecar: {exc}", file=sys.stderr)
        return 1
    except StartupError as exc:  # the configuration asks for what cannot be
        print(f"agent-sidecar: {exc}", file=sys.stderr)
        return 2
    return 0


def _secrets(config: Any) -> tuple[str | None, str | None, dict[str, str], Any]:
    """The model key, the store's connection string, the secrets the configuration names
    (by variable), and a redactor of them all, installed on every log handler."""
    from sidecar.config import (
        dsn_password,
        resolve_api_key,
        resolve_postgres_dsn,
        secret_environment,
    )
    from sidecar.llm.transport import proxy_secrets
    from sidecar.redaction import LogRedaction, Redactor

    api_key = resolve_api_key(config.model, os.environ)
    dsn = resolve_postgres_dsn(config.sessions.postgres, os.environ)
    tokens = secret_environment(config, os.environ)
    secrets = [api_key, dsn_password(dsn), *tokens.values(), *proxy_secrets(os.environ)]
    redactor = Redactor(secrets, config.security.redact)
    for handler in logging.getLogger().handlers:
        handler.addFilter(LogRedaction(redactor))  # no secret in any log line
    return api_key, dsn, tokens, redactor


def _mcp_stdio(args: argparse.Namespace) -> int:
    from sidecar.commands.mcp_stdio import mcp_stdio
    from sidecar.config import load_config, parse_config
    from sidecar.errors import ConfigError, SessionStoreError, StartupError, Unauthenticated

    try:
        config = load_config(args.config, os.environ) if args.config else parse_config({})
    except ConfigError as exc:
        print(f"agent-sidecar: {exc}", file=sys.stderr)
        return 2
    token = os.environ.get(args.token_env, "") if args.token_env else None
    try:
        api_key, dsn, tokens, redactor = _secrets(config)
        _run(
            mcp_stdio(
                config,
                api_key=api_key,
                postgres_dsn=dsn,
                redactor=redactor,
                environ=tokens,
                token=token,
            )
        )
    except (StartupError, Unauthenticated) as exc:
        print(f"agent-sidecar mcp-stdio: {exc}", file=sys.stderr)
        return 2
    except SessionStoreError as exc:
        print(f"agent-sidecar mcp-stdio: {exc}", file=sys.stderr)
        return 1
    return 0


def _check(args: argparse.Namespace) -> int:
    from sidecar.commands.check import check_config
    from sidecar.config import load_config, resolve_api_key, secret_environment
    from sidecar.errors import ConfigError

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"refused: {exc}")
        return 2
    environ = secret_environment(config, os.environ)
    api_key = resolve_api_key(config.model, os.environ)
    found = _run(check_config(config, environ, api_key, offline=args.offline))
    for line in found.lines():
        print(line)
    verdict = {0: "ok", 1: "starts, with problems", 2: "would not start"}[found.exit_code]
    print(f"{args.config}: {verdict}")
    return int(found.exit_code)


def _llm_sim(args: argparse.Namespace) -> int:
    from llmsim import serve_from_args

    _run(serve_from_args(args))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from sidecar.commands.demo import run_demo

    return int(_run(run_demo(json_output=args.json)))


def _report(args: argparse.Namespace) -> int:
    from sidecar.commands.report import bills, load, render

    try:
        found = bills(load(args.logs))
    except (OSError, ValueError) as exc:
        print(f"agent-sidecar report: {exc}", file=sys.stderr)
        return 2
    if not found:
        print("agent-sidecar report: the logs hold no runs", file=sys.stderr)
        return 1
    print(render(found), end="")
    if args.no_png:
        return 0
    try:
        from sidecar.commands.chart import write_chart
    except ImportError:
        print(
            "agent-sidecar report: the chart needs matplotlib: "
            "pip install 'agent-sidecar[report]' (or pass --no-png)",
            file=sys.stderr,
        )
        return 2
    png = args.png or str(Path(args.logs[0]).with_suffix(".png"))
    write_chart(found, png)
    print(f"chart: {png}")
    return 0


def _identity_jwks(args: argparse.Namespace) -> int:
    import json

    from sidecar.config import load_config
    from sidecar.errors import ConfigError, StartupError
    from sidecar.security.tool_identity import AssertionSigner

    try:
        assertion = load_config(args.config).auth.tool_assertion
        if assertion is None:
            raise ConfigError(
                f"{args.config} sets no auth.tool_assertion: the sidecar signs no assertion"
            )
        jwks = AssertionSigner(assertion).jwks()
    except (ConfigError, StartupError) as exc:
        print(f"agent-sidecar identity jwks: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(jwks, indent=2))
    return 0


def _level(text: str) -> str:
    if text.upper() not in LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a log level: {', '.join(LEVELS)}")
    return text.upper()


def _logging_flags(defaults: bool) -> argparse.ArgumentParser:
    """``--log-level`` and ``--log-format``, accepted before or after the command."""
    flags = argparse.ArgumentParser(add_help=False)
    unset = argparse.SUPPRESS
    flags.add_argument(
        "--log-level",
        type=_level,
        default="WARNING" if defaults else unset,
        help="DEBUG, INFO, WARNING (default), ERROR or CRITICAL",
    )
    flags.add_argument(
        "--log-format",
        choices=FORMATS,
        default="text" if defaults else unset,
        help="text (default) or json: one JSON object per line, for log collectors",
    )
    return flags


def _no_simulator(args: argparse.Namespace) -> int:
    print(
        "agent-sidecar: the LLM simulator (the llmsim package) is not installed here",
        file=sys.stderr,
    )
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="agent-sidecar", description=__doc__, parents=[_logging_flags(defaults=True)]
    )
    parser.add_argument("--version", action="version", version=f"agent-sidecar {own_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    logging_flags = _logging_flags(defaults=False)

    serve = commands.add_parser(
        "serve", help="serve AgentService over gRPC", parents=[logging_flags]
    )
    serve.add_argument("--config", help="YAML configuration file (default: built-in defaults)")
    serve.add_argument("--port", type=int, help="override server.port (0 picks a free port)")
    serve.set_defaults(handler=_serve)

    stdio = commands.add_parser(
        "mcp-stdio",
        help="serve the MCP endpoint on stdin and stdout, for one desktop host",
        parents=[logging_flags],
    )
    stdio.add_argument("--config", help="YAML configuration file (default: built-in defaults)")
    stdio.add_argument(
        "--token-env",
        help="environment variable holding the caller's bearer token (with auth.principals)",
    )
    stdio.set_defaults(handler=_mcp_stdio)

    check = commands.add_parser(
        "check",
        help="check a configuration as serve would at start, and find its tools",
        parents=[logging_flags],
    )
    check.add_argument("--config", required=True, help="YAML configuration file")
    check.add_argument(
        "--offline", action="store_true", help="do not ask the tool servers for their tools"
    )
    check.set_defaults(handler=_check)

    sim = commands.add_parser(
        "llm-sim", help="run the built-in LLM simulator (not a model)", parents=[logging_flags]
    )
    try:
        from llmsim import add_arguments
    except ImportError:  # a production image without the simulator
        sim.set_defaults(handler=_no_simulator)
    else:
        add_arguments(sim)
        sim.set_defaults(handler=_llm_sim)

    demo = commands.add_parser(
        "demo", help="run the founding and pre-sales scenarios", parents=[logging_flags]
    )
    demo.add_argument("--json", action="store_true", help="print each run's result as JSON")
    demo.set_defaults(handler=_demo)

    report = commands.add_parser(
        "report",
        help="print the latency bill of timeline logs and chart it (PNG)",
        parents=[logging_flags],
    )
    report.add_argument("logs", nargs="+", metavar="TIMELINE_LOG", help="timeline log (JSONL)")
    report.add_argument("--png", help="chart path (default: the first log's, ending .png)")
    report.add_argument("--no-png", action="store_true", help="print the bill only")
    report.set_defaults(handler=_report)

    identity = commands.add_parser(
        "identity",
        help="the identity assertions tool servers verify (auth.tool_assertion)",
        parents=[logging_flags],
    )
    identity_commands = identity.add_subparsers(dest="identity_command", required=True)
    jwks = identity_commands.add_parser(
        "jwks",
        help="print the JWKS (public keys) tool servers verify the assertions with",
        parents=[logging_flags],
    )
    jwks.add_argument("--config", required=True, help="the sidecar's YAML configuration file")
    jwks.set_defaults(handler=_identity_jwks)

    args = parser.parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    handler = args.handler
    return int(handler(args))


if __name__ == "__main__":
    sys.exit(main())
