"""Real process stacks for sidecar tests: LLM simulator, tool servers, sidecar.

Each piece is its own process on 127.0.0.1, started on port 0 (see ``procs.py``); the
test talks to the sidecar through the Python client over real gRPC, and to the
simulator's control API over real HTTP.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml
from procs import ServerProcess, spawn
from prometheus_client.parser import text_string_to_metric_families

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2, tool_pb2, tool_pb2_grpc

TESTS = Path(__file__).parent
SCENARIO = TESTS / "sidecar_scenario.yaml"


@contextmanager
def simulator(*extra: str) -> Iterator[ServerProcess]:
    proc = spawn(
        ["-m", "sidecar.llm.simulator", "--port", "0", "--scenario", str(SCENARIO), *extra]
    )
    try:
        yield proc
    finally:
        proc.stop()


@contextmanager
def scripted_toolserver() -> Iterator[ServerProcess]:
    proc = spawn([str(TESTS / "scripted_toolserver.py"), "--port", "0"])
    try:
        yield proc
    finally:
        proc.stop()


def sidecar_config(
    sim: ServerProcess,
    tool_servers: list[dict[str, Any]],
    *,
    profiles: Mapping[str, Any] | None = None,
    **sections: Any,
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "server": {"port": 0, "grace_period": 5},
        "model": {
            "base_url": f"http://{sim.address}/openai/v1",
            "model": "simulated-model",
            "retry": {"max_attempts": 3, "initial_backoff": 0.02, "max_backoff": 0.5},
        },
        "profiles": dict(profiles or {"default": {}}),
        "tool_servers": tool_servers,
    }
    config.update(sections)
    return config


@contextmanager
def sidecar(config: dict[str, Any], tmp_path: Path) -> Iterator[ServerProcess]:
    path = tmp_path / f"sidecar-{id(config)}.yaml"
    if "sessions" not in config:  # the embedded store, in the test's own directory
        config = {**config, "sessions": {"sqlite": {"path": str(tmp_path / "sessions.db")}}}
    path.write_text(yaml.safe_dump(config))
    proc = spawn(["-m", "sidecar.cli", "serve", "--config", str(path)], env={"GROQ_API_KEY": ""})
    try:
        yield proc
    finally:
        proc.stop()


class SimControl:
    """The simulator's control API over HTTP."""

    def __init__(self, address: str) -> None:
        self.base = f"http://{address}/sim"

    async def _request(self, method: str, path: str, body: Any = None) -> Any:
        async with (
            aiohttp.ClientSession() as http,
            http.request(method, self.base + path, json=body) as response,
        ):
            response.raise_for_status()
            text = await response.text()
            return json.loads(text) if text else None

    async def faults(self, *faults: dict[str, Any]) -> None:
        await self._request("POST", "/faults", {"faults": list(faults)})

    async def reset(self) -> None:
        await self._request("POST", "/reset")

    async def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("GET", "/stats")
        return result


async def tool_stats(address: str) -> dict[str, Any]:
    """Ask the scripted tool server what it saw, directly over gRPC."""
    import grpc

    async with grpc.aio.insecure_channel(address) as channel:
        stub = tool_pb2_grpc.ToolServiceStub(channel)
        response = await stub.CallTool(tool_pb2.CallToolRequest(tool_name="stats"), timeout=5)
    return orjson.loads(response.result.output)  # type: ignore[no-any-return]


async def set_broken(address: str, broken: bool) -> None:
    import grpc

    async with grpc.aio.insecure_channel(address) as channel:
        stub = tool_pb2_grpc.ToolServiceStub(channel)
        await stub.CallTool(
            tool_pb2.CallToolRequest(
                tool_name="set_broken", arguments=orjson.dumps({"broken": broken}).decode()
            ),
            timeout=5,
        )


async def run_events(
    client: AgentClient, text: str, *, profile: str = "default", timeout: float = 30
) -> tuple[list[agent_pb2.StreamRunResponse], agent_pb2.RunResult]:
    """Stream a run in a fresh session; return every event and the final result."""
    session = await client.create_session(profile)
    events = [e async for e in client.stream(session.session_id, text, timeout=timeout)]
    assert events and events[-1].WhichOneof("event") == "run_finished", events
    return events, events[-1].run_finished


def finished_calls(
    events: list[agent_pb2.StreamRunResponse],
) -> dict[str, agent_pb2.ToolCallFinished]:
    """tool_call_finished events by tool name (last one wins)."""
    return {
        e.tool_call_finished.tool_name: e.tool_call_finished
        for e in events
        if e.WhichOneof("event") == "tool_call_finished"
    }


def ms(duration: Any) -> float:
    return float(duration.seconds * 1000 + duration.nanos / 1e6)


async def eventually(
    check: Callable[[], Awaitable[bool]], *, timeout: float = 10.0, interval: float = 0.02
) -> None:
    """Poll another process's state until ``check`` holds; fail after ``timeout`` seconds.

    For state that lives in another process, where no in-process event can signal it.
    """
    async with asyncio.timeout(timeout):
        while not await check():  # noqa: ASYNC110 - the state is in another process
            await asyncio.sleep(interval)


class Scrape:
    """One scrape of the metrics endpoint."""

    def __init__(self, text: str) -> None:
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.samples[(sample.name, frozenset(sample.labels.items()))] = sample.value

    def get(self, name: str, **labels: str) -> float:
        """The sample's value; 0 when the series does not exist (yet)."""
        return self.samples.get((name, frozenset(labels.items())), 0.0)


async def scrape(side: ServerProcess) -> Scrape:
    address = side.announced("metrics on ")
    async with aiohttp.ClientSession() as http, http.get(f"http://{address}/metrics") as r:
        r.raise_for_status()
        return Scrape(await r.text())
