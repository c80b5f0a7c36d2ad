"""The bridge following tasks of MCP's tasks extension (2026-07-28): one sidecar's MCP
endpoint, which runs tools as tasks (its tasks side is held to the official conformance
suite in ``tests/mcp_server``), bridged by a second sidecar, whose model calls them. A tool
the first requires as a task reaches the model only if the bridge declared the extension
and followed the task; a task's question reaches the second sidecar's caller through the
approval flow and goes back with ``tasks/update``; a call that ends first cancels it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentsidecar.client import AgentClient, Decision
from agentsidecar.v1 import agent_pb2
from sidecar.testing import ServerProcess
from tests.support.mcp_stack import edge, script_calls, streamed
from tests.support.stack import finished_calls, sidecar, sidecar_config, simulator

OK = agent_pb2.TOOL_CALL_STATUS_OK


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerProcess]:
    with simulator() as process:
        yield process


def _upstream(sim: ServerProcess, audit: Path) -> dict[str, Any]:
    """The sidecar whose endpoint runs ``slow`` and ``ask`` only as tasks."""
    return sidecar_config(
        sim,
        [],
        mcp_servers=[edge(allow_tools=["slow", "ask", "echo"])],
        mcp={
            "port": 0,
            "tasks": {"tools": {"slow": "required", "ask": "required"}, "poll_interval": 0.05},
        },
        auth={"audit": {"path": str(audit)}},
    )


def _bridging(sim: ServerProcess, url: str, **settings: Any) -> dict[str, Any]:
    upstream = {"name": "upstream", "url": url, "protocol": "2026-07-28", "approval": "never"}
    return sidecar_config(sim, [], mcp_servers=[{**upstream, **settings}])


async def test_a_tool_run_only_as_a_task_upstream_answers_the_model(
    sim: ServerProcess, tmp_path: Path
) -> None:
    with sidecar(_upstream(sim, tmp_path / "audit.jsonl"), tmp_path / "up") as up:
        url = up.announced("mcp on ")
        with sidecar(_bridging(sim, url), tmp_path / "down") as down:
            async with AgentClient(down.address) as client:
                session = await client.create_session()
                await script_calls(sim, ("slow", {"ms": 400, "steps": 4}), ("echo", {"text": "x"}))
                calls = finished_calls(await streamed(client, session.session_id))
    assert calls["slow"].status == OK and calls["slow"].content == "slept"
    assert calls["echo"].status == OK and calls["echo"].content == "echo: x"


async def test_a_tasks_question_reaches_the_caller_and_its_answer_goes_back(
    sim: ServerProcess, tmp_path: Path
) -> None:
    asked: list[agent_pb2.ApprovalRequired] = []

    def answer(event: agent_pb2.ApprovalRequired) -> Decision:
        asked.append(event)
        return Decision.reply({"name": "Ada"})

    with sidecar(_upstream(sim, tmp_path / "audit.jsonl"), tmp_path / "up") as up:
        url = up.announced("mcp on ")
        with sidecar(_bridging(sim, url), tmp_path / "down") as down:
            async with AgentClient(down.address) as client:
                session = await client.create_session()
                await script_calls(sim, ("ask", {}))
                events = await streamed(client, session.session_id, on_approval=answer)
    assert finished_calls(events)["ask"].content == "hello Ada"
    [question] = asked
    assert question.question.message == "What is your name?"
    assert json.loads(question.question.requested_schema)["properties"] == {
        "name": {"type": "string"}
    }


async def test_a_call_that_ends_first_cancels_its_task_upstream(
    sim: ServerProcess, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    with sidecar(_upstream(sim, audit), tmp_path / "up") as up:
        url = up.announced("mcp on ")
        with sidecar(_bridging(sim, url, timeout=1.0), tmp_path / "down") as down:
            async with AgentClient(down.address) as client:
                session = await client.create_session()
                await script_calls(sim, ("slow", {"ms": 20000, "steps": 1}))
                slow = finished_calls(await streamed(client, session.session_id))["slow"]
        # The upstream call ends soon after (its task cancelled), not after 20 s.
        records: list[dict[str, Any]] = []
        for _ in range(100):
            records = [
                r
                for r in map(json.loads, audit.read_text().splitlines())
                if r.get("event") == "tool_call" and r.get("tool") == "slow"
            ]
            if records:
                break
            await asyncio.sleep(0.1)
    assert slow.status == agent_pb2.TOOL_CALL_STATUS_TIMED_OUT
    assert [r["status"] for r in records] == ["CANCELLED"]
