"""The endpoint's task board (MCP's tasks extension) in one process: who sees a task, how
questions are keyed and answered, what a cancel and the limits do. The wire is tested
through real processes in ``test_front.py`` and by the conformance suite."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.shared.exceptions import MCPError

from sidecar.mcp_server.tasks import EndpointTask, TaskBoard, TaskLimit

OWNERS = st.sampled_from(["alice", "bob", "carol", ""])


def _board(**limits: Any) -> TaskBoard:
    settings = {"ttl": 60.0, "poll_interval": 0.05, "max_per_principal": 8, "max_tasks": 32}
    return TaskBoard(**{**settings, **limits})


async def _settled(board: TaskBoard, owner: str, task_id: str) -> dict[str, Any]:
    """The task once it has ended (the board's state, polled as a host polls it)."""
    for _ in range(1000):
        view = board.get(owner, task_id)
        if view["status"] in ("completed", "failed", "cancelled"):
            return view
        await asyncio.sleep(0.005)
    raise AssertionError(f"task {task_id} did not end")


@settings(max_examples=40, deadline=None)
@given(starts=st.lists(OWNERS, min_size=1, max_size=12), reader=OWNERS)
def test_a_task_is_seen_only_by_its_owner(starts: list[str], reader: str) -> None:
    async def scenario() -> None:
        board = _board()

        async def work(task: EndpointTask) -> dict[str, Any]:
            return {"content": [{"type": "text", "text": task.owner}]}

        created = [(owner, board.start(owner, work)["taskId"]) for owner in starts]
        for owner, task_id in created:
            view = await _settled(board, owner, task_id)
            assert view["result"]["content"][0]["text"] == owner
            if reader != owner:
                for method, args in (
                    (board.get, ()),
                    (board.cancel, ()),
                    (board.update, ({"q1": {}},)),
                ):
                    with pytest.raises(MCPError) as error:
                        method(reader, task_id, *args)  # type: ignore[operator]
                    assert error.value.code == -32602
                    assert "not found" in error.value.message  # nothing said of its owner
        assert len({task_id for _, task_id in created}) == len(created)

    asyncio.run(scenario())


async def test_questions_have_keys_never_reused_and_partial_answers_keep_the_rest() -> None:
    board = _board()
    answers: list[dict[str, Any]] = []

    async def work(task: EndpointTask) -> dict[str, Any]:
        first = await asyncio.gather(task.ask({"n": 1}), task.ask({"n": 2}))
        answers.extend(first)
        answers.append(await task.ask({"n": 3}))
        return {"content": []}

    task_id = board.start("alice", work)["taskId"]
    await asyncio.sleep(0.01)
    view = board.get("alice", task_id)
    assert view["status"] == "input_required" and set(view["inputRequests"]) == {"q1", "q2"}
    board.update("alice", task_id, {"q2": {"action": "accept"}, "zz": {"action": "x"}})
    view = board.get("alice", task_id)
    assert view["status"] == "input_required" and set(view["inputRequests"]) == {"q1"}
    board.update("alice", task_id, {"q2": {"action": "again"}})  # answered already: ignored
    board.update("alice", task_id, {"q1": {"action": "decline"}})
    await asyncio.sleep(0.01)
    assert set(board.get("alice", task_id)["inputRequests"]) == {"q3"}
    board.update("alice", task_id, {"q3": "not an object"})
    view = await _settled(board, "alice", task_id)
    assert view["status"] == "completed"
    assert answers == [{"action": "decline"}, {"action": "accept"}, {}]


async def test_a_cancel_ends_a_waiting_task_and_its_question_is_withdrawn() -> None:
    board = _board()
    withdrawn: list[dict[str, Any]] = []

    async def work(task: EndpointTask) -> dict[str, Any]:
        try:
            await task.ask({"n": 1})
        finally:
            withdrawn.append({})
        return {}

    task_id = board.start("alice", work)["taskId"]
    await asyncio.sleep(0.01)
    board.cancel("alice", task_id)
    view = await _settled(board, "alice", task_id)
    board.cancel("alice", task_id)  # a finished task stays as it ended
    assert view["status"] == "cancelled" and "inputRequests" not in view
    assert board.get("alice", task_id)["status"] == "cancelled" and withdrawn


async def test_limits_per_principal_and_per_process_and_expiry() -> None:
    board = _board(max_per_principal=2, max_tasks=3, ttl=0.2)
    hold = asyncio.Event()

    async def work(task: EndpointTask) -> dict[str, Any]:
        await hold.wait()
        return {}

    first = board.start("alice", work)["taskId"]
    board.start("alice", work)
    with pytest.raises(TaskLimit):
        board.start("alice", work)
    board.start("bob", work)
    with pytest.raises(TaskLimit):
        board.start("carol", work)
    await asyncio.sleep(0.25)  # past the ttl: forgotten (and cancelled)
    with pytest.raises(MCPError):
        board.get("alice", first)
    board.start("carol", work)
    hold.set()
    await board.close()


async def test_a_failure_inside_the_call_is_a_failed_task_with_a_json_rpc_error() -> None:
    board = _board()

    async def broken(task: EndpointTask) -> dict[str, Any]:
        raise MCPError(-32603, "it broke")

    async def buggy(task: EndpointTask) -> dict[str, Any]:
        raise KeyError("secret detail")

    failed = await _settled(board, "a", board.start("a", broken)["taskId"])
    crashed = await _settled(board, "a", board.start("a", buggy)["taskId"])
    assert failed["status"] == "failed" and failed["error"] == {
        "code": -32603,
        "message": "it broke",
    }
    assert crashed["status"] == "failed" and "secret" not in str(crashed)
    assert "result" not in failed and "result" not in crashed
