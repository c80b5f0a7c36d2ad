"""Who a tool call serves, through real processes: sidecars with principals, SDK tool
servers that answer with the identity they received, and a proxy that changes it on the
way (what an attacker on the network would do).

Sidecar ``signed`` signs assertions (``auth.tool_assertion``) and serves alice and bob. Its
tool servers:

- ``ident`` verifies every assertion and requires one (``--require-identity``);
- ``plain`` verifies nothing: it sees the plain metadata;
- ``wrongaud`` expects another audience, ``otherkey`` trusts another key;
- ``proxied`` is the tampering proxy in front of a verifying server whose tools
  ``whoami_tamper``, ``whoami_expire`` and ``whoami_contradict`` the proxy treats each
  its own way.

Sidecar ``unsigned`` signs nothing and has no principals; its ``ident`` is the same
verifying server, so its calls arrive without an assertion.

A refused call is data for the model (a tool error), its handler never runs (each server
records the call ids its handler ran for), and the sidecar goes on serving.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2, identity_pb2, identity_pb2_grpc
from sidecar import testing
from sidecar.config import ToolAssertionConfig
from sidecar.security.tool_identity import AssertionSigner
from tests.support import SUPPORT
from tests.support.stack import TEST_MODELS, eventually, sidecar, sidecar_config

SCENARIO = Path(__file__).with_name("tool_identity_scenario.yaml")
IDENTITY_SERVER = SUPPORT / "identity_toolserver.py"
PROXY = SUPPORT / "tampering_proxy.py"
TOKENS = {"alice": "alice-identity-0001", "bob": "bob-identity-0002"}
LABELS = {
    "team": "Zürich ☕ 東京",
    "note": "line one\nline two",
    "plan": "50%+ off & more; x-agent-principal: mallory",
}


def _key(path: Path) -> Path:
    key = ed25519.Ed25519PrivateKey.generate()
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


def _published_jwks(key: Path, workdir: Path) -> Path:
    """The JWKS as an operator publishes it: ``agent-sidecar identity jwks``."""
    config = workdir / "jwks-config.yaml"
    config.write_text(f"auth:\n  tool_assertion:\n    key_file: {key}\n")
    done = subprocess.run(
        [sys.executable, "-m", "sidecar", "identity", "jwks", "--config", str(config)],
        capture_output=True,
        check=True,
        timeout=60,
    )
    path = workdir / "jwks.json"
    path.write_bytes(done.stdout)
    return path


def _server(record: Path, tools: str, *flags: str) -> testing.ServerProcess:
    return testing.tool_server(
        str(IDENTITY_SERVER),
        "--tools",
        tools,
        "--record",
        str(record),
        "--log-level",
        "ERROR",
        *flags,
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("tool-identity")
    key = _key(work / "sidecar.pem")
    jwks = _published_jwks(key, work)
    other = work / "other.json"
    other_key = _key(work / "other.pem")
    other.write_text(
        json.dumps(AssertionSigner(ToolAssertionConfig(key_file=str(other_key))).jwks())
    )
    record = work / "handled.txt"
    record.touch()
    verify = ["--identity-keys", str(jwks), "--require-identity"]
    principals = [
        {"name": name, "token_sha256": hashlib.sha256(token.encode()).hexdigest()}
        for name, token in TOKENS.items()
    ]
    with (
        testing.simulator(scenario=SCENARIO, models=TEST_MODELS) as sim,
        _server(record, "whoami", *verify, "--identity-audience", "ident") as ident,
        _server(record, "whoami_plain") as plain,
        _server(record, "whoami_wrongaud", *verify, "--identity-audience", "somebody") as wrong,
        _server(
            record,
            "whoami_otherkey",
            "--identity-keys",
            str(other),
            "--identity-audience",
            "otherkey",
            "--require-identity",
        ) as otherkey,
        _server(
            record,
            "whoami_tamper,whoami_expire,whoami_contradict",
            *verify,
            "--identity-audience",
            "proxied",
        ) as upstream,
        testing.start_process(
            [str(PROXY), "--port", "0", "--upstream", upstream.address, "--key", str(key)]
        ) as proxy,
    ):
        servers = [
            {"name": "ident", "address": ident.address},
            {"name": "plain", "address": plain.address},
            {"name": "wrongaud", "address": wrong.address},
            {"name": "otherkey", "address": otherkey.address},
            {"name": "proxied", "address": proxy.address},
        ]
        signed_config = sidecar_config(
            sim,
            servers,
            auth={"principals": principals, "tool_assertion": {"key_file": str(key)}},
        )
        unsigned_config = sidecar_config(sim, servers[:2])
        with (
            sidecar(signed_config, work / "signed") as signed,
            sidecar(unsigned_config, work / "unsigned") as unsigned,
        ):
            yield {
                "signed": signed.address,
                "unsigned": unsigned.address,
                "record": record,
                "jwks": json.loads(jwks.read_text()),
            }


async def test_a_sidecar_serves_its_keys_to_any_caller_and_one_that_signs_nothing_says_so(
    stack: dict[str, Any],
) -> None:
    # No token: the signed sidecar's AgentService would refuse this caller.
    async with grpc.aio.insecure_channel(stack["signed"]) as channel:
        keys = identity_pb2_grpc.IdentityKeysServiceStub(channel)
        answer = await keys.GetIdentityKeys(identity_pb2.GetIdentityKeysRequest(), timeout=10)
    assert json.loads(answer.jwks) == stack["jwks"]  # as `identity jwks` prints them
    assert answer.max_age.seconds == 300
    async with grpc.aio.insecure_channel(stack["unsigned"]) as channel:
        keys = identity_pb2_grpc.IdentityKeysServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await keys.GetIdentityKeys(identity_pb2.GetIdentityKeysRequest(), timeout=10)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "auth.tool_assertion is unset" in (refused.value.details() or "")


async def _ask(
    address: str, text: str, *, token: str | None = None, session_id: str = "", labels: Any = None
) -> tuple[list[agent_pb2.ToolCallFinished], agent_pb2.RunResult, str]:
    """Run ``text`` in a new session; the finished calls, the result and the run's id."""
    async with AgentClient(address, token=token) as client:
        session = await client.create_session(session_id=session_id, labels=labels)
        events = [e async for e in client.stream(session.session_id, text, timeout=30)]
        stored = await client.get_session(session.session_id)
    finished = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
    assert events[-1].HasField("run_finished")
    return finished, events[-1].run_finished, stored.turns[-1].run_id


def _handled(stack: dict[str, Any]) -> set[str]:
    return set(stack["record"].read_text().split())


async def test_a_tool_learns_and_verifies_the_principal_session_run_call_and_labels(
    stack: dict[str, Any],
) -> None:
    calls, result, run_id = await _ask(
        stack["signed"],
        "who am i twice",
        token=TOKENS["alice"],
        session_id="user-1",
        labels=LABELS,
    )

    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    assert len(calls) == 3 and len({c.call_id for c in calls}) == 3
    seen = []
    for call in calls:
        assert call.status == agent_pb2.TOOL_CALL_STATUS_OK, call.content
        identity = json.loads(call.content)
        seen.append(identity)
        assert identity["verified"] is True
        assert identity["principal"] == "alice"
        assert identity["session_id"] == "user-1"  # as alice knows it, not the store's key
        assert identity["run_id"] == run_id
        assert identity["call_id"] == identity["request_call_id"] == call.call_id
        assert identity["labels"] == LABELS and identity["labels_omitted"] is False
        claims = identity["claims"]
        assert (claims["iss"], claims["sub"], claims["aud"]) == ("agent-sidecar", "alice", "ident")
        assert (claims["sid"], claims["run_id"], claims["labels"]) == ("user-1", run_id, LABELS)
        assert claims["exp"] - claims["iat"] == 300
    # One assertion for the run's calls to this server, steps apart.
    assert len({identity["claims"]["jti"] for identity in seen}) == 1
    assert {c.call_id for c in calls} <= _handled(stack)

    again, _, next_run = await _ask(stack["signed"], "who am i", token=TOKENS["bob"])
    other = json.loads(again[0].content)
    assert next_run != run_id and other["run_id"] == next_run
    assert other["principal"] == "bob" and other["labels"] == {}
    assert other["claims"]["jti"] != seen[0]["claims"]["jti"]


async def test_a_server_that_verifies_nothing_sees_the_plain_metadata(
    stack: dict[str, Any],
) -> None:
    calls, _, run_id = await _ask(
        stack["signed"], "who am i via plain", token=TOKENS["bob"], labels=LABELS
    )
    identity = json.loads(calls[0].content)
    assert identity["verified"] is False and identity["claims"] == {}
    assert identity["principal"] == "bob" and identity["run_id"] == run_id
    assert identity["labels"] == LABELS and identity["call_id"] == calls[0].call_id


async def test_an_anonymous_caller_is_named_by_no_one_and_a_required_assertion_is_missed(
    stack: dict[str, Any],
) -> None:
    calls, _, run_id = await _ask(stack["unsigned"], "who am i via plain", session_id="mine")
    identity = json.loads(calls[0].content)
    assert identity["principal"] == "" and identity["session_id"] == "mine"
    assert identity["run_id"] == run_id and not identity["verified"]

    calls, result, _ = await _ask(stack["unsigned"], "who am i")
    refused = calls[0]
    assert refused.status == agent_pb2.TOOL_CALL_STATUS_ERROR
    assert "UNAUTHENTICATED" in refused.content
    assert "carries no identity assertion" in refused.content
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED  # the model went on
    assert refused.call_id not in _handled(stack)


@pytest.mark.parametrize(
    ("via", "reason"),
    [
        ("wrongaud", "the identity assertion is for another tool server"),
        ("otherkey", "signed by a key this server does not know"),
        ("tamper", "signature does not verify"),
        ("expire", "the identity assertion expired at 2001-09-09"),
        ("contradict", "x-agent-principal contradicts the identity assertion"),
    ],
)
async def test_an_assertion_that_fails_on_the_way_is_a_tool_error_and_the_tool_never_runs(
    stack: dict[str, Any], via: str, reason: str
) -> None:
    calls, result, _ = await _ask(stack["signed"], f"who am i via {via}", token=TOKENS["alice"])

    refused = calls[0]
    assert refused.status == agent_pb2.TOOL_CALL_STATUS_ERROR
    assert "UNAUTHENTICATED" in refused.content and reason in refused.content, refused.content
    assert "eyJ" not in refused.content  # no token in what the model sees
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    assert refused.call_id not in _handled(stack)
    # The sidecar goes on serving.
    calls, _, _ = await _ask(stack["signed"], "who am i", token=TOKENS["alice"])
    assert calls[0].status == agent_pb2.TOOL_CALL_STATUS_OK, calls[0].content
    assert json.loads(calls[0].content)["verified"] is True


async def test_a_reload_switches_the_signing_key_and_a_key_it_cannot_read_changes_nothing(
    tmp_path: Path,
) -> None:
    old, new = _key(tmp_path / "old.pem"), _key(tmp_path / "new.pem")
    trusted = tmp_path / "new.json"
    trusted.write_text(json.dumps(AssertionSigner(ToolAssertionConfig(key_file=str(new))).jwks()))
    record = tmp_path / "handled.txt"
    flags = ["--identity-keys", str(trusted), "--identity-audience", "ident"]
    with (
        testing.simulator(scenario=SCENARIO, models=TEST_MODELS) as sim,
        _server(record, "whoami", *flags, "--require-identity") as ident,
    ):
        config = sidecar_config(
            sim,
            [{"name": "ident", "address": ident.address}],
            server={"port": 0, "grace_period": 2, "config_watch_interval": None},
            auth={"tool_assertion": {"key_file": str(old)}},
        )
        log = tmp_path / "stderr.log"
        with log.open("wb") as stderr, sidecar(config, tmp_path, stderr=stderr) as side:
            calls, _, _ = await _ask(side.address, "who am i")
            assert "signed by a key this server does not know" in calls[0].content

            def reload_with(key: Path) -> None:
                path = tmp_path / "sidecar.yaml"  # as the sidecar read it
                written = yaml.safe_load(path.read_text())
                written["auth"]["tool_assertion"]["key_file"] = str(key)
                path.write_text(yaml.safe_dump(written, sort_keys=False))
                side.send_signal(signal.SIGHUP)

            reload_with(new)
            await _log_has(log, "configuration reloaded (SIGHUP): auth")
            calls, _, _ = await _ask(side.address, "who am i")
            assert json.loads(calls[0].content)["verified"] is True

            reload_with(tmp_path / "missing.pem")
            await _log_has(log, "auth.tool_assertion.key_file")
            assert "configuration not reloaded (SIGHUP)" in log.read_text()
            calls, _, _ = await _ask(side.address, "who am i")
            assert json.loads(calls[0].content)["verified"] is True  # the new key still


async def _log_has(log: Path, text: str) -> None:
    async def seen() -> bool:
        return text in log.read_text()  # noqa: ASYNC240 - a small file, polled

    await eventually(seen, timeout=10)


async def test_a_tool_server_fetches_the_keys_from_the_sidecar_and_waits_for_them(
    tmp_path: Path,
) -> None:
    # The tool server starts first, as in a cluster: the sidecar is not up, so calls
    # are refused until its keys arrive (the fetch tries again, 1 s then doubling).
    key = _key(tmp_path / "key.pem")
    socket_path = tmp_path / "sidecar.sock"
    record = tmp_path / "handled.txt"
    record.touch()
    flags = ["--identity-keys-from", f"unix:{socket_path}", "--identity-audience", "ident"]
    with (
        testing.simulator(scenario=SCENARIO, models=TEST_MODELS) as sim,
        _server(record, "whoami", *flags, "--require-identity") as ident,
    ):
        config = sidecar_config(
            sim,
            [{"name": "ident", "address": ident.address}],
            server={"port": 0, "unix_socket": str(socket_path)},
            auth={"tool_assertion": {"key_file": str(key)}},
        )
        with sidecar(config, tmp_path) as side:
            seen: list[str] = []

            async def verified() -> bool:
                calls, _, _ = await _ask(side.address, "who am i")
                seen.append(calls[0].content)
                return calls[0].status == agent_pb2.TOOL_CALL_STATUS_OK

            await eventually(verified, timeout=20, interval=0.2)
            assert json.loads(seen[-1])["verified"] is True
            # Any refusal on the way said why.
            assert all("not fetched yet" in s for s in seen[:-1]), seen
