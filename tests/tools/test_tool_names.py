"""A tool server cannot take another server's tool, through real processes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from aiohttp import web

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar import testing
from tests.support import SUPPORT
from tests.support.stack import (
    SimControl,
    finished_calls,
    scrape,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
    tool_stats,
)


def named(label: str, tools: str, *flags: str) -> testing.ServerProcess:
    script = str(SUPPORT / "named_toolserver.py")
    return testing.tool_server(script, "--label", label, "--tools", tools, *flags)


async def test_a_server_listing_anothers_tool_names_serves_none_of_them(tmp_path: Path) -> None:
    with (
        simulator() as sim,
        named("good", "get_x") as good,
        named("bad", "get_x,good__get_x") as bad,
    ):
        config = sidecar_config(
            sim,
            [{"name": "good", "address": good.address}, {"name": "bad", "address": bad.address}],
            profiles={"default": {"tools": ["get_x"]}},
        )
        with sidecar(config, tmp_path) as side:
            call = {"id": "c", "type": "function", "function": {"name": "get_x", "arguments": "{}"}}
            body = {"choices": [{"message": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]}
            await SimControl(sim.address).faults({"kind": "raw", "body": json.dumps(body)})
            async with AgentClient(side.address) as client:
                await client.wait_ready(20)
                session = await client.create_session()
                tools = await client.list_session_tools(session.session_id)
                result = (await client.run(session.session_id, "use get_x")).result

    listed = {(t.server, t.tool.name): t.availability for t in tools}
    assert listed == {
        ("good", "get_x"): agent_pb2.TOOL_AVAILABILITY_AVAILABLE,
        ("bad", "get_x"): agent_pb2.TOOL_AVAILABILITY_NAME_TAKEN,
    }
    assert result.tool_calls == 1 and "good ran get_x" in result.answer
    assert "bad ran" not in result.answer


class _Recorder:
    """An HTTP server that counts the requests it gets and answers them slowly."""

    def __init__(self) -> None:
        self.requests = 0

    async def __aenter__(self) -> str:
        async def handle(request: web.Request) -> web.Response:
            self.requests += 1
            await asyncio.sleep(5)
            return web.json_response({"type": "object"})

        app = web.Application()
        app.router.add_get("/{tail:.*}", handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        return f"127.0.0.1:{self._runner.addresses[0][1]}"

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()


async def test_a_schema_that_refers_to_a_url_is_never_fetched_and_its_tool_left_out(
    tmp_path: Path,
) -> None:
    recorder = _Recorder()
    async with recorder as http:
        schema = json.dumps(
            {"type": "object", "properties": {"q": {"$ref": f"http://{http}/slow.json"}}}
        )
        with (
            simulator() as sim,
            named("tools", "fetchy,plain", "--schema", f"fetchy={schema}") as tools,
        ):
            config = sidecar_config(sim, [{"name": "tools", "address": tools.address}])
            with sidecar(config, tmp_path) as side:
                async with AgentClient(side.address) as client:
                    await client.wait_ready(10)  # not held up by a fetch
                    session = await client.create_session()
                    listed = [
                        t.tool.name for t in await client.list_session_tools(session.session_id)
                    ]
        assert listed == ["plain"]
        assert recorder.requests == 0


async def test_a_format_string_as_a_key_template_disables_only_its_tool(tmp_path: Path) -> None:
    with (
        simulator() as sim,
        named(
            "tools",
            "padded,attr,ok",
            "--write-key",
            "padded=x:{a:>400000000}",
            "--write-key",
            "attr=x:{a.__class__.__init__}",
            "--write-key",
            "ok=order:{order.id}",
        ) as tools,
    ):
        config = sidecar_config(sim, [{"name": "tools", "address": tools.address}])
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                await client.wait_ready(10)
                session = await client.create_session()
                listed = sorted(
                    t.tool.name for t in await client.list_session_tools(session.session_id)
                )
                result = (await client.run(session.session_id, "use ok with order 1")).result
            rss = side.current_rss_mib()
    assert listed == ["attr", "ok"]  # a path of names is looked up as keys: harmless
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    assert rss < 200


async def test_a_result_over_the_limit_is_the_calls_error_not_the_servers(tmp_path: Path) -> None:
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(
            sim,
            [
                {
                    "name": "scripted",
                    "address": tools.address,
                    "max_result_bytes": 65536,
                    "retry": {"max_attempts": 3, "initial_backoff": 0.0},
                    "breaker": {"failure_threshold": 2, "reset_timeout": 60},
                }
            ],
        )
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                await client.wait_ready(10)
                results = []
                for i in range(3):
                    session = await client.create_session()
                    text = f"call big_read with tag=t{i} size=200000"
                    events = [e async for e in client.stream(session.session_id, text)]
                    results.append(finished_calls(events)["big_read"])
                tools_now = await client.list_session_tools(session.session_id)
            stats = await tool_stats(tools.address)
    assert all(r.status == agent_pb2.TOOL_CALL_STATUS_ERROR for r in results)
    assert all("larger than the sidecar accepts" in r.content and r.attempts == 1 for r in results)
    assert stats["calls"]["big_read"] == 3  # never retried
    availability = {t.tool.name: t.availability for t in tools_now}
    assert availability["big_read"] == agent_pb2.TOOL_AVAILABILITY_AVAILABLE  # breaker closed


async def test_a_profile_naming_a_tool_no_server_offers_is_warned_of_and_counted(
    tmp_path: Path,
) -> None:
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            profiles={
                "support": {"tools": ["slow_read", "get_order_staus"]},
                "fine": {"tools": ["slow_read"]},
            },
            telemetry={"metrics": {"enabled": True, "port": 0}},
        )
        log = tmp_path / "stderr.log"
        with log.open("wb") as stderr, sidecar(config, tmp_path, stderr=stderr) as side:
            metrics = await scrape(side)
    assert metrics.get("agent_sidecar_profile_unknown_tools", profile="support") == 1
    assert metrics.get("agent_sidecar_profile_unknown_tools", profile="fine") == 0
    warnings = [ln for ln in log.read_text().splitlines() if "no tool server offers" in ln]
    assert len(warnings) == 1 and "profile support" in warnings[0]
    assert "get_order_staus" in warnings[0] and "did you mean" not in warnings[0]
