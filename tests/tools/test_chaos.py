"""Chaos under concurrent runs, small: the fast versions of ``make soak``'s phases.

Each test sends a burst of concurrent runs through a real sidecar while something
breaks (a tool server that fails, hangs or is killed; a model that answers 429 or 500,
hangs or sends broken tool calls; SIGTERM), and judges every run the way the soak does
(``bench/soak/outcomes.py``): no run may be lost, and every degraded run must say clearly
what went wrong.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from agentsidecar.client import AgentClient
from agentsidecar.v1 import tool_pb2, tool_pb2_grpc
from bench.soak.load import Load, drive_turn
from bench.soak.outcomes import Tally, Verdict
from sidecar.testing import ServerProcess, start_process
from tests.support import ROOT
from tests.support.stack import SimControl, eventually, sidecar, sidecar_config, simulator

CHAOS_TOOLSERVER = ROOT / "bench" / "soak" / "chaos_toolserver.py"
TOOLS = ["check_inventory", "get_price", "get_discount"]
BURST = 20
MODEL_ATTEMPTS = 4
MODEL_TIMEOUT = 0.5
TOOL_TIMEOUT = 1.0

HIDDEN = "answered without tools (hidden: server down or breaker open)"


class ChaosTools:
    """The chaos tool server, restartable on its port."""

    def __init__(self) -> None:
        self.process = self._spawn("0")
        self.address = self.process.address

    @staticmethod
    def _spawn(port: str) -> ServerProcess:
        return start_process([str(CHAOS_TOOLSERVER), "--port", port, "--log-level", "ERROR"])

    def kill(self) -> None:
        """SIGKILL: no drain, connections reset, calls in flight cut."""
        self.process.kill()
        self.process.stop()  # reaped already; closes its pipe

    def restart(self) -> None:
        self.process = self._spawn(str(self.process.port))

    async def control(self, tool: str, **arguments: Any) -> Any:
        async with grpc.aio.insecure_channel(self.address) as channel:
            response = await tool_pb2_grpc.ToolServiceStub(channel).CallTool(
                tool_pb2.CallToolRequest(
                    tool_name=tool, arguments=orjson.dumps(arguments).decode()
                ),
                timeout=5,
            )
        return orjson.loads(response.result.output)


def _config(sim: ServerProcess, tools: ChaosTools, *, tool_timeout: float) -> dict[str, Any]:
    return sidecar_config(
        sim,
        [
            {
                "name": "shop",
                "address": tools.address,
                "timeout": tool_timeout,
                "retry": {"max_attempts": 3, "initial_backoff": 0.01, "max_backoff": 0.05},
                "breaker": {"failure_threshold": 5, "reset_timeout": 0.5},
            }
        ],
        profiles={"default": {"tools": TOOLS}},
        model={
            "base_url": f"http://{sim.address}/openai/v1",
            "model": "simulated-model",
            "keyless": True,
            "timeout": MODEL_TIMEOUT,
            "retry": {"max_attempts": MODEL_ATTEMPTS, "initial_backoff": 0.02, "max_backoff": 0.2},
        },
    )


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerProcess]:
    with simulator() as proc:
        yield proc


@pytest.fixture(scope="module")
def tools() -> Iterator[ChaosTools]:
    chaos = ChaosTools()
    try:
        yield chaos
    finally:
        chaos.process.stop()


@pytest.fixture(scope="module")
def side(
    sim: ServerProcess, tools: ChaosTools, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    config = _config(sim, tools, tool_timeout=TOOL_TIMEOUT)
    with sidecar(config, tmp_path_factory.mktemp("chaos")) as proc:
        yield proc


@pytest.fixture
async def client(
    side: ServerProcess, sim: ServerProcess, tools: ChaosTools
) -> AsyncIterator[AgentClient]:
    """A client of the shared sidecar, once a run completes cleanly again."""
    await SimControl(sim.address).reset()
    await tools.control("set_chaos")
    async with AgentClient(side.address) as c:
        await c.wait_ready(20)
        # A breaker opened by the previous test lets its trial call through once its
        # reset timeout passes; wait until a run gets all its tools again.
        await eventually(lambda: _completes(c), timeout=20)
        yield c


async def _completes(client: AgentClient) -> bool:
    return (await _burst(client, 1)).completed == 1


async def _burst(client: AgentClient, runs: int, text: str | None = None) -> Tally:
    """``runs`` concurrent runs, each in a new session, half of them streamed; of the
    tool-calling prompt, or of ``text`` (which calls no tool; each run's is numbered, so
    the simulator sees as many conversations)."""
    sessions = [await client.create_session() for _ in range(runs)]

    def turn(i: int, session_id: str) -> Any:
        stream = i % 2 == 0
        if text is None:
            return drive_turn(client.stub, session_id, stream=stream, timeout=30)
        asked = f"{text} (run {i})"
        return drive_turn(
            client.stub, session_id, asked, stream=stream, timeout=30, expect_tools=False
        )

    outcomes = await asyncio.gather(*(turn(i, s.session_id) for i, s in enumerate(sessions)))
    tally = Tally()
    for attempt in outcomes:
        tally.add(attempt.outcome)
    return tally


def _reasons(tally: Tally, verdict: Verdict) -> set[str]:
    return set(tally.reasons[verdict])


async def test_a_tool_server_failing_half_its_calls_degrades_runs_with_named_tool_failures(
    client: AgentClient, tools: ChaosTools
) -> None:
    await tools.control("set_chaos", fail_rate=0.5)
    tally = await _burst(client, 2 * BURST)
    assert tally.lost == 0, tally.summary()
    assert tally.degraded > 0
    # Raised: an error result. UNAVAILABLE: retried, then an unavailable result. Five
    # failures in a row open the breaker, and the next runs are answered without tools.
    assert _reasons(tally, Verdict.DEGRADED) <= {
        "tool error",
        "tool unavailable",
        "tool error+unavailable",
        HIDDEN,
    }
    stats = await tools.control("chaos_stats")
    assert stats["unavailable"] > 0 and stats["raised"] > 0


async def test_a_hanging_tool_server_turns_its_calls_into_timed_out_results(
    client: AgentClient, tools: ChaosTools
) -> None:
    await tools.control("set_chaos", hang_rate=1.0)
    tally = await _burst(client, BURST)
    assert tally.lost == 0, tally.summary()
    assert tally.reasons[Verdict.DEGRADED]["tool timed_out"] > 0
    assert _reasons(tally, Verdict.DEGRADED) <= {"tool timed_out", "tool unavailable", HIDDEN}
    assert (await tools.control("chaos_stats"))["hung"] > 0


async def test_a_tool_server_killed_and_restarted_under_load_loses_no_run(
    client: AgentClient, side: ServerProcess, tools: ChaosTools
) -> None:
    tally = Tally()
    stop = asyncio.Event()
    load = Load(side.address, users=BURST, turns_per_session=3, run_timeout=30, channels=2)
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(load.run(tally, stop))
            await eventually(lambda: _reached(lambda: tally.completed >= BURST))
            tools.kill()
            await eventually(lambda: _reached(lambda: tally.degraded >= BURST))
            await asyncio.to_thread(tools.restart)
            completed = tally.completed
            await eventually(lambda: _reached(lambda: tally.completed >= completed + BURST))
            stop.set()
    finally:
        await load.close()
    assert tally.lost == 0, tally.summary()
    assert _reasons(tally, Verdict.DEGRADED) <= {"tool unavailable", HIDDEN}


async def _reached(condition: Any) -> bool:
    return bool(condition())


MODEL_FAULTS = {
    "429": ({"kind": "status", "status": 429, "retry_after": 0.05}, "model_rate_limited"),
    "500": ({"kind": "status", "status": 500}, "model_unavailable"),
    "hang": ({"kind": "hang"}, "model_timeout"),
}


@pytest.mark.parametrize("fault", list(MODEL_FAULTS))
async def test_a_failed_model_request_is_retried_and_a_run_out_of_retries_names_the_fault(
    client: AgentClient, sim: ServerProcess, fault: str
) -> None:
    spec, code = MODEL_FAULTS[fault]
    control = SimControl(sim.address)
    # Every run's first request fails, and its retry succeeds (the simulator's scenario
    # fails each conversation's first request, however the runs interleave). A hung
    # request is abandoned after the model timeout, then retried.
    before = (await control.stats())["requests"]
    tally = await _burst(client, BURST, f"first request fails: {fault}")
    assert tally.completed == BURST, tally.summary()
    # Each conversation's first request failed: every run asked at least twice (more
    # when a loaded machine passes the model timeout on an answer too).
    assert (await control.stats())["requests"] - before >= 2 * BURST

    # Every request of every run fails: each run ends with the fault's error code.
    await control.faults({**spec, "times": BURST * MODEL_ATTEMPTS})
    tally = await _burst(client, BURST)
    assert tally.lost == 0, tally.summary()
    assert dict(tally.reasons[Verdict.DEGRADED]) == {f"model_error {code}": BURST}


async def test_a_broken_tool_call_from_the_model_gets_one_repair_round_then_a_model_error(
    client: AgentClient, sim: ServerProcess
) -> None:
    control = SimControl(sim.address)
    # Groq's 400 tool_use_failed is not retried: the model is asked once to repair
    # its call. Runs whose repair also fails end with the fault's code.
    await control.faults({"kind": "tool_use_failed", "times": BURST})
    tally = await _burst(client, BURST)
    assert tally.lost == 0, tally.summary()
    assert tally.completed > 0
    assert _reasons(tally, Verdict.DEGRADED) <= {"model_error model_tool_use_failed"}
    assert (await control.stats())["by_status"]["400"] == BURST

    await control.faults({"kind": "tool_use_failed", "times": 2 * BURST})
    tally = await _burst(client, BURST)
    assert dict(tally.reasons[Verdict.DEGRADED]) == {"model_error model_tool_use_failed": BURST}


async def test_malformed_tool_arguments_from_the_model_come_back_to_it_as_tool_errors(
    client: AgentClient, sim: ServerProcess
) -> None:
    await SimControl(sim.address).faults({"kind": "malformed_arguments", "times": BURST})
    tally = await _burst(client, BURST)
    assert tally.lost == 0, tally.summary()
    # The arguments never reach the tool server; the model sees why, and answers. (A
    # run that got through step 1 first may take a later run's fault in its step 2, and
    # then, asking for tools again, reach its step limit: a clear outcome too.)
    assert tally.degraded > 0
    reasons = _reasons(tally, Verdict.DEGRADED)
    assert "tool error" in reasons and reasons <= {"tool error", "max_steps"}, reasons


async def test_sigterm_under_load_lets_in_flight_runs_finish_and_refuses_new_ones(
    sim: ServerProcess, tools: ChaosTools, tmp_path: Path
) -> None:
    with sidecar(_config(sim, tools, tool_timeout=30), tmp_path) as draining:
        async with AgentClient(draining.address) as client:
            await client.wait_ready(20)
            sessions = [await client.create_session() for _ in range(BURST + 1)]
            await tools.control("set_chaos", hold=True)
            try:
                in_flight = [
                    asyncio.ensure_future(
                        drive_turn(client.stub, s.session_id, stream=i % 2 == 0, timeout=30)
                    )
                    for i, s in enumerate(sessions[:BURST])
                ]
                await eventually(
                    lambda: _held(tools, 3 * BURST), timeout=20
                )  # every run is in its tool calls
                draining.send_signal(signal.SIGTERM)
                await eventually(lambda: _refuses_sessions(client))
                late = await drive_turn(
                    client.stub, sessions[-1].session_id, stream=False, timeout=10
                )
            finally:
                await tools.control("set_chaos")
            outcomes = [attempt.outcome for attempt in await asyncio.gather(*in_flight)]
        assert draining.popen.wait(timeout=20) == 0
    assert [o.verdict for o in outcomes] == [Verdict.COMPLETED] * BURST, outcomes
    assert late.outcome.verdict is Verdict.DEGRADED
    assert late.outcome.reason == "Run refused: draining (UNAVAILABLE)"


async def _held(tools: ChaosTools, calls: int) -> bool:
    return bool((await tools.control("chaos_stats")).get("held", 0) >= calls)


async def _refuses_sessions(client: AgentClient) -> bool:
    try:
        await client.create_session(timeout=5)
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
        return True
    return False


async def test_sigterm_refuses_calls_still_queued_in_grpc_instead_of_cancelling_them(
    sim: ServerProcess, tools: ChaosTools, tmp_path: Path
) -> None:
    # Under a burst, grpc holds calls it has accepted before any handler takes them;
    # stopping the server would cancel those (CANCELLED, which callers don't retry).
    # The signal must land while calls still wait; on a slow machine a burst can all end
    # before it is handled, so a larger one is sent to a new sidecar (else this proved
    # nothing).
    for attempt, burst in enumerate((1000, 2500, 5000)):
        with sidecar(_config(sim, tools, tool_timeout=30), tmp_path / str(attempt)) as draining:
            async with AgentClient(draining.address) as client:
                await client.wait_ready(20)
                calls = [
                    asyncio.ensure_future(client.create_session(timeout=30)) for _ in range(burst)
                ]
                await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)
                draining.send_signal(signal.SIGTERM)
                results = await asyncio.gather(*calls, return_exceptions=True)
            assert draining.popen.wait(timeout=30) == 0
        codes = [_code(r) for r in results]
        assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE}, set(codes)
        if grpc.StatusCode.UNAVAILABLE in codes:
            return
    raise AssertionError("every call finished before the drain, burst after burst")


def _code(result: object) -> grpc.StatusCode:
    if isinstance(result, grpc.aio.AioRpcError):
        return result.code()
    if isinstance(result, BaseException):
        raise result
    return grpc.StatusCode.OK
