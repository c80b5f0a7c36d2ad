"""What one model request costs the sidecar's process, by transport.

Sends the same chat-completions body to the zero-latency LLM simulator, one request at a
time, through each way the sidecar can send it, and reports CPU (this process, user +
system) and wall time per request, medians of the rounds, transports interleaved:

- ``direct``: the default transport, over ``sidecar.llm.http`` (kept-alive HTTP/1.1,
  httptools);
- ``aiohttp``: the same bytes through one ``aiohttp`` session, as a general client sends;
- ``sdk``: through ``openai.AsyncOpenAI`` (``model.transport: sdk``: raw bytes in, raw
  response out).

``python -m bench.micro.model_transport [--requests 2000] [--rounds 5]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import orjson
import uvloop

from bench import processes
from bench.workload import MODEL, PROMPT, SYSTEM, openai_tools
from sidecar.llm.transport import DirectTransport, SdkTransport

ROOT = Path(__file__).resolve().parents[2]

BODY = orjson.dumps(
    {
        "model": MODEL,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}],
        "tools": openai_tools(),
    }
)


async def measure(address: str, requests: int, rounds: int) -> dict[str, tuple[float, float]]:
    base = f"http://{address}/openai/v1"
    direct = DirectTransport(base, "bench", 10)
    sdk = SdkTransport(base, "bench", 10)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def through_aiohttp() -> bytes:
        async with session.post(
            f"{base}/chat/completions",
            data=BODY,
            headers={"Content-Type": "application/json", "Authorization": "Bearer bench"},
        ) as response:
            return await response.read()

    senders: dict[str, Callable[[], Awaitable[bytes]]] = {
        "direct": lambda: direct.complete(BODY, 10),
        "aiohttp": through_aiohttp,
        "sdk": lambda: sdk.complete(BODY, 10),
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in senders}
    try:
        for send in senders.values():  # warm connections and code paths
            for _ in range(200):
                assert orjson.loads(await send())["choices"]
        for _ in range(rounds):
            for name, send in senders.items():
                cpu, wall = time.process_time(), time.perf_counter()
                for _ in range(requests):
                    await send()
                samples[name].append(
                    (
                        (time.process_time() - cpu) / requests * 1e6,
                        (time.perf_counter() - wall) / requests * 1e6,
                    )
                )
    finally:
        await direct.close()
        await sdk.close()
        await session.close()
    return {
        name: (statistics.median(c for c, _ in runs), statistics.median(w for _, w in runs))
        for name, runs in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with processes.simulator() as sim:
        results = uvloop.run(measure(sim.address, args.requests, args.rounds))
    print(f"one model request, medians of {args.rounds} rounds of {args.requests}")
    print("| transport | CPU µs per request | wall µs per request |")
    print("| --- | ---: | ---: |")
    for name, (cpu, wall) in results.items():
        print(f"| {name} | {cpu:,.0f} | {wall:,.0f} |")


if __name__ == "__main__":
    main()
