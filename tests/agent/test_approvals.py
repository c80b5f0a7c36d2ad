"""An approval runs exactly the call the caller was shown, whatever ids the model sent.

The model's tool-call ids are not trusted: two calls may share one, or have none. The
sidecar gives every call its own id; the approval_required event shows that id with the
call's arguments, and a decision for it runs that call and no other.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentsidecar.v1 import agent_pb2, agent_pb2_grpc, tool_pb2, tool_pb2_grpc
from tests.agent.test_hostile_input import control
from tests.support.stack import scripted_toolserver, sidecar, sidecar_config, simulator


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(sim, [{"name": "scripted", "address": tools.address}])
        with sidecar(config, tmp_path_factory.mktemp("approvals")) as side:
            with (
                grpc.insecure_channel(side.address) as ch,
                grpc.insecure_channel(tools.address) as tc,
            ):
                yield {
                    "sim": sim,
                    "stub": agent_pb2_grpc.AgentServiceStub(ch),
                    "tools": tool_pb2_grpc.ToolServiceStub(tc),
                }


def refunds_executed(tools: tool_pb2_grpc.ToolServiceStub) -> list[str]:
    response = tools.CallTool(tool_pb2.CallToolRequest(tool_name="stats"), timeout=5)
    order = orjson.loads(response.result.output)["order"]
    return [entry.removeprefix("refund ") for entry in order if entry.startswith("refund ")]


def stream_of_calls(calls: list[dict[str, Any]]) -> list[str]:
    """The model's answer as SSE frames: each call's id as given (None: no id)."""
    fragments = []
    for index, call in enumerate(calls):
        fragment: dict[str, Any] = {
            "index": index,
            "type": "function",
            "function": {"name": "refund", "arguments": json.dumps({"order": call["order"]})},
        }
        if call["id"] is not None:
            fragment["id"] = call["id"]
        fragments.append(fragment)
    chunk = {"choices": [{"delta": {"tool_calls": fragments}, "finish_reason": "tool_calls"}]}
    return [f"data: {json.dumps(chunk)}\n\n", "data: [DONE]\n\n"]


def run_approving(
    stack: dict[str, Any], calls: list[dict[str, Any]], approve: set[str]
) -> list[Any]:
    """Stream a run whose model sends ``calls``; approve the calls showing an order in
    ``approve``, deny the rest; return the events."""
    control(stack["sim"], "/reset")
    # The first answer makes the calls; the second (after the results) answers in text.
    control(
        stack["sim"], "/faults", {"faults": [{"kind": "raw", "frames": stream_of_calls(calls)}]}
    )
    stub = stack["stub"]
    session = stub.CreateSession(agent_pb2.CreateSessionRequest(), timeout=10).session.session_id
    events = []
    stream = stub.StreamRun(
        agent_pb2.StreamRunRequest(session_id=session, input="refunds"), timeout=30
    )
    for event in stream:
        events.append(event)
        if event.WhichOneof("event") == "approval_required":
            asked = event.approval_required
            order = json.loads(asked.arguments)["order"]
            decision = (
                agent_pb2.APPROVAL_DECISION_APPROVE
                if order in approve
                else agent_pb2.APPROVAL_DECISION_DENY
            )
            stub.ApproveToolCall(
                agent_pb2.ApproveToolCallRequest(
                    session_id=session, call_id=asked.call_id, decision=decision
                ),
                timeout=10,
            )
    return events


def test_two_calls_with_one_model_id_are_approved_one_at_a_time(stack: dict[str, Any]) -> None:
    before = refunds_executed(stack["tools"])
    calls = [{"id": "call_same", "order": "a"}, {"id": "call_same", "order": "b"}]

    events = run_approving(stack, calls, approve={"a"})

    asked = [e.approval_required for e in events if e.WhichOneof("event") == "approval_required"]
    assert len({a.call_id for a in asked}) == 2 and "call_same" not in {a.call_id for a in asked}, (
        events
    )
    assert refunds_executed(stack["tools"])[len(before) :] == ["a"]
    finished = {
        json.loads(next(a.arguments for a in asked if a.call_id == e.tool_call_finished.call_id))[
            "order"
        ]: e.tool_call_finished.status
        for e in events
        if e.WhichOneof("event") == "tool_call_finished"
    }
    assert finished == {"a": agent_pb2.TOOL_CALL_STATUS_OK, "b": agent_pb2.TOOL_CALL_STATUS_DENIED}


ORDERS = ["a", "b", "c", "d"]


@given(
    ids=st.lists(st.sampled_from(["x", "x", "", None, "y", "0"]), min_size=2, max_size=4),
    approved=st.sets(st.sampled_from(ORDERS)),
)
def test_whatever_ids_the_model_sends_exactly_the_approved_calls_run(
    stack: dict[str, Any], ids: list[str | None], approved: set[str]
) -> None:
    calls = [{"id": call_id, "order": ORDERS[i]} for i, call_id in enumerate(ids)]
    before = refunds_executed(stack["tools"])

    run_approving(stack, calls, approve=approved)

    ran = refunds_executed(stack["tools"])[len(before) :]
    assert sorted(ran) == sorted(o for o in ORDERS[: len(ids)] if o in approved)


def test_deleting_a_running_session_denies_its_pending_call_and_nothing_of_it_runs_after(
    stack: dict[str, Any],
) -> None:
    stub = stack["stub"]
    before = refunds_executed(stack["tools"])
    control(stack["sim"], "/reset")
    frames = stream_of_calls([{"id": "r", "order": "z"}])
    control(stack["sim"], "/faults", {"faults": [{"kind": "raw", "frames": frames}]})
    session = stub.CreateSession(agent_pb2.CreateSessionRequest(), timeout=10).session.session_id
    stream = stub.StreamRun(
        agent_pb2.StreamRunRequest(session_id=session, input="refund"), timeout=30
    )
    events = []
    for event in stream:
        events.append(event)
        if event.WhichOneof("event") == "approval_required":
            deleted = stub.DeleteSession(
                agent_pb2.DeleteSessionRequest(session_id=session), timeout=10
            ).deleted
            with pytest.raises(grpc.RpcError) as late:  # the call is no longer waiting
                stub.ApproveToolCall(
                    agent_pb2.ApproveToolCallRequest(
                        session_id=session,
                        call_id=event.approval_required.call_id,
                        decision=agent_pb2.APPROVAL_DECISION_APPROVE,
                    ),
                    timeout=10,
                )
            executed_at_delete = refunds_executed(stack["tools"])
    assert deleted is True
    assert late.value.code() == grpc.StatusCode.NOT_FOUND
    last = events[-1]
    assert last.WhichOneof("event") == "run_finished"
    assert last.run_finished.stop_reason == agent_pb2.STOP_REASON_CANCELLED
    assert last.run_finished.error.code == "session_deleted"
    # Another whole run later, the refund still never ran.
    run_approving(stack, [{"id": "q", "order": "y"}], approve=set())
    assert refunds_executed(stack["tools"]) == executed_at_delete == before
    with pytest.raises(grpc.RpcError) as gone:
        stub.GetSession(agent_pb2.GetSessionRequest(session_id=session), timeout=10)
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND


def test_deleting_a_session_while_its_approved_call_runs_stops_it_before_returning(
    stack: dict[str, Any],
) -> None:
    stub = stack["stub"]
    control(stack["sim"], "/reset")
    call = {
        "index": 0,
        "id": "h",
        "type": "function",
        "function": {"name": "hang", "arguments": "{}"},
    }
    chunk = {"choices": [{"delta": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]}
    frames = [f"data: {json.dumps(chunk)}\n\n", "data: [DONE]\n\n"]
    control(stack["sim"], "/faults", {"faults": [{"kind": "raw", "frames": frames}]})
    session = stub.CreateSession(agent_pb2.CreateSessionRequest(), timeout=10).session.session_id
    stream = stub.StreamRun(
        agent_pb2.StreamRunRequest(session_id=session, input="hang"), timeout=30
    )
    for event in stream:
        if event.WhichOneof("event") == "tool_call_started":
            # tool_call_started is sent as the call leaves; delete once it has arrived.
            wait_for_stat(stack["tools"], lambda stats: stats["calls"].get("hang", 0) >= 1)
            assert stub.DeleteSession(
                agent_pb2.DeleteSessionRequest(session_id=session), timeout=10
            ).deleted
        last = event
    # The stream has ended: the run had unwound when the delete returned.
    assert last.WhichOneof("event") == "run_finished"
    assert last.run_finished.stop_reason == agent_pb2.STOP_REASON_CANCELLED
    # The tool server saw its call cancelled.
    assert wait_for_stat(stack["tools"], lambda stats: stats["cancelled"] >= 1)


def wait_for_stat(
    tools: tool_pb2_grpc.ToolServiceStub, condition: Callable[[dict[str, Any]], bool]
) -> bool:
    """Whether the tool server's stats meet ``condition`` within 10 s (what it sees arrives
    on its own connection, so this polls it, bounded)."""
    deadline = time.monotonic() + 10
    while True:
        stats = tools.CallTool(tool_pb2.CallToolRequest(tool_name="stats"), timeout=5)
        if condition(orjson.loads(stats.result.output)):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
