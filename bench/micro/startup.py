"""How long a sidecar takes from ``serve`` to ready, with the gRPC front alone and with
every front configured (MCP endpoint, A2A over gRPC and HTTP, metrics).

Each round starts a fresh process (``python -m sidecar serve``) against a running
simulator and tool server, and times three moments from the spawn: ``listening on`` on
stdout, health ``SERVING`` (its tool servers discovered), and the first run answered.
Rounds alternate between the configurations, so both see the same machine. Prints the
median and P90 of each, and writes ``bench/results/startup.json`` (and ``.md``); the
chart's startup probe (``helm/agent-sidecar/values.yaml``) is sized from the slowest
median, with room for a loaded machine.

``python -m bench.micro.startup [--rounds 9]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentsidecar.client import AgentClient
from bench import processes
from bench.stats import median, percentile
from bench.workload import ZERO

OUT = processes.ROOT / "bench/results/startup.json"
SKILLS = [{"profile": "default", "id": "assistant", "name": "A", "description": "d"}]


def _config(sim: Any, tools: Any, workdir: Path, fronts: bool) -> Path:
    config: dict[str, Any] = {
        "server": {"port": 0},
        "model": {
            "base_url": f"http://{sim.address}/openai/v1",
            "keyless": True,
            "model": "bench-model",
        },
        "tool_servers": [{"name": "shop", "address": tools.address}],
        "sessions": {"store": "memory"},
    }
    if fronts:
        config["mcp"] = {"port": 0}
        config["a2a"] = {"skills": SKILLS, "http": {"port": 0}}
        config["telemetry"] = {"metrics": {"enabled": True, "port": 0}}
    path = workdir / ("fronts.yaml" if fronts else "grpc.yaml")
    path.write_text(yaml.safe_dump(config))
    return path


async def _serving(address: str, started: float) -> float:
    async with grpc.aio.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return time.perf_counter() - started
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.005)


async def _first_run(address: str, started: float) -> float:
    async with AgentClient(address) as client:
        session = await client.create_session()
        await client.run(session.session_id, "hello there", timeout=30)
    return time.perf_counter() - started


def _round(config: Path) -> dict[str, float]:
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sidecar", "serve", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("listening on "):
                listening = time.perf_counter() - started
                address = line.removeprefix("listening on ").strip()
                break
        else:
            raise RuntimeError(f"the sidecar exited ({proc.wait()}) before it listened")
        serving = asyncio.run(_serving(address, started))
        answered = asyncio.run(_first_run(address, started))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {"listening": listening, "serving": serving, "first_run": answered}


def measure(rounds: int) -> dict[str, Any]:
    sim = processes.simulator()
    tools = processes.shop(ZERO.tool_ms)
    found: dict[str, list[dict[str, float]]] = {"grpc": [], "fronts": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            configs = {
                "grpc": _config(sim, tools, Path(tmp), fronts=False),
                "fronts": _config(sim, tools, Path(tmp), fronts=True),
            }
            _round(configs["fronts"])  # warm the file cache: every round then reads alike
            for _ in range(rounds):
                for name, config in configs.items():
                    found[name].append(_round(config))
    finally:
        tools.stop()
        sim.stop()
    summary: dict[str, Any] = {"rounds": rounds, "load_per_core": os.getloadavg()[0] / 2}
    for name, samples in found.items():
        summary[name] = {
            moment: {
                "median_ms": round(median([s[moment] for s in samples]) * 1000, 1),
                "p90_ms": round(percentile([s[moment] for s in samples], 90) * 1000, 1),
            }
            for moment in ("listening", "serving", "first_run")
        }
    return summary


def _markdown(summary: dict[str, Any]) -> str:
    lines = [
        "| configuration | listening on (median / P90) | SERVING | first run answered |",
        "| --- | --- | --- | --- |",
    ]
    names = {"grpc": "the gRPC front alone", "fronts": "every front (MCP, A2A, metrics)"}
    for key, name in names.items():
        row = summary[key]
        cells = [
            f"{row[m]['median_ms']:.0f} / {row[m]['p90_ms']:.0f} ms"
            for m in ("listening", "serving", "first_run")
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        f"{summary['rounds']} rounds each, alternating, from the spawn of "
        f"`python -m sidecar serve`; load per core at the end {summary['load_per_core']:.1f}."
    )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    summary = measure(args.rounds)
    OUT.write_text(json.dumps(summary, indent=2) + "\n")
    table = _markdown(summary)
    OUT.with_suffix(".md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
