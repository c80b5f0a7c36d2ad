"""A sidecar's refusals keep their documented JSON-RPC codes and reasons; the gRPC binding
refuses another A2A version; the HTTP listener closes half-sent requests and caps its
connections. One sidecar of its own: a principal with no skill's profile, tight limits."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc

from sidecar.testing import ServerProcess
from tests.support.a2a import A2A_SKILLS
from tests.support.http_limits import check_bounded, half_post
from tests.support.stack import sidecar, sidecar_config, simulator

CAROL = "carol-token"
MAX_CONNECTIONS = 8


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sidecar")


@pytest.fixture(scope="module")
def side(workdir: Path) -> Iterator[ServerProcess]:
    path = workdir
    auth = {
        "principals": [{"name": "carol", "token_env": "CAROL_TOKEN", "profiles": ["other"]}],
        "audit": {"path": str(path / "audit.jsonl")},
    }
    http = {"port": 0, "limits": {"read_timeout": 0.5, "max_connections": MAX_CONNECTIONS}}
    with simulator() as sim:
        config: dict[str, Any] = sidecar_config(
            sim,
            [],
            profiles={"default": {}, "other": {}},
            auth=auth,
            a2a={"skills": A2A_SKILLS, "http": http},
        )
        with sidecar(config, path, env={"CAROL_TOKEN": CAROL}) as process:
            yield process


def test_a_refusal_keeps_its_json_rpc_code_and_the_sidecars_reason(
    side: ServerProcess, workdir: Path
) -> None:
    base = "http://" + side.announced("a2a http on ")
    message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "two reads"}]}
    body = {"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": message}}
    headers = {"authorization": f"Bearer {CAROL}", "a2a-version": "1.0"}
    answer = httpx.post(base + "/a2a/jsonrpc", json=body, headers=headers, timeout=30)
    error = answer.json()["error"]
    assert error["code"] == -32041, error
    (info,) = error["data"]
    assert info["metadata"]["reason"] == "PERMISSION_DENIED"
    assert info["metadata"]["domain"] == "agentsidecar.v1"
    assert "validation error" not in answer.text
    # Refused as on every front, and recorded alike.
    audit = [json.loads(line) for line in (workdir / "audit.jsonl").read_text().splitlines()]
    refused = [r for r in audit if r["event"] == "call_refused"]
    assert refused and refused[-1]["principal"] == "carol"
    assert refused[-1]["method"] == "SendMessage"
    assert refused[-1]["error"] == "PermissionDenied"


async def test_the_grpc_binding_refuses_another_a2a_version(side: ServerProcess) -> None:
    async with grpc.aio.insecure_channel(side.address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)  # type: ignore[no-untyped-call]
        metadata = (("authorization", f"Bearer {CAROL}"), ("a2a-version", "99.0"))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.ListTasks(a2a_pb2.ListTasksRequest(), metadata=metadata, timeout=30)
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
        current = (("authorization", f"Bearer {CAROL}"), ("a2a-version", "1.0"))
        listed = await stub.ListTasks(a2a_pb2.ListTasksRequest(), metadata=current, timeout=30)
        assert list(listed.tasks) == []


def test_a_half_sent_request_is_closed_and_connections_are_capped(side: ServerProcess) -> None:
    host, port = side.announced("a2a http on ").rsplit(":", 1)

    def serves() -> bool:
        card = httpx.get(f"http://{host}:{port}/.well-known/agent-card.json", timeout=10)
        return card.status_code == 200

    check_bounded(
        host,
        int(port),
        half_request=half_post("/a2a/jsonrpc"),
        cap=MAX_CONNECTIONS,
        serves=serves,
    )
