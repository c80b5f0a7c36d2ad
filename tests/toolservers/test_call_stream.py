"""Many calls on one ``CallTools`` stream: the sidecar's stream client against a real SDK
tool server process, over real gRPC.

A call on the stream behaves as the same call through ``CallTool``: its output, its
protocol failures (now a status per call), its deadline and cancellation reaching the
handler, its metadata; calls run concurrently and each gets its own answer; a broken or
missing stream is a clear error, never a hang.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentsidecar.v1 import tool_pb2, tool_pb2_grpc
from sidecar.config import ToolServerConfig
from sidecar.testing import ServerProcess, start_process
from sidecar.tools.call_stream import CallStream, StreamedCallError
from sidecar.tools.connection import ToolServerConnection
from tests.support import SCRIPTED_TOOLSERVER, TOOLSERVER_FIXTURES

WAIT = 10.0


@pytest.fixture(scope="module")
def fixture_server() -> Iterator[ServerProcess]:
    server = start_process([str(TOOLSERVER_FIXTURES), "--port", "0"])
    yield server
    assert server.stop() == 0


@pytest.fixture
async def stream(fixture_server: ServerProcess) -> AsyncIterator[CallStream]:
    async with grpc.aio.insecure_channel(fixture_server.address) as channel:
        stream = CallStream(tool_pb2_grpc.ToolServiceStub(channel), (), 4 * 1024 * 1024)
        yield stream
        await stream.close()


def request(
    tool: str, arguments: dict[str, Any] | str, call_id: str = ""
) -> tool_pb2.CallToolRequest:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return tool_pb2.CallToolRequest(call_id=call_id, tool_name=tool, arguments=text)


async def output(stream: CallStream, tool: str, arguments: dict[str, Any]) -> Any:
    result = await stream.call(request(tool, arguments), WAIT, ())
    assert result.WhichOneof("outcome") == "output", result
    return json.loads(result.output)


async def test_the_sdk_offers_the_stream_at_discovery(fixture_server: ServerProcess) -> None:
    async with grpc.aio.insecure_channel(fixture_server.address) as channel:
        listed = await tool_pb2_grpc.ToolServiceStub(channel).ListTools(
            tool_pb2.ListToolsRequest(), timeout=WAIT
        )
    assert listed.call_stream


async def test_a_call_returns_its_output_call_id_and_handler_duration(stream: CallStream) -> None:
    result = await stream.call(request("echo_int", {"value": 2**70}, "call-7"), WAIT, ())
    assert result.call_id == "call-7" and json.loads(result.output) == 2**70
    assert result.HasField("handler_duration")


@pytest.mark.parametrize(
    ("tool", "arguments", "code"),
    [
        ("no_such_tool", {}, grpc.StatusCode.NOT_FOUND),
        ("", {}, grpc.StatusCode.INVALID_ARGUMENT),
        ("echo_int", "[1, 2]", grpc.StatusCode.INVALID_ARGUMENT),
    ],
)
async def test_a_protocol_failure_is_the_calls_status_and_the_stream_goes_on(
    stream: CallStream, tool: str, arguments: Any, code: grpc.StatusCode
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stream.call(request(tool, arguments), WAIT, ())
    assert raised.value.code() == code
    assert await output(stream, "echo_int", {"value": 3}) == 3


async def test_a_tool_failure_is_a_result_not_a_status(stream: CallStream) -> None:
    result = await stream.call(request("refuse", {"message": "order 1 does not exist"}), WAIT, ())
    assert result.error.kind == tool_pb2.TOOL_ERROR_KIND_EXECUTION_FAILED
    assert result.error.message == "order 1 does not exist"


async def test_calls_on_one_stream_run_at_the_same_time(stream: CallStream) -> None:
    # Each rendezvous waits for the other: only concurrent calls both return.
    met = await asyncio.gather(
        *(stream.call(request("rendezvous", {"timeout_s": WAIT}), WAIT, ()) for _ in range(2))
    )
    assert [r.output for r in met] == ["met", "met"]


@pytest.mark.property
@given(st.lists(st.integers(-(2**80), 2**80), min_size=1, max_size=40))
def test_every_call_gets_its_own_answer_whatever_order_they_finish_in(
    fixture_server: ServerProcess, values: list[int]
) -> None:
    async def scenario() -> list[int]:
        async with grpc.aio.insecure_channel(fixture_server.address) as channel:
            stream = CallStream(tool_pb2_grpc.ToolServiceStub(channel), (), 4 * 1024 * 1024)
            try:
                shuffled = list(values)
                random.Random(len(values)).shuffle(shuffled)
                results = await asyncio.gather(
                    *(stream.call(request("echo_int", {"value": v}), WAIT, ()) for v in shuffled)
                )
                assert [json.loads(r.output) for r in results] == shuffled
                return shuffled
            finally:
                await stream.close()

    asyncio.run(scenario())


async def test_a_passed_deadline_fails_the_call_and_cancels_the_handler(
    stream: CallStream,
) -> None:
    key = uuid.uuid4().hex
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stream.call(request("block", {"key": key}), 0.5, ())
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert await output(stream, "await_cancellation", {"key": key, "timeout_s": WAIT}) is True


async def test_a_caller_cancelling_cancels_the_handler(stream: CallStream) -> None:
    key = uuid.uuid4().hex
    blocked = asyncio.ensure_future(stream.call(request("block", {"key": key}), WAIT, ()))
    assert await output(stream, "await_started", {"key": key, "timeout_s": WAIT}) is True
    blocked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await blocked
    assert await output(stream, "await_cancellation", {"key": key, "timeout_s": WAIT}) is True


async def test_each_calls_metadata_and_deadline_reach_its_handler(stream: CallStream) -> None:
    metadata = [("x-agent-call-id", "c-1"), ("x-agent-labels-bin", b'{"team":"a"}')]
    seen = await stream.call(request("whoami", {}, "c-1"), WAIT, metadata)
    described = json.loads(seen.output)
    assert described["has_deadline"] is True and described["call_id"] == "c-1"
    assert described["metadata"]["x-agent-call-id"] == "c-1"


async def test_a_result_larger_than_the_caller_takes_fails_that_call_only(
    fixture_server: ServerProcess,
) -> None:
    async with grpc.aio.insecure_channel(fixture_server.address) as channel:
        stream = CallStream(tool_pb2_grpc.ToolServiceStub(channel), (), 1024)
        try:
            with pytest.raises(StreamedCallError) as raised:
                await stream.call(request("echo_int", {"value": 10**1200}), WAIT, ())
            assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert raised.value.too_large
            assert await output(stream, "echo_int", {"value": 5}) == 5  # the stream lives
        finally:
            await stream.close()


async def test_a_server_that_dies_fails_the_calls_in_flight_at_once(tmp_path: Any) -> None:
    server = start_process([str(TOOLSERVER_FIXTURES), "--port", "0"])
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stream = CallStream(tool_pb2_grpc.ToolServiceStub(channel), (), 4 * 1024 * 1024)
            key = uuid.uuid4().hex
            blocked = asyncio.ensure_future(stream.call(request("block", {"key": key}), 60, ()))
            assert await output(stream, "await_started", {"key": key, "timeout_s": WAIT}) is True
            server.kill()
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                async with asyncio.timeout(WAIT):
                    await blocked
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
            await stream.close()
    finally:
        server.stop()


async def test_calls_written_as_the_server_dies_fail_unavailable_never_internal() -> None:
    """A write under a dying connection fails in grpc's core ("Internal error from Core"):
    that is the connection's loss, UNAVAILABLE (retried as such), not the server's error."""
    codes: set[grpc.StatusCode] = set()
    for _ in range(8):
        server = start_process([str(TOOLSERVER_FIXTURES), "--port", "0"])
        try:
            async with grpc.aio.insecure_channel(server.address) as channel:
                stream = CallStream(tool_pb2_grpc.ToolServiceStub(channel), (), 4 * 1024 * 1024)
                assert await output(stream, "echo_int", {"value": 7}) == 7

                async def pump(stream: CallStream) -> None:
                    while True:  # calls written all along, as the server is killed
                        calls = [
                            stream.call(request("echo_int", {"value": 1}), 5, ()) for _ in range(8)
                        ]
                        for done in await asyncio.gather(*calls, return_exceptions=True):
                            if isinstance(done, grpc.aio.AioRpcError):
                                codes.add(done.code())
                        await asyncio.sleep(0)

                pumping = asyncio.ensure_future(pump(stream))
                await asyncio.sleep(0.05)
                server.kill()
                await asyncio.sleep(0.3)
                pumping.cancel()
                await asyncio.gather(pumping, return_exceptions=True)
                await stream.close()
        finally:
            server.stop()
    assert codes == {grpc.StatusCode.UNAVAILABLE}


async def test_a_server_without_the_stream_gets_one_call_each() -> None:
    # The scripted tool server implements the protocol from the protos, without CallTools:
    # told (wrongly) that it streams, the connection learns otherwise and calls it unary.
    with start_process([str(SCRIPTED_TOOLSERVER), "--port", "0"]) as scripted:

        async def discovered(server: str, response: tool_pb2.ListToolsResponse) -> None:
            return None

        connection = ToolServerConnection(
            ToolServerConfig(name="scripted", address=scripted.address), on_discovered=discovered
        )
        try:
            connection._use_stream(True)
            result = None
            for attempt in range(3):
                try:
                    result = await connection.call(
                        request("slow_read", {"tag": f"t{attempt}", "ms": 1}), WAIT, ()
                    )
                    break
                except StreamedCallError as exc:
                    # The server's UNIMPLEMENTED races the first write: on a loaded machine
                    # gRPC core may fail the write first and keep only its own INTERNAL.
                    # Nothing ran (the server serves no stream); the next call asks again.
                    assert exc.code() is grpc.StatusCode.INTERNAL, exc
            assert result is not None and result.WhichOneof("outcome") == "output"
            assert connection._stream is None  # one call each from now on
            again = await connection.call(request("slow_read", {"tag": "u", "ms": 1}), WAIT, ())
            assert again.WhichOneof("outcome") == "output"
        finally:
            await connection.close()


async def test_the_stream_carries_the_servers_token_and_without_it_every_call_is_refused() -> None:
    server = start_process(
        [str(TOOLSERVER_FIXTURES), "--port", "0", "--token-env", "FIXTURE_TOKEN"],
        env={"FIXTURE_TOKEN": "fixture-secret"},
    )
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = tool_pb2_grpc.ToolServiceStub(channel)
            allowed = CallStream(stub, (("authorization", "Bearer fixture-secret"),), 1 << 20)
            refused = CallStream(stub, (), 1 << 20)
            try:
                assert await output(allowed, "echo_int", {"value": 1}) == 1
                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    await refused.call(request("echo_int", {"value": 1}), WAIT, ())
                assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
            finally:
                await allowed.close()
                await refused.close()
    finally:
        server.stop()


class _Recorder(tool_pb2_grpc.ToolServiceServicer):
    """A ``CallTools`` server that records each message it receives and answers each call
    with its id, one message per request."""

    def __init__(self) -> None:
        self.messages: list[tool_pb2.CallToolsRequest] = []

    async def CallTools(
        self, requests: AsyncIterator[tool_pb2.CallToolsRequest], context: Any
    ) -> AsyncIterator[tool_pb2.CallToolsResponse]:
        async for message in requests:
            self.messages.append(message)
            yield tool_pb2.CallToolsResponse(
                answers=[
                    tool_pb2.CallAnswer(id=c.id, result=tool_pb2.ToolResult(output=str(c.id)))
                    for c in message.calls
                ]
            )


async def test_calls_made_together_leave_in_one_message_and_share_an_answer() -> None:
    recorder = _Recorder()
    server = grpc.aio.server()
    tool_pb2_grpc.add_ToolServiceServicer_to_server(recorder, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stream = CallStream(tool_pb2_grpc.ToolServiceStub(channel), (), 1 << 20)
            try:
                step = [request("echo_int", {"value": v}, f"call-{v}") for v in range(3)]
                results = await asyncio.gather(*(stream.call(r, WAIT, ()) for r in step))
                assert [r.output for r in results] == ["1", "2", "3"]  # each its own answer
                assert [len(m.calls) for m in recorder.messages] == [3]  # one write
                assert [c.call.call_id for c in recorder.messages[0].calls] == [
                    "call-0",
                    "call-1",
                    "call-2",
                ]
                # A call made alone later goes alone.
                assert (await stream.call(step[0], WAIT, ())).output == "4"
                assert [len(m.calls) for m in recorder.messages] == [3, 1]
            finally:
                await stream.close()
    finally:
        await server.stop(None)


@pytest.mark.property
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=12),
    limit=st.integers(4200, 9000),
)
def test_answers_ready_together_are_split_within_the_callers_limit_and_none_is_lost(
    fixture_server: ServerProcess, sizes: list[int], limit: int
) -> None:
    """A raw client sends a batch of calls whose results together exceed the limit it
    declares: every call is answered exactly once, and no message is larger than the
    limit (gRPC would refuse it and end the stream)."""

    async def scenario() -> None:
        async with grpc.aio.insecure_channel(fixture_server.address) as channel:
            stub = tool_pb2_grpc.ToolServiceStub(channel)
            call = stub.CallTools(metadata=(("x-agent-max-result-bytes", str(limit)),))
            await call.write(
                tool_pb2.CallToolsRequest(
                    calls=[
                        tool_pb2.StreamedCall(id=i + 1, call=request("echo_text", {"size": n}))
                        for i, n in enumerate(sizes)
                    ]
                )
            )
            await call.done_writing()
            answered: list[int] = []
            async with asyncio.timeout(WAIT):
                async for message in call:
                    assert message.ByteSize() <= limit
                    for answer in message.answers:
                        assert answer.WhichOneof("outcome") == "result", answer
                        assert len(answer.result.output) == sizes[answer.id - 1]
                        answered.append(answer.id)
            assert sorted(answered) == list(range(1, len(sizes) + 1))

    asyncio.run(scenario())
