"""What a model request costs the sidecar's process, by transport; and what pacing saves.

**CPU per request.** Sends the workload's chat-completions body to the zero-latency LLM
simulator, one request at a time, through each transport, and measures this process's CPU
(user + system) for each request; transports interleave round by round, so drift of the
shared machine hits them alike. Reported: the median and P99 of every request's CPU, the
spread of the rounds' medians, and each transport against ``direct``:

- ``direct``: the default transport (``sidecar.llm.transport.DirectTransport``: one aiohttp
  session, the proxy resolved once);
- ``sdk``: ``model.transport: sdk`` (``openai.AsyncOpenAI`` on its aiohttp client, raw
  bytes in, raw response out);
- ``aiohttp trust_env``: a plain aiohttp session with ``trust_env=True``, which looks up
  the proxy and ``~/.netrc`` on every request, each in a worker thread: what resolving the
  proxy once saves;
- ``bare aiohttp``: the least a client can do with aiohttp, the yardstick: a plain
  session's ``post`` of the same bytes and a read of the answer (no timeout, no proxy, no
  checks);
- ``model call``: the whole of one model call as the loop makes it
  (:class:`~sidecar.llm.openai_model.OpenAICompatibleModel.complete` on the direct
  transport: the body serialized, the exchange, the answer parsed into tool calls and
  usage, the rate-limit headers read for pacing).

Each is measured unary and streamed (``stream: true``, the response read line by line).

**Bursts.** A simulator that enforces a rate limit (``--ratelimit-requests`` per
``--ratelimit-window-s``, answering 429 with ``retry-after`` past it) gets a burst of
concurrent model calls through :class:`~sidecar.llm.openai_model.OpenAICompatibleModel`
with its default retries, once with pacing on and once off: how many 429s each caused,
how many calls failed, and how long the burst took.

``python -m bench.micro.model_transport [--requests 1000] [--rounds 5] [--burst 60]``
writes ``bench/results/model_transport.json`` and prints the tables.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import uvloop

from bench import processes
from bench.stats import median, percentile
from bench.workload import MODEL, PROMPT, SYSTEM, openai_tools
from sidecar.config import MODEL_RETRY
from sidecar.errors import ModelError
from sidecar.llm.model import ModelRequest
from sidecar.llm.openai_model import OpenAICompatibleModel
from sidecar.llm.pacing import Pacers
from sidecar.llm.transport import DirectTransport, Endpoint, SdkTransport, Transport

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench/results/model_transport.json"

MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]
BODIES = {
    "unary": orjson.dumps({"model": MODEL, "messages": MESSAGES, "tools": openai_tools()}),
    "streamed": orjson.dumps(
        {
            "model": MODEL,
            "messages": MESSAGES,
            "tools": openai_tools(),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ),
}
Send = Callable[[], Awaitable[int]]


def _ours(transport: Transport, body: bytes, stream: bool) -> Send:
    async def send() -> int:
        async with transport.post(body, 10) as response:
            if stream:
                return sum([len(line) async for line in response.lines()])
            return len(await response.read())

    return send


def _plain(session: aiohttp.ClientSession, url: str, body: bytes, stream: bool) -> Send:
    headers = {"Content-Type": "application/json", "Authorization": "Bearer bench"}

    async def send() -> int:
        async with session.post(url, data=body, headers=headers) as response:
            if stream:
                return sum([len(line) async for line in response.content])
            return len(await response.read())

    return send


def _model_call(model: OpenAICompatibleModel, stream: bool) -> Send:
    request = ModelRequest(MESSAGES, openai_tools(), stream, 10)

    async def send() -> int:
        response = await model.complete(request, on_text=(lambda text: None) if stream else None)
        return len(response.tool_calls) + 1

    return send


async def cpu_per_request(address: str, requests: int, rounds: int) -> dict[str, Any]:
    base = f"http://{address}/openai/v1"
    endpoint = Endpoint(base_url=base, api_key="bench", tls=ssl.create_default_context())
    direct, sdk = DirectTransport(endpoint), SdkTransport(endpoint)
    session = aiohttp.ClientSession(trust_env=True, connector=aiohttp.TCPConnector(limit=0))
    bare = aiohttp.ClientSession()
    model = OpenAICompatibleModel(
        base_url=base,
        api_key="bench",
        model=MODEL,
        retry=MODEL_RETRY,
        timeout=30,
        pacers=Pacers(),
        environ={},
    )
    url = f"{base}/chat/completions"
    senders: dict[str, Send] = {}
    for mode, body in BODIES.items():
        stream = mode == "streamed"
        senders[f"bare aiohttp {mode}"] = _plain(bare, url, body, stream)
        senders[f"direct {mode}"] = _ours(direct, body, stream)
        senders[f"model call {mode}"] = _model_call(model, stream)
        senders[f"sdk {mode}"] = _ours(sdk, body, stream)
        senders[f"aiohttp trust_env {mode}"] = _plain(session, url, body, stream)
    samples: dict[str, list[float]] = {name: [] for name in senders}
    round_medians: dict[str, list[float]] = {name: [] for name in senders}
    try:
        for send in senders.values():  # warm connections and code paths
            for _ in range(100):
                assert await send() > 0
        for _ in range(rounds):
            for name, send in senders.items():
                cpu = []
                for _ in range(requests):
                    start = time.process_time()
                    await send()
                    cpu.append((time.process_time() - start) * 1e6)
                samples[name] += cpu
                round_medians[name].append(median(cpu))
    finally:
        await direct.close()
        await sdk.close()
        await session.close()
        await bare.close()
        await model.close()
    return {
        name: {
            "median_us": median(values),
            "p99_us": percentile(values, 99),
            "round_medians_us": round_medians[name],
        }
        for name, values in samples.items()
    }


async def burst(address: str, calls: int, pacing: bool) -> dict[str, Any]:
    """``calls`` concurrent model calls after one that shows the limits."""
    async with aiohttp.ClientSession() as http, http.post(f"http://{address}/sim/reset") as r:
        r.raise_for_status()
    model = OpenAICompatibleModel(
        base_url=f"http://{address}/openai/v1",
        api_key="bench",
        model=MODEL,
        retry=MODEL_RETRY,
        timeout=30,
        pacing=pacing,
        pacers=Pacers(),
        environ={},
    )
    request = ModelRequest([{"role": "user", "content": "hello"}], [], False, 60)
    failed: list[str] = []

    async def call() -> float:
        try:
            response = await model.complete(request)
        except ModelError as exc:
            failed.append(exc.code)
            return 0.0
        return response.paced

    try:
        await call()
        start = time.perf_counter()
        waits = await asyncio.gather(*(call() for _ in range(calls)))
        wall = time.perf_counter() - start
    finally:
        await model.close()
    async with aiohttp.ClientSession() as http, http.get(f"http://{address}/sim/stats") as r:
        stats = await r.json()
    return {
        "calls": calls,
        "requests": stats["requests"] - 1,
        "rate_limited": stats["by_status"].get("429", 0),
        "failed": len(failed),
        "wall_s": wall,
        "paced_calls": sum(1 for w in waits if w > 0),
        "longest_wait_s": max(waits),
    }


def _ratio(row: dict[str, Any], base: dict[str, Any]) -> str:
    return f"{row['median_us'] / base['median_us']:.2f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--burst", type=int, default=60, help="concurrent calls in a burst")
    parser.add_argument("--limit", type=int, default=20, help="requests per window")
    parser.add_argument("--window", type=float, default=1.0, help="window, seconds")
    args = parser.parse_args()
    # Each retry of the unpaced burst logs a line; the table says what they add up to.
    logging.getLogger("sidecar.llm.openai_model").setLevel(logging.ERROR)
    with processes.simulator() as sim:
        cpu = uvloop.run(cpu_per_request(sim.address, args.requests, args.rounds))
    flags = ["--ratelimit-requests", str(args.limit), "--ratelimit-window-s", str(args.window)]
    bursts = {}
    with processes.simulator(*flags, "--enforce-ratelimits") as limited:
        for pacing in (True, False):
            bursts["paced" if pacing else "unpaced"] = uvloop.run(
                burst(limited.address, args.burst, pacing)
            )
    results = {
        "command": "python -m bench.micro.model_transport"
        f" --requests {args.requests} --rounds {args.rounds} --burst {args.burst}"
        f" --limit {args.limit} --window {args.window:g}",
        "cpu_per_request": cpu,
        "burst": bursts,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")

    lines = [
        f"One model request, CPU of the sending process, {args.rounds} rounds of "
        f"{args.requests}, transports interleaved:",
        "",
        "| transport | median µs | P99 µs | round medians µs | vs bare aiohttp |",
        "| --- | ---: | ---: | --- | ---: |",
    ]
    for name, row in cpu.items():
        mode = name.rsplit(" ", 1)[1]
        spread = " ".join(f"{v:.0f}" for v in row["round_medians_us"])
        lines.append(
            f"| {name} | {row['median_us']:.0f} | {row['p99_us']:.0f} | {spread} "
            f"| {_ratio(row, cpu[f'bare aiohttp {mode}'])} |"
        )
    lines += [
        "",
        f"A burst of {args.burst} concurrent calls against {args.limit} requests "
        f"per {args.window:g} s (429 past it):",
        "",
        "| pacing | requests sent | 429s | failed calls | calls that waited | burst s |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in bursts.items():
        lines.append(
            f"| {name} | {row['requests']} | {row['rate_limited']} | {row['failed']} "
            f"| {row['paced_calls']} | {row['wall_s']:.2f} |"
        )
    text = "\n".join(lines)
    # bench.peers quotes it in docs/benchmarks.md.
    OUT.with_suffix(".md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
