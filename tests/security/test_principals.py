"""Callers as principals, through a real sidecar: who they are, what is theirs, what they
may use and how much, and the audit record of it all.

One sidecar serves every test of the module, with these principals:

- alice: a token stored as its SHA-256 in the configuration;
- bob: a token read from an environment variable;
- carol: may use the ``narrow`` profile only, and hold two sessions at most;
- dan: one run at a time;  erin and gina: two runs a minute;
- frank: a token read from a file, which is rotated.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import orjson
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from hypothesis import given
from hypothesis import strategies as st

from agentsidecar.client import AgentClient
from agentsidecar.errors import error_details
from agentsidecar.v1 import agent_pb2
from sidecar.agent.limits import ID_PATTERN
from sidecar.config import AuthConfig
from sidecar.errors import Unauthenticated
from sidecar.security.identity import ANONYMOUS, Authenticator, Principal
from sidecar.testing import wait_serving
from tests.support.stack import (
    eventually,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
)

TOKENS = {
    "alice": "alice-token-0001",
    "bob": "bob-token-0002",
    "carol": "carol-token-0003",
    "dan": "dan-token-0004",
    "erin": "erin-token-0005",
    "gina": "gina-token-0007",
}
SECRET = "sk-live0123456789abcdef"


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    workdir = tmp_path_factory.mktemp("principals")
    frank_file = workdir / "frank.token"
    frank_file.write_text("frank-token-1\n")
    audit = workdir / "audit.jsonl"
    principals = [
        {"name": "alice", "token_sha256": _sha(TOKENS["alice"])},
        {"name": "bob", "token_env": "BOB_TOKEN"},
        {
            "name": "carol",
            "token_sha256": _sha(TOKENS["carol"]),
            "profiles": ["narrow"],
            "quota": {"sessions": 2},
        },
        {"name": "dan", "token_sha256": _sha(TOKENS["dan"]), "quota": {"concurrent_runs": 1}},
        {"name": "erin", "token_sha256": _sha(TOKENS["erin"]), "quota": {"runs_per_minute": 2}},
        {"name": "gina", "token_sha256": _sha(TOKENS["gina"]), "quota": {"runs_per_minute": 2}},
        {"name": "frank", "token_file": str(frank_file)},
    ]
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            profiles={"default": {}, "narrow": {}},
            auth={"principals": principals, "audit": {"path": str(audit)}},
            security={"redact": [r"sk-live[0-9a-f]+"]},
        )
        with sidecar(config, workdir, env={"BOB_TOKEN": TOKENS["bob"]}) as side:
            wait_serving(side.address)
            yield {"address": side.address, "audit": audit, "frank_file": frank_file}


@contextlib.asynccontextmanager
async def client_of(stack: dict[str, Any], token: str | None) -> AsyncIterator[AgentClient]:
    async with AgentClient(stack["address"], token=token) as client:
        yield client


def reason_of(exc: grpc.aio.AioRpcError) -> str:
    return error_details(exc).reason


def audit_lines(stack: dict[str, Any]) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in stack["audit"].read_bytes().splitlines()]


# -- authentication ------------------------------------------------------------------------


async def test_no_token_or_a_wrong_one_is_unauthenticated_and_probes_stay_open(
    stack: dict[str, Any],
) -> None:
    for token in (None, "not-a-token", TOKENS["alice"] + "x"):
        async with client_of(stack, token) as client:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await client.create_session()
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert reason_of(refused.value) == "UNAUTHENTICATED"
            assert TOKENS["alice"] not in (refused.value.details() or "")
    # A scheme other than Bearer is refused too.
    async with client_of(stack, None) as client:
        with pytest.raises(grpc.aio.AioRpcError) as basic:
            await client.stub.GetSession(
                agent_pb2.GetSessionRequest(session_id="s"),
                metadata=(("authorization", "Basic YWxpY2U6eA=="),),
                timeout=5,
            )
        assert basic.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # Health and reflection need no credentials.
    async with grpc.aio.insecure_channel(stack["address"]) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        responses = [r async for r in stub.ServerReflectionInfo(iter([request]), timeout=5)]
        names = {s.name for s in responses[0].list_services_response.service}
        assert "agentsidecar.v1.AgentService" in names


async def test_the_token_of_every_kind_of_source_authenticates(stack: dict[str, Any]) -> None:
    for token in (TOKENS["alice"], TOKENS["bob"], "frank-token-1"):
        async with client_of(stack, token) as client:
            session = await client.create_session()
            assert session.session_id


async def test_a_rotated_token_file_takes_the_new_token_and_drops_the_old(
    stack: dict[str, Any],
) -> None:
    stack["frank_file"].write_text("frank-token-2\n")

    async def accepts(token: str) -> bool:
        async with client_of(stack, token) as client:
            try:
                await client.create_session()
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAUTHENTICATED
                return False
            return True

    await eventually(lambda: accepts("frank-token-2"), timeout=10, interval=0.2)
    assert not await accepts("frank-token-1")
    stack["frank_file"].write_text("frank-token-1\n")
    await eventually(lambda: accepts("frank-token-1"), timeout=10, interval=0.2)


@pytest.mark.parametrize("how", ["emptied", "deleted"])
async def test_emptying_or_deleting_a_token_file_revokes_its_token(
    stack: dict[str, Any], how: str
) -> None:
    async def refused() -> bool:
        async with client_of(stack, "frank-token-1") as client:
            try:
                await client.create_session()
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAUTHENTICATED
                return True
            return False

    assert not await refused()
    if how == "emptied":
        stack["frank_file"].write_text("")
    else:
        stack["frank_file"].unlink()
    try:
        await eventually(refused, timeout=10, interval=0.2)
    finally:
        stack["frank_file"].write_text("frank-token-1\n")
    await eventually(lambda: _not(refused), timeout=10, interval=0.2)


async def _not(check: Any) -> bool:
    return not await check()


# -- ownership -----------------------------------------------------------------------------


async def test_a_session_exists_only_for_the_principal_that_created_it(
    stack: dict[str, Any],
) -> None:
    async with client_of(stack, TOKENS["alice"]) as alice, client_of(stack, TOKENS["bob"]) as bob:
        mine = await alice.create_session(session_id="user-1")
        assert mine.session_id == "user-1"
        await alice.run("user-1", "hello", timeout=20)

        for attempt in (
            bob.get_session("user-1"),
            bob.run("user-1", "hello", timeout=20),
            bob.list_session_tools("user-1"),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as hidden:
                await attempt
            assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
            assert reason_of(hidden.value) == "SESSION_NOT_FOUND"
        assert await bob.delete_session("user-1") is False

        # The id is bob's to use as well: his own session, not alice's.
        theirs = await bob.create_session(session_id="user-1")
        assert theirs.session_id == "user-1"
        assert len((await alice.get_session("user-1")).turns) == 1
        assert len((await bob.get_session("user-1")).turns) == 0
        with pytest.raises(grpc.aio.AioRpcError) as taken:
            await alice.create_session(session_id="user-1")
        assert reason_of(taken.value) == "SESSION_EXISTS"
        assert error_details(taken.value).resource == ("agentsidecar.v1.Session", "user-1")


async def test_only_the_owner_can_decide_a_call_waiting_for_approval(
    stack: dict[str, Any],
) -> None:
    async with client_of(stack, TOKENS["alice"]) as alice, client_of(stack, TOKENS["bob"]) as bob:
        session = await alice.create_session()
        finished = None
        async for event in alice.stream(session.session_id, "refund order", timeout=30):
            if event.HasField("approval_required"):
                call_id = event.approval_required.call_id
                with pytest.raises(grpc.aio.AioRpcError) as not_bobs:
                    await bob.approve(session.session_id, call_id, approved=True)
                assert reason_of(not_bobs.value) == "CALL_NOT_PENDING"
                await alice.approve(session.session_id, call_id, approved=False, reason="no")
            if event.HasField("tool_call_finished"):
                finished = event.tool_call_finished
    assert finished is not None and finished.status == agent_pb2.TOOL_CALL_STATUS_DENIED


# -- permissions and quotas ------------------------------------------------------------------


async def test_a_principal_uses_only_its_profiles(stack: dict[str, Any]) -> None:
    async with client_of(stack, TOKENS["carol"]) as carol:
        for profile in ("default", "no-such-profile"):
            with pytest.raises(grpc.aio.AioRpcError) as denied:
                await carol.create_session(profile)
            assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert reason_of(denied.value) == "PERMISSION_DENIED"
            # A profile it may not use is never listed, and never said to exist or not.
            assert "narrow" not in (denied.value.details() or "")
        session = await carol.create_session("narrow")
        await carol.delete_session(session.session_id)


async def test_the_session_quota_refuses_one_more_until_one_is_deleted(
    stack: dict[str, Any],
) -> None:
    async with client_of(stack, TOKENS["carol"]) as carol:
        held = [await carol.create_session("narrow") for _ in range(2)]
        with pytest.raises(grpc.aio.AioRpcError) as full:
            await carol.create_session("narrow")
        details = error_details(full.value)
        assert full.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert details.reason == "QUOTA_EXCEEDED"
        assert details.metadata["quota"] == "sessions" and details.metadata["limit"] == "2"
        assert details.quota == (("principal:carol", "sessions at most 2"),)
        assert details.retry_delay is None  # waiting does not help: deleting does
        # Another principal is not held to carol's quota.
        async with client_of(stack, TOKENS["alice"]) as alice:
            await alice.create_session("narrow")
        await carol.delete_session(held[0].session_id)
        await carol.create_session("narrow")


async def test_the_concurrent_run_quota_refuses_a_second_run_while_one_runs(
    stack: dict[str, Any],
) -> None:
    async with client_of(stack, TOKENS["dan"]) as dan:
        first, second = await dan.create_session(), await dan.create_session()
        stream = dan.stream(first.session_id, "three slow reads", timeout=30)
        started = await anext(stream)
        assert started.HasField("run_started")
        with pytest.raises(grpc.aio.AioRpcError) as busy:
            await dan.run(second.session_id, "hello", timeout=20)
        details = error_details(busy.value)
        assert details.reason == "QUOTA_EXCEEDED" and details.metadata["quota"] == "concurrent_runs"
        assert details.retry_delay is not None and details.retry_delay > 0
        events = [e async for e in stream]
        assert events[-1].run_finished.stop_reason == agent_pb2.STOP_REASON_ANSWERED
        # The slot is free again once the run ended.
        result = await dan.run(second.session_id, "hello", timeout=20)
        assert result.result.stop_reason == agent_pb2.STOP_REASON_ANSWERED


async def test_the_per_minute_quota_says_when_the_next_run_fits(stack: dict[str, Any]) -> None:
    async with client_of(stack, TOKENS["erin"]) as erin:
        session = await erin.create_session()
        for _ in range(2):
            await erin.run(session.session_id, "hello", timeout=20)
        with pytest.raises(grpc.aio.AioRpcError) as limited:
            await erin.run(session.session_id, "hello", timeout=20)
        details = error_details(limited.value)
        assert details.reason == "QUOTA_EXCEEDED" and details.metadata["quota"] == "runs_per_minute"
        assert details.retry_delay is not None and 0 < details.retry_delay <= 60
        # The refused run left no turn behind.
        assert len((await erin.get_session(session.session_id)).turns) == 2


async def test_only_runs_that_start_spend_the_per_minute_quota(stack: dict[str, Any]) -> None:
    async with client_of(stack, TOKENS["gina"]) as gina:
        session = await gina.create_session()
        refusals = []

        async def refused(session_id: str, text: str) -> None:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await gina.run(session_id, text, timeout=20)
            refusals.append(reason_of(info.value))

        for _ in range(3):
            await refused("no-such-session", "hello")
            await refused(session.session_id, "x" * 200_001)  # over max_input_chars
        stream = gina.stream(session.session_id, "three slow reads", timeout=30)
        assert (await anext(stream)).HasField("run_started")  # the first run starts
        for _ in range(3):
            await refused(session.session_id, "hello")  # busy: retried as told
        events = [e async for e in stream]
        assert events[-1].run_finished.stop_reason == agent_pb2.STOP_REASON_ANSWERED
        assert refusals == ["SESSION_NOT_FOUND", "INPUT_TOO_LARGE"] * 3 + ["SESSION_BUSY"] * 3
        # Nine refusals spent nothing: the second run of the minute is the second that ran.
        second = await gina.run(session.session_id, "hello", timeout=20)
        assert second.result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
        await refused(session.session_id, "hello")
        assert refusals[-1] == "QUOTA_EXCEEDED"


# -- the audit record ------------------------------------------------------------------------


async def test_the_audit_record_holds_who_did_what(stack: dict[str, Any]) -> None:
    async with client_of(stack, TOKENS["alice"]) as alice:
        session = await alice.create_session(session_id="audited")
        result = await alice.run("audited", "read my secret", timeout=20)
        async for event in alice.stream("audited", "refund order", timeout=30):
            if event.HasField("approval_required"):
                await alice.approve(
                    "audited", event.approval_required.call_id, approved=False, reason="not now"
                )
        await alice.delete_session(session.session_id)
    async with client_of(stack, "wrong-token") as stranger:
        with contextlib.suppress(grpc.aio.AioRpcError):
            await stranger.get_session("audited")
    async with client_of(stack, TOKENS["carol"]) as carol:
        with contextlib.suppress(grpc.aio.AioRpcError):
            await carol.create_session("default")

    lines = audit_lines(stack)
    for line in lines:
        assert {"time", "event", "principal"} <= line.keys(), line
        assert line["time"].endswith("Z")
    mine = [ln for ln in lines if ln.get("session_id") == "audited" and ln["principal"] == "alice"]
    events = [ln["event"] for ln in mine]
    assert events[0] == "session_created" and events[-1] == "session_deleted"
    assert events.count("run_started") == 2 and events.count("run_finished") == 2
    runs = {ln["run_id"] for ln in mine if ln["event"] == "run_started"}
    assert result.run_id in runs

    calls = [ln for ln in mine if ln["event"] == "tool_call"]
    read = next(ln for ln in calls if ln["tool"] == "slow_read")
    assert read["server"] == "scripted" and read["status"] == "OK" and read["call_id"]
    assert read["run_id"] == result.run_id
    assert SECRET not in read["arguments"] and "slow_read" not in read["arguments"]
    raw = orjson.dumps({"tag": SECRET, "ms": 1}).decode()
    assert read["arguments_sha256"] == hashlib.sha256(raw.encode()).hexdigest()
    refund = next(ln for ln in calls if ln["tool"] == "refund")
    assert refund["status"] == "DENIED"
    decided = next(ln for ln in mine if ln["event"] == "approval_decided")
    assert decided["decision"] == "deny" and decided["reason"] == "not now"
    assert decided["call_id"] == refund["call_id"] and decided["run_id"] == refund["run_id"]

    failed = [ln for ln in lines if ln["event"] == "auth_failed" and ln["method"] == "GetSession"]
    assert failed and failed[-1]["principal"] == "" and "peer" in failed[-1]
    assert "wrong-token" not in stack["audit"].read_text()
    refused = [ln for ln in lines if ln["event"] == "call_refused" and ln["principal"] == "carol"]
    assert refused and refused[-1]["error"] == "PermissionDenied"
    assert refused[-1]["method"] == "CreateSession"
    assert SECRET not in stack["audit"].read_text()


# -- the namespace, as a property ------------------------------------------------------------

_NAME = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,20}", fullmatch=True)
_ID = st.from_regex(ID_PATTERN, fullmatch=True)


@given(a=_NAME, b=_NAME, x=_ID, y=_ID)
def test_no_two_principals_sessions_share_a_key(a: str, b: str, x: str, y: str) -> None:
    pa, pb = Principal(a), Principal(b)
    assert pa.shown(pa.key(x)) == x
    assert pa.key(x).startswith(pa.prefix)
    if (a, x) != (b, y):
        assert pa.key(x) != pb.key(y)
    # Anonymous keys (the ids themselves) never look like a principal's.
    assert "/" not in ANONYMOUS.key(x)


@given(presented=st.text(min_size=1, max_size=40), configured=st.text(min_size=1, max_size=40))
def test_a_token_authenticates_exactly_when_it_is_the_configured_one(
    presented: str, configured: str
) -> None:
    configured, presented = configured.strip() or "t", presented.strip()
    auth = Authenticator(
        AuthConfig.model_validate(
            {"principals": [{"name": "p", "token_sha256": _sha(configured)}]}
        ),
        {},
    )
    metadata = [("authorization", f"Bearer {presented}")]
    if presented == configured:
        assert auth.authenticate(metadata, {}).name == "p"
    else:
        with pytest.raises(Unauthenticated):
            auth.authenticate(metadata, {})


def test_concurrent_clients_of_one_principal_see_the_same_sessions(stack: dict[str, Any]) -> None:
    async def both() -> None:
        async with client_of(stack, TOKENS["bob"]) as one, client_of(stack, TOKENS["bob"]) as two:
            made = await one.create_session()
            seen = await two.get_session(made.session_id)
            assert seen.session_id == made.session_id

    asyncio.run(both())
