"""``agent-sidecar``: serve, run the LLM simulator, run the demo, print a latency bill,
publish the key tool servers verify the sidecar's identity assertions with, export
recorded turns, replay them against a configuration, or report on shadow variants.

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

_DESCRIPTION = """\
A gRPC sidecar that runs an LLM agent's loop and calls its tools on tool servers.

  agent-sidecar serve --config sidecar.yaml     serve (no model key: the built-in simulator)
  agent-sidecar check --config sidecar.yaml     check a configuration before deploying it
  agent-sidecar demo                            a scenario end to end, on the simulator"""

_EPILOG = """\
Each command has its own --help. Logs go to stderr; --log-level and --log-format (or
AGENT_SIDECAR_LOG_LEVEL and AGENT_SIDECAR_LOG_FORMAT) set them. Documentation: docs/ in
the source, starting with docs/operations.md and docs/configuration.md."""


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
        # As serve reads it: ${NAME} in the file from this environment.
        config = load_config(args.config, os.environ)
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
        assertion = load_config(args.config, os.environ).auth.tool_assertion
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


def _comparison_outputs(
    args: argparse.Namespace, reports: list[tuple[str, Any, Any]], about: dict[str, Any]
) -> int:
    """Print each (title, comparisons, summary); write the JSON and the plot when asked;
    exit 1 when any summary breached a threshold."""
    import json

    from sidecar.commands.comparison_report import render, report_document, write_plot

    for title, comparisons, summary in reports:
        print(render(comparisons, summary, title=title))
    if args.json:
        documents = [report_document(c, s, title=t, **about) for t, c, s in reports]
        Path(args.json).write_text(
            json.dumps(documents[0] if len(documents) == 1 else documents, indent=2) + "\n"
        )
        print(f"report: {args.json}")
    if args.plot:
        try:
            for i, (title, comparisons, _) in enumerate(reports):
                path = args.plot if i == 0 else f"{Path(args.plot).with_suffix('')}-{i + 1}.png"
                write_plot(comparisons, path, title=title)
                print(f"plot: {path}")
        except ImportError:
            print(
                "agent-sidecar: the plot needs matplotlib: pip install 'agent-sidecar[report]'",
                file=sys.stderr,
            )
            return 2
    return 0 if all(summary.passed for _, _, summary in reports) else 1


def _replay(args: argparse.Namespace) -> int:
    from sidecar.commands.replay import replay
    from sidecar.config import load_config
    from sidecar.errors import ConfigError, RecordingError, StartupError
    from sidecar.recording.compare import summarize
    from sidecar.recording.format import read_turns

    try:
        config = load_config(args.config, os.environ)
        turns = [t for t in read_turns(args.recordings) if t.shadow_of is None]
    except (ConfigError, RecordingError) as exc:
        print(f"agent-sidecar replay: {exc}", file=sys.stderr)
        return 2
    if not turns:
        print("agent-sidecar replay: the recording holds no turns", file=sys.stderr)
        return 2
    api_key, _dsn, tokens, redactor = _secrets(config)
    try:
        done = _run(
            replay(
                config,
                turns,
                api_key=api_key,
                redactor=redactor,
                environ=tokens,
                profile=args.profile,
                variant=args.variant,
                live=args.live_read_only,
                timeout=args.timeout,
            )
        )
    except (ConfigError, StartupError) as exc:
        print(f"agent-sidecar replay: {exc}", file=sys.stderr)
        return 2
    comparisons = [d.comparison for d in done]
    summary = summarize(comparisons, config.replay.fail)
    title = f"replay of {len(turns)} recorded turn(s) on {args.config}"
    about = {"config": args.config, "recordings": args.recordings}
    return _comparison_outputs(args, [(title, comparisons, summary)], about)


def _recording_source(args: argparse.Namespace) -> str:
    from sidecar.config import load_config
    from sidecar.errors import ConfigError

    if args.dir:
        return str(args.dir)
    path = load_config(args.config, os.environ).recording.path
    if path is None:
        raise ConfigError(f"{args.config} sets no recording.path: pass --dir")
    return path


def _record_export(args: argparse.Namespace) -> int:
    from sidecar.commands.recordings import parse_time
    from sidecar.errors import ConfigError, RecordingError
    from sidecar.recording.files import TurnFilter, export, export_to

    try:
        source = _recording_source(args)
        keep = TurnFilter(
            session_id=args.session,
            profile=args.profile,
            variant=args.variant,
            since=parse_time(args.since) if args.since else None,
            until=parse_time(args.until) if args.until else None,
            shadows=args.shadows,
        )
        if args.output:
            count = export_to(source, keep, Path(args.output))
        else:
            count = 0
            for line in export(source, keep):
                sys.stdout.buffer.write(line)
                count += 1
    except (ConfigError, RecordingError, ValueError, OSError) as exc:
        print(f"agent-sidecar record export: {exc}", file=sys.stderr)
        return 2
    print(f"exported {count} turn(s) from {source}", file=sys.stderr)
    return 0


def _shadow_report(args: argparse.Namespace) -> int:
    from sidecar.commands.recordings import parse_time, shadow_comparisons
    from sidecar.config import load_config
    from sidecar.errors import ConfigError, RecordingError
    from sidecar.recording.compare import summarize
    from sidecar.recording.files import TurnFilter
    from sidecar.recording.format import read_turns

    try:
        config = load_config(args.config, os.environ)
        source = _recording_source(args)
        keep = TurnFilter(
            profile=args.profile,
            since=parse_time(args.since) if args.since else None,
            until=parse_time(args.until) if args.until else None,
            shadows=True,
        )
        turns = [t for t in read_turns([source]) if keep.keeps(t)]
    except (ConfigError, RecordingError, ValueError) as exc:
        print(f"agent-sidecar shadow report: {exc}", file=sys.stderr)
        return 2
    groups = shadow_comparisons(turns, config)
    reports = [
        (
            f"shadow variant {variant} of profile {profile}: {len(found)} run(s) compared "
            "with the live runs they copied",
            found,
            summarize(found, config.replay.fail),
        )
        for (profile, variant), found in sorted(groups.items())
        if args.variant is None or variant == args.variant
    ]
    if not reports:
        print(f"agent-sidecar shadow report: no shadow runs in {source}", file=sys.stderr)
        return 1
    return _comparison_outputs(args, reports, {"config": args.config, "recordings": [source]})


def _level(text: str) -> str:
    if text.upper() not in LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a log level: {', '.join(LEVELS)}")
    return text.upper()


def _logging_flags(defaults: bool) -> argparse.ArgumentParser:
    """``--log-level`` and ``--log-format``, accepted before or after the command; their
    defaults come from ``AGENT_SIDECAR_LOG_LEVEL`` and ``AGENT_SIDECAR_LOG_FORMAT`` (a
    container's environment), else WARNING and text."""
    flags = argparse.ArgumentParser(add_help=False)
    unset = argparse.SUPPRESS
    level = (os.environ.get("AGENT_SIDECAR_LOG_LEVEL") or "WARNING").upper()
    form = os.environ.get("AGENT_SIDECAR_LOG_FORMAT") or "text"
    if level not in LEVELS or form not in FORMATS:
        print(
            f"agent-sidecar: AGENT_SIDECAR_LOG_LEVEL must be one of {', '.join(LEVELS)} and "
            f"AGENT_SIDECAR_LOG_FORMAT one of {', '.join(FORMATS)}",
            file=sys.stderr,
        )
        sys.exit(2)
    flags.add_argument(
        "--log-level",
        type=_level,
        default=level if defaults else unset,
        help="DEBUG, INFO, WARNING (default; AGENT_SIDECAR_LOG_LEVEL), ERROR or CRITICAL",
    )
    flags.add_argument(
        "--log-format",
        choices=FORMATS,
        default=form if defaults else unset,
        help="text (default; AGENT_SIDECAR_LOG_FORMAT) or json: one JSON object per line, "
        "for log collectors",
    )
    return flags


def _no_simulator(args: argparse.Namespace) -> int:
    print(
        "agent-sidecar: the LLM simulator (the llmsim package) is not installed here",
        file=sys.stderr,
    )
    return 2


def _comparison_flags(command: argparse.ArgumentParser) -> None:
    command.add_argument("--json", metavar="FILE", help="write the report as JSON too")
    command.add_argument("--plot", metavar="PNG", help="plot each turn (needs matplotlib)")


def _recording_commands(commands: Any, logging_flags: argparse.ArgumentParser) -> None:
    """``replay``, ``record export`` and ``shadow report``."""
    replay = commands.add_parser(
        "replay",
        help="run recorded turns again against a configuration and compare (exit 1: "
        "a regression past replay.fail)",
        parents=[logging_flags],
    )
    replay.add_argument(
        "recordings", nargs="+", metavar="RECORDING", help="a recording file or directory"
    )
    replay.add_argument("--config", required=True, help="the configuration to replay on")
    replay.add_argument("--profile", help="run every turn on this profile (default: its own)")
    replay.add_argument("--variant", help="run on this variant (default: the stable one)")
    replay.add_argument(
        "--live-read-only",
        action="store_true",
        help="run read-only tools on the configured tool servers (others: the recording)",
    )
    replay.add_argument(
        "--timeout", type=float, default=120.0, help="seconds a turn may take (default 120)"
    )
    _comparison_flags(replay)
    replay.set_defaults(handler=_replay)

    record = commands.add_parser("record", help="recorded turns", parents=[logging_flags])
    record_commands = record.add_subparsers(dest="record_command", required=True)
    export = record_commands.add_parser(
        "export",
        help="write the recorded turns a filter keeps as one recording (JSON lines)",
        parents=[logging_flags],
    )
    source = export.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="the sidecar's configuration (its recording.path)")
    source.add_argument("--dir", help="a recording directory or file")
    export.add_argument("--session", help="one session's turns")
    export.add_argument("--profile", help="one profile's turns")
    export.add_argument("--variant", help="one variant's turns")
    export.add_argument("--since", help="turns started at or after (ISO 8601 or epoch seconds)")
    export.add_argument("--until", help="turns started before (ISO 8601 or epoch seconds)")
    export.add_argument(
        "--shadows", action="store_true", help="keep the runs of shadow variants too"
    )
    export.add_argument("-o", "--output", help="the file to write (default: standard output)")
    export.set_defaults(handler=_record_export)

    shadow = commands.add_parser("shadow", help="shadow variants", parents=[logging_flags])
    shadow_commands = shadow.add_subparsers(dest="shadow_command", required=True)
    report = shadow_commands.add_parser(
        "report",
        help="compare shadow variants' runs with the live runs they copied (exit 1: a "
        "regression past replay.fail)",
        parents=[logging_flags],
    )
    report.add_argument("--config", required=True, help="the sidecar's configuration")
    report.add_argument("--dir", help="the recordings (default: its recording.path)")
    report.add_argument("--profile", help="one profile's shadow runs")
    report.add_argument("--variant", help="one shadow variant")
    report.add_argument("--since", help="runs started at or after (ISO 8601 or epoch seconds)")
    report.add_argument("--until", help="runs started before (ISO 8601 or epoch seconds)")
    _comparison_flags(report)
    report.set_defaults(handler=_shadow_report)


def _variants(args: argparse.Namespace) -> int:
    from sidecar.commands.variants import Dial, Request, parse_weights, variants

    token = None
    if args.token_env:
        token = os.environ.get(args.token_env, "").strip()
        if not token:
            print(f"agent-sidecar variants: {args.token_env} is unset or empty", file=sys.stderr)
            return 2
    elif args.token_file:
        try:
            token = Path(args.token_file).read_text().strip()
        except OSError as exc:
            print(f"agent-sidecar variants: {args.token_file}: {exc.strerror}", file=sys.stderr)
            return 2
    try:
        weights = parse_weights(args.weights) if args.action == "set" else None
    except ValueError as exc:
        print(f"agent-sidecar variants set: {exc}", file=sys.stderr)
        return 2
    dial = Dial(
        address=args.address,
        token=token,
        tls=args.tls,
        ca_file=args.ca_file,
        cert_file=args.cert_file,
        key_file=args.key_file,
        server_name=args.server_name,
    )
    request = Request(
        action=args.action,
        profile=getattr(args, "profile", None) or "",
        variant=getattr(args, "variant", ""),
        weights=weights,
        reason=getattr(args, "reason", ""),
    )
    return int(_run(variants(dial, request, as_json=args.json)))


def _variants_command(commands: Any, logging_flags: argparse.ArgumentParser) -> None:
    dial = argparse.ArgumentParser(add_help=False)
    dial.add_argument(
        "--address",
        default=os.environ.get("AGENT_SIDECAR_ADDRESS", "127.0.0.1:50051"),
        help="the sidecar (default: $AGENT_SIDECAR_ADDRESS or 127.0.0.1:50051)",
    )
    tokens = dial.add_mutually_exclusive_group()
    tokens.add_argument("--token-env", help="environment variable holding an operator's token")
    tokens.add_argument("--token-file", help="file holding an operator's token")
    dial.add_argument("--tls", action="store_true", help="dial TLS")
    dial.add_argument("--ca-file", help="CA bundle the sidecar's certificate chains to (--tls)")
    dial.add_argument("--cert-file", help="client certificate (mutual TLS), with --key-file")
    dial.add_argument("--key-file", help="its private key")
    dial.add_argument("--server-name", help="name to check the sidecar's certificate against")
    dial.add_argument("--json", action="store_true", help="print the answer as JSON")
    reason = argparse.ArgumentParser(add_help=False)
    reason.add_argument("--reason", default="", help="why, for the audit record")
    parents = [logging_flags, dial]
    variants = commands.add_parser(
        "variants",
        help="see and change a serving sidecar's canaries (VariantService)",
        description="See each profile's variants (state, weights, figures) and change "
        "them on a serving sidecar: the change is kept in its session store, so every "
        "replica sharing the store applies it. Needs an operator principal "
        "(auth.principals[].operator) when the sidecar authenticates callers.",
        parents=[logging_flags],
    )
    actions = variants.add_subparsers(dest="action", required=True)
    listed = actions.add_parser("list", help="each profile's variants", parents=parents)
    listed.add_argument("profile", nargs="?", help="one profile (default: every one)")
    weights = actions.add_parser(
        "set", help="set weights of new sessions", parents=[*parents, reason]
    )
    weights.add_argument("profile")
    weights.add_argument("weights", nargs="+", metavar="NAME=WEIGHT")
    promote = actions.add_parser(
        "promote", help="give one variant every new session", parents=[*parents, reason]
    )
    promote.add_argument("profile")
    promote.add_argument("variant")
    rollback = actions.add_parser(
        "rollback", help="take a canary out of rotation", parents=[*parents, reason]
    )
    rollback.add_argument("profile")
    rollback.add_argument("variant")
    reset = actions.add_parser(
        "reset",
        help="drop the operator's change: the configured weights apply",
        parents=[*parents, reason],
    )
    reset.add_argument("profile")
    variants.set_defaults(handler=_variants)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="agent-sidecar",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_logging_flags(defaults=True)],
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

    _recording_commands(commands, logging_flags)
    _variants_command(commands, logging_flags)

    args = parser.parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    handler = args.handler
    return int(handler(args))


if __name__ == "__main__":
    sys.exit(main())
