"""The MCP bridge against our own misbehaving MCP server, through real processes: the
simulator, the sidecar, and the edge server the sidecar starts on stdio (or serves over
HTTP). Each test drives tool calls scripted into the model's answers and reads what the
caller sees: events, statuses, availability."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentsidecar.client import AgentClient, Decision
from agentsidecar.v1 import agent_pb2
from sidecar import testing
from sidecar.testing import ServerProcess
from tests.support.mcp_stack import EDGE_SERVER, edge, events_of, script_calls, streamed
from tests.support.stack import finished_calls, sidecar, sidecar_config, simulator

OK = agent_pb2.TOOL_CALL_STATUS_OK
ERROR = agent_pb2.TOOL_CALL_STATUS_ERROR
AVAILABLE = agent_pb2.TOOL_AVAILABILITY_AVAILABLE
DOWN = agent_pb2.TOOL_AVAILABILITY_SERVER_UNAVAILABLE


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerProcess]:
    with simulator() as process:
        yield process


async def _availability(client: AgentClient, session_id: str) -> dict[str, int]:
    return {t.tool.name: t.availability for t in await client.list_session_tools(session_id)}


async def _until(client: AgentClient, session_id: str, tool: str, state: int) -> None:
    """Wait (bounded) until ``tool`` has availability ``state``."""
    async with asyncio.timeout(30):
        while (await _availability(client, session_id)).get(tool) != state:  # noqa: ASYNC110
            await asyncio.sleep(0.05)  # the sidecar's state, polled through its API


@pytest.mark.parametrize("protocol", ["2026-07-28", "legacy"])
async def test_a_tools_progress_reaches_the_callers_stream_between_start_and_finish(
    sim: ServerProcess, tmp_path: Path, protocol: str
) -> None:
    config = sidecar_config(sim, [], mcp_servers=[edge(protocol=protocol)])
    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            await script_calls(sim, ("slow", {"ms": 600, "steps": 3}))
            events = await streamed(client, session.session_id)
    kinds = [e.WhichOneof("event") for e in events]
    progress = events_of(events, "tool_call_progress")
    assert [p.progress for p in progress][-1] == 3 and progress[-1].total == 3
    assert progress[-1].message == "step 3" and progress[0].tool_name == "slow"
    assert kinds.index("tool_call_started") < kinds.index("tool_call_progress")
    assert kinds.index("tool_call_finished") > max(
        i for i, k in enumerate(kinds) if k == "tool_call_progress"
    )
    assert finished_calls(events)["slow"].status == OK


async def test_results_reach_the_model_as_text_with_every_block_described_and_errors_as_errors(
    sim: ServerProcess, tmp_path: Path
) -> None:
    config = sidecar_config(sim, [], mcp_servers=[edge()])
    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            await script_calls(
                sim,
                ("mixed", {}),
                ("fail", {"message": "no such order"}),
                ("structured", {"good": True}),
            )
            first = finished_calls(await streamed(client, session.session_id))
            await script_calls(sim, ("structured", {"good": False}))
            second = finished_calls(await streamed(client, session.session_id))
    mixed = first["mixed"].content
    assert first["mixed"].status == OK
    assert "here is everything" in mixed
    assert "[image: image/png, 70 bytes; not shown]" in mixed
    assert "[audio: audio/wav, 3 bytes; not played]" in mixed
    assert "[resource link: readme <file:///readme.md> (text/markdown)]" in mixed
    assert "[resource file:///notes.txt (text/plain)]\na note" in mixed
    assert "[resource file:///blob.bin (application/octet-stream): 3 bytes" in mixed
    assert first["fail"].status == ERROR and first["fail"].content == "no such order"
    assert first["structured"].status == OK and json.loads(first["structured"].content) == {"n": 1}
    assert second["structured"].status == ERROR
    assert "output schema" in second["structured"].content


async def test_a_result_over_the_bound_is_the_calls_error_and_the_server_keeps_serving(
    sim: ServerProcess, tmp_path: Path
) -> None:
    config = sidecar_config(sim, [], mcp_servers=[edge(max_result_bytes=4096)])
    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            await script_calls(sim, ("huge", {"size": 3000}), ("huge", {"size": 1_000_000}))
            events = await streamed(client, session.session_id)
            await script_calls(sim, ("echo", {"text": "still here"}))
            after = finished_calls(await streamed(client, session.session_id))
    finished = events_of(events, "tool_call_finished")
    sizes = sorted((len(f.content), f.status) for f in finished)
    assert sizes[1] == (3000, OK)
    assert sizes[0][1] == ERROR
    big = next(f for f in finished if f.status == ERROR)
    assert "larger than the sidecar accepts" in big.content
    assert after["echo"].status == OK and after["echo"].content == "echo: still here"


async def test_an_answer_the_bridge_cannot_read_fails_its_call_at_once_and_the_server_serves_on(
    sim: ServerProcess, tmp_path: Path
) -> None:
    # A timeout far beyond the test's own bound: a call that waited it out fails the test.
    config = sidecar_config(sim, [], mcp_servers=[edge(timeout=120.0, max_result_bytes=1 << 20)])
    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client, asyncio.timeout(60):
            session = await client.create_session()
            await script_calls(
                sim,
                ("unreadable", {"how": "deep", "depth": 50_000}),
                ("unreadable", {"how": "broken"}),
            )
            events = await streamed(client, session.session_id)
            await script_calls(sim, ("echo", {"text": "still here"}))
            after = finished_calls(await streamed(client, session.session_id))
    finished = events_of(events, "tool_call_finished")
    assert [f.status for f in finished] == [ERROR, ERROR]
    for call in finished:
        assert "could not be read" in call.content, call.content
        assert "validation" not in call.content.lower()  # no validator's text
    assert after["echo"].status == OK and after["echo"].content == "echo: still here"


@pytest.mark.parametrize("tool", ["crash", "long_line"])
async def test_a_server_that_dies_or_breaks_the_transport_mid_call_fails_that_call_and_is_restarted(
    sim: ServerProcess, tmp_path: Path, tool: str
) -> None:
    server = edge(max_result_bytes=65_536, health_interval=0.5, discovery_timeout=5)
    config = sidecar_config(sim, [], mcp_servers=[server])
    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            await script_calls(sim, (tool, {"size": 1_000_000}))
            broken = finished_calls(await streamed(client, session.session_id))[tool]
            await _until(client, session.session_id, "echo", AVAILABLE)
            await script_calls(sim, ("echo", {"text": "back"}))
            after = finished_calls(await streamed(client, session.session_id))["echo"]
    assert broken.status == agent_pb2.TOOL_CALL_STATUS_UNAVAILABLE
    assert after.status == OK and after.content == "echo: back"


async def test_a_hung_server_times_out_its_call_leaves_the_models_list_and_comes_back_restarted(
    sim: ServerProcess, tmp_path: Path
) -> None:
    server = edge(timeout=1.0, health_interval=0.3, discovery_timeout=5.0)
    config = sidecar_config(sim, [], mcp_servers=[server])
    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            await script_calls(sim, ("hang", {}))
            hung = finished_calls(await streamed(client, session.session_id))["hang"]
            await _until(client, session.session_id, "echo", DOWN)
            await _until(client, session.session_id, "echo", AVAILABLE)
            await script_calls(sim, ("echo", {"text": "restarted"}))
            after = finished_calls(await streamed(client, session.session_id))["echo"]
    assert hung.status == agent_pb2.TOOL_CALL_STATUS_TIMED_OUT
    assert after.content == "echo: restarted"


async def test_a_servers_question_is_asked_through_the_approval_flow_and_answered(
    sim: ServerProcess, tmp_path: Path
) -> None:
    asked: list[agent_pb2.ApprovalRequired] = []

    def answer(event: agent_pb2.ApprovalRequired) -> Decision:
        asked.append(event)
        return Decision.reply({"name": "Ada"})

    servers = [edge("modern", protocol="2026-07-28"), edge("old", protocol="legacy")]
    refusing = [edge("modern", protocol="2026-07-28", elicitation="refuse")]
    config = sidecar_config(sim, [], mcp_servers=servers)
    with sidecar(config, tmp_path / "a") as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            await script_calls(sim, ("ask", {}))
            answered = finished_calls(
                await streamed(client, session.session_id, on_approval=answer)
            )
            await script_calls(sim, ("ask", {}))
            unary = (await client.run(session.session_id, "go", timeout=30)).result
    with sidecar(sidecar_config(sim, [], mcp_servers=refusing), tmp_path / "b") as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            await script_calls(sim, ("ask", {}))
            refused = finished_calls(await streamed(client, session.session_id, on_approval=answer))
    assert answered["ask"].content == "hello Ada"
    assert len(asked) == 1
    question = asked[0].question
    assert question.message == "What is your name?"
    assert json.loads(question.requested_schema)["properties"] == {"name": {"type": "string"}}
    assert "no answer" in unary.answer  # nobody can answer a unary run: declined
    assert refused["ask"].content == "no answer" and len(asked) == 1


@pytest.mark.parametrize("protocol", ["legacy", "2026-07-28"])
async def test_a_caller_that_leaves_while_a_server_asks_leaves_the_connection_serving(
    sim: ServerProcess, tmp_path: Path, protocol: str
) -> None:
    # The question is withdrawn with its call; the server and its other calls go on. A long
    # restart backoff makes a dropped connection show: the server would stay down.
    server = edge(protocol=protocol, restart_backoff=30, max_restart_backoff=30)
    config = sidecar_config(sim, [], mcp_servers=[server])
    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            await script_calls(sim, ("ask", {}))
            async for event in client.stream(session.session_id, "go", timeout=30):
                if event.HasField("approval_required"):
                    break  # the caller leaves: the run, its call and the question end
            await asyncio.sleep(1.0)
            other = await client.create_session()
            await script_calls(sim, ("echo", {"text": "still here"}))
            echoed = finished_calls(await streamed(client, other.session_id))["echo"]
    assert echoed.status == OK and echoed.content == "echo: still here"


async def test_an_answer_that_does_not_match_the_question_is_refused_and_the_question_stays(
    sim: ServerProcess, tmp_path: Path
) -> None:
    config = sidecar_config(sim, [], mcp_servers=[edge()])
    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            await script_calls(sim, ("ask", {}))
            refused = []
            async for event in client.stream(session.session_id, "go", timeout=30):
                if event.HasField("approval_required"):
                    call_id = event.approval_required.call_id
                    for bad in ({"name": 5}, None):
                        try:
                            await client.stub.ApproveToolCall(
                                agent_pb2.ApproveToolCallRequest(
                                    session_id=session.session_id,
                                    call_id=call_id,
                                    decision=agent_pb2.APPROVAL_DECISION_APPROVE,
                                    answer="[1]" if bad is None else json.dumps(bad),
                                )
                            )
                        except Exception as exc:
                            refused.append(str(exc))
                    await client.approve(
                        session.session_id, call_id, approved=True, answer={"name": "Bo"}
                    )
                if event.HasField("tool_call_finished"):
                    content = event.tool_call_finished.content
    assert len(refused) == 2
    assert all("INVALID_ARGUMENT" in r for r in refused)
    assert content == "hello Bo"


async def test_who_the_call_serves_travels_in_meta(sim: ServerProcess, tmp_path: Path) -> None:
    config = sidecar_config(sim, [], mcp_servers=[edge()])
    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session(labels={"team": "blue"})
            await script_calls(sim, ("whoami", {}))
            events = await streamed(client, session.session_id)
            finished = finished_calls(events)["whoami"]
            run_id = events[0].run_id
    meta = json.loads(finished.content)
    assert meta["dev.agentsidecar/session-id"] == session.session_id
    assert meta["dev.agentsidecar/run-id"] == run_id
    assert meta["dev.agentsidecar/call-id"] == finished.call_id
    assert meta["dev.agentsidecar/labels"] == {"team": "blue"}


async def test_a_list_changed_storm_costs_a_bounded_number_of_listings_and_new_tools_appear(
    sim: ServerProcess, tmp_path: Path
) -> None:
    server = edge(min_relist_interval=0.5, health_interval=60)
    config = sidecar_config(sim, [], mcp_servers=[server])
    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            await script_calls(sim, ("storm", {"count": 500}), ("add_tool", {"name": "new"}))
            await streamed(client, session.session_id)
            await _until(client, session.session_id, "extra_new", AVAILABLE)
            await script_calls(sim, ("listings", {}))
            listings = finished_calls(await streamed(client, session.session_id))["listings"]
    # 500 notices in well under a second: the first listing, and about two more.
    assert int(listings.content) <= 6


async def test_annotations_relax_nothing_unless_trusted_and_hostile_tools_are_left_out(
    sim: ServerProcess, tmp_path: Path
) -> None:
    untrusted = edge("plain", "--hostile", approval="destructive")
    trusted = edge("trusting", "--hostile", approval="destructive", trust_annotations=True)
    overridden = edge(
        "configured",
        "--hostile",
        approval="destructive",
        allow_tools=["wipe", "echo"],
        tools={"wipe": {"requires_approval": True, "read_only": False}},
    )
    servers = [untrusted]
    with sidecar(sidecar_config(sim, [], mcp_servers=servers), tmp_path / "a") as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            plain = {
                t.tool.name: t.tool for t in await client.list_session_tools(session.session_id)
            }
    with sidecar(sidecar_config(sim, [], mcp_servers=[trusted]), tmp_path / "b") as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            trusting = {
                t.tool.name: t.tool for t in await client.list_session_tools(session.session_id)
            }
    with sidecar(sidecar_config(sim, [], mcp_servers=[overridden]), tmp_path / "c") as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            configured = {
                t.tool.name: t.tool for t in await client.list_session_tools(session.session_id)
            }
    for name in ("dotted.name", "n" * 100, "remote_ref", "bad_output", "big_schema"):
        assert name not in plain
    assert len(plain["wordy"].description) < 4200
    wipe = plain["wipe"]
    assert not wipe.read_only and wipe.destructive and wipe.requires_approval
    assert not plain["echo"].read_only and plain["echo"].requires_approval
    assert trusting["wipe"].read_only and not trusting["wipe"].requires_approval
    assert set(configured) == {"wipe", "echo"}
    assert configured["wipe"].requires_approval and not configured["wipe"].read_only


async def test_a_call_needing_approval_in_a_unary_run_is_denied_without_reaching_the_server(
    sim: ServerProcess, tmp_path: Path
) -> None:
    config = sidecar_config(sim, [], mcp_servers=[edge(approval="destructive")])
    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            await script_calls(sim, ("add_tool", {"name": "never"}))
            result = (await client.run(session.session_id, "go", timeout=30)).result
            await script_calls(sim, ("listings", {}))
            streamed_events = await streamed(client, session.session_id, on_approval=lambda _: True)
            tools = await _availability(client, session.session_id)
    [stage] = [s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL]
    assert stage.tool_call.status == agent_pb2.TOOL_CALL_STATUS_DENIED
    assert finished_calls(streamed_events)["listings"].status == OK
    assert "extra_never" not in tools


async def test_a_streamable_http_server_is_bridged_and_its_loss_hides_its_tools(
    sim: ServerProcess, tmp_path: Path
) -> None:
    http = testing.start_process([str(EDGE_SERVER), "--http"], executable=sys.executable)
    server = {
        "name": "remote",
        "url": f"http://{http.address}/mcp",
        "approval": "never",
        "health_interval": 0.3,
        "discovery_timeout": 5,
        "restart_backoff": 0.2,
        "max_restart_backoff": 0.5,
        "headers": {"X-Team": "blue"},
    }
    config = sidecar_config(sim, [], mcp_servers=[server])
    try:
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                session = await client.create_session()
                await script_calls(sim, ("echo", {"text": "over http"}), ("slow", {"ms": 300}))
                events = await streamed(client, session.session_id)
                http.stop()
                await _until(client, session.session_id, "echo", DOWN)
    finally:
        http.stop()
    calls = finished_calls(events)
    assert calls["echo"].content == "echo: over http"
    assert events_of(events, "tool_call_progress")
