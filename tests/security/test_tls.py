"""TLS and mutual TLS on every gRPC link, through real processes.

The sidecar's port, its channel to a tool server, and a tool server built with the SDK:
each refuses what it must (plaintext, a wrong CA, an expired certificate, a caller
without a client certificate, a tool call without the token), and picks up rotated
certificates without dropping a call in flight.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentsidecar.client import AgentClient
from agentsidecar.tls import channel_credentials
from agentsidecar.v1 import agent_pb2, tool_pb2, tool_pb2_grpc
from sidecar import testing
from sidecar.testing import ProcessStartError, ServerProcess
from sidecar.testing.certs import Issued, TestCA
from tests.support.stack import eventually

ORDER_QUESTION = "What is the status of order 20250101, and where is its parcel?"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("pki")
    ca, other = TestCA(root / "ca"), TestCA(root / "other", "other-ca")
    return {
        "ca": ca,
        "other": other,
        "server": ca.issue("server"),
        "expired": ca.issue("expired-server", expired=True),
        "client": ca.issue("client", client=True, uris=("spiffe://test/alice",)),
        "other_client": other.issue("other-client", client=True),
        "root": root,
    }


@pytest.fixture(scope="module")
def simulator() -> Iterator[ServerProcess]:
    with testing.simulator(scenario=testing.SCENARIO) as sim:
        yield sim


def _tls_sidecar(
    sim: ServerProcess, workdir: Path, tls: dict[str, Any], tool_servers: Any = ()
) -> ServerProcess:
    config = testing.sidecar_config(
        sim.address,
        list(tool_servers),
        server={"port": 0, "grace_period": 1, "tls": tls},
    )
    return testing.sidecar(config, workdir)


async def _health(address: str, credentials: grpc.ChannelCredentials | None) -> int:
    channel = (
        grpc.aio.secure_channel(address, credentials)
        if credentials is not None
        else grpc.aio.insecure_channel(address)
    )
    async with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
        return int(reply.status)


def _trusting(ca: TestCA, client: Issued | None = None) -> grpc.ChannelCredentials:
    credentials = channel_credentials(
        tls=True,
        ca_file=ca.ca_file,
        cert_file=client.cert_file if client else None,
        key_file=client.key_file if client else None,
    )
    assert credentials is not None
    return credentials


async def test_a_tls_sidecar_serves_tls_and_refuses_plaintext_and_wrong_cas(
    pki: dict[str, Any], simulator: ServerProcess, tmp_path: Path
) -> None:
    server: Issued = pki["server"]
    tls = {"cert_file": server.cert_file, "key_file": server.key_file}
    with _tls_sidecar(simulator, tmp_path, tls) as side:
        assert await _health(side.address, _trusting(pki["ca"])) in (1, 2)
        async with AgentClient(side.address, tls=True, ca_file=pki["ca"].ca_file) as client:
            session = await client.create_session()
            result = await client.run(session.session_id, "hello", timeout=20)
            assert result.result.stop_reason == agent_pb2.STOP_REASON_ANSWERED

        with pytest.raises(grpc.aio.AioRpcError) as plaintext:
            await _health(side.address, None)
        assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE

        with pytest.raises(grpc.aio.AioRpcError) as wrong_ca:
            await _health(side.address, _trusting(pki["other"]))
        assert wrong_ca.value.code() == grpc.StatusCode.UNAVAILABLE
        # The sidecar goes on serving those who trust its CA.
        assert await _health(side.address, _trusting(pki["ca"])) in (1, 2)


async def test_an_expired_server_certificate_is_refused_by_the_client(
    pki: dict[str, Any], simulator: ServerProcess, tmp_path: Path
) -> None:
    expired: Issued = pki["expired"]
    tls = {"cert_file": expired.cert_file, "key_file": expired.key_file}
    with _tls_sidecar(simulator, tmp_path, tls) as side:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await _health(side.address, _trusting(pki["ca"]))
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_mutual_tls_refuses_a_caller_without_a_certificate_or_with_a_foreign_one(
    pki: dict[str, Any], simulator: ServerProcess, tmp_path: Path
) -> None:
    server: Issued = pki["server"]
    tls = {
        "cert_file": server.cert_file,
        "key_file": server.key_file,
        "client_ca_file": pki["ca"].ca_file,
    }
    with _tls_sidecar(simulator, tmp_path, tls) as side:
        assert await _health(side.address, _trusting(pki["ca"], pki["client"])) in (1, 2)
        with pytest.raises(grpc.aio.AioRpcError) as anonymous:
            await _health(side.address, _trusting(pki["ca"]))
        assert anonymous.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.aio.AioRpcError) as foreign:
            await _health(side.address, _trusting(pki["ca"], pki["other_client"]))
        assert foreign.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_rotated_certificate_serves_new_connections_and_keeps_calls_in_flight(
    pki: dict[str, Any], simulator: ServerProcess, tmp_path: Path
) -> None:
    live = tmp_path / "live"
    live.mkdir()
    server: Issued = pki["server"]
    shutil.copy(server.cert_file, live / "tls.crt")
    shutil.copy(server.key_file, live / "tls.key")
    tls = {
        "cert_file": str(live / "tls.crt"),
        "key_file": str(live / "tls.key"),
        "reload_interval": 0.1,
    }
    with _tls_sidecar(simulator, tmp_path, tls) as side:
        async with AgentClient(side.address, tls=True, ca_file=pki["ca"].ca_file) as old:
            session = await old.create_session()
            # A 3 s answer is in flight across the rotation.
            slow = asyncio.ensure_future(old.run(session.session_id, "slow answer", timeout=30))

            renewed = pki["other"].issue("renewed-server")
            shutil.copy(renewed.key_file, live / "tls.key.new")
            shutil.copy(renewed.cert_file, live / "tls.crt.new")
            # Renamed into place, as a Kubernetes Secret's files are swapped.
            (live / "tls.key.new").replace(live / "tls.key")
            (live / "tls.crt.new").replace(live / "tls.crt")

            async def trusted_by_the_new_ca() -> bool:
                try:
                    await _health(side.address, _trusting(pki["other"]))
                except grpc.aio.AioRpcError:
                    return False
                return True

            await eventually(trusted_by_the_new_ca, timeout=10)
            result = await slow
            assert result.result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
        # A client that trusts only the old CA now fails on a new connection.
        with pytest.raises(grpc.aio.AioRpcError):
            await _health(side.address, _trusting(pki["ca"]))


# -- the sidecar's link to a tool server --------------------------------------------------


@pytest.fixture(scope="module")
def locked_tool_server(pki: dict[str, Any]) -> Iterator[ServerProcess]:
    """The orders example over mutual TLS, requiring a token as well."""
    server: Issued = pki["server"]
    with testing.tool_server(
        "toolservers.examples.orders",
        "--tls-cert",
        server.cert_file,
        "--tls-key",
        server.key_file,
        "--tls-client-ca",
        pki["ca"].ca_file,
        "--token-env",
        "ORDERS_TOKEN",
        env={"ORDERS_TOKEN": "orders-secret-1"},
    ) as tools:
        yield tools


async def _call_orders(
    address: str, credentials: grpc.ChannelCredentials
) -> tool_pb2.CallToolResponse:
    async with grpc.aio.secure_channel(address, credentials) as channel:
        stub = tool_pb2_grpc.ToolServiceStub(channel)
        response: tool_pb2.CallToolResponse = await stub.CallTool(
            tool_pb2.CallToolRequest(
                tool_name="get_order_status", arguments='{"order_id": "20250101"}'
            ),
            timeout=5,
        )
        return response


async def test_an_sdk_tool_server_requires_its_client_certificate_and_its_token(
    pki: dict[str, Any], locked_tool_server: ServerProcess
) -> None:
    address = locked_tool_server.address
    ca, client = pki["ca"], pki["client"]

    def dialing(token: str | None, cert: Issued | None) -> grpc.ChannelCredentials:
        credentials = channel_credentials(
            tls=True,
            ca_file=ca.ca_file,
            cert_file=cert.cert_file if cert else None,
            key_file=cert.key_file if cert else None,
            token=token,
        )
        assert credentials is not None
        return credentials

    response = await _call_orders(address, dialing("orders-secret-1", client))
    assert response.result.output

    with pytest.raises(grpc.aio.AioRpcError) as no_token:
        await _call_orders(address, dialing(None, client))
    assert no_token.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.aio.AioRpcError) as bad_token:
        await _call_orders(address, dialing("orders-secret-2", client))
    assert bad_token.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.aio.AioRpcError) as no_cert:
        await _call_orders(address, dialing("orders-secret-1", None))
    assert no_cert.value.code() == grpc.StatusCode.UNAVAILABLE
    # Health stays open to probes holding a certificate but no token.
    assert await _health(address, dialing(None, client)) == 1


async def test_the_sidecar_calls_a_tool_server_over_mutual_tls_with_its_token(
    pki: dict[str, Any],
    simulator: ServerProcess,
    locked_tool_server: ServerProcess,
    tmp_path: Path,
) -> None:
    client: Issued = pki["client"]
    entry = {
        "name": "orders",
        "address": locked_tool_server.address,
        "tls": {
            "ca_file": pki["ca"].ca_file,
            "cert_file": client.cert_file,
            "key_file": client.key_file,
        },
        "token_env": "ORDERS_TOKEN",
    }
    config = testing.sidecar_config(simulator.address, [entry])
    with testing.sidecar(config, tmp_path, env={"ORDERS_TOKEN": "orders-secret-1"}) as side:
        testing.wait_serving(side.address)
        async with AgentClient(side.address) as agent:
            session = await agent.create_session()
            events = [e async for e in agent.stream(session.session_id, ORDER_QUESTION)]
    finished = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
    statuses = {f.tool_name: f.status for f in finished}
    assert statuses["get_order_status"] == agent_pb2.TOOL_CALL_STATUS_OK, finished


def test_a_tool_server_token_never_travels_in_plaintext_beyond_loopback(
    simulator: ServerProcess, tmp_path: Path
) -> None:
    entry = {"name": "remote", "address": "10.1.2.3:50061", "token_env": "REMOTE_TOKEN"}
    config = testing.sidecar_config(simulator.address, [entry])
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr, pytest.raises(ProcessStartError):
        testing.sidecar(config, tmp_path, env={"REMOTE_TOKEN": "t"}, stderr=stderr)
    assert "a token travels only over TLS" in log.read_text()


async def test_with_mutual_tls_a_certificate_san_names_the_principal(
    pki: dict[str, Any], simulator: ServerProcess, tmp_path: Path
) -> None:
    server: Issued = pki["server"]
    stranger = pki["ca"].issue("stranger", client=True, uris=("spiffe://test/mallory",))
    config = testing.sidecar_config(
        simulator.address,
        [],
        server={
            "port": 0,
            "host": "0.0.0.0",
            "tls": {
                "cert_file": server.cert_file,
                "key_file": server.key_file,
                "client_ca_file": pki["ca"].ca_file,
            },
        },
        auth={"principals": [{"name": "alice", "san": "spiffe://test/alice"}]},
    )
    # TLS and authentication on every interface: starts without insecure.
    with testing.sidecar(config, tmp_path) as side:
        address = f"127.0.0.1:{side.port}"
        client: Issued = pki["client"]
        async with AgentClient(
            address,
            tls=True,
            ca_file=pki["ca"].ca_file,
            cert_file=client.cert_file,
            key_file=client.key_file,
        ) as alice:
            session = await alice.create_session(session_id="by-certificate")
            assert session.session_id == "by-certificate"
        async with AgentClient(
            address,
            tls=True,
            ca_file=pki["ca"].ca_file,
            cert_file=stranger.cert_file,
            key_file=stranger.key_file,
        ) as mallory:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await mallory.get_session("by-certificate")
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "names no principal" in (refused.value.details() or "")


@pytest.mark.parametrize("failure", ["its certificate is refused", "it refuses ours"])
async def test_a_tool_server_the_tls_handshake_fails_with_is_named_so(
    pki: dict[str, Any],
    simulator: ServerProcess,
    locked_tool_server: ServerProcess,
    tmp_path: Path,
    failure: str,
) -> None:
    # The locked tool server's certificate comes from "ca" and it requires a client
    # certificate from "ca": trusting "other" refuses its certificate; presenting none
    # makes it refuse the sidecar.
    if failure == "its certificate is refused":
        tls: dict[str, Any] = {"ca_file": pki["other"].ca_file}
    else:
        tls = {"ca_file": pki["ca"].ca_file}
    entry = {
        "name": "orders",
        "address": locked_tool_server.address,
        "tls": tls,
        "discovery_timeout": 1,
    }
    config = testing.sidecar_config(simulator.address, [entry])
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr, testing.sidecar(config, tmp_path, stderr=stderr) as side:
        testing.wait_serving(side.address)
    text = log.read_text()
    (line,) = [ln for ln in text.splitlines() if "not discovered within" in ln]
    assert "TLS handshake failed" in line, text
