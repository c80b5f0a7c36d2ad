"""grpcurl, knowing only what reflection serves, against a real sidecar and tool server.

The real grpcurl (`make grpcurl` installs the pinned one into .tools/bin; `make pytest`
does that first) lists the services, describes services, methods, messages and enums,
and calls both servers with JSON it encodes from the descriptors the servers serve over
reflection: it is given nothing of protos/. The sidecar and the SDK's orders tool server
are the example stack's (sidecar.testing), on loopback with no caller authentication.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from agentsidecar.v1 import agent_pb2, tool_pb2
from sidecar import testing
from sidecar.testing import Stack
from tests.support import ROOT

GRPCURL = ROOT / ".tools" / "bin" / "grpcurl"
REFLECTION = {"grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"}
QUESTION = "What is the status of order 20250101?"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    assert GRPCURL.exists(), "grpcurl is missing: run 'make pytest' or 'make grpcurl'"
    with testing.example_stack(tmp_path_factory.mktemp("grpcurl")) as stack:
        testing.wait_serving(stack.sidecar.address)
        yield stack


@pytest.fixture(scope="module")
def sidecar(stack: Stack) -> str:
    return stack.sidecar.address


@pytest.fixture(scope="module")
def tool_server(stack: Stack) -> str:
    return stack.tool_servers["orders"].address


def grpcurl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GRPCURL), "-plaintext", "-max-time", "30", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def ok(*args: str) -> str:
    proc = grpcurl(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def call(address: str, method: str, request: dict[str, Any]) -> dict[str, Any]:
    """One unary call; the response as the proto's JSON mapping."""
    response: dict[str, Any] = json.loads(ok("-d", json.dumps(request), address, method))
    return response


def messages(text: str) -> list[dict[str, Any]]:
    """The JSON objects grpcurl prints one after another for a stream."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := text.find("{", at)) >= 0:
        message, at = decoder.raw_decode(text, at)
        found.append(message)
    return found


def rpc_line(method: Any) -> str:
    """grpcurl's rendering of a method, e.g. ``rpc Run ( .pkg.RunRequest ) returns (...);``."""
    sends = "stream " if method.client_streaming else ""
    returns = "stream " if method.server_streaming else ""
    return (
        f"rpc {method.name} ( {sends}.{method.input_type.full_name} ) "
        f"returns ( {returns}.{method.output_type.full_name} );"
    )


def test_list_names_the_sidecars_services(sidecar: str) -> None:
    services = set(ok(sidecar, "list").split())
    ours = {"AgentService", "VariantService", "IdentityKeysService"}
    assert {f"agentsidecar.v1.{name}" for name in ours} <= services
    assert {"grpc.health.v1.Health", *REFLECTION} <= services


def test_list_names_the_tool_servers_services(tool_server: str) -> None:
    services = set(ok(tool_server, "list").split())
    assert {"agentsidecar.v1.ToolService", "grpc.health.v1.Health", *REFLECTION} <= services


@pytest.mark.parametrize(
    ("target", "service"),
    [
        ("sidecar", agent_pb2.DESCRIPTOR.services_by_name["AgentService"]),
        ("tool_server", tool_pb2.DESCRIPTOR.services_by_name["ToolService"]),
    ],
    ids=["AgentService", "ToolService"],
)
def test_describe_shows_every_rpc_of_a_service(
    target: str, service: Any, request: pytest.FixtureRequest
) -> None:
    out = ok(request.getfixturevalue(target), "describe", service.full_name)
    assert out.startswith(f"{service.full_name} is a service:"), out
    for method in service.methods:
        assert rpc_line(method) in out, (method.name, out)


@pytest.mark.parametrize(
    ("target", "method"),
    [
        ("sidecar", agent_pb2.DESCRIPTOR.services_by_name["AgentService"].methods_by_name["Run"]),
        (
            "sidecar",
            agent_pb2.DESCRIPTOR.services_by_name["AgentService"].methods_by_name["StreamRun"],
        ),
        (
            "tool_server",
            tool_pb2.DESCRIPTOR.services_by_name["ToolService"].methods_by_name["CallTool"],
        ),
    ],
    ids=["AgentService.Run", "AgentService.StreamRun", "ToolService.CallTool"],
)
def test_describe_resolves_a_method_symbol(
    target: str, method: Any, request: pytest.FixtureRequest
) -> None:
    out = ok(request.getfixturevalue(target), "describe", method.full_name)
    assert out.startswith(f"{method.full_name} is a method:"), out
    assert rpc_line(method) in out, out


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("sidecar", agent_pb2.RunRequest.DESCRIPTOR),
        ("sidecar", agent_pb2.StreamRunResponse.DESCRIPTOR),
        ("tool_server", tool_pb2.CallToolRequest.DESCRIPTOR),
        ("tool_server", tool_pb2.ToolDescriptor.DESCRIPTOR),
    ],
    ids=lambda m: getattr(m, "name", m),
)
def test_describe_shows_every_field_of_a_message(
    target: str, message: Any, request: pytest.FixtureRequest
) -> None:
    out = ok(request.getfixturevalue(target), "describe", message.full_name)
    assert out.startswith(f"{message.full_name} is a message:"), out
    for field in message.fields:
        assert f" {field.name} = {field.number};" in out, (field.name, out)


def test_describe_shows_an_enums_values(sidecar: str) -> None:
    enum = agent_pb2.StopReason.DESCRIPTOR
    out = ok(sidecar, "describe", enum.full_name)
    assert out.startswith(f"{enum.full_name} is an enum:"), out
    for value in enum.values:
        assert f"{value.name} = {value.number};" in out, (value.name, out)


def test_a_session_created_through_reflection_alone_exists(sidecar: str) -> None:
    created = call(sidecar, "agentsidecar.v1.AgentService/CreateSession", {})
    session = created["session"]
    assert session["sessionId"] and session["profile"] == "default", created
    got = call(
        sidecar, "agentsidecar.v1.AgentService/GetSession", {"session_id": session["sessionId"]}
    )
    assert got["session"]["sessionId"] == session["sessionId"], got


def test_a_run_through_reflection_alone_answers(sidecar: str) -> None:
    session = call(sidecar, "agentsidecar.v1.AgentService/CreateSession", {})["session"]
    response = call(
        sidecar,
        "agentsidecar.v1.AgentService/Run",
        {"session_id": session["sessionId"], "input": QUESTION},
    )
    result = response["result"]
    assert result["stopReason"] == "STOP_REASON_ANSWERED", response
    assert result["answer"].startswith("[simulated]") and "20250101" in result["answer"]


def test_a_streamed_run_through_reflection_alone_ends_with_run_finished(sidecar: str) -> None:
    session = call(sidecar, "agentsidecar.v1.AgentService/CreateSession", {})["session"]
    request = {"session_id": session["sessionId"], "input": QUESTION}
    events = messages(
        ok("-d", json.dumps(request), sidecar, "agentsidecar.v1.AgentService/StreamRun")
    )
    assert "runStarted" in events[0], events[0]
    finished = [e["toolCallFinished"] for e in events if "toolCallFinished" in e]
    # The other tests' runs may have left the order's status in the result cache.
    assert [f["toolName"] for f in finished] == ["get_order_status"], finished
    assert finished[0]["status"] in {"TOOL_CALL_STATUS_OK", "TOOL_CALL_STATUS_CACHED"}
    assert events[-1]["runFinished"]["stopReason"] == "STOP_REASON_ANSWERED", events[-1]


def test_an_error_through_reflection_alone_carries_its_reason(sidecar: str) -> None:
    proc = grpcurl(
        "-d",
        json.dumps({"session_id": "no-such-session"}),
        sidecar,
        "agentsidecar.v1.AgentService/GetSession",
    )
    assert proc.returncode != 0
    # grpcurl decodes the google.rpc.Status details of the error trailer.
    assert "Code: NotFound" in proc.stderr, proc.stderr
    assert '"reason": "SESSION_NOT_FOUND"' in proc.stderr, proc.stderr
    assert '"domain": "agentsidecar.v1"' in proc.stderr, proc.stderr


def test_list_tools_through_reflection_alone(tool_server: str) -> None:
    response = call(tool_server, "agentsidecar.v1.ToolService/ListTools", {})
    tools = {tool["name"]: tool for tool in response["tools"]}
    assert "get_order_status" in tools, response
    assert json.loads(tools["get_order_status"]["inputSchema"])["type"] == "object"
    assert response["toolSetVersion"], response


def test_call_tool_through_reflection_alone(tool_server: str) -> None:
    response = call(
        tool_server,
        "agentsidecar.v1.ToolService/CallTool",
        {
            "call_id": "grpcurl-1",
            "tool_name": "get_order_status",
            "arguments": json.dumps({"order_id": "20250101"}),
        },
    )
    assert response["result"]["callId"] == "grpcurl-1", response
    assert json.loads(response["result"]["output"])["order_id"] == "20250101", response
