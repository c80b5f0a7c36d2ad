"""Background runs through a real sidecar on every session store (SQLite, memory,
PostgreSQL), from the Python client: started at once, stored as they happen, watched from
any point, listed, cancelled, approved, called back; and every bad request refused with
its reason while the sidecar keeps serving."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentsidecar.client import AgentClient
from agentsidecar.errors import error_details
from agentsidecar.v1 import agent_pb2
from sidecar.testing import ServerProcess
from tests.support.runs import (
    CALLBACK_SECRET,
    STORES,
    events_of,
    first_event,
    kinds,
    receiver,
    signed_correctly,
    state_becomes,
    store_section,
)
from tests.support.stack import (
    eventually,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
    tool_stats,
)

COMPLETED = agent_pb2.RUN_STATE_COMPLETED
CANCELED = agent_pb2.RUN_STATE_CANCELED
FAILED = agent_pb2.RUN_STATE_FAILED
INPUT_REQUIRED = agent_pb2.RUN_STATE_INPUT_REQUIRED
BACKGROUND: dict[str, Any] = {
    "flush_interval": 0.02,
    "poll_interval": 0.2,
    "callbacks": {
        "allowed_hosts": ["127.0.0.1"],
        "allow_private_networks": True,
        "allow_http": True,
        "secret_env": "CALLBACK_SECRET",
        "timeout": 2,
        "retry": {"max_attempts": 3, "initial_backoff": 0.05, "max_backoff": 0.1},
    },
}


@pytest.fixture(scope="module", params=STORES)
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ServerProcess]]:
    with (
        store_section(request.param, request) as sessions,
        simulator() as sim,
        scripted_toolserver() as tools,
    ):
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            background=BACKGROUND,
            sessions=sessions,
        )
        env = {"CALLBACK_SECRET": CALLBACK_SECRET}
        with sidecar(config, tmp_path_factory.mktemp("sidecar"), env=env) as side:
            yield {"sim": sim, "tools": tools, "sidecar": side}


@pytest.fixture
async def session_id(client: AgentClient) -> str:
    return (await client.create_session()).session_id


async def test_a_run_returns_at_once_and_its_events_and_result_are_stored(
    client: AgentClient, session_id: str
) -> None:
    run = await client.start_run(session_id, "three slow reads please")
    assert run.state == agent_pb2.RUN_STATE_SUBMITTED and run.run_id
    assert (run.session_id, run.input, run.attempts) == (session_id, "three slow reads please", 1)
    events = await events_of(client, run.run_id)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert kinds(events)[0] == "run_started" and kinds(events)[-1] == "run_finished"
    assert kinds(events).count("tool_call_finished") == 3
    assert {e.run_id for e in events} == {run.run_id}
    done = await client.get_run(run.run_id)
    assert done.state == COMPLETED
    assert done.result.answer.endswith("all three were read")
    assert done.result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    assert done.last_sequence == events[-1].sequence
    assert done.result == events[-1].run_finished
    assert done.end_time.seconds > 0
    # The run is the session's turn, under the same id.
    turns = (await client.get_session(session_id)).turns
    assert [(t.run_id, t.answer) for t in turns] == [(run.run_id, done.result.answer)]


async def test_a_background_runs_first_event_is_the_one_a_streamed_run_sends(
    client: AgentClient, session_id: str
) -> None:
    streamed, *_ = [e async for e in client.stream(session_id, "hello", timeout=30)]
    run = await client.start_run(session_id, "three slow reads please")
    stored = (await events_of(client, run.run_id))[0]
    assert stored.run_started == streamed.run_started
    assert stored.run_started.path == agent_pb2.RUN_PATH_FULL
    assert stored.run_started.profile == "default" and stored.run_started.model


async def test_a_request_sent_again_returns_the_run_it_started(
    client: AgentClient, session_id: str
) -> None:
    key = uuid.uuid4().hex
    first = await client.start_run(session_id, "two reads", request_id=key)
    again = await client.start_run(session_id, "two reads", request_id=key)  # while it runs
    assert (again.run_id, again.request_id) == (first.run_id, key)
    await events_of(client, first.run_id)
    after = await client.start_run(session_id, "two reads", request_id=key)  # once it ended
    assert after.run_id == first.run_id and after.state == COMPLETED
    with pytest.raises(grpc.aio.AioRpcError) as reused:
        await client.start_run(session_id, "hello there", request_id=key)
    assert reused.value.code() == grpc.StatusCode.ALREADY_EXISTS
    details = error_details(reused.value)
    assert details.reason == "REQUEST_ID_REUSED" and details.metadata["run_id"] == first.run_id
    assert [r.run_id for r in (await client.list_runs(session_id)).runs] == [first.run_id]
    # Sent at once, many times over: one run.
    other = (await client.create_session()).session_id
    key = uuid.uuid4().hex
    runs = await asyncio.gather(
        *(client.start_run(other, "two reads", request_id=key) for _ in range(6))
    )
    assert len({r.run_id for r in runs}) == 1
    await events_of(client, runs[0].run_id)
    # Without a key, every request is a run of its own.
    assert (await client.start_run(other, "two reads")).run_id != runs[0].run_id


async def test_a_watcher_that_reconnects_misses_nothing_and_sees_nothing_twice(
    client: AgentClient, session_id: str
) -> None:
    run = await client.start_run(session_id, "three slow reads please")
    seen: list[agent_pb2.StreamRunResponse] = []
    # Three watchers in turn, each leaving after two events, then one to the end.
    for _ in range(3):
        async with contextlib.aclosing(
            client.watch_run(run.run_id, after_sequence=seen[-1].sequence if seen else 0)
        ) as watch:
            async for event in watch:
                seen.append(event)
                if len(seen) % 2 == 0:
                    break
    seen += await events_of(client, run.run_id, after=seen[-1].sequence)
    assert [e.sequence for e in seen] == list(range(1, len(seen) + 1))
    # A watcher that comes after the end gets the same events, stored.
    assert await events_of(client, run.run_id) == seen
    assert await events_of(client, run.run_id, after=len(seen)) == []


async def test_a_sessions_runs_are_listed_newest_first_a_page_at_a_time(
    client: AgentClient, session_id: str
) -> None:
    started = []
    for text in ("two reads", "hello there", "two reads"):
        run = await client.start_run(session_id, text)
        await events_of(client, run.run_id)
        started.append(run.run_id)
    first = await client.list_runs(session_id, page_size=2)
    assert [r.run_id for r in first.runs] == started[::-1][:2]
    assert all(r.state == COMPLETED and not r.HasField("result") for r in first.runs)
    rest = await client.list_runs(session_id, page_size=2, page_token=first.next_page_token)
    assert [r.run_id for r in rest.runs] == started[:1] and rest.next_page_token == ""
    other = (await client.create_session()).session_id
    with pytest.raises(grpc.aio.AioRpcError) as wrong:
        await client.list_runs(other, page_token=first.next_page_token)
    assert error_details(wrong.value).reason == "INVALID_REQUEST"
    assert (await client.list_runs(other)).runs == []


async def test_cancelling_a_run_stops_it_and_its_tool_calls_and_is_safe_to_retry(
    client: AgentClient, session_id: str, stack: dict[str, ServerProcess]
) -> None:
    tools = stack["tools"].address
    before = (await tool_stats(tools))["cancelled"]
    run = await client.start_run(session_id, "hang please")
    await first_event(client, run.run_id, "tool_call_started")
    cancelled = await client.cancel_run(run.run_id)
    assert cancelled.state == CANCELED
    assert cancelled.result.stop_reason == agent_pb2.STOP_REASON_CANCELLED
    assert cancelled.result.error.code == "cancelled"
    assert (await tool_stats(tools))["cancelled"] == before + 1
    assert (await client.cancel_run(run.run_id)) == cancelled
    events = await events_of(client, run.run_id)
    finished = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
    assert [f.status for f in finished] == [agent_pb2.TOOL_CALL_STATUS_CANCELLED]
    assert events[-1].run_finished == cancelled.result
    turns = (await client.get_session(session_id)).turns
    assert [t.stop_reason for t in turns] == [agent_pb2.STOP_REASON_CANCELLED]
    # The session is free for the next run.
    again = await client.start_run(session_id, "two reads")
    assert (await state_becomes(client, again.run_id, COMPLETED)).result.tool_calls == 2


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "denied"])
async def test_a_run_waits_in_input_required_until_its_call_is_decided(
    client: AgentClient, session_id: str, approve: bool
) -> None:
    run = await client.start_run(session_id, "Please refund order 20250101")
    waiting = await state_becomes(client, run.run_id, INPUT_REQUIRED)
    (pending,) = waiting.pending_approvals
    assert (pending.tool_name, pending.destructive) == ("refund", True)
    assert orjson.loads(pending.arguments) == {"order": "20250101"}
    await client.approve(session_id, pending.call_id, approved=approve, reason="not today")
    done = await state_becomes(client, run.run_id, COMPLETED)
    assert not done.pending_approvals
    events = await events_of(client, run.run_id)
    assert "approval_required" in kinds(events)
    (finished,) = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
    expected = agent_pb2.TOOL_CALL_STATUS_OK if approve else agent_pb2.TOOL_CALL_STATUS_DENIED
    assert finished.status == expected
    if not approve:
        assert "not today" in finished.content
    with pytest.raises(grpc.aio.AioRpcError) as late:
        await client.approve(session_id, pending.call_id, approved=True)
    assert error_details(late.value).reason == "CALL_NOT_PENDING"


async def test_a_session_runs_one_background_run_at_a_time(
    client: AgentClient, session_id: str
) -> None:
    run = await client.start_run(session_id, "hang please")
    with pytest.raises(grpc.aio.AioRpcError) as busy:
        await client.start_run(session_id, "two reads")
    details = error_details(busy.value)
    assert (details.code, details.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "SESSION_BUSY")
    assert details.retry_delay is not None
    # Nor may a foreground turn take the session meanwhile.
    with pytest.raises(grpc.aio.AioRpcError) as taken:
        await client.run(session_id, "two reads", timeout=10)
    assert error_details(taken.value).reason == "SESSION_BUSY"
    await client.cancel_run(run.run_id)


async def test_a_completion_callback_is_signed_and_carries_the_final_state(
    client: AgentClient, session_id: str
) -> None:
    async with receiver() as hook:
        run = await client.start_run(session_id, "two reads", callback_url=hook.url)
        (delivery,) = await hook.wait(1)
        assert delivery.headers["webhook-id"] == run.run_id
        assert delivery.headers["content-type"] == "application/json"
        assert signed_correctly(delivery)
        assert not signed_correctly(delivery, secret="another-secret")
        body = orjson.loads(delivery.body)
        assert (body["runId"], body["state"]) == (run.run_id, "RUN_STATE_COMPLETED")
        assert body["result"]["answer"].endswith("done")
        done = await state_becomes(client, run.run_id, COMPLETED)

        async def delivered() -> bool:
            got = await client.get_run(run.run_id)
            return got.callback_status == agent_pb2.CALLBACK_STATUS_DELIVERED

        await eventually(delivered)
        assert done.result.answer == body["result"]["answer"]


async def test_a_failing_callback_is_retried_and_a_redirect_never_followed(
    client: AgentClient,
) -> None:
    async with receiver() as hook:
        hook.answers = [503, 500]
        first = (await client.create_session()).session_id
        run = await client.start_run(first, "two reads", callback_url=hook.url)
        deliveries = await hook.wait(3)
        assert {d.headers["webhook-id"] for d in deliveries} == {run.run_id}
        got = await _callback_settled(client, run.run_id)
        assert (got.callback_status, len(hook.deliveries)) == (
            agent_pb2.CALLBACK_STATUS_DELIVERED,
            3,
        )
        hook.answers = [307]
        second = (await client.create_session()).session_id
        moved = await client.start_run(second, "two reads", callback_url=hook.url)
        got = await _callback_settled(client, moved.run_id)
        assert got.callback_status == agent_pb2.CALLBACK_STATUS_FAILED
        assert len(hook.deliveries) == 4  # the redirect's target was never asked


async def test_a_callback_to_a_host_the_configuration_does_not_name_is_refused(
    client: AgentClient, session_id: str
) -> None:
    for url in ("https://hooks.example.com/x", "http://127.0.0.2:9/x"):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.start_run(session_id, "two reads", callback_url=url)
        details = error_details(refused.value)
        assert (details.code, details.reason) == (
            grpc.StatusCode.PERMISSION_DENIED,
            "CALLBACK_NOT_ALLOWED",
        )
    assert (await client.list_runs(session_id)).runs == []  # nothing was started


async def test_an_unknown_run_is_not_found_by_any_call(client: AgentClient) -> None:
    calls = [
        client.get_run("no-such-run"),
        client.cancel_run("no-such-run"),
        events_of(client, "no-such-run"),
    ]
    for call in calls:
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await call
        details = error_details(missing.value)
        assert (details.code, details.reason) == (grpc.StatusCode.NOT_FOUND, "RUN_NOT_FOUND")
        assert details.resource == ("agentsidecar.v1.Run", "no-such-run")


_BAD_ID = st.one_of(
    st.just(""), st.text(min_size=129, max_size=140), st.sampled_from(["a b", "x/y", "-lead", "é"])
)
_GOOD_ID = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,20}", fullmatch=True)
_BAD_URL = st.sampled_from(
    [
        "not a url",
        "ftp://127.0.0.1/x",
        "https://user:pw@127.0.0.1/x",
        "https://" + "a" * 2050,
        "https://h\u00e9llo.example/",
        "http://127.0.0.1/a b",
        "https://127.0.0.1:99999/",
    ]
)


@st.composite
def _starts(draw: st.DrawFn) -> tuple[agent_pb2.StartRunRequest, set[str]]:
    fields = ["session_id", "input", "output_mode", "callback.url"]
    bad = draw(st.sets(st.sampled_from(fields), min_size=1))
    request = agent_pb2.StartRunRequest(
        session_id=draw(_BAD_ID if "session_id" in bad else _GOOD_ID),
        input=draw(st.sampled_from(["", "  \n"])) if "input" in bad else "hello",
        output_mode=draw(st.integers(3, 99)) if "output_mode" in bad else 0,
        callback=agent_pb2.RunCallback(url=draw(_BAD_URL) if "callback.url" in bad else ""),
    )
    return request, bad


@pytest.mark.property
@given(data=st.data())
async def test_a_bad_request_names_every_invalid_field_and_the_sidecar_keeps_serving(
    client: AgentClient, data: st.DataObject
) -> None:
    kind = data.draw(st.sampled_from(["start", "get", "cancel", "watch", "list"]))
    stub = client.stub
    if kind == "start":
        request, bad = data.draw(_starts())
        call: Any = stub.StartRun(request, timeout=10)
    elif kind == "list":
        bad = data.draw(st.sets(st.sampled_from(["session_id", "page_size"]), min_size=1))
        call = stub.ListRuns(
            agent_pb2.ListRunsRequest(
                # An empty session id lists every session's runs: not a bad one here.
                session_id=data.draw(_BAD_ID.filter(bool) if "session_id" in bad else _GOOD_ID),
                page_size=data.draw(st.integers(1001, 2**32 - 1)) if "page_size" in bad else 0,
            ),
            timeout=10,
        )
    else:
        run_id, bad = data.draw(_BAD_ID), {"run_id"}
        if kind == "get":
            call = stub.GetRun(agent_pb2.GetRunRequest(run_id=run_id), timeout=10)
        elif kind == "cancel":
            call = stub.CancelRun(agent_pb2.CancelRunRequest(run_id=run_id), timeout=10)
        else:
            call = stub.WatchRun(agent_pb2.WatchRunRequest(run_id=run_id), timeout=10).read()
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    details = error_details(refused.value)
    assert (details.code, details.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
    assert sorted(f for f, _ in details.violations) == sorted(bad)
    # The sidecar goes on serving.
    session = await client.create_session()
    assert (await client.list_runs(session.session_id)).runs == []


async def test_a_page_token_that_is_not_one_is_refused(
    client: AgentClient, session_id: str
) -> None:
    for token in ("garbage", "MTox", "!!"):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.list_runs(session_id, page_token=token)
        details = error_details(refused.value)
        assert [f for f, _ in details.violations] == ["page_token"]


async def _callback_settled(client: AgentClient, run_id: str) -> agent_pb2.Run:
    found: list[agent_pb2.Run] = []

    async def settled() -> bool:
        found[:] = [await client.get_run(run_id)]
        return found[0].callback_status in (
            agent_pb2.CALLBACK_STATUS_DELIVERED,
            agent_pb2.CALLBACK_STATUS_FAILED,
        )

    await eventually(settled, timeout=20)
    return found[0]
