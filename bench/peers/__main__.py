"""Run the benchmark: every contender, the same workload, the same simulator, one run.

``python -m bench.peers`` (or ``make bench``) starts the LLM simulators, the tool servers,
the sidecars and one long-lived process per contender, then repeats each scenario
``--repeats`` times with the contenders interleaved (the order rotates every round, so
machine drift hits all alike). It writes the raw samples to ``bench/results/latest.json``
and the report (tables, targets, charts) to ``docs/benchmarks.md`` and ``docs/img/``.

Scenarios (one user turn = 2 model calls, the first asking for 3 parallel tool calls):

- zero latency, concurrency 1 and 32: runs/s and CPU per run of the contender's process
  (for the sidecar: the sidecar's process; its client is reported apart);
- realistic (model 50 ms per call, tools 30/20/10 ms), concurrency 1 and 32: latency at
  the calling client and overhead = latency - 130 ms (the ideal critical path);
- fan-out: 1 to 32 parallel 20 ms tools in one step through the sidecar;
- streaming: time to the first text delta through the sidecar against a direct stream.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import platform
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from bench import processes
from bench.peers import report
from bench.workload import PROMPT, REALISTIC, ZERO
from sidecar.testing import ServerProcess
from sidecar.testing.certs import TestCA

CONTENDERS = (
    "sidecar",
    "sidecar_new_session",
    "sidecar_memory",
    "sidecar_sdk",
    "sidecar_event_engine",
    "sidecar_secure",
    "floor",
    "textbook",
    "textbook_threads",
    "langgraph_react",
    "langchain_agent",
    "openai_agents",
)
FANOUT = (1, 2, 4, 8, 16, 32)
FANOUT_TOOL_MS = 20.0
EARLY_TOKEN_MS = 5.0


def _scenarios(quick: bool) -> list[dict[str, Any]]:
    scale = 0.25 if quick else 1.0
    return [
        {"name": "zero-c1", "mode": ZERO, "concurrency": 1, "runs": int(200 * scale)},
        {"name": "zero-c32", "mode": ZERO, "concurrency": 32, "runs": int(640 * scale)},
        {"name": "realistic-c1", "mode": REALISTIC, "concurrency": 1, "runs": int(20 * scale)},
        {"name": "realistic-c32", "mode": REALISTIC, "concurrency": 32, "runs": int(320 * scale)},
    ]


_CALLER_TOKEN = "bench-caller-token"  # a benchmark's throwaway tokens
_TOOLS_TOKEN = "bench-tools-token"


class Stack:
    """Every process of the run."""

    def __init__(self, workdir: Path) -> None:
        self.sims = {
            "zero": processes.simulator(),
            "realistic": processes.simulator("--ttft-ms", str(REALISTIC.model_ms)),
        }
        self.shops = {
            "zero": processes.shop(ZERO.tool_ms),
            "realistic": processes.shop(REALISTIC.tool_ms),
        }
        # "sidecar_secure": TLS on both gRPC links, a caller's token checked by the
        # sidecar and the sidecar's token (and client certificate) checked by its own
        # tool servers; what the locked-down setup of docs/security.md costs.
        ca = TestCA(workdir / "pki")
        issued = ca.issue("bench-server")
        client = ca.issue("bench-sidecar", client=True)
        tls_flags = (
            *("--tls-cert", issued.cert_file, "--tls-key", issued.key_file),
            *("--tls-client-ca", ca.ca_file, "--token-env", "BENCH_TOOLS_TOKEN"),
        )
        tools_env = {"BENCH_TOOLS_TOKEN": _TOOLS_TOKEN}
        self.secure_shops = {
            "zero": processes.shop(ZERO.tool_ms, *tls_flags, env=tools_env),
            "realistic": processes.shop(REALISTIC.tool_ms, *tls_flags, env=tools_env),
        }
        secure = {
            "server": {"tls": {"cert_file": issued.cert_file, "key_file": issued.key_file}},
            "auth": {
                "principals": [
                    {
                        "name": "bench",
                        "token_sha256": hashlib.sha256(_CALLER_TOKEN.encode()).hexdigest(),
                    }
                ]
            },
            "tool_server": {
                "tls": {
                    "ca_file": ca.ca_file,
                    "cert_file": client.cert_file,
                    "key_file": client.key_file,
                },
                "token_env": "BENCH_TOOLS_TOKEN",
            },
            "env": tools_env,
        }
        # One sidecar per mode and variant: "sidecar" is the default configuration (model
        # requests straight through aiohttp, sessions in SQLite); "sidecar_memory" keeps
        # sessions in memory (what durability costs); "sidecar_sdk" sends model requests
        # through openai.AsyncOpenAI (what the direct transport saves);
        # "sidecar_event_engine" keeps gRPC's default I/O (what agentsidecar.grpc_io saves).
        # "sidecar_new_session" is the default configuration with each run's session
        # created inside the timed run (CreateSession, then Run), as a one-shot caller does.
        variants: dict[str, tuple[str, str, dict[str, Any]]] = {
            "sidecar": ("direct", "sqlite", {}),
            "sidecar_new_session": ("direct", "sqlite", {}),
            "sidecar_memory": ("direct", "memory", {}),
            "sidecar_sdk": ("sdk", "sqlite", {}),
            "sidecar_event_engine": ("direct", "sqlite", {"env": {"GRPC_EXPERIMENTS": ""}}),
            "sidecar_secure": ("direct", "sqlite", secure),
        }
        self.sidecars = {
            (name, mode): processes.sidecar(
                self.sims[mode],
                [("shop", self._shop(name, mode))],
                workdir,
                transport=transport,
                store=store,
                **options,
            )
            for name, (transport, store, options) in variants.items()
            for mode in self.sims
        }
        secure_caller = {
            "BENCH_CA_FILE": ca.ca_file,
            "BENCH_SERVER_NAME": "localhost",
            "BENCH_TOKEN": _CALLER_TOKEN,
        }
        self.workers = {
            name: processes.Worker(
                name,
                module=_contender_module(name),
                env=secure_caller if name == "sidecar_secure" else None,
            )
            for name in CONTENDERS
        }

    def _shop(self, contender: str, mode: str) -> ServerProcess:
        return (self.secure_shops if contender == "sidecar_secure" else self.shops)[mode]

    def sidecar(self, contender: str, mode: str) -> ServerProcess | None:
        return self.sidecars.get((contender, mode))

    def tool_server(self, contender: str, mode: str) -> ServerProcess | None:
        """The tool server a sidecar contender calls; None for the peers (tools in-process)."""
        return self._shop(contender, mode) if (contender, mode) in self.sidecars else None

    def target(self, contender: str, mode: str) -> str:
        sidecar = self.sidecar(contender, mode)
        if sidecar is not None:
            return sidecar.address
        return f"http://{self.sims[mode].address}/openai/v1"

    def stop(self) -> None:
        for worker in self.workers.values():
            worker.stop()
        for group in (self.sidecars, self.shops, self.secure_shops, self.sims):
            for server in group.values():
                server.stop()


def _batch(stack: Stack, contender: str, scenario: dict[str, Any]) -> dict[str, Any]:
    mode = scenario["mode"].name
    worker = stack.workers[contender]
    target = stack.target(contender, mode)
    command = {"mode": mode, "target": target, "concurrency": scenario["concurrency"]}
    warmup = max(scenario["concurrency"], 10)
    worker.command(op="prepare", runs=warmup, **command)
    worker.command(op="batch", runs=warmup, **command)  # warm connections and caches
    worker.command(op="prepare", runs=scenario["runs"], **command)
    sidecar = stack.sidecar(contender, mode)
    tools = stack.tool_server(contender, mode)
    cpu0 = sidecar.cpu_seconds() if sidecar else 0.0
    tools0 = tools.cpu_seconds() if tools else 0.0
    result = worker.command(op="batch", runs=scenario["runs"], **command)
    if sidecar is not None and tools is not None:
        # The peers run their tools in-process: like with like is the sidecar's CPU plus
        # its tool server's (contenders' batches never overlap, so the delta is this one's).
        result["client_cpu_s"] = result["cpu_s"]
        result["cpu_s"] = sidecar.cpu_seconds() - cpu0
        result["tools_cpu_s"] = tools.cpu_seconds() - tools0
    return result


def _contender_module(name: str) -> str:
    """The contender module a worker loads: sidecar variants differ by configuration only."""
    if name in ("sidecar_new_session", "sidecar_secure"):
        return name
    return "sidecar" if name.startswith("sidecar") else name


async def _fanout(address: str, runs: int) -> dict[str, dict[str, list[float]]]:
    """N parallel 20 ms tools in one step: the tool stage as the sidecar's timeline has it,
    and the whole run (two model calls around it) as the calling client sees it."""
    stages: dict[str, list[float]] = {str(n): [] for n in FANOUT}
    client: dict[str, list[float]] = {str(n): [] for n in FANOUT}
    async with AgentClient(address) as agent:
        await agent.wait_ready()
        for _ in range(runs):
            for n in FANOUT:
                session = await agent.create_session()
                sent = time.perf_counter()
                response = await agent.run(session.session_id, f"fanout {n}", timeout=30)
                client[str(n)].append((time.perf_counter() - sent) * 1000)
                calls = [
                    s
                    for s in response.result.timeline.stages
                    if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL
                ]
                if len(calls) != n:
                    raise RuntimeError(f"fanout {n}: {len(calls)} tool calls")
                start = min(_s(c.start_offset) for c in calls)
                end = max(_s(c.start_offset) + _s(c.duration) for c in calls)
                stages[str(n)].append((end - start) * 1000)
    return {"tool_stage": stages, "client": client}


async def _streaming(sidecar: str, sim: str, runs: int) -> dict[str, list[float]]:
    prompt = "tell me a short story"
    samples: dict[str, list[float]] = {"sidecar": [], "direct": []}
    body = orjson.dumps(
        {
            "model": "bench-model",
            "messages": [{"role": "user", "content": prompt}],
            "stream": True,
        }
    )
    async with AgentClient(sidecar) as client, aiohttp.ClientSession() as http:
        await client.wait_ready()
        for _ in range(runs):
            session = await client.create_session()
            start = time.perf_counter()
            async for event in client.stream(session.session_id, prompt, timeout=30):
                if event.WhichOneof("event") == "text_delta":
                    samples["sidecar"].append((time.perf_counter() - start) * 1000)
                    break
            start = time.perf_counter()
            url = f"http://{sim}/openai/v1/chat/completions"
            async with http.post(
                url, data=body, headers={"content-type": "application/json"}
            ) as response:
                async for line in response.content:
                    if b'"content":"' in line and b'"content":""' not in line:
                        samples["direct"].append((time.perf_counter() - start) * 1000)
                        break
    return samples


async def _early_dispatch(address: str, runs: int) -> dict[str, list[float]]:
    """The workload through StreamRun, the model's answer streamed a fragment every
    5 ms: end-to-end latency with early dispatch on, and off (profile ``no_early``)."""
    samples: dict[str, list[float]] = {"on": [], "off": []}
    async with AgentClient(address) as client:
        await client.wait_ready()
        for _ in range(runs):
            for label, profile in (("on", "default"), ("off", "no_early")):
                session = await client.create_session(profile)
                start = time.perf_counter()
                async for event in client.stream(session.session_id, PROMPT, timeout=30):
                    if event.WhichOneof("event") == "run_finished":
                        if event.run_finished.tool_calls != 3:
                            raise RuntimeError(f"unexpected run: {event.run_finished}")
                samples[label].append((time.perf_counter() - start) * 1000)
    return samples


TIER_BIG = "openai/gpt-oss-120b"
TIER_SMALL = "openai/gpt-oss-20b"
TIER_BIG_TTFT_MS, TIER_SMALL_TTFT_MS = 120, 30


async def _tiering(address: str, runs: int) -> dict[str, dict[str, list[float]]]:
    """The workload on one model for every step (``single``), and tiered (``tiered``:
    the small model chooses the tools, the big one answers): latency at the client and
    cost per run at Groq's list prices, runs interleaved."""
    samples: dict[str, dict[str, list[float]]] = {
        name: {"latency_ms": [], "cost_usd": [], "model_calls": []} for name in ("single", "tiered")
    }
    async with AgentClient(address) as client:
        await client.wait_ready()
        for _ in range(runs):
            for name in ("single", "tiered"):
                session = await client.create_session(name)
                start = time.perf_counter()
                response = await client.run(session.session_id, PROMPT, timeout=30)
                samples[name]["latency_ms"].append((time.perf_counter() - start) * 1000)
                result = response.result
                if result.tool_calls != 3 or result.stop_reason != agent_pb2.STOP_REASON_ANSWERED:
                    raise RuntimeError(f"unexpected run: {result}")
                samples[name]["cost_usd"].append(result.cost.total_usd)
                calls = [
                    s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_MODEL_CALL
                ]
                samples[name]["model_calls"].append(float(len(calls)))
    return samples


async def _wakeup(sim: str, runs: int) -> dict[str, list[float]]:
    """A zero-latency simulator round trip back to back, and after 50 ms asleep: what
    waking a sleeping process costs on this machine, paid by every contender."""
    body = orjson.dumps({"model": "bench-model", "messages": [{"role": "user", "content": "hi"}]})
    url = f"http://{sim}/openai/v1/chat/completions"
    samples: dict[str, list[float]] = {"back to back": [], "after 50 ms asleep": []}
    async with aiohttp.ClientSession() as http:
        for _ in range(runs):
            for label, pause in (("back to back", 0.0), ("after 50 ms asleep", 0.05)):
                await asyncio.sleep(pause)
                start = time.perf_counter()
                async with http.post(
                    url, data=body, headers={"content-type": "application/json"}
                ) as response:
                    await response.read()
                samples[label].append((time.perf_counter() - start) * 1000)
    return samples


def _s(duration: Any) -> float:
    return float(duration.seconds + duration.nanos / 1e9)


def _fanout_scenario(path: Path) -> None:
    rules = [
        {
            "match": f"^fanout {n}$",
            "steps": [
                {"tool_calls": [{"name": "probe", "arguments": {"tag": str(i)}} for i in range(n)]},
                {"text": "done"},
            ],
        }
        for n in FANOUT
    ]
    path.write_text(yaml.safe_dump(rules))


def _versions() -> dict[str, str]:
    names = (
        "grpcio",
        "protobuf",
        "openai",
        "aiohttp",
        "uvloop",
        "langgraph",
        "langchain",
        "langchain-openai",
        "openai-agents",
    )
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def _machine() -> dict[str, Any]:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    import os

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds per scenario")
    parser.add_argument("--quick", action="store_true", help="a quarter of the runs")
    parser.add_argument("--out", default="bench/results/latest.json")
    parser.add_argument("--doc", default="docs/benchmarks.md")
    parser.add_argument(
        "--report",
        action="store_true",
        help="measure nothing: write the report again from --out and the micro benchmarks' "
        "last results (after a micro benchmark ran alone)",
    )
    args = parser.parse_args()
    if args.report:
        _write_report(json.loads(Path(args.out).read_text()), Path(args.doc))
        return
    started = time.time()
    results: dict[str, Any] = {
        "command": "python -m bench.peers"
        + (" --quick" if args.quick else "")
        + (f" --repeats {args.repeats}" if args.repeats != 3 else ""),
        "machine": _machine(),
        "versions": _versions(),
        "scenarios": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        stack = Stack(workdir)
        try:
            for scenario in _scenarios(args.quick):
                samples: dict[str, list[dict[str, Any]]] = {c: [] for c in CONTENDERS}
                for round_number in range(args.repeats):
                    shift = round_number % len(CONTENDERS)
                    order = CONTENDERS[shift:] + CONTENDERS[:shift]
                    for contender in order:
                        samples[contender].append(_batch(stack, contender, scenario))
                    print(
                        f"{scenario['name']}: round {round_number + 1}/{args.repeats}", flush=True
                    )
                results["scenarios"][scenario["name"]] = {
                    "mode": scenario["mode"].name,
                    "ideal_ms": scenario["mode"].ideal_ms,
                    "concurrency": scenario["concurrency"],
                    "runs": scenario["runs"],
                    "batches": samples,
                }
            results["sidecar_peak_rss_mib"] = stack.sidecars[("sidecar", "realistic")].rss_mib()
            results["wakeup"] = asyncio.run(_wakeup(stack.sims["zero"].address, 60))
        finally:
            stack.stop()

        scenario_file = workdir / "fanout.yaml"
        _fanout_scenario(scenario_file)
        sim = processes.simulator("--scenario", str(scenario_file))
        tools = processes.start(
            "-m", "bench.peers.fanout_tools", "--port", "0", "--latency-ms", str(FANOUT_TOOL_MS)
        )
        side = processes.sidecar(sim, [("fanout", tools)], workdir)
        stream_sim = processes.simulator("--ttft-ms", "50", "--token-ms", "2")
        stream_side = processes.sidecar(stream_sim, [], workdir)
        early_sim = processes.simulator("--ttft-ms", "50", "--token-ms", str(EARLY_TOKEN_MS))
        early_shop = processes.shop(REALISTIC.tool_ms)
        big_sim = processes.simulator("--ttft-ms", str(TIER_BIG_TTFT_MS))
        small_sim = processes.simulator("--ttft-ms", str(TIER_SMALL_TTFT_MS))
        tier_shop = processes.shop(REALISTIC.tool_ms)
        tier_side = processes.sidecar(
            big_sim,
            [("shop", tier_shop)],
            workdir,
            model={"model": TIER_BIG},
            profiles={
                "single": {},
                "tiered": {
                    "tools_model": {
                        "model": TIER_SMALL,
                        "base_url": f"http://{small_sim.address}/openai/v1",
                    }
                },
            },
        )
        early_side = processes.sidecar(
            early_sim,
            [("shop", early_shop)],
            workdir,
            profiles={"default": {}, "no_early": {"early_dispatch": False}},
        )
        try:
            results["fanout"] = asyncio.run(
                _fanout(side.address, 5 if args.quick else 20 * args.repeats // 3)
            )
            print("fan-out: done", flush=True)
            results["streaming"] = asyncio.run(
                _streaming(
                    stream_side.address,
                    stream_sim.address,
                    10 if args.quick else 30 * args.repeats // 3,
                )
            )
            print("streaming: done", flush=True)
            results["early_dispatch"] = asyncio.run(
                _early_dispatch(early_side.address, 10 if args.quick else 30 * args.repeats // 3)
            )
            print("early dispatch: done", flush=True)
            results["tiering"] = asyncio.run(
                _tiering(tier_side.address, 10 if args.quick else 30 * args.repeats // 3)
            )
            results["tiering_setup"] = {
                "big": TIER_BIG,
                "small": TIER_SMALL,
                "big_ttft_ms": TIER_BIG_TTFT_MS,
                "small_ttft_ms": TIER_SMALL_TTFT_MS,
            }
            print("tiering: done", flush=True)
        finally:
            for server in (
                tier_side,
                tier_shop,
                big_sim,
                small_sim,
                side,
                tools,
                sim,
                stream_side,
                stream_sim,
                early_side,
                early_shop,
                early_sim,
            ):
                server.stop()
    results["duration_s"] = time.time() - started
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    _write_report(results, Path(args.doc))
    print(report.summary(results))


def _write_report(results: dict[str, Any], doc: Path) -> None:
    """The report of ``results``, quoting each micro benchmark's last results."""
    micro = {name: Path(f"bench/results/{name}.md") for name in report.MICRO}
    quoted = {name: path.read_text() for name, path in micro.items() if path.exists()}
    report.write(results, doc, Path("docs/img"), quoted)


if __name__ == "__main__":
    main()
