"""Calling tools on a real tool server process through a real gRPC client.

The server is ``tests/support/toolserver_fixtures.py``; its tools let a test see
inside the process (did a handler start, was it cancelled) through further
tool calls, so nothing here sleeps to wait for something.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest

from agentsidecar.v1 import tool_pb2, tool_pb2_grpc
from sidecar.testing import ServerProcess, start_process
from tests.support import TOOLSERVER_FIXTURES

FIXTURES = str(TOOLSERVER_FIXTURES)
WAIT = 10.0  # upper bound on any single wait; never expected to be reached


@pytest.fixture(scope="module")
def fixture_server() -> Iterator[ServerProcess]:
    server = start_process([FIXTURES, "--port", "0"])
    yield server
    assert server.stop() == 0


@pytest.fixture
async def stub(fixture_server: ServerProcess) -> AsyncIterator[tool_pb2_grpc.ToolServiceStub]:
    async with grpc.aio.insecure_channel(fixture_server.address) as channel:
        yield tool_pb2_grpc.ToolServiceStub(channel)


def request(
    tool: str, arguments: dict[str, Any] | str, call_id: str = ""
) -> tool_pb2.CallToolRequest:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return tool_pb2.CallToolRequest(call_id=call_id, tool_name=tool, arguments=text)


async def call(
    stub: tool_pb2_grpc.ToolServiceStub,
    tool: str,
    arguments: dict[str, Any] | str,
    *,
    call_id: str = "",
    timeout: float = WAIT,
) -> tool_pb2.ToolResult:
    response = await stub.CallTool(request(tool, arguments, call_id), timeout=timeout)
    return response.result


async def output(stub: tool_pb2_grpc.ToolServiceStub, tool: str, arguments: dict[str, Any]) -> Any:
    result = await call(stub, tool, arguments)
    assert result.WhichOneof("outcome") == "output", result
    return json.loads(result.output)


async def test_a_call_returns_the_output_and_echoes_the_call_id(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    result = await call(stub, "echo_int", {"value": 7}, call_id="call-7")

    assert result.call_id == "call-7"
    assert result.output == "7"


async def test_handler_duration_is_filled_in(stub: tool_pb2_grpc.ToolServiceStub) -> None:
    result = await call(stub, "echo_int", {"value": 1})

    assert result.HasField("handler_duration")
    assert result.handler_duration.ToNanoseconds() > 0


@pytest.mark.parametrize("value", [2**63 - 1, -(2**63), 2**70])
async def test_large_integers_survive_the_round_trip_exactly(
    stub: tool_pb2_grpc.ToolServiceStub, value: int
) -> None:
    result = await call(stub, "echo_int", f'{{"value": {value}}}')

    assert result.output == str(value)


async def test_empty_arguments_mean_no_arguments(stub: tool_pb2_grpc.ToolServiceStub) -> None:
    result = await call(stub, "whoami", "")

    assert json.loads(result.output)["tool_name"] == "whoami"


async def test_parameters_named_like_pydantic_attributes_keep_their_names(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    result = await call(stub, "shadow", {"json": "a", "schema": 2})

    assert result.output == "a:2"


async def test_arguments_violating_the_schema_are_an_invalid_arguments_result_naming_each_field(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    result = await call(stub, "plan_trip", {"travellers": 0, "pace": "warp", "colour": "red"})

    assert result.error.kind == tool_pb2.TOOL_ERROR_KIND_INVALID_ARGUMENTS
    message = result.error.message
    assert "- destination: required argument is missing; expected string" in message
    assert "- travellers: Input should be greater than or equal to 1; got 0" in message
    assert "- pace: Input should be 'slow' or 'fast'" in message
    assert "- stops: required argument is missing; expected array of object" in message
    assert "- colour: unknown argument; plan_trip takes: destination, travellers" in message


async def test_nested_argument_errors_name_the_path_to_the_field(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    arguments = {
        "destination": "Lyon",
        "travellers": 2,
        "pace": "slow",
        "mode": "train",
        "stops": [{"city": "Dijon"}, {"city": "Beaune", "nights": "many"}],
    }

    result = await call(stub, "plan_trip", arguments)

    assert result.error.kind == tool_pb2.TOOL_ERROR_KIND_INVALID_ARGUMENTS
    assert "- stops[1].nights: Input should be a valid integer" in result.error.message
    assert 'got "many"' in result.error.message


async def test_valid_nested_arguments_reach_the_tool_as_models_and_enums(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    arguments = {
        "destination": "Lyon",
        "travellers": 2,
        "pace": "fast",
        "mode": "plane",
        "stops": [{"city": "Dijon"}],
        "budget": {"amount": 900.5, "currency": "EUR"},
    }

    assert await output(stub, "plan_trip", arguments) == {
        "destination": "Lyon",
        "stops": 1,
        "pace": "fast",
    }


@pytest.mark.parametrize("arguments", ["[1, 2]", "null", '"text"', "42", "{", "   "])
async def test_arguments_that_are_not_a_json_object_fail_with_invalid_argument(
    stub: tool_pb2_grpc.ToolServiceStub, arguments: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call(stub, "echo_int", arguments)

    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "arguments must be a JSON object" in (raised.value.details() or "")


async def test_an_unknown_tool_fails_with_not_found_listing_the_available_tools(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call(stub, "launch_rocket", {})

    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    details = raised.value.details() or ""
    assert "launch_rocket" in details
    assert "echo_int" in details


async def test_an_empty_tool_name_fails_with_invalid_argument(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call(stub, "", {})

    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_an_exception_in_a_tool_is_an_execution_failed_result_with_type_and_message(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    result = await call(stub, "explode", {"message": "the flux capacitor is cold"})

    assert result.error.kind == tool_pb2.TOOL_ERROR_KIND_EXECUTION_FAILED
    assert result.error.message == "ValueError: the flux capacitor is cold"


async def test_a_tool_failure_reaches_the_model_with_exactly_its_message(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    result = await call(stub, "refuse", {"message": "order 1 does not exist"})

    assert result.error.kind == tool_pb2.TOOL_ERROR_KIND_EXECUTION_FAILED
    assert result.error.message == "order 1 does not exist"


async def test_a_passed_deadline_fails_the_call_and_cancels_the_async_handler(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    key = uuid.uuid4().hex

    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call(stub, "block", {"key": key}, timeout=0.5)

    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert await output(stub, "await_cancellation", {"key": key, "timeout_s": WAIT}) is True


async def test_a_caller_cancelling_cancels_the_async_handler(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    key = uuid.uuid4().hex
    blocked = stub.CallTool(request("block", {"key": key}), timeout=WAIT)
    assert await output(stub, "await_started", {"key": key, "timeout_s": WAIT}) is True

    blocked.cancel()

    with pytest.raises(asyncio.CancelledError):
        await blocked
    assert await output(stub, "await_cancellation", {"key": key, "timeout_s": WAIT}) is True


async def test_stream_tool_sends_progress_reports_then_exactly_one_result(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    stream = stub.StreamTool(
        tool_pb2.StreamToolRequest(call=request("count", {"steps": 3}, "s-1")), timeout=WAIT
    )

    events = [event async for event in stream]

    progress = [(e.progress.progress, e.progress.total, e.progress.message) for e in events[:-1]]
    assert progress == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
    assert events[-1].WhichOneof("event") == "result"
    assert events[-1].result.call_id == "s-1"
    assert events[-1].result.output == "counted 3"


async def test_stream_tool_without_progress_sends_only_the_result(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    stream = stub.StreamTool(
        tool_pb2.StreamToolRequest(call=request("echo_int", {"value": 5})), timeout=WAIT
    )

    events = [event async for event in stream]

    assert [e.WhichOneof("event") for e in events] == ["result"]
    assert events[0].result.output == "5"


async def test_a_sync_tool_reports_progress_from_its_worker_thread(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    stream = stub.StreamTool(
        tool_pb2.StreamToolRequest(call=request("count_in_thread", {"steps": 2})), timeout=WAIT
    )

    events = [event async for event in stream]

    assert [e.progress.progress for e in events[:-1]] == [1, 2]
    assert events[-1].result.output == "counted 2 in a thread"


async def test_progress_on_call_tool_is_dropped_and_the_result_still_arrives(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    result = await call(stub, "count", {"steps": 2})

    assert result.output == "counted 2"


async def test_stream_tool_reports_an_unknown_tool_as_not_found(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    stream = stub.StreamTool(tool_pb2.StreamToolRequest(call=request("nope", {})), timeout=WAIT)

    with pytest.raises(grpc.aio.AioRpcError) as raised:
        _ = [event async for event in stream]

    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_client_cancelling_a_stream_cancels_the_handler(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    key = uuid.uuid4().hex
    stream = stub.StreamTool(
        tool_pb2.StreamToolRequest(call=request("block", {"key": key})), timeout=WAIT
    )
    first = await stream.read()
    assert first.progress.message == "started"

    stream.cancel()

    assert await output(stub, "await_cancellation", {"key": key, "timeout_s": WAIT}) is True


async def test_two_sync_tool_calls_run_at_the_same_time_off_the_event_loop(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    # Each call waits at a two-party barrier: both return "met" only if they
    # ran concurrently in separate threads.
    first, second = await asyncio.gather(
        call(stub, "rendezvous", {"timeout_s": WAIT}),
        call(stub, "rendezvous", {"timeout_s": WAIT}),
    )

    assert (first.output, second.output) == ("met", "met")


async def test_a_blocked_sync_tool_does_not_block_async_tools(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    key = uuid.uuid4().hex
    waiting = asyncio.ensure_future(call(stub, "wait_for_release", {"key": key, "timeout_s": WAIT}))

    released = await call(stub, "release", {"key": key})

    assert released.output == "released"
    assert (await waiting).output == "true"


async def test_the_context_exposes_call_id_tool_name_deadline_and_metadata(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    response = await stub.CallTool(
        request("whoami", {}, "ctx-1"), timeout=WAIT, metadata=(("x-tenant", "acme"),)
    )

    assert json.loads(response.result.output) == {
        "call_id": "ctx-1",
        "tool_name": "whoami",
        "has_deadline": True,
        "metadata": {"x-tenant": "acme"},
    }


async def test_list_tools_reports_each_schema_and_descriptor_fact(
    stub: tool_pb2_grpc.ToolServiceStub,
) -> None:
    response = await stub.ListTools(tool_pb2.ListToolsRequest(), timeout=WAIT)

    tools = {tool.name: tool for tool in response.tools}
    assert list(tools)[:3] == ["echo_int", "shadow", "explode"]
    plan = tools["plan_trip"]
    assert plan.description == "Plan a trip."
    assert (plan.read_only, plan.idempotent, plan.destructive) == (True, True, False)
    assert list(plan.read_keys) == ["trip:{destination}"]
    assert plan.default_timeout.ToSeconds() == 5
    assert plan.version == "test"
    schema = json.loads(plan.input_schema)
    assert schema["type"] == "object"
    assert schema["properties"]["destination"] == {"description": "Where to go.", "type": "string"}
    assert schema["required"] == ["destination", "travellers", "pace", "mode", "stops"]
    assert json.loads(tools["echo_int"].output_schema) == {"type": "integer"}
    assert len(response.tool_set_version) == 16
    again = await stub.ListTools(tool_pb2.ListToolsRequest(), timeout=WAIT)
    assert again.tool_set_version == response.tool_set_version
