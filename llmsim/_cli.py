"""The simulator's command line: ``python -m llmsim`` (and ``agent-sidecar llm-sim``)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import math
import signal
import sys
from collections.abc import Coroutine
from typing import Any

from llmsim._errors import SimulatorError
from llmsim._options import SimulatorOptions
from llmsim._scenario import Scenario
from llmsim._server import LLMSimulator

__all__ = ["add_arguments", "main", "options_from_args", "serve_from_args"]

logger = logging.getLogger("llmsim")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the simulator's flags (``--port``, ``--scenario``, latency, chaos) to ``parser``."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    parser.add_argument(
        "--port", type=int, default=8090, help="port to bind, 0 for any (default %(default)s)"
    )
    parser.add_argument("--scenario", metavar="FILE", help="scripted rules, YAML or JSON")
    parser.add_argument(
        "--recording",
        metavar="FILE",
        help="answer as an agent-sidecar recording's model did (before --scenario's rules)",
    )
    parser.add_argument(
        "--ttft-ms", type=_non_negative, default=0.0, help="delay before the first token"
    )
    parser.add_argument(
        "--token-ms", type=_non_negative, default=0.0, help="delay per streamed chunk"
    )
    parser.add_argument(
        "--prefill-ms-per-1k",
        type=_non_negative,
        default=0.0,
        help="delay per 1000 uncached prompt tokens, added to the first token",
    )
    parser.add_argument(
        "--jitter-ms", type=_non_negative, default=0.0, help="uniform ± jitter on each delay"
    )
    for status in ("429", "500", "hang"):
        parser.add_argument(
            f"--fault-rate-{status}",
            type=_probability,
            default=0.0,
            metavar="P",
            help=f"probability of a chaos {status} fault per request",
        )
    parser.add_argument("--seed", type=int, default=None, help="seed for chaos and jitter")
    parser.add_argument(
        "--hang-cap-s", type=_non_negative, default=300.0, help="longest a hang lasts"
    )
    parser.add_argument(
        "--ratelimit-requests", type=int, default=100_000, help="requests per 60 s window"
    )
    parser.add_argument(
        "--ratelimit-tokens", type=int, default=50_000_000, help="tokens per 60 s window"
    )
    parser.add_argument(
        "--ratelimit-window-s",
        type=_positive,
        default=60.0,
        help="length of the rate-limit windows in seconds (default %(default)s)",
    )
    parser.add_argument(
        "--ratelimit-output-tokens",
        type=int,
        default=None,
        help="output tokens per window, enforced (with --enforce-ratelimits), not reported",
    )
    parser.add_argument(
        "--serve-model",
        action="append",
        default=[],
        metavar="NAME",
        help="serve this model id too, besides Groq's current ones (repeatable)",
    )
    parser.add_argument(
        "--flex-full",
        action="store_true",
        help="answer every service_tier: flex request 498 capacity_exceeded",
    )
    parser.add_argument(
        "--enforce-ratelimits",
        action="store_true",
        help="answer 429 once a window's budget is spent (default: report only)",
    )
    parser.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate")
    parser.add_argument("--tls-key", metavar="PEM", help="the key of --tls-cert")
    parser.add_argument(
        "--tls-client-ca",
        metavar="PEM",
        help="require client certificates signed by these CAs (mutual TLS)",
    )


def options_from_args(args: argparse.Namespace) -> SimulatorOptions:
    """Build options from parsed flags, loading the scenario and recording files named.

    Raises:
        ScenarioError: the scenario or the recording cannot be read or is malformed.
    """
    scenario = Scenario.load(args.scenario) if args.scenario else None
    if args.recording:
        recorded = Scenario.from_recording(args.recording)
        scenario = recorded.then(scenario) if scenario is not None else recorded
    return SimulatorOptions(
        ttft_ms=args.ttft_ms,
        token_ms=args.token_ms,
        prefill_ms_per_1k=args.prefill_ms_per_1k,
        jitter_ms=args.jitter_ms,
        scenario=scenario,
        fault_rate_429=args.fault_rate_429,
        fault_rate_500=args.fault_rate_500,
        fault_rate_hang=args.fault_rate_hang,
        seed=args.seed,
        hang_cap_s=args.hang_cap_s,
        ratelimit_requests=args.ratelimit_requests,
        ratelimit_tokens=args.ratelimit_tokens,
        ratelimit_window_s=args.ratelimit_window_s,
        enforce_ratelimits=args.enforce_ratelimits,
        extra_models=tuple(args.serve_model),
        ratelimit_output_tokens=args.ratelimit_output_tokens,
        flex_full=args.flex_full,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
    )


async def serve_from_args(args: argparse.Namespace) -> None:
    """Run the simulator from parsed flags until SIGTERM or SIGINT.

    Prints ``listening on HOST:PORT`` to stdout once it accepts connections.

    Raises:
        ScenarioError: the scenario file cannot be read or is malformed.
        OSError: the address cannot be bound.
    """
    simulator = LLMSimulator(options_from_args(args))
    port = await simulator.start(args.host, args.port)
    # Start-up objects live as long as the process: hidden from the collector, no full
    # collection walks them in the middle of a response.
    gc.collect()
    gc.freeze()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        print(f"listening on {args.host}:{port}", flush=True)
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await simulator.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m llmsim``: parse flags, serve, return the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m llmsim",
        description="OpenAI-compatible LLM simulator (not a model) for offline runs.",
    )
    parser.add_argument("--log-level", default="WARNING", help="stderr log level")
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper())
    try:
        _run(serve_from_args(args))
    except SimulatorError as exc:
        logger.error("%s", exc)
        return 2
    except OSError as exc:
        logger.error("cannot serve on %s:%s: %s", args.host, args.port, exc)
        return 1
    return 0


def _run(coroutine: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop  # optional: a faster loop where it is installed
    except ImportError:
        asyncio.run(coroutine)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(coroutine)


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a non-negative number, got {text}")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _probability(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a probability between 0 and 1, got {text}")
    return value
