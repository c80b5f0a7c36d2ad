"""Principals named by a client certificate's SAN on the HTTP listeners, as on the gRPC
port: the MCP endpoint and A2A's HTTP bindings, under ``server.tls`` with a client CA,
used by outside clients (the ``mcp`` SDK's, the ``a2a-sdk``'s) that present a certificate
and no token. A certificate the CA issued whose SANs name no principal is refused 401."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types import a2a_pb2
from google.protobuf import json_format
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from sidecar.testing.certs import Issued, TestCA
from tests.support.mcp_stack import edge
from tests.support.stack import sidecar, sidecar_config, simulator


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    ca = TestCA(tmp_path_factory.mktemp("pki") / "ca")
    return {
        "ca": ca,
        "server": ca.issue("server"),
        "svc": ca.issue("svc", client=True, uris=("spiffe://test/svc",)),
        "stranger": ca.issue("stranger", client=True, uris=("spiffe://test/stranger",)),
    }


@pytest.fixture(scope="module")
def listeners(
    pki: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    served = pki["server"]
    with simulator() as sim:
        config = sidecar_config(
            sim,
            [],
            mcp_servers=[edge(allow_tools=["whoami"])],
            server={
                "port": 0,
                "grace_period": 1,
                "tls": {
                    "cert_file": served.cert_file,
                    "key_file": served.key_file,
                    "client_ca_file": pki["ca"].ca_file,
                },
            },
            mcp={"port": 0},
            a2a={"skills": [{"profile": "default"}], "grpc": False, "http": {"port": 0}},
            auth={"principals": [{"name": "svc", "san": "spiffe://test/svc"}]},
        )
        with sidecar(config, tmp_path_factory.mktemp("side"), ready=False) as side:
            yield {"mcp": side.announced("mcp on "), "a2a": side.announced("a2a http on ")}


def _context(ca: TestCA, client: Issued) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca.ca_file)
    context.load_cert_chain(client.cert_file, client.key_file)
    return context


async def test_an_mcp_host_is_its_certificates_principal(
    listeners: dict[str, str], pki: dict[str, Any]
) -> None:
    verify = _context(pki["ca"], pki["svc"])
    async with httpx2.AsyncClient(verify=verify, timeout=30) as http:
        transport = streamable_http_client(listeners["mcp"], http_client=http)
        async with Client(transport, cache=None) as client:
            async with asyncio.timeout(30):  # the bridged server's tools are being listed
                while "whoami" not in {t.name for t in (await client.list_tools()).tools}:  # noqa: ASYNC110
                    await asyncio.sleep(0.1)
            who = await client.call_tool("whoami", {})
    stranger = _context(pki["ca"], pki["stranger"])
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with httpx2.AsyncClient(verify=stranger, timeout=30) as http:
        refused = await http.post(listeners["mcp"], json=listing)
    assert '"dev.agentsidecar/principal": "svc"' in who.content[0].text
    assert refused.status_code == 401


async def test_an_a2a_client_is_its_certificates_principal(
    listeners: dict[str, str], pki: dict[str, Any]
) -> None:
    base = f"https://{listeners['a2a']}"
    verify = _context(pki["ca"], pki["svc"])
    async with httpx.AsyncClient(verify=verify, timeout=30) as http:
        fetched = await http.get(f"{base}/.well-known/agent-card.json")
        card = json_format.ParseDict(
            fetched.json(), a2a_pb2.AgentCard(), ignore_unknown_fields=True
        )
        config = ClientConfig(
            streaming=False, httpx_client=http, supported_protocol_bindings=["JSONRPC"]
        )
        client = ClientFactory(config).create(card)
        listed = await client.list_tasks(a2a_pb2.ListTasksRequest())
    stranger = _context(pki["ca"], pki["stranger"])
    async with httpx.AsyncClient(verify=stranger, timeout=30) as http:
        request = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
        refused = await http.post(card.supported_interfaces[0].url, json=request)
    assert list(listed.tasks) == []
    assert refused.status_code == 401
