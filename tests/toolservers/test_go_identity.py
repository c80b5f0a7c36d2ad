"""The Go library verifies the Python sidecar's identity assertions, end to end.

A sidecar signs with an Ed25519 key (``auth.tool_assertion``); the Go whoami example
(toolservers/go/examples/whoami) is started with the JWKS ``agent-sidecar identity jwks``
printed, and requires an assertion. A turn of alice's calls whoami, which answers with
the identity the Go library verified; a second Go server that expects another audience
refuses the call, which the model sees as a tool error.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar import testing
from tests.support.stack import TEST_MODELS, sidecar, sidecar_config

ROOT = Path(__file__).resolve().parents[2]
GO_MODULE = ROOT / "toolservers" / "go"
BINARY = ROOT / ".tools" / "bin" / "whoami-toolserver"
SCENARIO = ROOT / "tests" / "security" / "tool_identity_scenario.yaml"
BUILD_TIMEOUT = 480  # seconds: a cold build downloads and compiles grpc-go
TOKEN = "alice-go-identity-0001"
LABELS = {"team": "Zürich ☕", "note": "line one\nline two"}

pytestmark = pytest.mark.timeout(BUILD_TIMEOUT + 120)


@pytest.fixture(scope="module")
def whoami_binary() -> Path:
    go = shutil.which("go")
    assert go is not None, "the Go toolchain (go) is needed to build the Go tool server"
    subprocess.run(
        [go, "build", "-o", str(BINARY), "./examples/whoami"],
        cwd=GO_MODULE,
        check=True,
        timeout=BUILD_TIMEOUT,
    )
    return BINARY


@pytest.fixture(scope="module")
def stack(
    whoami_binary: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    work = tmp_path_factory.mktemp("go-identity")
    key = work / "sidecar.pem"
    key.write_bytes(
        ed25519.Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    assertion = {"key_file": str(key), "issuer": "sidecar.test"}
    published = work / "published.yaml"
    published.write_text(json.dumps({"auth": {"tool_assertion": assertion}}))
    jwks = work / "jwks.json"
    jwks.write_bytes(
        subprocess.run(
            [sys.executable, "-m", "sidecar", "identity", "jwks", "--config", str(published)],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    )

    def go_server(audience: str) -> testing.ServerProcess:
        flags = ["--port", "0", "--log-level", "error", "--identity-keys", str(jwks)]
        flags += ["--identity-audience", audience, "--identity-issuer", "sidecar.test"]
        return testing.start_process([*flags, "--require-identity"], executable=str(whoami_binary))

    with (
        testing.simulator(scenario=SCENARIO, models=TEST_MODELS) as sim,
        go_server("whoami") as verifying,
        go_server("somebody-else") as other,
    ):
        config = sidecar_config(
            sim,
            [{"name": "whoami", "address": verifying.address}],
            auth={
                "principals": [
                    {"name": "alice", "token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}
                ],
                "tool_assertion": assertion,
            },
        )
        wrong = sidecar_config(
            sim,
            [{"name": "whoami", "address": other.address}],
            auth=config["auth"],
        )
        with (
            sidecar(config, work / "verified") as side,
            sidecar(wrong, work / "wrong") as wrong_side,
        ):
            yield {"verified": side.address, "wrong": wrong_side.address}


async def _who(address: str) -> tuple[agent_pb2.ToolCallFinished, str]:
    async with AgentClient(address, token=TOKEN) as client:
        session = await client.create_session(session_id="user-7", labels=LABELS)
        events = [e async for e in client.stream(session.session_id, "who am i", timeout=30)]
        stored = await client.get_session(session.session_id)
    calls = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
    assert events[-1].run_finished.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    return calls[0], stored.turns[-1].run_id


async def test_the_go_library_verifies_the_python_sidecars_assertion(stack: Any) -> None:
    call, run_id = await _who(stack["verified"])

    assert call.status == agent_pb2.TOOL_CALL_STATUS_OK, call.content
    identity = json.loads(call.content)
    assert identity["verified"] is True
    assert identity["principal"] == "alice" and identity["session_id"] == "user-7"
    assert identity["run_id"] == run_id and identity["call_id"] == call.call_id
    assert identity["labels"] == LABELS
    claims = identity["claims"]
    assert (claims["iss"], claims["aud"], claims["sub"]) == ("sidecar.test", "whoami", "alice")


async def test_a_go_server_expecting_another_audience_refuses_and_the_model_sees_it(
    stack: Any,
) -> None:
    call, _ = await _who(stack["wrong"])

    assert call.status == agent_pb2.TOOL_CALL_STATUS_ERROR
    assert "UNAUTHENTICATED" in call.content
    assert "the identity assertion is for another tool server" in call.content
