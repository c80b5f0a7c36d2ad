"""The soak's processes and the levers its chaos pulls on them.

One LLM simulator, one tool server on a fixed port (the example ``shop``, or the
chaos double ``bench.soak.chaos_toolserver`` in its place: same tools, same latencies) and
one sidecar on a fixed port, so a killed tool server or a restarted sidecar comes back
where its callers look for it. Every process logs to ``<workdir>/<name>.log``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import orjson
import yaml

from agentsidecar.v1 import agent_pb2, agent_pb2_grpc, tool_pb2, tool_pb2_grpc
from bench.processes import SERVE_BENCH_MODELS, start
from bench.soak.load import CHANNEL_OPTIONS, drive_turn
from bench.soak.outcomes import Verdict
from sidecar.testing import ServerProcess

TOOL_MS = {"check_inventory": 30.0, "get_price": 20.0, "get_discount": 10.0}
"""The shop's simulated handler latency per tool, in milliseconds."""

TOOL_SERVER_MODULES = {"shop": "toolservers.examples.shop", "chaos": "bench.soak.chaos_toolserver"}


def sidecar_config(sim_address: str, tools_address: str) -> dict[str, Any]:
    """The soak's sidecar configuration (reported with the results)."""
    return {
        "server": {"host": "127.0.0.1", "port": 0, "grace_period": 10},
        "model": {
            "base_url": f"http://{sim_address}/openai/v1",
            "keyless": True,
            "model": "soak-model",
            # A hung model request is abandoned after 5 s and retried.
            "timeout": 5,
            "retry": {"max_attempts": 4, "initial_backoff": 0.1, "max_backoff": 2},
        },
        # The chaos double's control tools stay out of the model's sight.
        "profiles": {"default": {"tools": list(TOOL_MS)}},
        "tool_servers": [
            {
                "name": "shop",
                "address": tools_address,
                "timeout": 5,
                "retry": {"max_attempts": 3, "initial_backoff": 0.05, "max_backoff": 0.5},
                # Opened by a failure rate: at hundreds of calls a second, five failures
                # in a row happen by chance to a server failing a quarter of its calls.
                "breaker": {
                    "failure_threshold": 5,
                    "reset_timeout": 5,
                    "failure_rate": 0.5,
                    "window": 100,
                },
            }
        ],
    }


class ProcessStats:
    """CPU and memory of the sidecar across restarts, sampled from /proc."""

    def __init__(self) -> None:
        self._cpu: dict[int, float] = {}  # pid -> CPU seconds at its last sample
        self._peak: dict[int, float] = {}  # pid -> VmHWM at its last sample

    def sample(self, server: ServerProcess) -> None:
        try:
            self._cpu[server.popen.pid] = server.cpu_seconds()
            self._peak[server.popen.pid] = server.rss_mib()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            pass  # exited between samples: its last sample stands

    def cpu_seconds(self) -> float:
        return sum(self._cpu.values())

    def peak_rss_mib(self) -> float:
        return max(self._peak.values(), default=0.0)


class SoakStack:
    """The simulator, the tool server and the sidecar of one soak run."""

    def __init__(self, workdir: Path, *, ttft_ms: float) -> None:
        self.workdir = workdir
        self.sim = start(
            "-m",
            "llmsim",
            *SERVE_BENCH_MODELS,
            "--port",
            "0",
            "--ttft-ms",
            f"{ttft_ms:g}",
            log=workdir / "simulator.log",
        )
        self.tools_kind = "shop"
        self.tools = self._tools_process("shop", 0)
        self.tools_port = _port(self.tools.address)
        self.config = sidecar_config(self.sim.address, self.tools.address)
        self.config["sessions"] = {"sqlite": {"path": str(workdir / "sessions.db")}}
        self.config_path = workdir / "sidecar.yaml"
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self.sidecar = self._sidecar_process(0)
        self.sidecar_port = _port(self.sidecar.address)
        self.stats = ProcessStats()
        self._channel = grpc.aio.insecure_channel(self.sidecar.address, options=CHANNEL_OPTIONS)
        self._agent = agent_pb2_grpc.AgentServiceStub(self._channel)

    @property
    def address(self) -> str:
        return self.sidecar.address

    def _tools_process(self, kind: str, port: int) -> ServerProcess:
        latency = [f for tool, ms in TOOL_MS.items() for f in ("--latency", f"{tool}={ms:g}")]
        return start(
            "-m",
            TOOL_SERVER_MODULES[kind],
            "--port",
            str(port),
            "--log-level",
            "ERROR",
            *latency,
            log=self.workdir / "tools.log",
        )

    def _sidecar_process(self, port: int) -> ServerProcess:
        return start(
            "-m",
            "sidecar",
            "serve",
            "--config",
            str(self.config_path),
            "--port",
            str(port),
            log=self.workdir / "sidecar.log",
        )

    # -- the tool server ----------------------------------------------------------------

    def kill_tools(self) -> None:
        """SIGKILL the tool server: no drain, connections reset, calls in flight cut."""
        self.tools.kill()

    def start_tools(self, kind: str | None = None) -> None:
        """Start the tool server (again) on its port."""
        self.tools_kind = kind or self.tools_kind
        self.tools = self._tools_process(self.tools_kind, self.tools_port)

    async def swap_tools(self, kind: str) -> None:
        """Replace the tool server by another kind, with no load running."""
        self.tools.stop()
        await until(lambda: self.tools_available(expect=False))
        self.start_tools(kind)
        await until(self.tools_available)

    async def set_chaos(self, **chaos: Any) -> None:
        """Set the chaos double's faults (``hang_rate``, ``fail_rate``, ``hold``)."""
        await self._control("set_chaos", chaos)

    async def chaos_stats(self) -> dict[str, int]:
        result: dict[str, int] = orjson.loads(await self._control("chaos_stats", {}))
        return result

    async def _control(self, tool: str, arguments: dict[str, Any]) -> str:
        async with grpc.aio.insecure_channel(self.tools.address) as channel:
            response = await tool_pb2_grpc.ToolServiceStub(channel).CallTool(
                tool_pb2.CallToolRequest(
                    tool_name=tool, arguments=orjson.dumps(arguments).decode()
                ),
                timeout=10,
            )
        if response.result.WhichOneof("outcome") == "error":
            raise RuntimeError(f"{tool}: {response.result.error.message}")
        return str(response.result.output)

    async def tools_available(self, *, expect: bool = True) -> bool:
        """Whether the sidecar offers every tool to the model right now (or none, when
        ``expect`` is False)."""
        try:
            session = await self._agent.CreateSession(agent_pb2.CreateSessionRequest(), timeout=5)
            session_id = session.session.session_id
            listed = await self._agent.ListSessionTools(
                agent_pb2.ListSessionToolsRequest(session_id=session_id), timeout=5
            )
            await self._agent.DeleteSession(
                agent_pb2.DeleteSessionRequest(session_id=session_id), timeout=5
            )
        except grpc.aio.AioRpcError:
            return False
        available = [
            t for t in listed.tools if t.availability == agent_pb2.TOOL_AVAILABILITY_AVAILABLE
        ]
        return len(available) == len(TOOL_MS) if expect else not available

    # -- the sidecar --------------------------------------------------------------------

    async def ready(self, timeout: float = 60.0) -> None:
        """Wait until the sidecar is SERVING, offers every tool, and a run completes (a
        breaker a fault left half-open has closed again)."""
        await until(self.tools_available, timeout=timeout)
        await until(self._run_completes, timeout=timeout)

    async def _run_completes(self) -> bool:
        try:
            session = await self._agent.CreateSession(agent_pb2.CreateSessionRequest(), timeout=5)
        except grpc.aio.AioRpcError:
            return False
        attempt = await drive_turn(
            self._agent, session.session.session_id, stream=False, timeout=10
        )
        return attempt.outcome.verdict is Verdict.COMPLETED

    async def sigterm_sidecar(self) -> tuple[int, float]:
        """SIGTERM the sidecar and wait for it to exit; return its exit code and how long
        the drain took, in seconds."""
        self.stats.sample(self.sidecar)
        started = time.perf_counter()
        self.sidecar.popen.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(self.sidecar.popen.wait, 60)
        return code, time.perf_counter() - started

    def start_sidecar(self) -> None:
        """Start the sidecar again on its port."""
        self.sidecar = self._sidecar_process(self.sidecar_port)

    def sample(self) -> None:
        self.stats.sample(self.sidecar)

    # -- the simulator ------------------------------------------------------------------

    async def sim_control(self, method: str, path: str, body: Any = None) -> Any:
        """Call the simulator's control API (``/sim/...``)."""
        async with (
            aiohttp.ClientSession() as http,
            http.request(method, f"http://{self.sim.address}/sim{path}", json=body) as response,
        ):
            response.raise_for_status()
            return await response.json()

    async def close(self) -> None:
        await self._channel.close()
        for server in (self.sidecar, self.tools, self.sim):
            server.stop()


async def until(check: Any, *, timeout: float = 30.0, interval: float = 0.1) -> None:
    """Poll another process's state until ``check()`` holds; fail after ``timeout``."""
    async with asyncio.timeout(timeout):
        while not await check():  # noqa: ASYNC110 - the state is in another process
            await asyncio.sleep(interval)


def machine() -> dict[str, Any]:
    """What the soak ran on."""
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    memory = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            memory = int(line.split()[1]) // 1024
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_mib": memory,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "kernel": os.uname().release,
    }


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])
