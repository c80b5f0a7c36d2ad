"""The Python client answers approvals with a callback, as the Go, TypeScript and Java
clients do: against a real sidecar, whose simulator calls ``refund_order`` (a tool that
needs approval) for any input with "refund order" in it (``sidecar.testing``'s scenario).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentsidecar.client import AgentClient, Decision
from agentsidecar.v1 import agent_pb2
from sidecar import testing


@pytest.fixture(scope="module")
def sidecar_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with testing.example_stack(tmp_path_factory.mktemp("approvals")) as stack:
        testing.wait_serving(stack.sidecar.address)
        yield stack.sidecar.address


def _finished(events: list[agent_pb2.StreamRunResponse]) -> agent_pb2.ToolCallFinished:
    (finished,) = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
    return finished


async def test_an_async_callback_approves_a_call_and_it_runs(sidecar_address: str) -> None:
    asked: list[agent_pb2.ApprovalRequired] = []

    async def decide(call: agent_pb2.ApprovalRequired) -> Decision:
        asked.append(call)
        return Decision.approve()

    async with AgentClient(sidecar_address) as client:
        session = await client.create_session()
        events = [
            e
            async for e in client.stream(
                session.session_id, "Please refund order 20250101", on_approval=decide, timeout=30
            )
        ]
    kinds = [e.WhichOneof("event") for e in events]
    assert [c.tool_name for c in asked] == ["refund_order"]
    assert asked[0].destructive
    # The callback ran before its event was yielded, and the call ran after it.
    assert kinds.index("approval_required") < kinds.index("tool_call_started")
    assert _finished(events).status == agent_pb2.TOOL_CALL_STATUS_OK
    assert events[-1].run_finished.stop_reason == agent_pb2.STOP_REASON_ANSWERED


async def test_a_sync_callback_denies_with_a_reason_the_model_reads(sidecar_address: str) -> None:
    async with AgentClient(sidecar_address) as client:
        session = await client.create_session()
        events = [
            e
            async for e in client.stream(
                session.session_id,
                "Please refund order 20250101",
                on_approval=lambda call: Decision.deny("refunds need a ticket"),
                timeout=30,
            )
        ]
    finished = _finished(events)
    assert finished.status == agent_pb2.TOOL_CALL_STATUS_DENIED
    assert "refunds need a ticket" in finished.content


async def test_a_bool_answer_is_a_decision(sidecar_address: str) -> None:
    async with AgentClient(sidecar_address) as client:
        session = await client.create_session()
        events = [
            e
            async for e in client.stream(
                session.session_id,
                "Please refund order 20250101",
                on_approval=lambda call: False,
                timeout=30,
            )
        ]
    assert _finished(events).status == agent_pb2.TOOL_CALL_STATUS_DENIED


async def test_a_callback_that_raises_ends_the_stream_and_frees_the_session(
    sidecar_address: str,
) -> None:
    class Refused(Exception):
        pass

    def refuse(call: agent_pb2.ApprovalRequired) -> Decision:
        raise Refused(call.call_id)

    async with AgentClient(sidecar_address) as client:
        session = await client.create_session()
        seen: list[str] = []
        with pytest.raises(Refused):
            async for event in client.stream(
                session.session_id, "Please refund order 20250101", on_approval=refuse, timeout=30
            ):
                seen.append(event.WhichOneof("event"))
        assert "approval_required" not in seen
        # The run was cancelled with the stream: the session takes its next turn.
        async with asyncio.timeout(30):
            while True:
                turns = (await client.get_session(session.session_id)).turns
                if turns:
                    break
                await asyncio.sleep(0.05)
        assert turns[-1].stop_reason == agent_pb2.STOP_REASON_CANCELLED
        reply = await client.run(session.session_id, "What is the status of order 20250101?")
        assert reply.result.stop_reason == agent_pb2.STOP_REASON_ANSWERED


async def test_an_answer_of_the_wrong_type_is_a_clear_error(sidecar_address: str) -> None:
    async with AgentClient(sidecar_address) as client:
        session = await client.create_session()
        with pytest.raises(TypeError, match=r"return Decision.approve\(\)"):
            async for _ in client.stream(
                session.session_id,
                "Please refund order 20250101",
                on_approval=lambda call: "yes",  # type: ignore[arg-type, return-value]
                timeout=30,
            ):
                pass


async def test_list_tools_is_list_session_tools(sidecar_address: str) -> None:
    async with AgentClient(sidecar_address) as client:
        session = await client.create_session()
        names = [t.tool.name for t in await client.list_session_tools(session.session_id)]
        assert "refund_order" in names
        assert [t.tool.name for t in await client.list_tools(session.session_id)] == names


def test_the_package_exports_the_approval_types() -> None:
    import agentsidecar.client as module

    assert {"AgentClient", "ApprovalHandler", "Decision"} <= set(module.__all__)
    assert Path(module.__file__ or "").name == "client.py"
