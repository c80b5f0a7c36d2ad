"""Background runs' bounds and walls, each on a sidecar configured for it: the queue's
bounds in all and per principal, ownership between principals, a run waiting for a slot,
the approval deadline, retention, deletion with the session, the off switch, and callbacks
that resolve where they may not go."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from agentsidecar.client import AgentClient
from agentsidecar.errors import error_details
from agentsidecar.v1 import agent_pb2
from sidecar.testing import ServerProcess
from tests.support.runs import (
    CALLBACK_SECRET,
    WHSEC_SECRET,
    events_of,
    first_event,
    kinds,
    receiver,
    state_becomes,
    verified_as_standard_webhooks,
)
from tests.support.stack import (
    MODEL,
    eventually,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
)

CANCELED = agent_pb2.RUN_STATE_CANCELED
COMPLETED = agent_pb2.RUN_STATE_COMPLETED
FAILED = agent_pb2.RUN_STATE_FAILED
SUBMITTED = agent_pb2.RUN_STATE_SUBMITTED
FAST = {"flush_interval": 0.02, "poll_interval": 0.2}
TOKENS = {"ann": "ann-token-0123", "bob": "bob-token-4567"}

Start = Callable[..., Any]


@pytest.fixture(scope="module")
def processes() -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with simulator() as sim, scripted_toolserver() as tools:
        yield sim, tools


@pytest.fixture
def start(processes: tuple[ServerProcess, ServerProcess], tmp_path: Path) -> Start:
    """Starts a sidecar with ``background`` (over the fast defaults) and more sections."""

    @asynccontextmanager
    async def start_(background: dict[str, Any], **sections: Any) -> AsyncIterator[ServerProcess]:
        sim, tools = processes
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            background={**FAST, **background},
            **sections,
        )
        env = {
            "CALLBACK_SECRET": CALLBACK_SECRET,
            "ANN_CALLBACKS": CALLBACK_SECRET,
            "WHSEC_CALLBACKS": WHSEC_SECRET,
        }
        with sidecar(config, tmp_path, env=env) as side:
            yield side

    return start_


def _principals(**ann: Any) -> dict[str, Any]:
    return {
        "principals": [
            {
                "name": name,
                "token_sha256": hashlib.sha256(token.encode()).hexdigest(),
                **(ann if name == "ann" else {}),
            }
            for name, token in TOKENS.items()
        ],
        "audit": {"path": "-"},
    }


async def _refusal(call: Any) -> Any:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    return error_details(refused.value)


async def test_the_queue_is_bounded_in_all_and_per_principal_with_a_retry_delay(
    start: Start,
) -> None:
    auth = _principals(quota={"background_runs": 1})
    async with start({"max_runs": 2}, auth=auth) as side:
        async with (
            AgentClient(side.address, token=TOKENS["ann"]) as ann,
            AgentClient(side.address, token=TOKENS["bob"]) as bob,
        ):
            await ann.wait_ready(20)
            held = await ann.start_run((await ann.create_session()).session_id, "hang please")
            quota = await _refusal(
                ann.start_run((await ann.create_session()).session_id, "two reads")
            )
            assert (quota.code, quota.reason) == (
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "QUOTA_EXCEEDED",
            )
            assert quota.metadata["quota"] == "background_runs" and quota.retry_delay
            await bob.start_run((await bob.create_session()).session_id, "hang please")
            full = await _refusal(bob.start_run((await bob.create_session()).session_id, "x"))
            assert (full.code, full.reason) == (
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "RUN_QUEUE_FULL",
            )
            assert full.retry_delay and full.metadata["limit"] == "2"
            await ann.cancel_run(held.run_id)
            again = await bob.start_run((await bob.create_session()).session_id, "two reads")
            assert (await state_becomes(bob, again.run_id, COMPLETED)).state == COMPLETED


async def test_another_principals_run_does_not_exist_for_the_caller(
    start: Start, tmp_path: Path
) -> None:
    auth = _principals(callback_secret_env="ANN_CALLBACKS")
    auth["audit"] = {"path": str(tmp_path / "audit.jsonl")}
    background = {"callbacks": {"allowed_hosts": ["127.0.0.1"], "allow_http": True}}
    async with start(background, auth=auth) as side:
        async with (
            AgentClient(side.address, token=TOKENS["ann"]) as ann,
            AgentClient(side.address, token=TOKENS["bob"]) as bob,
        ):
            await ann.wait_ready(20)
            session = (await ann.create_session(session_id="shared-name")).session_id
            run = await ann.start_run(session, "hang please")
            for call in (
                bob.get_run(run.run_id),
                bob.cancel_run(run.run_id),
                events_of(bob, run.run_id),
            ):
                assert (await _refusal(call)).reason == "RUN_NOT_FOUND"
            # Bob's "shared-name" is another session: his own, which does not exist.
            assert (await _refusal(bob.list_runs(session))).reason == "SESSION_NOT_FOUND"
            await bob.create_session(session_id="shared-name")
            assert (await bob.list_runs(session)).runs == []
            # Bob has no callback secret: his runs may name no callback.
            denied = await _refusal(bob.start_run(session, "x", callback_url="http://127.0.0.1/h"))
            assert (denied.code, denied.reason) == (
                grpc.StatusCode.PERMISSION_DENIED,
                "CALLBACK_NOT_ALLOWED",
            )
            assert (await ann.cancel_run(run.run_id)).state == CANCELED
    lines = [orjson.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    mine = [(e["event"], e["principal"]) for e in lines if e.get("run_id") == run.run_id]
    assert mine[:2] == [("run_submitted", "ann"), ("run_started", "ann")]
    assert ("run_cancel_requested", "ann") in mine and mine[-1] == ("run_finished", "ann")
    assert all(principal == "ann" for _, principal in mine)


async def test_a_run_waits_for_a_free_slot_and_may_be_cancelled_before_it_starts(
    start: Start,
) -> None:
    async with start({"max_running": 1}) as side, AgentClient(side.address) as client:
        await client.wait_ready(20)
        first = await client.start_run((await client.create_session()).session_id, "hang please")
        await first_event(client, first.run_id, "tool_call_started")
        queued = await client.start_run((await client.create_session()).session_id, "two reads")
        waiting = await client.start_run((await client.create_session()).session_id, "two reads")
        assert (await client.get_run(queued.run_id)).state == SUBMITTED
        cancelled = await client.cancel_run(queued.run_id)
        assert cancelled.state == CANCELED
        assert cancelled.result.error.code == "cancelled"
        assert kinds(await events_of(client, queued.run_id)) == ["run_finished"]
        assert (await client.get_run(waiting.run_id)).state == SUBMITTED
        await client.cancel_run(first.run_id)  # a slot frees: the waiting run starts
        done = await state_becomes(client, waiting.run_id, COMPLETED)
        assert done.result.tool_calls == 2


async def test_a_call_nobody_decides_is_denied_at_the_approval_deadline(start: Start) -> None:
    async with start({"approval_timeout": 0.3}) as side, AgentClient(side.address) as client:
        await client.wait_ready(20)
        session = (await client.create_session()).session_id
        run = await client.start_run(session, "Please refund order 20250101")
        done = await state_becomes(client, run.run_id, COMPLETED)
        events = await events_of(client, run.run_id)
        (finished,) = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
        assert finished.status == agent_pb2.TOOL_CALL_STATUS_DENIED
        assert "no decision arrived in time" in finished.content
        assert done.pending_approvals == []


async def test_finished_runs_expire_after_their_retention(start: Start) -> None:
    async with (
        start({"retention": 0.5}, sessions={"sweep_interval": 0.2}) as side,
        AgentClient(side.address) as client,
    ):
        await client.wait_ready(20)
        session = (await client.create_session()).session_id
        run = await client.start_run(session, "two reads")
        await state_becomes(client, run.run_id, COMPLETED)

        async def gone() -> bool:
            try:
                await client.get_run(run.run_id)
            except grpc.aio.AioRpcError as exc:
                return error_details(exc).reason == "RUN_NOT_FOUND"
            return False

        await eventually(gone)
        assert (await client.list_runs(session)).runs == []
        # Its turn stays with the session.
        assert len((await client.get_session(session)).turns) == 1


async def test_deleting_a_session_stops_its_run_and_takes_its_runs_along(start: Start) -> None:
    async with start({}) as side, AgentClient(side.address) as client:
        await client.wait_ready(20)
        session = (await client.create_session()).session_id
        run = await client.start_run(session, "hang please")
        await first_event(client, run.run_id, "tool_call_started")
        assert await client.delete_session(session)
        assert (await _refusal(client.get_run(run.run_id))).reason == "RUN_NOT_FOUND"
        # The sidecar goes on: a new session runs.
        other = (await client.create_session()).session_id
        again = await client.start_run(other, "two reads")
        assert (await state_becomes(client, again.run_id, COMPLETED)).state == COMPLETED


async def test_background_runs_switched_off_answer_every_call_with_their_reason(
    start: Start,
) -> None:
    async with start({"enabled": False}) as side, AgentClient(side.address) as client:
        await client.wait_ready(20)
        session = (await client.create_session()).session_id
        for call in (
            client.start_run(session, "two reads"),
            client.get_run("r1"),
            client.list_runs(session),
            client.cancel_run("r1"),
            events_of(client, "r1"),
        ):
            details = await _refusal(call)
            assert (details.code, details.reason) == (
                grpc.StatusCode.FAILED_PRECONDITION,
                "BACKGROUND_RUNS_DISABLED",
            )
        assert (await client.run(session, "two reads", timeout=30)).result.tool_calls == 2


async def test_a_callback_whose_name_resolves_to_a_private_address_is_never_made(
    start: Start,
) -> None:
    callbacks = {
        "allowed_hosts": ["localhost"],
        "allow_http": True,
        "secret_env": "CALLBACK_SECRET",
        "retry": {"max_attempts": 2, "initial_backoff": 0.01, "max_backoff": 0.02},
    }
    async with (
        receiver(host="localhost") as hook,
        start({"callbacks": callbacks}) as side,
        AgentClient(side.address) as client,
    ):
        await client.wait_ready(20)
        session = (await client.create_session()).session_id
        run = await client.start_run(session, "two reads", callback_url=hook.url)
        await state_becomes(client, run.run_id, COMPLETED)

        async def failed() -> bool:
            got = await client.get_run(run.run_id)
            return got.callback_status == agent_pb2.CALLBACK_STATUS_FAILED

        await eventually(failed)
        assert hook.deliveries == []


async def test_runs_queued_before_the_daily_quota_was_spent_fail_with_its_error(
    start: Start,
) -> None:
    auth = _principals(quota={"daily_cost": 0.001})
    dear = {MODEL: {"prompt": 1000.0, "completion": 1000.0}}  # one call spends the day
    async with (
        start({"max_running": 1, "max_runs": 2}, auth=auth, prices=dear) as side,
        AgentClient(side.address, token=TOKENS["ann"]) as ann,
        AgentClient(side.address, token=TOKENS["bob"]) as bob,
    ):
        await ann.wait_ready(20)
        first = await ann.start_run((await ann.create_session()).session_id, "hang please")
        await first_event(ann, first.run_id, "tool_call_started")
        queued = await ann.start_run((await ann.create_session()).session_id, "two reads")
        assert (await ann.get_run(queued.run_id)).state == SUBMITTED
        await ann.cancel_run(first.run_id)  # its model call was priced: the day is spent
        failed = await state_becomes(ann, queued.run_id, FAILED)
        assert failed.result.stop_reason == agent_pb2.STOP_REASON_COST_LIMIT
        assert failed.result.error.code == "quota_exceeded" and failed.result.error.retryable
        assert "daily cost" in failed.result.error.message
        # A run started now is refused at once, with the quota's details.
        refused = await _refusal(ann.start_run((await ann.create_session()).session_id, "x"))
        assert (refused.reason, refused.metadata["quota"]) == ("QUOTA_EXCEEDED", "daily_cost")
        # Both places in the queue's bounds (max_runs 2) are free for another principal.
        runs = [await bob.start_run((await bob.create_session()).session_id, "two reads")]
        runs.append(await bob.start_run((await bob.create_session()).session_id, "two reads"))
        for run in runs:
            assert (await state_becomes(bob, run.run_id, COMPLETED)).result.tool_calls == 2


@pytest.mark.parametrize(
    ("allowed", "host"),
    [("::1", "::1"), ("[::1]", "::1"), ("::ffff:127.0.0.1", "::ffff:127.0.0.1")],
)
async def test_a_callback_to_an_allowed_ipv6_address_is_delivered(
    start: Start, allowed: str, host: str
) -> None:
    callbacks = {
        "allowed_hosts": [allowed],
        "allow_private_networks": True,
        "allow_http": True,
        "secret_env": "CALLBACK_SECRET",
    }
    async with (
        receiver(host=host) as hook,
        start({"callbacks": callbacks}) as side,
        AgentClient(side.address) as client,
    ):
        await client.wait_ready(20)
        session = (await client.create_session()).session_id
        run = await client.start_run(session, "two reads", callback_url=hook.url)
        (delivery,) = await hook.wait(1)
        assert delivery.headers["webhook-id"] == run.run_id
        # Another address is still refused, however it is written.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.start_run(session, "two reads", callback_url="http://[::2]:9/hook")
        assert error_details(refused.value).reason == "CALLBACK_NOT_ALLOWED"


async def test_a_whsec_secret_signs_callbacks_a_standard_webhooks_receiver_accepts(
    start: Start,
) -> None:
    callbacks = {
        "allowed_hosts": ["127.0.0.1"],
        "allow_private_networks": True,
        "allow_http": True,
        "secret_env": "WHSEC_CALLBACKS",
    }
    async with (
        receiver() as hook,
        start({"callbacks": callbacks}) as side,
        AgentClient(side.address) as client,
    ):
        await client.wait_ready(20)
        session = (await client.create_session()).session_id
        run = await client.start_run(session, "two reads", callback_url=hook.url)
        (delivery,) = await hook.wait(1)
        assert delivery.headers["webhook-id"] == run.run_id
        # Keyed with the decoded key, not the text; stamped in seconds, not milliseconds.
        assert verified_as_standard_webhooks(delivery, WHSEC_SECRET)
        assert not verified_as_standard_webhooks(delivery, "whsec_" + "QUJD" * 8)


async def test_list_runs_without_a_session_lists_the_callers_runs_in_every_session(
    start: Start,
) -> None:
    async with start({}, auth=_principals()) as side:
        async with (
            AgentClient(side.address, token=TOKENS["ann"]) as ann,
            AgentClient(side.address, token=TOKENS["bob"]) as bob,
        ):
            await ann.wait_ready(20)
            started = []
            for name in ("first", "second", "third"):
                session = (await ann.create_session(session_id=name)).session_id
                started.append((await ann.start_run(session, "two reads")).run_id)
            bobs = (await bob.create_session(session_id="first")).session_id
            theirs = (await bob.start_run(bobs, "two reads")).run_id
            everything = await ann.list_runs()
            assert [r.run_id for r in everything.runs] == started[::-1]  # newest first
            assert [r.session_id for r in everything.runs] == ["third", "second", "first"]
            assert not everything.next_page_token
            assert [r.run_id for r in (await bob.list_runs()).runs] == [theirs]
            # A page at a time, the token continuing the same listing.
            first = await ann.list_runs(page_size=2)
            rest = await ann.list_runs(page_size=2, page_token=first.next_page_token)
            assert [r.run_id for r in first.runs] == started[:0:-1]
            assert [r.run_id for r in rest.runs] == started[:1] and not rest.next_page_token
            # The whole listing's token continues no session's listing.
            mixed = await _refusal(ann.list_runs("first", page_token=first.next_page_token))
            assert mixed.reason == "INVALID_REQUEST"
