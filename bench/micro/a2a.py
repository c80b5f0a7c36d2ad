"""A turn through A2A against the same turn through AgentService.

It starts the LLM simulator (instant), the example shop tool server (no simulated latency)
and one sidecar serving A2A (an ``a2a`` section: the default profile as a skill, the gRPC
binding on its port, the card on an HTTP listener), then drives the same zero-latency
pre-sales turn (two model calls, three concurrent tool calls) two ways, one turn at a
time, each in a session of its own created beforehand:

- ``agentservice``: ``Run`` through our Python client (``agentsidecar.client``).
- ``a2a``: ``SendMessage``, blocking, through the ``a2a-sdk`` client from PyPI over A2A's
  gRPC binding, with the session as its ``context_id``. The sidecar starts a background
  run and waits for its end (docs/a2a.md), then answers the task.

Rounds alternate between the two (which goes first alternates too, so drift on a shared
machine hits both alike). Each batch reads the sidecar's CPU time (``/proc/PID/stat``,
every thread) and this process's (the client's) before and after its turns. Every figure
is the median of the per-round figures: latency P50 and P99 at the caller (request to
answer), sidecar CPU and client CPU per turn. Writes ``bench/results/a2a.md`` (quoted by
``make bench`` in docs/benchmarks.md) and ``a2a.json``::

    python -m bench.micro.a2a                    # make bench-a2a; a minute or two
    python -m bench.micro.a2a --rounds 4 --batch 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc
import httpx
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types import a2a_pb2
from google.protobuf import json_format

from agentsidecar.client import AgentClient
from bench.processes import ROOT, configured_sidecar, shop, simulator
from bench.stats import percentile
from bench.workload import PROMPT, ZERO
from sidecar.testing import ServerProcess

OUT = ROOT / "bench/results/a2a.md"
KINDS = ("agentservice", "a2a")
A2A = {
    "skills": [{"profile": "default", "id": "assistant", "description": "The pre-sales agent"}],
    "http": {"port": 0},
}

Turn = Callable[[str], Awaitable[None]]


@asynccontextmanager
async def _a2a_client(side: ServerProcess) -> AsyncIterator[Client]:
    """The SDK's client of the sidecar's card, over the gRPC binding."""
    base = "http://" + side.announced("a2a http on ")
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(f"{base}/.well-known/agent-card.json")
        response.raise_for_status()
    card = json_format.ParseDict(response.json(), a2a_pb2.AgentCard(), ignore_unknown_fields=True)
    channels: list[grpc.aio.Channel] = []

    def channel(url: str) -> grpc.aio.Channel:
        channels.append(grpc.aio.insecure_channel(url))
        return channels[-1]

    config = ClientConfig(
        streaming=False, grpc_channel_factory=channel, supported_protocol_bindings=["GRPC"]
    )
    client = ClientFactory(config).create(card)
    try:
        yield client
    finally:
        await client.close()
        for made in channels:
            await made.close()


def _turns(ours: AgentClient, theirs: Client) -> dict[str, Turn]:
    async def agentservice(session_id: str) -> None:
        response = await ours.run(session_id, PROMPT, timeout=30)
        if response.result.tool_calls != 3:
            raise RuntimeError(f"unexpected run: {response}")

    async def a2a(session_id: str) -> None:
        message = a2a_pb2.Message(
            message_id=uuid.uuid4().hex,
            role=a2a_pb2.ROLE_USER,
            context_id=session_id,
            parts=[a2a_pb2.Part(text=PROMPT)],
        )
        request = a2a_pb2.SendMessageRequest(message=message)
        responses = [r async for r in theirs.send_message(request)]
        task = responses[-1].task
        if task.status.state != a2a_pb2.TASK_STATE_COMPLETED or task.metadata["toolCalls"] != 3:
            raise RuntimeError(f"unexpected task: {task}")

    return {"agentservice": agentservice, "a2a": a2a}


async def measure(side: ServerProcess, rounds: int, batch: int) -> dict[str, Any]:
    found: dict[str, dict[str, list[float]]] = {
        k: {"p50_ms": [], "p99_ms": [], "sidecar_ms": [], "client_ms": []} for k in KINDS
    }
    async with AgentClient(side.address) as ours, _a2a_client(side) as theirs:
        await ours.wait_ready(30)
        turns = _turns(ours, theirs)
        for turn in turns.values():  # warm up: connections, caches, first-call costs
            for _ in range(10):
                await turn((await ours.create_session()).session_id)
        for number in range(rounds):
            order = list(KINDS) if number % 2 == 0 else list(reversed(KINDS))
            for kind in order:
                sessions = [(await ours.create_session()).session_id for _ in range(batch)]
                latencies = []
                cpu0, client0 = side.cpu_seconds(), time.process_time()
                for session_id in sessions:
                    start = time.perf_counter()
                    await turns[kind](session_id)
                    latencies.append((time.perf_counter() - start) * 1000)
                figures = found[kind]
                figures["sidecar_ms"].append((side.cpu_seconds() - cpu0) / batch * 1000)
                figures["client_ms"].append((time.process_time() - client0) / batch * 1000)
                figures["p50_ms"].append(percentile(latencies, 50))
                figures["p99_ms"].append(percentile(latencies, 99))
            print(f"round {number + 1}/{rounds}", flush=True)
    return found


def _report(found: dict[str, Any], took: float, load: float, args: argparse.Namespace) -> str:
    def med(kind: str, key: str) -> float:
        return float(statistics.median(found[kind][key]))

    rows = []
    for label, key, digits in (
        ("latency P50 (ms)", "p50_ms", 1),
        ("latency P99 (ms)", "p99_ms", 1),
        ("sidecar CPU per turn (ms)", "sidecar_ms", 2),
        ("client CPU per turn (ms)", "client_ms", 2),
    ):
        ours, theirs = med("agentservice", key), med("a2a", key)
        rows.append(f"| {label} | {ours:.{digits}f} | {theirs:.{digits}f} | {theirs / ours:.2f} |")

    def spread(key: str) -> str:
        ratios = [b / a for a, b in zip(found["agentservice"][key], found["a2a"][key], strict=True)]
        return f"{min(ratios):.2f} to {max(ratios):.2f}"

    return "\n".join(
        [
            f"`python -m bench.micro.a2a --rounds {args.rounds} --batch {args.batch}` "
            f"({took:.0f} s; {os.cpu_count()} cores, load average {load:.1f} at the start).",
            "",
            "The pre-sales turn (2 model calls + 3 tool calls, all instant), one at a time, each "
            "in a session of its own created beforehand: `Run` through AgentService (our Python "
            "client) against a blocking `SendMessage` over A2A's gRPC binding (the `a2a-sdk` "
            "client from PyPI, the session as `context_id`), on one sidecar in its default "
            f"configuration plus an `a2a` section. {args.rounds} interleaved rounds of "
            f"{args.batch} turns each way; every figure is the median of the per-round "
            "figures (latency at the caller, from the request to the answer; CPU per turn "
            "from the sidecar's process clock and this process's).",
            "",
            "| per turn | AgentService `Run` | A2A `SendMessage` (gRPC) | A2A/AgentService |",
            "| --- | ---: | ---: | ---: |",
            *rows,
            "",
            f"Per round, A2A/AgentService ranged from {spread('sidecar_ms')} in sidecar CPU and "
            f"from {spread('p50_ms')} in P50 latency.",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds")
    parser.add_argument("--batch", type=int, default=50, help="turns per round and kind")
    args = parser.parse_args()
    started, load = time.time(), os.getloadavg()[0]
    sim = simulator()
    tools = shop(ZERO.tool_ms)
    try:
        with configured_sidecar(sim, {"shop": tools}, a2a=A2A) as side:
            found = asyncio.run(measure(side, args.rounds, args.batch))
    finally:
        tools.stop()
        sim.stop()
    took = time.time() - started
    text = _report(found, took, load, args) + "\n"
    OUT.write_text(text)
    OUT.with_suffix(".json").write_text(json.dumps(found, indent=1))
    print(text)


if __name__ == "__main__":
    main()
