"""The MCP endpoint's tool list as hosts see it, through a real sidecar: complete from the
first request (the endpoint answers once discovery is over), and announced when it
changes (a bridged server's ``list_changed`` reaches a 2025 host on its session; the
2026-07-28 ``subscriptions/listen`` side is the conformance suite's)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.stack import sidecar, sidecar_config, simulator

FIXTURES = str(Path(__file__).parents[1] / "support" / "mcp_conformance_fixtures.py")


async def test_the_first_list_is_complete_and_a_change_is_announced(tmp_path: Path) -> None:
    servers = [
        {
            "name": "fixtures",
            "command": sys.executable,
            "args": [FIXTURES],
            "approval": "never",
            "protocol": "legacy",  # its list_changed arrives as it is sent
        }
    ]
    changed = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    with simulator() as sim:
        config = sidecar_config(sim, [], mcp_servers=servers, mcp={"port": 0})
        with (tmp_path / "log").open("wb") as log, sidecar(config, tmp_path, stderr=log) as side:
            url = side.announced("mcp on ")
            async with (
                httpx2.AsyncClient(timeout=30) as http,
                Client(
                    streamable_http_client(url, http_client=http),
                    mode="legacy",
                    cache=None,
                    message_handler=on_message,
                ) as client,
            ):
                # Asked at once: the bridged server's tools are there, not an empty list.
                first = {t.name for t in (await client.list_tools()).tools}
                declared = client.server_capabilities
                await client.call_tool("test_trigger_tool_change", {})
                # Before the bridge's scheduled re-listing (health_interval) would find it.
                await asyncio.wait_for(changed.wait(), timeout=5)
                after = {t.name for t in (await client.list_tools()).tools}
    assert "test_simple_text" in first and "test_trigger_tool_change" in first
    assert declared is not None and declared.tools is not None and declared.tools.list_changed
    assert len(after - first) == 1 and next(iter(after - first)).startswith("test_added_tool")
