"""The bridge against MCP servers no one here wrote, installed from the registries and run
offline: mcp-server-time and mcp-server-git (PyPI) and the reference server
@modelcontextprotocol/server-everything (npm, ``make mcp-tools``)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentsidecar.client import AgentClient, Decision
from agentsidecar.v1 import agent_pb2
from sidecar.testing import ServerProcess
from tests.support.mcp_stack import (
    EVERYTHING,
    NODE,
    events_of,
    script_calls,
    streamed,
    venv_script,
)
from tests.support.stack import finished_calls, sidecar, sidecar_config, simulator

OK = agent_pb2.TOOL_CALL_STATUS_OK


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerProcess]:
    with simulator() as process:
        yield process


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_mcp_server_time_answers_through_the_bridge_in_either_revision(
    sim: ServerProcess, tmp_path: Path, protocol: str
) -> None:
    server = {
        "name": "time",
        "command": venv_script("mcp-server-time"),
        "args": ["--local-timezone", "UTC"],
        "protocol": protocol,
        "trust_annotations": True,
    }
    config = sidecar_config(sim, [], mcp_servers=[server])
    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            tools = {t.tool.name: t for t in await client.list_session_tools(session.session_id)}
            arguments = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
            await script_calls(
                sim,
                ("get_current_time", {"timezone": "Europe/Paris"}),
                ("convert_time", arguments),
            )
            calls = finished_calls(await streamed(client, session.session_id))
    assert set(tools) == {"get_current_time", "convert_time"}
    assert all(t.server == "time" and t.tool.read_only for t in tools.values())
    assert json.loads(calls["get_current_time"].content)["timezone"] == "Europe/Paris"
    converted = json.loads(calls["convert_time"].content)
    assert converted["target"]["datetime"].startswith(converted["source"]["datetime"][:10])
    assert converted["target"]["timezone"] == "Asia/Tokyo"


def _git(repo: Path, *args: str) -> str:
    command = ["git", "-c", "user.email=t@example.com", "-c", "user.name=Test", *args]
    return subprocess.run(command, cwd=repo, check=True, capture_output=True, text=True).stdout


async def test_mcp_server_git_writes_in_the_models_order_and_destructive_calls_wait_for_approval(
    sim: ServerProcess, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("a\n")
    _git(repo, "add", "a.txt")
    _git(repo, "commit", "-qm", "first commit")
    (repo / "b.txt").write_text("b\n")
    writes = {"write_keys": ["repo:{repo_path}"]}
    server = {
        "name": "git",
        "command": venv_script("mcp-server-git"),
        "args": ["--repository", str(repo)],
        "trust_annotations": True,
        "tools": {
            "git_add": writes,
            "git_commit": writes,
            "git_log": {"read_keys": ["repo:{repo_path}"]},
        },
        "env": {
            "GIT_AUTHOR_NAME": "Test",
            "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "Test",
            "GIT_COMMITTER_EMAIL": "t@example.com",
        },
    }
    config = sidecar_config(sim, [], mcp_servers=[server])
    at = {"repo_path": str(repo)}
    with sidecar(config, tmp_path / "side") as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            tools = {
                t.tool.name: t.tool for t in await client.list_session_tools(session.session_id)
            }
            await script_calls(
                sim,
                ("git_add", {**at, "files": ["b.txt"]}),
                ("git_commit", {**at, "message": "second commit"}),
                ("git_log", {**at, "max_count": 5}),
            )
            calls = finished_calls(await streamed(client, session.session_id))
            await script_calls(sim, ("git_reset", at))
            unary = (await client.run(session.session_id, "go", timeout=60)).result
    assert tools["git_reset"].requires_approval and not tools["git_commit"].requires_approval
    assert tools["git_log"].read_only and not tools["git_add"].read_only
    assert all(calls[name].status == OK for name in ("git_add", "git_commit", "git_log"))
    assert "second commit" in calls["git_log"].content
    assert "second commit" in _git(repo, "log", "--oneline")
    [reset] = [s for s in unary.timeline.stages if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL]
    assert reset.tool_call.status == agent_pb2.TOOL_CALL_STATUS_DENIED


def _everything() -> dict[str, object]:
    assert EVERYTHING.exists(), "server-everything is missing: run 'make mcp-tools'"
    return {
        "name": "everything",
        "command": str(NODE),
        "args": [str(EVERYTHING)],
        "trust_annotations": True,
        "approval": "never",
        "discovery_timeout": 20,
    }


async def test_server_everything_results_progress_and_structured_content_through_the_bridge(
    sim: ServerProcess, tmp_path: Path
) -> None:
    config = sidecar_config(sim, [], mcp_servers=[_everything()])
    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            tools = {t.tool.name for t in await client.list_session_tools(session.session_id)}
            await script_calls(
                sim,
                ("echo", {"message": "hi there"}),
                ("get-sum", {"a": 2, "b": 40}),
                ("get-structured-content", {"location": "Chicago"}),
                ("get-tiny-image", {}),
                ("get-resource-links", {"count": 2}),
                ("trigger-long-running-operation", {"duration": 1, "steps": 4}),
            )
            events = await streamed(client, session.session_id)
    calls = finished_calls(events)
    assert "simulate-research-query" in tools  # runs only as a task
    assert all(c.status == OK for c in calls.values()), calls
    assert "hi there" in calls["echo"].content
    assert "42" in calls["get-sum"].content
    assert set(json.loads(calls["get-structured-content"].content)) >= {"temperature", "conditions"}
    assert "[image: image/png" in calls["get-tiny-image"].content
    assert calls["get-resource-links"].content.count("[resource link:") == 2
    progress = [p for p in events_of(events, "tool_call_progress")]
    assert progress and progress[-1].tool_name == "trigger-long-running-operation"
    assert progress[-1].total == 4


async def test_a_task_is_polled_asks_through_approval_and_ends_with_the_runs_deadline(
    sim: ServerProcess, tmp_path: Path
) -> None:
    answers: list[agent_pb2.ApprovalRequired] = []

    def clarify(event: agent_pb2.ApprovalRequired) -> Decision:
        answers.append(event)
        return Decision.reply({"interpretation": "historical"})

    everything = {**_everything(), "tools": {"simulate-research-query": {"timeout": 20}}}
    config = sidecar_config(sim, [], mcp_servers=[everything])
    with sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            await script_calls(sim, ("simulate-research-query", {"topic": "bees"}))
            plain = await streamed(client, session.session_id)
            await script_calls(
                sim, ("simulate-research-query", {"topic": "bees", "ambiguous": True})
            )
            asked = await streamed(client, session.session_id, on_approval=clarify)
            await script_calls(sim, ("simulate-research-query", {"topic": "wasps"}))
            cut = await streamed(client, session.session_id, timeout=2.5)
    report = finished_calls(plain)["simulate-research-query"]
    assert report.status == OK and "Research Report: bees" in report.content
    assert [p.message for p in events_of(plain, "tool_call_progress")]
    assert answers and "interpretations" in answers[0].question.message
    clarified = finished_calls(asked)["simulate-research-query"]
    assert clarified.status == OK and "historical" in clarified.content.lower()
    timed_out = finished_calls(cut)["simulate-research-query"]
    assert timed_out.status == agent_pb2.TOOL_CALL_STATUS_TIMED_OUT
    [ended] = events_of(cut, "run_finished")
    assert ended.stop_reason == agent_pb2.STOP_REASON_BUDGET_EXHAUSTED
