"""TLS on both sides of MCP, through real processes.

The bridge reaches a Streamable HTTP MCP server (the project's edge server) over HTTPS
with a test CA, and refuses one whose certificate it cannot verify: that server is not
serving, the log names the TLS failure, and the sidecar serves on. The sidecar's own MCP
endpoint under ``server.tls`` is used by the ``mcp`` SDK's client over HTTPS with the CA
and a bearer token; plain HTTP, or HTTPS without the CA, gets nowhere.
"""

from __future__ import annotations

import hashlib
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx2
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agentsidecar.client import AgentClient
from agentsidecar.tls import channel_credentials
from agentsidecar.v1 import agent_pb2
from sidecar import testing
from sidecar.testing import ServerProcess
from sidecar.testing.certs import TestCA
from tests.support.mcp_stack import EDGE_SERVER, edge, script_calls, streamed
from tests.support.stack import eventually, finished_calls, sidecar, sidecar_config, simulator

TOKEN = "ide-token-0123456789abcdef"
SERVING = health_pb2.HealthCheckResponse.SERVING


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("pki")
    ca, other = TestCA(root / "ca"), TestCA(root / "other", "other-ca")
    return {"ca": ca, "other": other, "server": ca.issue("server")}


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerProcess]:
    with simulator() as process:
        yield process


@pytest.fixture(scope="module")
def https_edge(pki: dict[str, Any]) -> Iterator[str]:
    """The edge MCP server on HTTPS, its certificate issued by the test CA."""
    served = pki["server"]
    args = [str(EDGE_SERVER), "--http", "--tls-cert", served.cert_file]
    process = testing.start_process([*args, "--tls-key", served.key_file])
    try:
        yield f"https://{process.address}/mcp"
    finally:
        process.stop()


def _trusting(ca: TestCA) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=ca.ca_file)


def _remote(name: str, url: str, **settings: Any) -> dict[str, Any]:
    return {
        "name": name,
        "url": url,
        "approval": "never",
        "discovery_timeout": 3,
        "restart_backoff": 0.2,
        "max_restart_backoff": 1.0,
        **settings,
    }


async def test_the_bridge_calls_an_https_mcp_server_it_trusts_and_refuses_one_it_cannot_verify(
    sim: ServerProcess, pki: dict[str, Any], https_edge: str, tmp_path: Path
) -> None:
    # The refused servers come first: a server that never lists offers no name, so the
    # trusted one owns the tools the three share.
    servers = [
        _remote("unverified", https_edge),  # the system's CAs: the test CA is not among them
        _remote("wrong_ca", https_edge, tls={"ca_file": pki["other"].ca_file}),
        _remote("trusted", https_edge, tls={"ca_file": pki["ca"].ca_file}),
    ]
    config = sidecar_config(sim, [], mcp_servers=servers)
    log = tmp_path / "sidecar.log"
    with log.open("wb") as stderr, sidecar(config, tmp_path, stderr=stderr) as side:

        async def refused() -> bool:
            text = log.read_text(errors="replace")
            return all(f"MCP server {n} is not serving" in text for n in ("unverified", "wrong_ca"))

        await eventually(refused, timeout=20)
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            tools = {t.tool.name: t for t in await client.list_session_tools(session.session_id)}
            await script_calls(sim, ("echo", {"text": "over https"}), ("whoami", {}))
            calls = finished_calls(await streamed(client, session.session_id))
        with grpc.insecure_channel(side.address) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
    text = log.read_text(errors="replace")
    for name in ("unverified", "wrong_ca"):
        line = next(x for x in text.splitlines() if f"MCP server {name} is not serving" in x)
        assert "CERTIFICATE_VERIFY_FAILED" in line or "certificate verify failed" in line, line
    assert "MCP server trusted is not serving" not in text
    assert {t.server for t in tools.values()} == {"trusted"}
    assert tools["echo"].availability == agent_pb2.TOOL_AVAILABILITY_AVAILABLE
    assert calls["echo"].status == agent_pb2.TOOL_CALL_STATUS_OK
    assert calls["echo"].content == "echo: over https"
    assert calls["whoami"].status == agent_pb2.TOOL_CALL_STATUS_OK
    assert health.status == SERVING


@pytest.fixture(scope="module")
def tls_endpoint(
    sim: ServerProcess, pki: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A sidecar under ``server.tls`` whose MCP endpoint offers a bridged edge server's
    tools to a principal with a token."""
    served = pki["server"]
    work = tmp_path_factory.mktemp("endpoint")
    config = sidecar_config(
        sim,
        [],
        mcp_servers=[edge(allow_tools=["echo", "whoami"])],
        server={
            "port": 0,
            "grace_period": 1,
            "tls": {"cert_file": served.cert_file, "key_file": served.key_file},
        },
        mcp={"port": 0},
        auth={
            "principals": [
                {
                    "name": "ide",
                    "token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest(),
                    "profiles": ["default"],
                }
            ]
        },
    )
    with sidecar(config, work, ready=False) as side:
        # The gRPC port speaks TLS too: its health is asked over it.
        credentials = channel_credentials(tls=True, ca_file=pki["ca"].ca_file)
        assert credentials is not None
        with grpc.secure_channel(side.address, credentials) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            grpc.channel_ready_future(channel).result(timeout=30)
            deadline = time.monotonic() + 30
            while stub.Check(health_pb2.HealthCheckRequest(), timeout=30).status != SERVING:
                assert time.monotonic() < deadline, "the sidecar did not become SERVING"
                time.sleep(0.05)  # its bridged server's tools are being listed
        yield side.announced("mcp on ")


async def test_an_mcp_host_calls_a_tool_over_https_with_the_ca_and_its_token(
    tls_endpoint: str, pki: dict[str, Any]
) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient(headers=headers, verify=_trusting(pki["ca"]), timeout=30) as http:
        transport = streamable_http_client(tls_endpoint, http_client=http)
        async with Client(transport, cache=None) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            echoed = await client.call_tool("echo", {"text": "through tls"})
            who = await client.call_tool("whoami", {})
    assert tls_endpoint.startswith("https://127.0.0.1:")
    assert {"echo", "whoami"} <= tools
    assert not echoed.is_error and echoed.content[0].text == "echo: through tls"
    assert '"dev.agentsidecar/principal": "ide"' in who.content[0].text


async def test_the_tls_endpoint_refuses_plain_http_an_unknown_ca_and_a_missing_token(
    tls_endpoint: str, pki: dict[str, Any]
) -> None:
    plain = tls_endpoint.replace("https://", "http://", 1)
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient(headers=headers, timeout=10) as http:
        with pytest.raises(httpx2.TransportError):
            await http.post(plain, json=listing)
    async with httpx2.AsyncClient(headers=headers, verify=_trusting(pki["other"])) as http:
        with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await http.post(tls_endpoint, json=listing)
    async with httpx2.AsyncClient(verify=_trusting(pki["ca"])) as http:
        missing = await http.post(tls_endpoint, json=listing)
    assert missing.status_code == 401
