"""Real process stacks for sidecar tests: LLM simulator, tool servers, sidecar.

Each piece is its own process on 127.0.0.1, started on port 0 by ``sidecar.testing``;
the test talks to the sidecar through the Python client over real gRPC, and to the
simulator's control API over real HTTP.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from prometheus_client.parser import text_string_to_metric_families

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2, tool_pb2, tool_pb2_grpc
from sidecar import testing
from sidecar.testing import ServerProcess, scaled
from tests.support import SCRIPTED_TOOLSERVER, SIDECAR_SCENARIO

MODEL = "simulated-model"
"""The model name the test sidecars send (prices in tests are keyed by it)."""
TEST_MODELS = (
    MODEL,
    "small-model",
    "summary-model",
    "light-model",
    "stable-model",
    "canary-model",
    "judge-model",
    "unpriced-model",
)
"""The names the sidecar tests' simulator serves beside Groq's current ones, as a local
endpoint's models (which do not reason): the tests' token counts stay exact."""


def simulator(*flags: str) -> ServerProcess:
    """The LLM simulator with the sidecar tests' scenario."""
    return testing.simulator(*flags, scenario=SIDECAR_SCENARIO, models=TEST_MODELS)


def scripted_toolserver() -> ServerProcess:
    """The scripted tool server (``tests/support/scripted_toolserver.py``)."""
    return testing.tool_server(str(SCRIPTED_TOOLSERVER))


def sidecar_config(
    sim: ServerProcess,
    tool_servers: list[dict[str, Any]],
    *,
    profiles: Mapping[str, Any] | None = None,
    **sections: Any,
) -> dict[str, Any]:
    """A test sidecar's config: fast model retries, the test model name."""
    model = {
        "base_url": f"http://{sim.address}/openai/v1",
        "model": MODEL,
        "keyless": True,
        "retry": {"max_attempts": 3, "initial_backoff": 0.02, "max_backoff": 0.5},
    }
    return testing.sidecar_config(
        sim.address, tool_servers, profiles=profiles, **{"model": model, **sections}
    )


def sidecar(
    config: dict[str, Any], tmp_path: Path, *, ready: bool = True, **kwargs: Any
) -> ServerProcess:
    """A sidecar; its SQLite store in ``tmp_path`` unless ``config`` names another;
    ``kwargs`` as for :func:`sidecar.testing.sidecar` (``env``, ``stderr`` ...).

    With ``ready`` (the default) it returns once the sidecar's health says SERVING, so
    its tool servers' tools are known; a test of what happens before then says
    ``ready=False``.
    """
    process = testing.sidecar(config, tmp_path, **kwargs)
    if ready:
        try:
            testing.wait_serving(process.address)
        except BaseException:
            process.stop()
            raise
    return process


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

    async def flex_full(self, full: bool) -> None:
        """Answer every ``service_tier: flex`` request 498 (or stop doing so)."""
        await self._request("POST", "/flex", {"full": full})


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
    events = [e async for e in client.stream(session.session_id, text, timeout=scaled(timeout))]
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
    """Poll another process's state until ``check`` holds; fail after ``timeout`` seconds
    (stretched for the machine's load: :func:`sidecar.testing.scaled`), naming the check.

    For state that lives in another process, where no in-process event can signal it.
    """
    allowed = scaled(timeout)
    try:
        async with asyncio.timeout(allowed):
            while not await check():  # noqa: ASYNC110 - the state is in another process
                await asyncio.sleep(interval)
    except TimeoutError:
        code = getattr(check, "__code__", None)
        where = f"{Path(code.co_filename).name}:{code.co_firstlineno}" if code else "?"
        what = getattr(check, "__qualname__", repr(check))
        raise TimeoutError(f"waited {allowed:.0f}s for {what} ({where}) to hold") from None


class Scrape:
    """One scrape of the metrics endpoint."""

    def __init__(self, text: str) -> None:
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.samples[(sample.name, frozenset(sample.labels.items()))] = sample.value

    def get(self, name: str, default: float | None = None, **labels: str) -> float:
        """The sample's value.

        Raises:
            LookupError: the series does not exist and no ``default`` was given (a
                renamed metric must fail a test, not read as 0).
        """
        value = self.samples.get((name, frozenset(labels.items())))
        if value is not None:
            return value
        if default is None:
            raise LookupError(f"no series {name}{labels} in the scrape")
        return default


async def scrape(side: ServerProcess) -> Scrape:
    address = side.announced("metrics on ")
    async with aiohttp.ClientSession() as http, http.get(f"http://{address}/metrics") as r:
        r.raise_for_status()
        return Scrape(await r.text())
