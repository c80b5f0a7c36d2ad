"""The MCP endpoint serves only what its profile's ``tools`` list allows: a host neither
sees nor calls a tool beyond it, through a real sidecar and the ``mcp`` SDK's client."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from sidecar import testing
from tests.support.mcp_stack import edge
from tests.support.stack import sidecar, sidecar_config, simulator


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("profile-tools")
    with simulator() as sim, testing.tool_server("toolservers.examples.orders") as orders:
        config = sidecar_config(
            sim,
            [{"name": "orders", "address": orders.address}],
            mcp_servers=[edge(allow_tools=["echo"])],
            profiles={"default": {"tools": ["echo"]}},
            mcp={"port": 0},
        )
        with sidecar(config, work) as side:
            yield side.announced("mcp on ")


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_host_cannot_call_a_tool_its_profile_does_not_allow(url: str, mode: str) -> None:
    async with (
        httpx2.AsyncClient(timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, cache=None) as client,
    ):
        names = {t.name for t in (await client.list_tools()).tools}
        echoed = await client.call_tool("echo", {"text": "allowed"})
        refused: object
        try:
            refused = await client.call_tool("get_order_status", {"order_id": "20250101"})
        except MCPError as exc:
            refused = exc
    assert names == {"echo"}
    assert echoed.content[0].text == "echo: allowed"
    # The orders server is up and serves the tool, but the profile does not allow it.
    assert isinstance(refused, MCPError) or refused.is_error  # type: ignore[attr-defined]
    assert "delivered" not in str(refused)
