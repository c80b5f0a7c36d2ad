"""A new version of a tool server takes a weighted share of its tools' calls, and the
share changes with a reload, without a restart."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from agentsidecar.client import AgentClient
from sidecar.config import parse_config
from sidecar.errors import ConfigError
from tests.support.stack import (
    eventually,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
    tool_stats,
)


def _logged(log: Path, text: str) -> bool:
    return text in log.read_text()


async def _slow_reads(address: str) -> int:
    return int((await tool_stats(address))["calls"].get("slow_read", 0))


async def test_a_version_takes_its_weight_of_the_calls_and_a_reload_moves_it(
    tmp_path: Path,
) -> None:
    with simulator() as sim, scripted_toolserver() as v1, scripted_toolserver() as v2:
        audit = tmp_path / "audit.jsonl"
        config = sidecar_config(
            sim,
            [
                {"name": "scripted", "address": v1.address, "weight": 3},
                {"name": "scripted-v2", "address": v2.address, "version_of": "scripted"},
            ],
            server={"port": 0, "grace_period": 2, "config_watch_interval": None},
            auth={"audit": {"path": str(audit)}},
        )
        log = tmp_path / "stderr.log"
        with log.open("wb") as stderr, sidecar(config, tmp_path, stderr=stderr) as side:
            async with AgentClient(side.address) as client:
                session = await client.create_session()
                # The version adds no tools of its own: one slow_read, from "scripted".
                listed = [t for t in await client.list_session_tools(session.session_id)]
                assert [t.server for t in listed if t.tool.name == "slow_read"] == ["scripted"]
                for _ in range(25):
                    await client.run(session.session_id, "two reads", timeout=20)
                first, second = await _slow_reads(v1.address), await _slow_reads(v2.address)
                assert first + second == 50
                # 50 calls at 3:1, each share at least 5 with probability above 1 - 1e-4.
                assert second >= 5 and first >= 5 and first > second, (first, second)

                path = tmp_path / "sidecar.yaml"
                document = yaml.safe_load(path.read_text())
                document["tool_servers"][0]["weight"] = 0  # all calls to the new version
                path.write_text(yaml.safe_dump(document, sort_keys=False))
                side.send_signal(signal.SIGHUP)

                async def reloaded() -> bool:
                    return _logged(log, "configuration reloaded (SIGHUP): tool_servers")

                await eventually(reloaded, timeout=10)
                before = await _slow_reads(v1.address)
                for _ in range(5):
                    await client.run(session.session_id, "two reads", timeout=20)
                assert await _slow_reads(v1.address) == before
                assert await _slow_reads(v2.address) == second + 10
        lines = [orjson.loads(line) for line in audit.read_bytes().splitlines()]
        servers = {ln["server"] for ln in lines if ln["event"] == "tool_call"}
        assert servers == {"scripted", "scripted-v2"}


@pytest.mark.parametrize(
    "servers",
    [
        [{"name": "a", "address": "x:1", "version_of": "missing"}],
        [{"name": "a", "address": "x:1", "version_of": "a"}],
        [
            {"name": "a", "address": "x:1"},
            {"name": "b", "address": "x:2", "version_of": "a"},
            {"name": "c", "address": "x:3", "version_of": "b"},
        ],
    ],
)
def test_a_version_must_be_of_another_original_server(servers: list[dict[str, Any]]) -> None:
    with pytest.raises(ConfigError, match="version_of"):
        parse_config({"tool_servers": servers})
