"""Whatever a host sends the MCP endpoint, it gets a clear refusal or an answer, never a
server error, and the endpoint keeps serving: property-tested over malformed bodies and
JSON-RPC messages with wrong methods, ids and params, through a real sidecar."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar import testing
from tests.support.http_limits import check_bounded, half_post
from tests.support.mcp_stack import edge
from tests.support.stack import sidecar, sidecar_config, simulator

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("bad-requests")
    with simulator() as sim, testing.tool_server("toolservers.examples.orders") as orders:
        config = sidecar_config(
            sim,
            [{"name": "orders", "address": orders.address}],
            mcp_servers=[edge(allow_tools=["echo"])],
            mcp={"port": 0, "max_body_bytes": 65_536},
        )
        with sidecar(config, work) as side:
            yield side.announced("mcp on ")


_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3)
    ),
    max_leaves=12,
)
_message = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
        "id": st.none()
        | st.integers()
        | st.text(max_size=10)
        | st.lists(st.integers(), max_size=2),
        "method": st.sampled_from(
            ["tools/call", "tools/list", "initialize", "server/discover", "resources/list", "x"]
        )
        | st.text(max_size=20),
        "params": _value
        | st.fixed_dictionaries(
            {
                "name": st.sampled_from(["echo", "get_order_status", "nope", ""])
                | st.text(max_size=10)
            },
            optional={"arguments": _value, "_meta": _value},
        ),
    },
)
_body = st.one_of(
    _message.map(lambda m: json.dumps(m).encode()),
    st.binary(max_size=200),
    st.just(b"{" * 5000),
    st.just(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "x" * 70_000}},
            }
        ).encode()
    ),
)


def _post(url: str, body: bytes, headers: dict[str, str]) -> httpx2.Response:
    with httpx2.Client(timeout=30) as http:
        return http.post(url, content=body, headers=headers)


@pytest.mark.property
@given(body=_body, version=st.sampled_from(["2026-07-28", "2025-11-25", "bogus", None]))
def test_a_malformed_request_is_refused_clearly_and_the_endpoint_keeps_serving(
    url: str, body: bytes, version: str | None
) -> None:
    headers: dict[str, Any] = dict(HEADERS)
    if version is not None:
        headers["MCP-Protocol-Version"] = version
    response = _post(url, body, headers)
    assert response.status_code < 500, response.text[:300]
    listed = _post(
        url,
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
        ).encode(),
        HEADERS,
    )
    assert listed.status_code == 200


def test_a_half_sent_request_is_closed_and_connections_are_capped(tmp_path: Path) -> None:
    cap = 8
    with simulator() as sim:
        mcp = {"port": 0, "read_timeout": 0.5, "max_connections": cap}
        with sidecar(sidecar_config(sim, [], mcp=mcp), tmp_path) as side:
            url = side.announced("mcp on ")
            host, port = url.removeprefix("http://").split("/", 1)[0].rsplit(":", 1)

            def serves() -> bool:
                ping = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
                return _post(url, ping, HEADERS).status_code < 500

            check_bounded(
                host,
                int(port),
                half_request=half_post("/mcp"),
                cap=cap,
                serves=serves,
            )
