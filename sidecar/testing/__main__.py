"""``python -m sidecar.testing``: a test stack for clients in any language.

Starts the LLM simulator (with :data:`~sidecar.testing.SCENARIO`), the three example
tool servers and a sidecar with the profiles ``default`` and ``structured``; waits until
the sidecar is SERVING; prints ``stack {JSON}`` with every address, then
``listening on HOST:PORT`` (the sidecar). Stops everything on SIGTERM, SIGINT or the end
of its stdin, and exits 0.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import threading
from collections.abc import Sequence

from sidecar.testing import example_stack, wait_serving


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sidecar.testing", description=__doc__)
    parser.add_argument("--workdir", help="directory for the sidecar's files (default: a temp dir)")
    parser.add_argument(
        "--ttft-ms", type=float, default=0.0, help="the simulator's first-token delay"
    )
    parser.add_argument(
        "--tool-latency-ms", type=float, default=0.0, help="handler latency of every example tool"
    )
    args = parser.parse_args(argv)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())

    def watch_stdin() -> None:
        sys.stdin.read()  # returns at EOF: the parent went away or closed the pipe
        done.set()

    with tempfile.TemporaryDirectory() as scratch:
        with example_stack(
            args.workdir or scratch,
            simulator_flags=["--ttft-ms", str(args.ttft_ms)],
            tool_latency_ms=args.tool_latency_ms,
        ) as stack:
            wait_serving(stack.sidecar.address)
            print("stack " + json.dumps(stack.describe()), flush=True)
            print(f"listening on {stack.sidecar.address}", flush=True)
            threading.Thread(target=watch_stdin, daemon=True).start()
            done.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
