"""Per-turn latency and prompt size over a 50-turn session, with the context window on and off.

Run from the repository root: ``python -m bench.micro.context_window`` (or ``make bench-context``).

Everything is a real process on 127.0.0.1: the LLM simulator (not a model) with a little
latency — 20 ms to the first token, plus 2 ms per 1,000 prompt tokens not served from its
prompt cache, as a provider's prompt processing grows with the context — a tool server
whose one tool returns a report of about 3.4 KB (10 ms handler latency), and the sidecar
with two profiles that differ only in the window: ``windowed`` (8,000-token budget) and
``unbounded`` (no window), one session each, their turns interleaved. Each turn asks for
a new report, so each turn adds one tool call and its result to the history.

Prints, per profile, the median of the first and last 10 turns and the P99 over all 50
for the turn's latency (client-side), its prompt size (the prompt tokens of the turn's
last model call, which carries the whole history) and the sidecar's own overhead (the
timeline's OVERHEAD stage); writes the plot to ``docs/img/context-window.png``.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from bench import processes
from sidecar import testing

ROOT = Path(__file__).resolve().parents[2]

TURNS = 50
BUDGET = 8_000
PLOT = ROOT / "docs" / "img" / "context-window.png"
PROFILES = {"windowed": BUDGET, "unbounded": None}


def _ms(d: object) -> float:
    return d.seconds * 1000 + d.nanos / 1e6  # type: ignore[attr-defined, no-any-return]


async def turn(client: AgentClient, session_id: str, i: int) -> tuple[float, int, float]:
    """(latency ms, prompt tokens, sidecar overhead ms) of one turn."""
    start = time.perf_counter()
    response = await client.run(session_id, f"fetch the report with topic=t{i}", timeout=60)
    took = (time.perf_counter() - start) * 1000
    result = response.result
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED, result
    stages = result.timeline.stages
    models = [s for s in stages if s.kind == agent_pb2.STAGE_KIND_MODEL_CALL]
    overhead = sum(_ms(s.duration) for s in stages if s.kind == agent_pb2.STAGE_KIND_OVERHEAD)
    return took, int(models[-1].model_call.usage.prompt_tokens), overhead


async def sessions(client: AgentClient) -> dict[str, list[tuple[float, int, float]]]:
    """One session per profile, their turns interleaved so that whatever else the machine
    is doing weighs on both alike."""
    ids = {name: (await client.create_session(name)).session_id for name in PROFILES}
    results: dict[str, list[tuple[float, int, float]]] = {name: [] for name in PROFILES}
    for i in range(TURNS):
        for name, session_id in ids.items():
            results[name].append(await turn(client, session_id, i))
    return results


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def summary(name: str, turns: list[tuple[float, int, float]]) -> list[str]:
    rows = []
    for label, i, unit in (("latency", 0, "ms"), ("prompt", 1, "tokens"), ("overhead", 2, "ms")):
        values = [float(t[i]) for t in turns]
        first, last = statistics.median(values[:10]), statistics.median(values[-10:])
        digits = 0 if unit == "tokens" else 1
        rows.append(
            f"| {name} | {label} ({unit}) | {first:,.{digits}f} | {last:,.{digits}f} "
            f"| {p99(values):,.{digits}f} |"
        )
    return rows


def plot(results: dict[str, list[tuple[float, int, float]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, size) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=100)
    for name, turns in results.items():
        x = range(1, len(turns) + 1)
        lat.plot(x, [t[0] for t in turns], marker=".", label=name)
        size.plot(x, [t[1] for t in turns], marker=".", label=name)
    lat.set(title="Turn latency", xlabel="turn", ylabel="ms (client-side)")
    size.set(title="Prompt size (last model call of the turn)", xlabel="turn", ylabel="tokens")
    size.axhline(BUDGET, color="grey", linestyle=":", label=f"window budget ({BUDGET:,})")
    for axis in (lat, size):
        axis.grid(alpha=0.3)
        axis.legend()
    fig.suptitle(
        f"{TURNS}-turn session against the LLM simulator (20 ms TTFT + 2 ms per 1k uncached "
        "prompt tokens), window on vs off"
    )
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT)


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-context-") as tmp:
        with (
            processes.simulator("--ttft-ms", "20", "--prefill-ms-per-1k", "2") as sim,
            processes.start(
                str(ROOT / "bench/micro/report_tools.py"), "--port", "0", "--latency-ms", "10"
            ) as tools,
        ):
            config = testing.sidecar_config(
                sim.address,
                {"reports": tools.address},
                profiles={
                    name: {"context": {"max_tokens": budget}} for name, budget in PROFILES.items()
                },
                model={
                    "base_url": f"http://{sim.address}/openai/v1",
                    "model": "simulated",
                    "keyless": True,
                },
            )
            with testing.sidecar(config, tmp) as side:
                async with AgentClient(side.address) as client:
                    await client.wait_ready(30)
                    warm = await client.create_session("windowed")
                    await client.run(warm.session_id, "fetch the report with topic=warm-up")
                    results = await sessions(client)
    print(f"{TURNS}-turn session, window budget {BUDGET:,} tokens (estimated, ~4 chars/token)")
    print("| profile | metric | median, turns 1-10 | median, turns 41-50 | P99, all turns |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, turns in results.items():
        print("\n".join(summary(name, turns)))
    plot(results)
    print(f"plot: {PLOT.relative_to(ROOT)}")


if __name__ == "__main__":
    asyncio.run(main())
