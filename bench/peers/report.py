"""Turn a benchmark run's samples into ``docs/benchmarks.md`` and its charts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.stats import median, percentile

LABELS = {
    "sidecar": "agent-sidecar (gRPC, tools in separate processes)",
    "sidecar_new_session": "agent-sidecar, each run's session created inside the run",
    "sidecar_memory": "agent-sidecar, sessions in memory instead of SQLite",
    "sidecar_sdk": "agent-sidecar, model requests through openai.AsyncOpenAI",
    "sidecar_event_engine": "agent-sidecar, gRPC's default I/O (EventEngine threads)",
    "sidecar_secure": "agent-sidecar, TLS and token authentication on both gRPC links",
    "floor": "floor: hand-written asyncio + aiohttp, tools in-process",
    "textbook": "textbook loop: sync openai, tools one after another",
    "textbook_threads": "textbook loop, tools on a thread pool",
    "langgraph_react": "LangGraph create_react_agent",
    "langchain_agent": "LangChain create_agent",
    "openai_agents": "OpenAI Agents SDK",
}
FRAMEWORKS = ("langgraph_react", "langchain_agent", "openai_agents")


def _zero(batches: list[dict[str, Any]], runs: int) -> dict[str, float]:
    """Throughput and CPU per run. ``total_cpu_ms`` compares like with like: the peers run
    their tools in-process, so a sidecar's figure adds its tool server's CPU."""
    tools = [b.get("tools_cpu_s", 0.0) / runs * 1000 for b in batches]
    return {
        "rps": median([runs / b["wall_s"] for b in batches]),
        "cpu_ms": median([b["cpu_s"] / runs * 1000 for b in batches]),
        "tools_cpu_ms": median(tools),
        "total_cpu_ms": median(
            [(b["cpu_s"] + b.get("tools_cpu_s", 0.0)) / runs * 1000 for b in batches]
        ),
        "client_cpu_ms": median([b.get("client_cpu_s", 0.0) / runs * 1000 for b in batches]),
    }


def fanout(results: dict[str, Any]) -> tuple[dict[str, list[float]], dict[str, list[float]] | None]:
    """The fan-out samples: the tool stage (the sidecar's timeline) and the whole run at the
    calling client (None in results from before it was measured)."""
    fan = results["fanout"]
    if "tool_stage" in fan:
        return fan["tool_stage"], fan["client"]
    return fan, None


def _latency(batches: list[dict[str, Any]], ideal: float) -> dict[str, float]:
    samples = [x for b in batches for x in b["latencies_ms"]]
    return {
        "p50": median(samples),
        "p99": percentile(samples, 99),
        "overhead_p50": median(samples) - ideal,
        "overhead_p99": percentile(samples, 99) - ideal,
    }


def metrics(results: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """Per scenario, per contender: the figures the tables show."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    for name, scenario in results["scenarios"].items():
        rows = {}
        for contender, batches in scenario["batches"].items():
            row = _zero(batches, scenario["runs"])
            row.update(_latency(batches, scenario["ideal_ms"]))
            rows[contender] = row
        table[name] = rows
    return table


def _micro(name: str) -> dict[str, Any] | None:
    """A micro benchmark's last results (``bench/results/NAME.json``), if it ran."""
    path = Path("bench/results") / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def targets(results: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """(target, measured, goal, met) for each target set for the hot path."""
    m = metrics(results)
    out: list[tuple[str, str, str, bool]] = []
    z1, z32 = m["zero-c1"], m["zero-c32"]
    cpu, total = z1["sidecar"]["cpu_ms"], z1["sidecar"]["total_cpu_ms"]
    out.append(
        (
            "sidecar + tool server CPU per run, zero latency",
            f"{total:.2f} ms",
            "≤ 2.0 ms",
            total <= 2.0,
        )
    )
    out.append(("… the sidecar alone", f"{cpu:.2f} ms", "≤ 1.4 ms", cpu <= 1.4))
    secure = z1["sidecar_secure"]["total_cpu_ms"] / total
    out.append(
        ("… TLS and tokens on both links, against it", f"{secure:.2f}x", "≤ 1.10x", secure <= 1.10)
    )
    per_call = z1["sidecar"]["tools_cpu_ms"] / 3
    out.append(
        (
            "tool-server CPU per call (Python SDK)",
            f"{per_call:.3f} ms",
            "≤ 0.15 ms",
            per_call <= 0.15,
        )
    )
    transport = _micro("model_transport")
    if transport is not None:
        cpu_of = {k: v["median_us"] for k, v in transport["cpu_per_request"].items()}
        ratio = max(
            cpu_of[f"direct {m}"] / cpu_of[f"bare aiohttp {m}"] for m in ("unary", "streamed")
        )
        out.append(
            (
                "model request (default transport) vs a bare aiohttp POST",
                f"{ratio:.2f}x",
                "≤ 1.25x",
                ratio <= 1.25,
            )
        )
    rps = z32["sidecar"]["rps"]
    out.append(("runs/s, zero latency, concurrency 32", f"{rps:.0f}", "≥ 450", rps >= 450))
    r32 = m["realistic-c32"]["sidecar"]
    out.append(
        (
            "overhead P50, realistic, concurrency 32",
            f"{r32['overhead_p50']:.1f} ms",
            "≤ 12 ms",
            r32["overhead_p50"] <= 12,
        )
    )
    out.append(
        (
            "overhead P99, realistic, concurrency 32",
            f"{r32['overhead_p99']:.1f} ms",
            "≤ 30 ms",
            r32["overhead_p99"] <= 30,
        )
    )
    control = _micro("control_plane")
    if control is not None:
        slowest = max(row["p50_ms"] for name, row in control.items() if "beside" in name)
        out.append(
            (
                "CreateSession / GetSession P50 while 32 turns run",
                f"{slowest:.1f} ms",
                "≤ 5 ms",
                slowest <= 5,
            )
        )
    return out


def summary(results: dict[str, Any]) -> str:
    lines = ["target                                   measured      goal      "]
    for name, measured, goal, met in targets(results):
        lines.append(f"{name:<40} {measured:<13} {goal:<9} {'met' if met else 'NOT MET'}")
    return "\n".join(lines)


def _charts(results: dict[str, Any], img: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = metrics(results)
    img.mkdir(parents=True, exist_ok=True)
    names = list(LABELS)
    short = [n.replace("_", "\n") for n in names]
    files = []

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    own = [m["zero-c1"][n]["cpu_ms"] for n in names]
    axes[0].bar(short, own, color="#4c72b0", label="the contender's process")
    axes[0].bar(
        short,
        [m["zero-c1"][n]["tools_cpu_ms"] for n in names],
        bottom=own,
        color="#8172b3",
        label="its tool server (sidecar only; the peers' tools are in-process)",
    )
    axes[0].set_title("CPU per run, zero latency (ms, lower is better)")
    axes[0].axhline(1.5, color="#c44e52", linestyle="--", label="sidecar target 1.5 ms")
    axes[0].legend()
    axes[1].bar(short, [m["zero-c32"][n]["rps"] for n in names], color="#55a868")
    axes[1].set_title("runs/s, zero latency, concurrency 32 (higher is better)")
    axes[1].axhline(600, color="#c44e52", linestyle="--", label="sidecar target 600")
    axes[1].legend()
    for ax in axes:
        ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(img / "bench-zero-latency.png", dpi=110)
    plt.close(fig)
    files.append("img/bench-zero-latency.png")

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, scenario in zip(axes, ("realistic-c1", "realistic-c32"), strict=True):
        p50 = [m[scenario][n]["overhead_p50"] for n in names]
        p99 = [m[scenario][n]["overhead_p99"] for n in names]
        x = range(len(names))
        ax.bar([i - 0.2 for i in x], p50, width=0.4, label="P50", color="#4c72b0")
        ax.bar([i + 0.2 for i in x], p99, width=0.4, label="P99", color="#dd8452")
        ax.set_xticks(list(x), short, fontsize=7)
        ax.set_yscale("log")
        ax.set_title(f"overhead over the 130 ms critical path, {scenario} (ms, log)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(img / "bench-realistic.png", dpi=110)
    plt.close(fig)
    files.append("img/bench-realistic.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    fan, at_client = fanout(results)
    counts = [int(n) for n in fan]
    ax.plot(counts, [median(fan[str(n)]) for n in counts], marker="o", label="tool stage P50")
    ax.plot(
        counts, [percentile(fan[str(n)], 99) for n in counts], marker="o", label="tool stage P99"
    )
    if at_client is not None:
        ax.plot(
            counts,
            [median(at_client[str(n)]) for n in counts],
            marker="s",
            label="whole run at the client, P50",
        )
    ax.axhline(20, color="grey", linestyle=":", label="one tool (20 ms)")
    ax.axhline(25, color="#c44e52", linestyle="--", label="target 25 ms")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("parallel tool calls in one step")
    ax.set_ylabel("ms")
    ax.set_title("fan-out through the sidecar")
    ax.legend()
    fig.tight_layout()
    fig.savefig(img / "bench-fanout.png", dpi=110)
    plt.close(fig)
    files.append("img/bench-fanout.png")
    return files


# The micro benchmarks `make bench` runs before the peers, quoted from their last run
# (bench/results/NAME.md): name -> (title, command, what it shows).
MICRO = {
    "ledger": (
        "The CPU a run costs",
        "make profile",
        "where the sidecar's and its tool server's CPU per run goes, part by part.",
    ),
    "startup": (
        "Start to ready",
        "make bench-startup",
        "from the spawn of `agent-sidecar serve` to `listening on`, to health SERVING (its "
        "tool servers discovered) and to the first run answered, with the gRPC front alone "
        "and with every front configured (MCP, A2A over gRPC and HTTP, metrics), rounds "
        "alternating; the chart's startup probe is sized from it (docs/kubernetes.md).",
    ),
    "control_plane": (
        "Control-plane calls beside running turns",
        "make bench-control-plane",
        "CreateSession and GetSession latency on an idle sidecar and while 32 zero-latency "
        "turns keep it busy.",
    ),
    "model_transport": (
        "The model transports and pacing",
        "make bench-model",
        "CPU per model request of each transport (docs/models.md#transports), and a burst "
        "against a rate-limited endpoint with pacing on and off (docs/models.md#pacing).",
    ),
    "background_runs": (
        "Background runs",
        "make bench-background",
        "a background run (StartRun, then WatchRun to its end) against the same run "
        "streamed (StreamRun), and the throughput of one and two replicas on one PostgreSQL "
        "(docs/background-runs.md).",
    ),
    "hedging": (
        "Hedged calls: a heavy-tailed tool",
        "make bench-hedging",
        "a tool whose calls take 10 ms but a share of them 200 ms, with hedging off and "
        "on (docs/runtime-policies.md#hedged-calls).",
    ),
    "cost_guard": (
        "The cost guard: runs capped, a principal's day",
        "make bench-cost",
        "research runs of random depth with the cost guard off and on, capped at the median "
        "run's cost, and a principal's daily quota (docs/runtime-policies.md#the-cost-guard).",
    ),
    "speculation": (
        "Speculative prefetch on repeated turns",
        "make bench-speculation",
        "support-desk turns through a sidecar whose profile speculates and one that does "
        "not (docs/runtime-policies.md#speculative-prefetch).",
    ),
    "light_path": (
        "The light path under a load ramp",
        "make bench-light",
        "runs arriving at rising rates against a sidecar that refuses past its capacity and "
        "one whose profile has a light variant "
        "(docs/runtime-policies.md#the-light-path-under-load).",
    ),
    "recording_cost": (
        "What recording costs",
        "make bench-recording",
        "sidecar CPU per run with recording off, configured but not drawn (record: 0), and "
        "recording every turn (record: 1): the price of one recorded run, and of a share "
        "(docs/replay.md#what-recording-costs).",
    ),
    "mcp": (
        "MCP both ways",
        "make bench-mcp",
        "a tool call through the MCP bridge in the sidecar, through a bridge process, and "
        "served natively; an MCP host's call through the sidecar against calling the tool "
        "directly (docs/mcp.md).",
    ),
    "a2a": (
        "A turn through A2A",
        "make bench-a2a",
        "the same turn through A2A's gRPC binding (a blocking SendMessage from the a2a-sdk "
        "client) and through AgentService (Run), interleaved (docs/a2a.md#cost).",
    ),
    "unix_socket": (
        "A Unix socket against loopback TCP",
        "make bench-unix",
        "the same calls to one sidecar over its Unix socket (server.unix_socket) and its "
        "TCP port, alternating (docs/kubernetes.md#the-application-on-a-unix-socket).",
    ),
}


def write(
    results: dict[str, Any], doc: Path, img: Path, micro: dict[str, str] | None = None
) -> None:
    """Write the report and its charts; ``micro`` holds the micro benchmarks' tables."""
    m = metrics(results)
    _charts(results, img)
    machine, versions = results["machine"], results["versions"]
    out = [
        "# Benchmarks",
        "",
        "The same agent workload through each contender, against the same LLM simulator and",
        "the same tools, contenders interleaved round by round, in one run on one machine.",
        "This page is written by the benchmark itself; the numbers below are from its last",
        "run. The machines are shared and noisy: read the ratios, not the third digit.",
        "",
        f"Command: `{results['command']}` (or `make bench`); it took "
        f"{results['duration_s']:.0f} s. Raw samples: `bench/results/latest.json`.",
        "",
        "**Workload.** One user turn = 2 model calls (the first asks for 3 parallel tool "
        "calls) + 3 tool calls. *Zero latency*: the simulator and the tools answer at once, "
        "so what is left is each contender's own orchestration cost. *Realistic*: each model "
        "call takes 50 ms, the tools 30, 20 and 10 ms, so the ideal critical path is 130 ms "
        "and overhead = latency - 130 ms, measured at the calling client.",
        "",
        "**Contenders.** The sidecar is called over gRPC by a client process; it calls the "
        "simulator over HTTP and every tool over gRPC in a separate tool-server process. "
        "Every peer runs its tools in-process. CPU is the contender's own process (for the "
        "sidecar, the sidecar process; its client's CPU is shown apart). The first sidecar "
        "row is the default configuration: every turn is stored durably in SQLite. The "
        "others each change one thing. *Session created inside the run*: a one-shot caller's "
        "CreateSession then Run. *Sessions in memory*, as every peer keeps them: the "
        "difference is what durability costs. *Model requests through openai.AsyncOpenAI* "
        "(`model.transport: sdk`, raw bytes in and out) instead of the sidecar's own "
        "transport: the difference is what keeping the SDK's plumbing off the hot path "
        "saves. *gRPC's default I/O*, on its EventEngine threads, instead of the poller the "
        "sidecar loads it with (`agentsidecar/grpc_io.py`; its tool server is the same as "
        "the others'): what that choice saves. *TLS and token authentication*: the caller "
        "dials TLS with a bearer token the sidecar checks, and the sidecar dials its tool "
        "server over mutual TLS with a token that server checks (docs/security.md): what "
        "the locked-down setup costs, tool server's CPU included. The "
        "textbook loop uses the SDK's full `chat.completions.create`.",
        "",
        "## Targets",
        "",
        "| target | measured | goal | |",
        "| --- | --- | --- | --- |",
    ]
    for name, measured, goal, met in targets(results):
        out.append(f"| {name} | {measured} | {goal} | {'met' if met else '**not met**'} |")
    out += [
        "",
        "## Zero latency: orchestration cost",
        "",
        "![zero latency](img/bench-zero-latency.png)",
        "",
        "CPU per run is the contender's own process; for the sidecar it is shown alone and "
        "with its tool server's CPU added (**with tools**), the figure to compare with the "
        "peers, which run their tools in-process. The sidecar's calling client is shown apart "
        "(every peer's caller would pay its own too).",
        "",
        "| contender | CPU/run c=1 (ms) | with tools c=1 | runs/s c=1 | CPU/run c=32 (ms) | "
        "with tools c=32 | runs/s c=32 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, label in LABELS.items():
        a, b = m["zero-c1"][name], m["zero-c32"][name]
        sidecar = name.startswith("sidecar")
        extra = f" (+ client {a['client_cpu_ms']:.2f})" if sidecar else ""
        with_a = f"{a['total_cpu_ms']:.2f}" if sidecar else "(in-process)"
        with_b = f"{b['total_cpu_ms']:.2f}" if sidecar else "(in-process)"
        out.append(
            f"| {label} | {a['cpu_ms']:.2f}{extra} | {with_a} | {a['rps']:.0f} | "
            f"{b['cpu_ms']:.2f} | {with_b} | {b['rps']:.0f} |"
        )
    out += [
        "",
        "## Realistic latency: overhead at the client",
        "",
        "![realistic](img/bench-realistic.png)",
        "",
        "| contender | P50 c=1 (ms) | overhead P50 / P99 c=1 | P50 c=32 (ms) | "
        "overhead P50 / P99 c=32 |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, label in LABELS.items():
        a, b = m["realistic-c1"][name], m["realistic-c32"][name]
        out.append(
            f"| {label} | {a['p50']:.1f} | {a['overhead_p50']:.1f} / {a['overhead_p99']:.1f} | "
            f"{b['p50']:.1f} | {b['overhead_p50']:.1f} / {b['overhead_p99']:.1f} |"
        )
    fan, at_client = fanout(results)
    out += [
        "",
        "The textbook loop runs its tools one after another, so its critical path is "
        "160 ms, not 130: its overhead column includes that 30 ms.",
        *_overhead_parts(results),
        "",
        "## Fan-out: N parallel 20 ms tools in one step",
        "",
        "![fan-out](img/bench-fanout.png)",
        "",
        "The tool stage, from the first call's start to the last call's end, as the sidecar's "
        "timeline reports it (every call crosses a process boundary over gRPC), and the whole "
        "run as the calling client measures it.",
        "",
        "| parallel calls | " + " | ".join(fan) + " |",
        "| --- |" + " --- |" * len(fan),
        "| tool stage P50 (ms) | " + " | ".join(f"{median(v):.1f}" for v in fan.values()) + " |",
        "| tool stage P99 (ms) | "
        + " | ".join(f"{percentile(v, 99):.1f}" for v in fan.values())
        + " |",
    ]
    if at_client is not None:
        out += [
            "| whole run at the client P50 (ms) | "
            + " | ".join(f"{median(v):.1f}" for v in at_client.values())
            + " |",
            "| whole run at the client P99 (ms) | "
            + " | ".join(f"{percentile(v, 99):.1f}" for v in at_client.values())
            + " |",
            "",
            "The whole run, as the calling client measures it, is two model calls "
            "(zero latency) around the tool stage, plus the gRPC hop in and out.",
        ]
    stream = results["streaming"]
    out += [
        "",
        "## Streaming: time to the first text delta",
        "",
        "The simulator's time to first token is 50 ms. *Direct* reads the simulator's stream "
        "with aiohttp; *sidecar* is the first `text_delta` event of `StreamRun` at the gRPC "
        "client (the sidecar streams the model's text as it arrives).",
        "",
        "| path | P50 (ms) | P99 (ms) |",
        "| --- | --- | --- |",
    ]
    for name, samples in stream.items():
        out.append(f"| {name} | {median(samples):.1f} | {percentile(samples, 99):.1f} |")
    early = results.get("early_dispatch")
    if early:
        on, off = median(early["on"]), median(early["off"])
        out += [
            "",
            "## Early dispatch: tools started from the model's stream",
            "",
            "The workload through `StreamRun` with the model's answer streamed (50 ms to the "
            "first token, then a fragment every 5 ms; each tool call is a few fragments), "
            "tools 30, 20 and 10 ms. With early dispatch a read-only call starts as soon as "
            "its arguments are complete, while the model still streams the calls after it; "
            "off, every call waits for the whole answer. Same sidecar, two profiles, runs "
            "interleaved.",
            "",
            "| early dispatch | P50 (ms) | P99 (ms) |",
            "| --- | --- | --- |",
            f"| on | {on:.1f} | {percentile(early['on'], 99):.1f} |",
            f"| off | {off:.1f} | {percentile(early['off'], 99):.1f} |",
            "",
            f"Saved per run at the median: {off - on:.1f} ms.",
        ]
    out += _tiering(results)
    for name, text in (micro or {}).items():
        title, command, what = MICRO[name]
        source = f"From the last run of `{command}` (`make bench` runs it first): {what}"
        body = text.strip()
        if body.startswith("# "):  # the file's own title: the section has one
            body = body.split("\n", 1)[1].strip() if "\n" in body else ""
        out += ["", f"## {title}", "", source, "", body]
    out += [
        "",
        f"Sidecar peak RSS during the run: {results.get('sidecar_peak_rss_mib', 0):.0f} MiB.",
        "",
        "## Machine and versions",
        "",
        f"- CPU: {machine['cpu']}, {machine['cores']} cores; Python {machine['python']}; "
        f"{machine['platform']}",
        "- " + ", ".join(f"{k} {v}" for k, v in versions.items()),
        "",
        "## Where the sidecar's time goes",
        "",
        "See [the profile notes](#profile) below.",
        "",
    ]
    doc.write_text("\n".join(out) + _profile_notes(doc))


def _tiering(results: dict[str, Any]) -> list[str]:
    tiering, setup = results.get("tiering"), results.get("tiering_setup")
    if not tiering or not setup:
        return []
    single, tiered = tiering["single"], tiering["tiered"]
    cost_ratio = median(single["cost_usd"]) / max(median(tiered["cost_usd"]), 1e-12)
    out = [
        "",
        "## Tiering: a small model for the tool steps",
        "",
        f"The workload on one model (`{setup['big']}`, {setup['big_ttft_ms']} ms to the "
        f"first token) for every step, and tiered: `{setup['small']}` "
        f"({setup['small_ttft_ms']} ms) chooses the tools and, once it needs no more, "
        f"`{setup['big']}` writes the answer (`profiles.NAME.tools_model`). Latency at "
        "the client; cost per run at Groq's list prices, from each run's `RunResult.cost`. "
        "Same sidecar, two profiles, runs interleaved.",
        "",
        "| profile | model calls | P50 (ms) | P99 (ms) | cost per run (USD) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, samples in (("one model", single), ("tiered", tiered)):
        out.append(
            f"| {name} | {median(samples['model_calls']):.0f} | "
            f"{median(samples['latency_ms']):.1f} | {percentile(samples['latency_ms'], 99):.1f} | "
            f"{median(samples['cost_usd']):.6f} |"
        )
    out += [
        "",
        f"The tiered run makes one model call more (the small model's last step, whose "
        f"text is dropped) and costs {_as_much(cost_ratio)}; its latency is the sum of its "
        "calls' latencies, so it gains when the small model is faster by more than the "
        "answer call it adds, and saves money only when the small model is cheaper by "
        "more than the call it adds costs.",
    ]
    return out


def _as_much(ratio: float) -> str:
    """``ratio`` (one model's cost over the tiered one's) said the right way round."""
    if ratio >= 1:
        return f"{ratio:.2f}x less"
    return f"{1 / ratio:.2f}x as much"


_PARTS = {
    "model": "model calls beyond their 50 ms each (the simulator's timer, the HTTP exchange)",
    "tools": "the tool step beyond its slowest tool's 30 ms (gRPC hop, tool server)",
    "sidecar": "the sidecar's own stages (queue, context, persistence, the rest)",
    "client_hop": "the client's gRPC hop into the sidecar and back",
}


def _overhead_parts(results: dict[str, Any]) -> list[str]:
    """Where the default sidecar's realistic overhead goes, from the runs' timelines."""
    scenarios = results["scenarios"]
    columns = [name for name in ("realistic-c1", "realistic-c32") if name in scenarios]
    parts = {
        name: [b for batch in scenarios[name]["batches"]["sidecar"] for b in batch["breakdowns"]]
        for name in columns
        if all("breakdowns" in batch for batch in scenarios[name]["batches"]["sidecar"])
    }
    if not parts:
        return []
    out = [
        "",
        "### Where the sidecar's overhead goes",
        "",
        "Each run's timeline (returned with its result) splits the default sidecar's "
        "overhead into parts; each part's median and P99 in ms (parts of different runs: "
        "they do not add up exactly to the overhead's own percentiles):",
        "",
        "| part | "
        + " | ".join(f"c={scenarios[n]['concurrency']} {q}" for n in parts for q in ("P50", "P99"))
        + " |",
        "| --- |" + " --- |" * (2 * len(parts)),
    ]
    for key, label in _PARTS.items():
        cells = " | ".join(
            f"{median(v):.2f} | {percentile(v, 99):.2f}"
            for v in ([b[key] for b in parts[n]] for n in parts)
        )
        out.append(f"| {label} | {cells} |")
    wake = results.get("wakeup")
    if wake:
        hot, cold = (median(v) for v in wake.values())
        out += [
            "",
            f"On this machine a round trip to the zero-latency simulator takes {hot:.2f} ms "
            f"back to back but {cold:.2f} ms after the client slept 50 ms (medians of "
            f"{len(next(iter(wake.values())))}): a process that sleeps through a model call "
            "wakes to cold caches. Every contender pays this for each process it wakes; the "
            "floor wakes two (itself and the simulator), the sidecar's path four (client, "
            "sidecar, simulator, tool server), which is most of the gap between them at "
            "concurrency 1.",
        ]
    return out


def _profile_notes(doc: Path) -> str:
    """Keep the hand-written profile section that follows the generated part."""
    marker = '<a id="profile"></a>'
    if doc.exists():
        text = doc.read_text()
        if marker in text:
            return (
                text[text.index(marker) - 1 :]
                if text[text.index(marker) - 1] == "\n"
                else ("\n" + text[text.index(marker) :])
            )
    return f"\n{marker}\n\n## Profile\n\n(not written yet)\n"
