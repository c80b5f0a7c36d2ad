"""The sidecar's MCP endpoint, used by outside clients: the ``mcp`` SDK's client (both
revisions, Streamable HTTP and ``agent-sidecar mcp-stdio``) and the MCP Inspector's CLI,
against a real sidecar with a gRPC tool server and a bridged MCP server behind it."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
import yaml
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from sidecar import testing
from sidecar.testing import ServerProcess
from tests.support.mcp_stack import INSPECTOR, NODE, edge
from tests.support.stack import eventually, sidecar, sidecar_config, simulator

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789"


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _config(sim: ServerProcess, orders: ServerProcess, audit: Path) -> dict[str, Any]:
    return sidecar_config(
        sim,
        [{"name": "orders", "address": orders.address}],
        mcp_servers=[
            edge(allow_tools=["echo", "slow", "whoami", "ask", "fail"]),
            edge("guarded", approval="always", allow_tools=["mixed"]),
        ],
        profiles={"default": {}, "other": {"tools": ["echo"]}},
        mcp={
            "port": 0,
            "agent_tool": True,
            "allowed_origins": ["https://app.example"],
            "tasks": {"tools": {"slow": "optional", "ask": "optional"}, "poll_interval": 0.05},
        },
        auth={
            "principals": [
                {"name": "alice", "token_sha256": _sha(ALICE), "profiles": ["default"]},
                {"name": "bob", "token_sha256": _sha(BOB), "profiles": ["other"]},
            ],
            "audit": {"path": str(audit)},
        },
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, dict[str, Any]]]:
    work = tmp_path_factory.mktemp("front")
    with (
        simulator() as sim,
        testing.tool_server("toolservers.examples.orders") as orders,
    ):
        config = _config(sim, orders, work / "audit.jsonl")
        with sidecar(config, work) as side:
            yield side.announced("mcp on "), work / "audit.jsonl", config


@contextlib.asynccontextmanager
async def _client(
    url: str, mode: str = "auto", token: str = ALICE, **kwargs: Any
) -> AsyncIterator[Client]:
    """An SDK client of the endpoint, as ``token``'s principal."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode, cache=None, **kwargs) as client:
            yield client


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_host_lists_and_calls_native_and_bridged_tools_with_progress(
    stack: tuple[str, Path, dict[str, Any]], mode: str
) -> None:
    url, _, _ = stack
    progress: list[float] = []

    async def report(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    async with _client(url, mode) as client:
        version = client.protocol_version
        tools = {t.name: t for t in (await client.list_tools()).tools}
        order = await client.call_tool("get_order_status", {"order_id": "20250101"})
        slow = await client.call_tool("slow", {"ms": 300, "steps": 3}, progress_callback=report)
        failed = await client.call_tool("fail", {"message": "nope"})
        invalid = await client.call_tool("get_order_status", {"order_id": 5})
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("no_such_tool", {})
    assert version == ("2026-07-28" if mode == "auto" else "2025-11-25")
    assert {"get_order_status", "echo", "slow", "mixed", "agent"} <= set(tools)
    assert tools["get_order_status"].annotations.read_only_hint is True
    assert tools["echo"].annotations.read_only_hint is False  # the bridge does not trust it
    assert json.loads(order.content[0].text)["order_id"] == "20250101"
    assert not order.is_error
    # Reports closer than a tenth of a second apart are thinned; the last always goes.
    assert slow.content[0].text == "slept" and progress[-1] == 3
    assert progress == sorted(set(progress))
    assert failed.is_error and failed.content[0].text == "nope"
    assert invalid.is_error and "order_id" in invalid.content[0].text
    assert unknown.value.code == types.INVALID_PARAMS


async def test_callers_are_the_grpc_ports_principals_and_their_identity_reaches_the_tools(
    stack: tuple[str, Path, dict[str, Any]],
) -> None:
    url, audit, _ = stack
    async with httpx2.AsyncClient() as http:
        missing = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        wrong = await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": "Bearer not-a-token-at-all"},
        )
    async with _client(url) as client:
        who = json.loads((await client.call_tool("whoami", {})).content[0].text)
    async with _client(url, token=BOB) as client:
        with pytest.raises(MCPError) as refused:
            await client.list_tools()
    assert missing.status_code == 401 and wrong.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    assert who["dev.agentsidecar/principal"] == "alice"
    assert refused.value.error.data == {"reason": "PERMISSION_DENIED"}
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert any(r["event"] == "auth_failed" and r["method"] == "mcp" for r in lines)
    # A refusal is recorded as on every front.
    assert any(
        r["event"] == "call_refused" and r["principal"] == "bob" and r["method"] == "tools/list"
        for r in lines
    )
    calls = [r for r in lines if r["event"] == "tool_call" and r["tool"] == "whoami"]
    assert calls and calls[-1]["principal"] == "alice" and calls[-1]["server"] == "edge"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("answer", ["accept", "decline"])
async def test_approval_is_an_elicitation_to_the_host(
    stack: tuple[str, Path, dict[str, Any]], mode: str, answer: str
) -> None:
    url, _, _ = stack
    asked: list[str] = []

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action=answer, content={} if answer == "accept" else None)

    async with _client(url, mode, elicitation_callback=elicit) as client:
        result = await client.call_tool("mixed", {})
    async with _client(url, mode) as client:
        unasked = await client.call_tool("mixed", {})
    assert len(asked) == 1 and asked[0].startswith("Run mixed with {}?")
    if answer == "accept":
        assert not result.is_error and "[image: image/png" in result.content[0].text
    else:
        assert result.is_error and "denied" in result.content[0].text
    assert unasked.is_error and "denied" in unasked.content[0].text


async def test_a_bridged_tools_question_reaches_the_host_on_the_2025_revisions(
    stack: tuple[str, Path, dict[str, Any]],
) -> None:
    url, _, _ = stack

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "Host"})

    async with _client(url, "legacy", elicitation_callback=elicit) as client:
        result = await client.call_tool("ask", {})
    assert result.content[0].text == "hello Host"


async def test_a_bridged_servers_question_is_relayed_to_a_2026_host(
    stack: tuple[str, Path, dict[str, Any]],
) -> None:
    url, _, _ = stack
    asked: list[str] = []

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Host"})

    async with _client(url, elicitation_callback=elicit) as client:
        result = await client.call_tool("ask", {})
        assert client.protocol_version == "2026-07-28"
    assert asked == ["What is your name?"]
    assert result.content[0].text == "hello Host"


async def test_a_relayed_round_is_sealed_to_its_call_its_arguments_and_its_principal(
    stack: tuple[str, Path, dict[str, Any]],
) -> None:
    url, _, _ = stack
    answer = {"name": types.ElicitResult(action="accept", content={"name": "Eve"})}

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:  # declared, never called
        return types.ElicitResult(action="decline")

    async with _client(url) as client:
        with pytest.raises(MCPError) as undeclared:  # a host that cannot answer is not asked
            await client.session.call_tool("ask", {}, allow_input_required=True)
    assert undeclared.value.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY
    async with _client(url, elicitation_callback=elicit) as client:
        first = await client.session.call_tool("ask", {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        state = first.request_state
        assert state and "name" not in state  # sealed: opaque to the host
        refused = []
        for arguments, sent in (({}, state[:-4] + "AAAA"), ({"x": 1}, state)):
            with pytest.raises(MCPError) as error:
                await client.session.call_tool(
                    "ask", arguments, input_responses=answer, request_state=sent
                )
            refused.append(error.value)
        done = await client.session.call_tool(
            "ask", {}, input_responses=answer, request_state=state
        )
    async with _client(url, token=BOB, elicitation_callback=elicit) as client:
        with pytest.raises(MCPError) as foreign:
            await client.session.call_tool("ask", {}, input_responses=answer, request_state=state)
    assert all(e.code == types.INVALID_PARAMS for e in [*refused, foreign.value])
    assert all("requestState" in e.message for e in [*refused, foreign.value])
    assert done.content[0].text == "hello Eve"


async def _rpc(url: str, token: str, method: str, params: dict[str, Any], name: str) -> Any:
    """One 2026-07-28 request, as a host that declares the tasks extension sends it."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {
            "elicitation": {},
            "extensions": {"io.modelcontextprotocol/tasks": {}},
        },
    }
    headers = {
        "Authorization": f"Bearer {token}",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": method,
        "Mcp-Name": name,
        "Accept": "application/json, text/event-stream",
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    async with httpx2.AsyncClient(timeout=30) as http:
        response = await http.post(url, json=body, headers=headers)
    text = response.text
    if "data:" in text:
        text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
    answer = json.loads(text)
    if "error" in answer:
        raise MCPError(answer["error"]["code"], answer["error"]["message"])
    return answer["result"]


async def _task(url: str, token: str, task_id: str, until: set[str]) -> dict[str, Any]:
    async with asyncio.timeout(20):
        while True:
            task = await _rpc(url, token, "tasks/get", {"taskId": task_id}, task_id)
            if task["status"] in until:
                return task  # type: ignore[no-any-return]
            await asyncio.sleep(0.05)


async def test_a_2026_host_runs_a_tool_as_a_task_that_only_it_can_see(
    stack: tuple[str, Path, dict[str, Any]],
) -> None:
    url, _, _ = stack
    call = {"name": "slow", "arguments": {"ms": 200, "steps": 1}}
    created = await _rpc(url, ALICE, "tools/call", call, "slow")
    task_id = created["taskId"]
    assert created["resultType"] == "task" and created["status"] == "working"
    with pytest.raises(MCPError) as foreign:
        await _rpc(url, BOB, "tasks/get", {"taskId": task_id}, task_id)
    with pytest.raises(MCPError) as foreign_cancel:
        await _rpc(url, BOB, "tasks/cancel", {"taskId": task_id}, task_id)
    done = await _task(url, ALICE, task_id, {"completed", "failed", "cancelled"})
    assert foreign.value.code == foreign_cancel.value.code == types.INVALID_PARAMS
    assert done["status"] == "completed" and done["result"]["content"][0]["text"] == "slept"
    # Without the extension the same tool answers at once.
    async with _client(url) as client:
        plain = await client.call_tool("slow", {"ms": 10, "steps": 1})
    assert plain.content[0].text == "slept"


async def test_a_tasks_question_is_answered_with_tasks_update_and_a_cancel_withdraws_it(
    stack: tuple[str, Path, dict[str, Any]],
) -> None:
    url, _, _ = stack
    created = await _rpc(url, ALICE, "tools/call", {"name": "ask", "arguments": {}}, "ask")
    task_id = created["taskId"]
    waiting = await _task(url, ALICE, task_id, {"input_required"})
    [(key, request)] = waiting["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    assert request["params"]["message"] == "What is your name?"
    reply = {"action": "accept", "content": {"name": "Tess"}}
    update = {"taskId": task_id, "inputResponses": {key: reply, "unknown": reply}}
    await _rpc(url, ALICE, "tasks/update", update, task_id)
    done = await _task(url, ALICE, task_id, {"completed", "failed", "cancelled"})
    assert done["result"]["content"][0]["text"] == "hello Tess"
    # Cancelled while it waits for an answer: the task ends cancelled and the server that
    # asked serves the next call.
    created = await _rpc(url, ALICE, "tools/call", {"name": "ask", "arguments": {}}, "ask")
    task_id = created["taskId"]
    await _task(url, ALICE, task_id, {"input_required"})
    await _rpc(url, ALICE, "tasks/cancel", {"taskId": task_id}, task_id)
    cancelled = await _task(url, ALICE, task_id, {"completed", "failed", "cancelled"})
    async with _client(url) as client:
        echoed = await client.call_tool("echo", {"text": "after"})
    assert cancelled["status"] == "cancelled"
    assert echoed.content[0].text == "echo: after"


async def test_the_agent_tool_runs_a_turn_and_continues_its_session(
    stack: tuple[str, Path, dict[str, Any]],
) -> None:
    url, _, _ = stack
    async with _client(url) as client:
        first = await client.call_tool("agent", {"input": "hello there"})
        session_id = first.structured_content["session_id"]
        second = await client.call_tool("agent", {"input": "again", "session_id": session_id})
        missing = await client.call_tool("agent", {"input": "x", "session_id": "nope"})
    assert first.structured_content["answer"].startswith("[simulated]")
    assert first.structured_content["stop_reason"] == "ANSWERED"
    assert second.structured_content["session_id"] == session_id
    assert missing.is_error


async def test_requests_from_a_foreign_origin_or_a_rebound_host_are_refused(
    stack: tuple[str, Path, dict[str, Any]],
) -> None:
    url, _, _ = stack
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    auth = {"Authorization": f"Bearer {ALICE}"}
    async with httpx2.AsyncClient() as http:
        origin = await http.post(url, json=body, headers={**auth, "Origin": "https://evil.example"})
        host = await http.post(url, json=body, headers={**auth, "Host": "evil.example"})
        allowed = await http.post(
            url,
            json=body,
            headers={**auth, "Origin": "https://app.example", "Accept": "application/json"},
        )
        local = await http.post(
            url,
            json=body,
            headers={**auth, "Origin": "http://localhost:3000", "Accept": "application/json"},
        )
    assert origin.status_code == 403
    assert host.status_code == 421
    assert local.status_code != 403
    # The configured allow-list takes effect on a loopback bind too.
    assert allowed.status_code not in (403, 421)


def test_the_mcp_inspector_cli_lists_and_calls_tools(
    stack: tuple[str, Path, dict[str, Any]],
) -> None:
    assert INSPECTOR.exists(), "the MCP Inspector is missing: run 'make mcp-tools'"
    url, _, _ = stack
    common = [str(NODE), str(INSPECTOR), "--cli", url, "--header", f"Authorization: Bearer {ALICE}"]
    listed = subprocess.run(
        [*common, "--method", "tools/list"], capture_output=True, text=True, timeout=60
    )
    called = subprocess.run(
        [
            *common,
            "--method",
            "tools/call",
            "--tool-name",
            "get_order_status",
            "--tool-arg",
            'order_id="20250101"',
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    names = {t["name"] for t in json.loads(listed.stdout)["tools"]}
    assert {"get_order_status", "echo", "agent"} <= names
    assert called.returncode == 0, called.stderr
    content = json.loads(called.stdout)["content"][0]["text"]
    assert json.loads(content)["status"] == "delivered"


async def test_mcp_stdio_serves_a_desktop_host(
    stack: tuple[str, Path, dict[str, Any]], tmp_path: Path
) -> None:
    _, _, config = stack
    config = {
        **config,
        "mcp": {"agent_tool": False},
        "auth": {"principals": config["auth"]["principals"]},
    }
    config["sessions"] = {"store": "memory"}
    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump(config))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "sidecar", "mcp-stdio", "--config", str(path), "--token-env", "HOST_TOKEN"],
        env={"HOST_TOKEN": ALICE, "GROQ_API_KEY": ""},
    )
    async with Client(params, cache=None) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        result = await client.call_tool("echo", {"text": "from a desktop"})
    assert "agent" not in names and "get_order_status" in names
    assert result.content[0].text == "echo: from a desktop"


async def test_a_2026_approval_answers_only_the_endpoints_question_and_is_taken_once(
    stack: tuple[str, Path, dict[str, Any]],
) -> None:
    url, audit, _ = stack
    accept = {"approve": types.ElicitResult(action="accept", content={})}

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:  # declared, never called
        return types.ElicitResult(action="decline")

    def runs() -> int:
        lines = [json.loads(x) for x in audit.read_text().splitlines()]
        return sum(1 for r in lines if r["event"] == "tool_call" and r["tool"] == "mixed")

    before = runs()
    async with _client(url, elicitation_callback=elicit) as client:
        # An answer to a question the endpoint never asked: it asks.
        unasked = await client.session.call_tool(
            "mixed", {}, input_responses=accept, allow_input_required=True
        )
        assert isinstance(unasked, types.InputRequiredResult)
        assert list(unasked.input_requests) == ["approve"]
        assert runs() == before
        state = unasked.request_state
        ran = await client.session.call_tool(
            "mixed", {}, input_responses=accept, request_state=state
        )
        replays = []
        for _ in range(2):
            with pytest.raises(MCPError) as replayed:
                await client.session.call_tool(
                    "mixed", {}, input_responses=accept, request_state=state
                )
            replays.append(replayed.value)
    assert not ran.is_error
    assert all(e.code == types.INVALID_PARAMS and "requestState" in e.message for e in replays)
    assert runs() == before + 1


async def test_a_call_the_host_gave_up_on_is_recorded_with_the_time_it_ran(
    stack: tuple[str, Path, dict[str, Any]],
) -> None:
    url, audit, _ = stack

    def slow_records() -> list[dict[str, Any]]:
        lines = [json.loads(x) for x in audit.read_text().splitlines()]
        return [r for r in lines if r["event"] == "tool_call" and r["tool"] == "slow"]

    before = len(slow_records())
    async with _client(url, "legacy") as client:
        call = asyncio.create_task(client.call_tool("slow", {"ms": 5000, "steps": 50}))
        await asyncio.sleep(0.8)  # it reached the bridged server and runs there
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError, MCPError):
            await call

        async def recorded() -> bool:
            return len(slow_records()) > before

        await eventually(recorded, timeout=20)
    record = slow_records()[-1]
    assert record["status"] == "CANCELLED"
    assert record["duration_ms"] >= 500 and record["attempts"] >= 1
