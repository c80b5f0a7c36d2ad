"""Early dispatch: read-only calls start while the model is still streaming its answer.

The simulator streams each answer fragment 20 ms apart, so a call that starts early does
so tens of milliseconds before the model stage ends, and the run's timeline shows it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar.testing import ServerProcess
from tests.support.stack import (
    SimControl,
    ms,
    run_events,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
    tool_stats,
)

MIX = "early dispatch mix"  # reserve E-1, stock E-1, slow_read early, slow_read last


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with simulator("--token-ms", "20") as sim, scripted_toolserver() as tools:
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address, "timeout": 5.0}],
            profiles={
                "default": {},
                "no_early": {"early_dispatch": False},
                "reads_only": {"tools": ["slow_read"]},
            },
        )
        with sidecar(config, tmp_path_factory.mktemp("sidecar")) as side:
            yield {"sim": sim, "tools": tools, "sidecar": side}


def _starts_before_the_model_ended(result: agent_pb2.RunResult) -> dict[str, float]:
    """For each step-1 tool call (by call id): how long before the model stage's end it
    started, in ms (negative: after)."""
    stages = [s for s in result.timeline.stages if s.step == 1]
    model = next(s for s in stages if s.kind == agent_pb2.STAGE_KIND_MODEL_CALL)
    model_end = ms(model.start_offset) + ms(model.duration)
    return {
        s.tool_call.call_id: model_end - ms(s.start_offset)
        for s in stages
        if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL
    }


def _call_ids(events: list[agent_pb2.StreamRunResponse]) -> list[str]:
    """Call ids in the order the model asked for them (from tool_call_started events)."""
    started = [e.tool_call_started for e in events if e.WhichOneof("event") == "tool_call_started"]
    return [s.call_id for s in started]


async def test_a_read_only_call_starts_before_the_model_has_finished_its_answer(
    client: AgentClient, stack: dict[str, ServerProcess]
) -> None:
    events, result = await run_events(client, MIX)
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED and result.tool_calls == 4
    early = _starts_before_the_model_ended(result)
    names = {
        e.tool_call_started.call_id: (e.tool_call_started.tool_name, e.tool_call_started.arguments)
        for e in events
        if e.WhichOneof("event") == "tool_call_started"
    }
    by_call = {names[call_id]: lead for call_id, lead in early.items()}
    # The third call is complete while the model still streams the fourth: it starts
    # at least one 20 ms fragment before the model stage ends.
    assert by_call[("slow_read", '{"tag":"early","ms":1}')] >= 15
    # A writer never starts early; nor does a reader of a key an earlier call writes;
    # the last call is complete only when the answer is.
    assert by_call[("reserve", '{"sku":"E-1","ms":50}')] <= 0
    assert by_call[("stock", '{"sku":"E-1"}')] <= 0
    assert by_call[("slow_read", '{"tag":"last","ms":1}')] <= 0
    # The reader still ran after the writer, in the model's order.
    order = [o.split(":")[0] for o in (await tool_stats(stack["tools"].address))["order"]]
    assert order[-4:] == ["E-1", "reserved E-1", "stock E-1", "stocked E-1"]
    # Overlapping stages count once: with the sidecar's own overhead they cover the total.
    stages = [s for s in result.timeline.stages if s.kind != agent_pb2.STAGE_KIND_OVERHEAD]
    overhead = next(s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_OVERHEAD)
    covered, reach = 0.0, 0.0
    for start, end in sorted(
        (ms(s.start_offset), ms(s.start_offset) + ms(s.duration)) for s in stages
    ):
        covered, reach = covered + max(0.0, end - max(start, reach)), max(reach, end)
    assert covered + ms(overhead.duration) == pytest.approx(ms(result.timeline.total), abs=0.5)
    # Every call ran once and reported once.
    finished = [e for e in events if e.WhichOneof("event") == "tool_call_finished"]
    assert sorted(f.tool_call_finished.call_id for f in finished) == sorted(early)
    assert all(f.tool_call_finished.status == agent_pb2.TOOL_CALL_STATUS_OK for f in finished)


async def test_no_call_starts_early_when_the_profile_turns_it_off(client: AgentClient) -> None:
    _, result = await run_events(client, MIX, profile="no_early")
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    assert all(lead <= 0 for lead in _starts_before_the_model_ended(result).values())


async def test_no_call_starts_early_when_the_model_answer_is_not_streamed(
    client: AgentClient,
) -> None:
    session = await client.create_session()
    response = await client.run(session.session_id, MIX, timeout=30)
    assert response.result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    assert all(lead <= 0 for lead in _starts_before_the_model_ended(response.result).values())


async def test_a_call_started_early_from_a_broken_stream_is_cancelled_and_reported(
    client: AgentClient, stack: dict[str, ServerProcess]
) -> None:
    # The first model stream breaks halfway (after the early call started); the retried
    # attempt names its calls anew, so the early one is not used: it is cancelled, its
    # caller sees it finish as cancelled, and the answer's calls run as usual.
    await SimControl(stack["sim"].address).faults({"kind": "disconnect", "times": 1})
    events, result = await run_events(client, "early reads")
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED and result.tool_calls == 4
    finished = {
        e.tool_call_finished.call_id: e.tool_call_finished
        for e in events
        if e.WhichOneof("event") == "tool_call_finished"
    }
    kept = set(_starts_before_the_model_ended(result))
    dropped = [f for call_id, f in finished.items() if call_id not in kept]
    assert dropped, "the broken attempt's early call should have been reported"
    assert all(f.content.startswith("not used:") for f in dropped)
    assert all(finished[call_id].status == agent_pb2.TOOL_CALL_STATUS_OK for call_id in kept)
    assert len(_call_ids(events)) == len(kept) + len(dropped)


async def test_a_call_the_profile_does_not_allow_never_starts_early(
    client: AgentClient, stack: dict[str, ServerProcess]
) -> None:
    # The first call of a two-call answer is complete (and would start early) once the
    # stream moves on to the second; the profile allows only the second.
    def call(index: int, name: str, arguments: str) -> dict[str, object]:
        return {
            "index": index,
            "id": f"call_{index}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }

    chunks = [
        {"choices": [{"delta": {"tool_calls": [call(0, "stock", '{"sku":"NOPE-1"}')]}}]},
        {"choices": [{"delta": {"tool_calls": [call(1, "slow_read", '{"tag":"ok","ms":1}')]}}]},
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
    ]
    frames = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
    await SimControl(stack["sim"].address).faults({"kind": "raw", "frames": frames})
    before = (await tool_stats(stack["tools"].address))["calls"].get("stock", 0)
    session = await client.create_session("reads_only")
    events = [e async for e in client.stream(session.session_id, "go", timeout=30)]
    finished = {
        e.tool_call_finished.tool_name: e.tool_call_finished
        for e in events
        if e.HasField("tool_call_finished")
    }
    assert finished["stock"].status == agent_pb2.TOOL_CALL_STATUS_UNKNOWN_TOOL
    assert finished["slow_read"].status == agent_pb2.TOOL_CALL_STATUS_OK
    assert (await tool_stats(stack["tools"].address))["calls"].get("stock", 0) == before
