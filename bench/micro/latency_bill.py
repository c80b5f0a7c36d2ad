"""Generate a timeline log of demo runs and its latency bill (text and PNG).

Runs the demo's two scenarios (the founding one: two tools in one step; the pre-sales
one: three tools in one step) through a sidecar with the timeline log on, against the
example tool servers (30, 20 and 10 ms of simulated handler latency) and the built-in
LLM simulator, once per model-latency setting, each under its own label:

- ``instant-model``: the simulator answers at once, so the bill shows what everything
  around the model costs (tools, the sidecar's own stages);
- ``model-150ms-ttft``: the simulator waits 150 ms (± 30) before its first token and
  2 ms per streamed chunk, closer to a hosted model.

Then it prints ``agent-sidecar report`` over the log and writes its chart::

    python -m bench.micro.latency_bill                      # 30 runs per scenario and label
    python -m bench.micro.latency_bill --runs 10 --png /tmp/bill.png

The model is a simulator: the figures show the shape of a bill, not a model's speed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
from pathlib import Path

from agentsidecar.client import AgentClient
from bench.processes import configured_sidecar, simulator, tool_server
from sidecar.commands.demo import SCENARIOS, TOOL_SERVERS

ROOT = Path(__file__).resolve().parents[2]

SETTINGS = (
    ("instant-model", ()),
    (
        "model-150ms-ttft",
        ("--ttft-ms", "150", "--token-ms", "2", "--jitter-ms", "30", "--seed", "7"),
    ),
)


async def _runs(address: str, runs: int) -> None:
    async with AgentClient(address) as client:
        await client.wait_ready(30)
        for _ in range(runs):
            for _, text in SCENARIOS:
                session = await client.create_session()
                async for _event in client.stream(session.session_id, text, timeout=60):
                    pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="runs per scenario and label")
    parser.add_argument(
        "--log", default=str(ROOT / "bench/results/raw/latency-bill.jsonl"), help="timeline log"
    )
    parser.add_argument("--png", default=str(ROOT / "docs/latency-bill.png"), help="chart path")
    args = parser.parse_args()
    log = Path(args.log)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    for label, sim_flags in SETTINGS:
        with contextlib.ExitStack() as stack:
            sim = stack.enter_context(simulator(*sim_flags))
            tools = {
                name: stack.enter_context(tool_server(name, latency))
                for name, latency in TOOL_SERVERS
            }
            telemetry = {"label": label, "timeline_log": str(log)}
            side = stack.enter_context(configured_sidecar(sim, tools, telemetry=telemetry))
            asyncio.run(_runs(side.address, args.runs))
        print(f"{label}: {2 * args.runs} runs logged", file=sys.stderr)
    report = [sys.executable, "-m", "sidecar", "report", str(log), "--png", args.png]
    return subprocess.run(report, cwd=ROOT, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
