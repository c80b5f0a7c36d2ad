"""Every error status carries machine-readable details, read back from real calls.

Callers in any language branch on ``ErrorInfo.reason``, never on message text; field
violations, the missing resource and retry delays ride along as ``google.rpc`` details.
"""

from __future__ import annotations

import asyncio
import logging
import re
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from agentsidecar.client import AgentClient
from agentsidecar.errors import DOMAIN, ErrorDetails, error_details
from agentsidecar.v1 import agent_pb2, agent_pb2_grpc
from sidecar.a2a.errors import REASONS as A2A_REASONS
from sidecar.a2a.errors import Refused, to_a2a
from sidecar.agent.agent import Agent
from sidecar.agent.loop import AgentLoop
from sidecar.agent.prices import PriceTable
from sidecar.agent.profiles import build_profiles
from sidecar.agent.snapshot import Snapshot
from sidecar.api.service import AgentServicer, add_to_server
from sidecar.api.status import REASONS, to_status
from sidecar.config import AuthConfig, ProfileConfig, SidecarConfig
from sidecar.context.assembler import ContextAssembler
from sidecar.errors import RequestError, request_errors
from sidecar.security.identity import Authenticator
from sidecar.security.tool_identity import ToolIdentity
from sidecar.sessions.store import MemorySessionStore
from sidecar.testing import ServerProcess
from sidecar.tools.catalog import ToolCatalog
from tests.support import ROOT
from tests.support.stack import scripted_toolserver, sidecar, sidecar_config, simulator

Call = Callable[[agent_pb2_grpc.AgentServiceStub, str], Awaitable[Any]]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(sim, [{"name": "scripted", "address": tools.address}])
        with sidecar(config, tmp_path_factory.mktemp("sidecar")) as side:
            yield {"sim": sim, "tools": tools, "sidecar": side}


async def failure(call: Awaitable[Any]) -> ErrorDetails:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return error_details(info.value)


def _run(session: str, text: str = "hi") -> Call:
    return lambda stub, _: stub.Run(agent_pb2.RunRequest(session_id=session, input=text))


BAD_REQUESTS: dict[str, tuple[Call, grpc.StatusCode, str]] = {
    "unknown session": (
        lambda stub, _: stub.GetSession(agent_pb2.GetSessionRequest(session_id="nope")),
        grpc.StatusCode.NOT_FOUND,
        "SESSION_NOT_FOUND",
    ),
    "run in an unknown session": (_run("nope"), grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND"),
    "unknown profile": (
        lambda stub, _: stub.CreateSession(agent_pb2.CreateSessionRequest(profile="ghost")),
        grpc.StatusCode.NOT_FOUND,
        "PROFILE_NOT_FOUND",
    ),
    "taken session id": (
        lambda stub, sid: stub.CreateSession(agent_pb2.CreateSessionRequest(session_id=sid)),
        grpc.StatusCode.ALREADY_EXISTS,
        "SESSION_EXISTS",
    ),
    "empty input": (
        lambda stub, sid: stub.Run(agent_pb2.RunRequest(session_id=sid)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_REQUEST",
    ),
    "empty session id": (
        lambda stub, _: stub.GetSession(agent_pb2.GetSessionRequest()),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_REQUEST",
    ),
    "decision unspecified": (
        lambda stub, sid: stub.ApproveToolCall(
            agent_pb2.ApproveToolCallRequest(session_id=sid, call_id="x")
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_REQUEST",
    ),
    "no such pending call": (
        lambda stub, sid: stub.ApproveToolCall(
            agent_pb2.ApproveToolCallRequest(
                session_id=sid, call_id="x", decision=agent_pb2.APPROVAL_DECISION_APPROVE
            )
        ),
        grpc.StatusCode.NOT_FOUND,
        "CALL_NOT_PENDING",
    ),
}

EXPECTED_DETAILS: dict[str, Callable[[ErrorDetails, str], bool]] = {
    "unknown session": lambda d, _: d.resource == ("agentsidecar.v1.Session", "nope"),
    "run in an unknown session": lambda d, _: d.resource == ("agentsidecar.v1.Session", "nope"),
    "unknown profile": lambda d, _: d.resource == ("agentsidecar.v1.Profile", "ghost"),
    "taken session id": lambda d, sid: d.resource == ("agentsidecar.v1.Session", sid),
    "empty input": lambda d, _: d.violations == (("input", "must not be empty"),),
    "empty session id": lambda d, _: d.violations == (("session_id", "is required"),),
    "decision unspecified": lambda d, _: [f for f, _ in d.violations] == ["decision"],
    "no such pending call": lambda d, sid: d.resource == ("agentsidecar.v1.ToolCall", f"{sid}/x"),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
async def test_a_bad_request_names_its_reason_and_what_was_wrong(
    client: AgentClient, case: str
) -> None:
    call, code, reason = BAD_REQUESTS[case]
    session = await client.create_session()

    details = await failure(call(client.stub, session.session_id))

    assert (details.code, details.reason, details.domain) == (code, reason, DOMAIN)
    assert EXPECTED_DETAILS[case](details, session.session_id), details


async def test_a_busy_session_says_when_to_retry(client: AgentClient) -> None:
    session = await client.create_session()
    stream = client.stream(session.session_id, "hang please")
    async with asyncio.timeout(10):
        async for event in stream:
            if event.WhichOneof("event") == "tool_call_started":
                break
        details = await failure(_run(session.session_id)(client.stub, ""))
    await stream.aclose()

    assert (details.code, details.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "SESSION_BUSY",
    )
    assert details.retry_delay is not None and details.retry_delay > 0
    assert details.resource == ("agentsidecar.v1.Session", session.session_id)


async def test_a_draining_sidecar_refuses_new_work_with_a_retry_delay(
    stack: dict[str, ServerProcess], tmp_path: Path
) -> None:
    config = sidecar_config(stack["sim"], [{"name": "scripted", "address": stack["tools"].address}])
    with sidecar({**config, "server": {"port": 0, "grace_period": 5}}, tmp_path) as side:
        async with AgentClient(side.address) as c:
            await c.wait_ready(20)
            session = await c.create_session()
            stream = c.stream(session.session_id, "hang please")
            async for event in stream:
                if event.WhichOneof("event") == "tool_call_started":
                    break
            side.send_signal(signal.SIGTERM)  # the hanging run holds the drain open
            details = await _refused_while_draining(c)
            await stream.aclose()

    assert (details.code, details.reason) == (grpc.StatusCode.UNAVAILABLE, "DRAINING")
    assert details.retry_delay is not None and details.retry_delay > 0


async def _refused_while_draining(client: AgentClient) -> ErrorDetails:
    """The first refusal once the signal has landed (it is handled asynchronously)."""
    async with asyncio.timeout(10):
        while True:
            try:
                await client.create_session()
            except grpc.aio.AioRpcError as exc:
                return error_details(exc)
            await asyncio.sleep(0.02)


class _BrokenStore(MemorySessionStore):
    """A store with a bug: reading a session raises something nobody planned for."""

    async def get(self, session_id: str) -> Any:
        raise RuntimeError("secret internals: /var/lib/agent/db.sqlite is corrupt")


@pytest.fixture
async def broken_server() -> AsyncIterator[str]:
    profiles = {"default": ProfileConfig()}
    snapshot = Snapshot(
        config=SidecarConfig(profiles=profiles),
        profiles=build_profiles(profiles),
        routers={},
        context=ContextAssembler(profiles, None),
        prices=PriceTable({}),
        authenticator=Authenticator(AuthConfig(), {}),
        tool_identity=ToolIdentity.from_config(None),
        tool_versions={},
        light={},
    )
    loop = AgentLoop(ToolCatalog(), {})
    agent = Agent(loop, _BrokenStore(), model=_NoModel(), snapshot=lambda: snapshot)
    server = grpc.aio.server()
    add_to_server(AgentServicer(agent), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


class _NoModel:
    name = "none"

    async def complete(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no model call expected")

    async def close(self) -> None:
        return None


async def test_an_unexpected_exception_is_internal_with_an_error_id_and_no_python_text(
    broken_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="sidecar.api.status")
    async with AgentClient(broken_server) as c:
        details = await failure(c.get_session("s-1"))
        streamed = await failure(
            _first_event(c.stub.StreamRun(agent_pb2.StreamRunRequest(session_id="s-1", input="hi")))
        )

    for d in (details, streamed):
        assert (d.code, d.reason) == (grpc.StatusCode.INTERNAL, "INTERNAL")
        error_id = d.metadata["error_id"]
        assert error_id in d.message
        assert "secret" not in d.message and "RuntimeError" not in d.message
        logged = [r for r in caplog.records if error_id in r.getMessage()]
        assert logged and logged[0].exc_info is not None  # the traceback is in the log


async def _first_event(stream: Any) -> Any:
    async for event in stream:
        return event
    return None


def _instance(cls: type[RequestError]) -> RequestError:
    """An error of ``cls`` whatever its constructor asks for."""
    exc = cls.__new__(cls)
    RequestError.__init__(exc, f"a {cls.__name__}")
    return exc


@pytest.mark.parametrize("cls", list(request_errors()), ids=lambda c: c.__name__)
def test_every_front_answers_an_error_with_the_code_and_reason_its_class_names(
    cls: type[RequestError],
) -> None:
    exc = _instance(cls)
    status = to_status(exc)
    assert status.code == grpc.StatusCode[cls.code]
    info = error_details_pb2.ErrorInfo()
    [raw] = [v for k, v in status.trailing_metadata if k == "grpc-status-details-bin"]
    assert status_pb2.Status.FromString(raw).details[0].Unpack(info)
    assert info.reason == cls.reason and REASONS[cls.reason] == status.code
    answer = to_a2a(exc)
    if isinstance(answer, Refused):  # else an error of the A2A spec's own
        assert (answer.reason, answer.code) == (cls.reason, grpc.StatusCode[cls.code])
        assert A2A_REASONS[cls.reason] == status.code


def test_every_reason_is_documented_in_the_proto_and_the_docs() -> None:
    proto = (ROOT / "protos" / "agentsidecar" / "v1" / "agent.proto").read_text()
    docs = (ROOT / "docs" / "errors.md").read_text()
    for reason, code in REASONS.items():
        assert re.search(rf"\b{reason}\b", proto), reason
        assert re.search(rf"`{reason}`\s*\|\s*`?{code.name}`?", docs), reason


METHODS = [
    "CreateSession",
    "GetSession",
    "DeleteSession",
    "Run",
    "ApproveToolCall",
    "ListSessionTools",
]


async def raw_call(
    client: AgentClient, method: str, payload: bytes, stream: bool = False
) -> grpc.StatusCode:
    channel = client._channel
    path = f"/agentsidecar.v1.AgentService/{method}"
    identity = lambda b: b  # noqa: E731 - bytes as they are, on both sides
    try:
        if stream:
            call = channel.unary_stream(
                path, request_serializer=identity, response_deserializer=identity
            )
            async for _ in call(payload, timeout=10):
                pass
        else:
            call = channel.unary_unary(
                path, request_serializer=identity, response_deserializer=identity
            )
            await call(payload, timeout=10)
    except grpc.aio.AioRpcError as exc:
        details = error_details(exc)
        assert details.code not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), details
        if details.code == grpc.StatusCode.INVALID_ARGUMENT:
            assert details.reason in ("MALFORMED_REQUEST", "INVALID_REQUEST", "INPUT_TOO_LARGE")
        return details.code
    return grpc.StatusCode.OK


@pytest.mark.parametrize("method", [*METHODS, "StreamRun"])
async def test_bytes_that_are_no_request_are_malformed_not_unknown(
    client: AgentClient, method: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        channel = client._channel
        path = f"/agentsidecar.v1.AgentService/{method}"
        if method == "StreamRun":
            async for _ in channel.unary_stream(path)(b"\xff\xff\xff", timeout=10):
                pass
        else:
            await channel.unary_unary(path)(b"\xff\xff\xff", timeout=10)
    details = error_details(info.value)
    assert (details.code, details.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED_REQUEST")


@given(payload=st.binary(max_size=64), method=st.sampled_from([*METHODS, "StreamRun"]))
@settings(max_examples=40)
def test_any_bytes_to_any_method_get_a_status_a_caller_can_act_on(
    stack: dict[str, ServerProcess], payload: bytes, method: str
) -> None:
    async def call() -> None:
        async with AgentClient(stack["sidecar"].address) as c:
            await raw_call(c, method, payload, stream=method == "StreamRun")
            await c.wait_ready(5)  # still serving

    asyncio.run(call())


_BAD_ID = st.one_of(
    st.just(""), st.text(min_size=129, max_size=140), st.sampled_from(["a b", "x/y", "-lead", "é"])
)
_GOOD_ID = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,20}", fullmatch=True)


@st.composite
def _approvals(draw: st.DrawFn) -> tuple[agent_pb2.ApproveToolCallRequest, set[str]]:
    bad = draw(
        st.sets(st.sampled_from(["session_id", "call_id", "decision", "reason"]), min_size=1)
    )
    request = agent_pb2.ApproveToolCallRequest(
        session_id=draw(_BAD_ID if "session_id" in bad else _GOOD_ID),
        call_id=draw(_BAD_ID if "call_id" in bad else _GOOD_ID),
        decision=0 if "decision" in bad else agent_pb2.APPROVAL_DECISION_DENY,
        reason="r" * 2001 if "reason" in bad else "",
    )
    return request, bad


@st.composite
def _runs(draw: st.DrawFn) -> tuple[agent_pb2.StreamRunRequest, set[str]]:
    bad = draw(st.sets(st.sampled_from(["session_id", "input", "output_mode"]), min_size=1))
    request = agent_pb2.StreamRunRequest(
        session_id=draw(_BAD_ID if "session_id" in bad else _GOOD_ID),
        input=draw(st.sampled_from(["", "  \n"])) if "input" in bad else "hello",
        output_mode=draw(st.integers(3, 99)) if "output_mode" in bad else 0,
    )
    return request, bad


@st.composite
def _creates(draw: st.DrawFn) -> tuple[agent_pb2.CreateSessionRequest, set[str]]:
    bad = draw(st.sets(st.sampled_from(["profile", "session_id", "labels"]), min_size=1))
    session_id = draw(_BAD_ID.filter(bool)) if "session_id" in bad else ""
    request = agent_pb2.CreateSessionRequest(
        profile=draw(_BAD_ID.filter(bool)) if "profile" in bad else "default",
        session_id=session_id,
        labels={"bad key!": "v"} if "labels" in bad else {"team": "a"},
    )
    return request, bad


@pytest.mark.property
@given(data=st.data())
async def test_a_request_with_several_invalid_fields_names_each_of_them(
    client: AgentClient, data: st.DataObject
) -> None:
    kind = data.draw(st.sampled_from(["approve", "run", "create"]))
    if kind == "approve":
        request, bad = data.draw(_approvals())
        call = client.stub.ApproveToolCall(request, timeout=10)
    elif kind == "run":
        request, bad = data.draw(_runs())
        call = client.stub.StreamRun(request, timeout=10).read()
    else:
        request, bad = data.draw(_creates())
        call = client.stub.CreateSession(request, timeout=10)
    details = await failure(call)
    assert (details.code, details.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
    fields = [field.split("[")[0] for field, _ in details.violations]
    assert sorted(fields) == sorted(bad), (request, details.violations)
