"""The configuration reloads without a restart: on SIGHUP and when its file changes.

Runs in flight finish on what they started with; a reload that does not validate, or
that changes what only a restart applies, changes nothing and says why.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import orjson
import yaml

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from tests.support.stack import (
    SimControl,
    eventually,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
)


def _config_file(workdir: Path) -> Path:
    path = workdir / "sidecar.yaml"
    assert path.exists()
    return path


def _rewrite(path: Path, change: Any) -> None:
    config = yaml.safe_load(path.read_text())
    change(config)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def _occurrences(log: Path, text: str) -> int:
    return log.read_text().count(text)


async def _log_has(log: Path, text: str, count: int = 1) -> None:
    async def seen() -> bool:
        return _occurrences(log, text) >= count

    await eventually(seen, timeout=10)


def _system_prompts(stats: dict[str, Any]) -> list[str]:
    return [r["messages"][0]["content"] for r in stats["recent_requests"]]


async def test_sighup_reloads_profiles_and_a_run_in_flight_finishes_on_the_old_ones(
    tmp_path: Path,
) -> None:
    with simulator() as sim, scripted_toolserver() as tools:
        audit = tmp_path / "audit.jsonl"
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            profiles={"default": {"system_prompt": "Prompt one."}},
            server={"port": 0, "grace_period": 2, "config_watch_interval": None},
            auth={"audit": {"path": str(audit)}},
        )
        log = tmp_path / "stderr.log"
        with log.open("wb") as stderr, sidecar(config, tmp_path, stderr=stderr) as side:
            path = _config_file(tmp_path)
            control = SimControl(sim.address)
            async with AgentClient(side.address) as client:
                session = await client.create_session()
                stream = client.stream(session.session_id, "three slow reads", timeout=30)
                async for event in stream:
                    if event.HasField("tool_call_started"):
                        break  # the run is in its tools: its next model call is ahead

                def change(c: dict[str, Any]) -> None:
                    c["profiles"]["default"]["system_prompt"] = "Prompt two."
                    c["profiles"]["default"]["tools"] = ["slow_read"]
                    c["profiles"]["narrow"] = {"system_prompt": "Narrow."}

                _rewrite(path, change)
                side.send_signal(signal.SIGHUP)
                await _log_has(log, "configuration reloaded (SIGHUP): profiles")
                events = [e async for e in stream]
                assert events[-1].run_finished.stop_reason == agent_pb2.STOP_REASON_ANSWERED
                in_flight = _system_prompts(await control.stats())
                assert in_flight[-1] == "Prompt one."  # its last call: after the reload

                await control.reset()
                after = await client.create_session()
                await client.run(after.session_id, "two reads", timeout=20)
                stats = await control.stats()
                assert set(_system_prompts(stats)) == {"Prompt two."}
                tools_sent = {t["function"]["name"] for t in stats["last_request"]["tools"]}
                assert tools_sent == {"slow_read"}
                narrow = await client.create_session("narrow")  # a new profile
                assert narrow.profile == "narrow"
        lines = [orjson.loads(line) for line in audit.read_bytes().splitlines()]
        reloaded = [ln for ln in lines if ln["event"] == "config_reloaded"]
        assert reloaded and reloaded[0]["sections"] == ["profiles"]


async def test_a_reload_that_does_not_validate_or_needs_a_restart_changes_nothing(
    tmp_path: Path,
) -> None:
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            profiles={"default": {"system_prompt": "Kept."}},
            server={"port": 0, "grace_period": 2, "config_watch_interval": 0.1},
            telemetry={"metrics": {"enabled": True, "port": 0}},
        )
        log = tmp_path / "stderr.log"
        with log.open("wb") as stderr, sidecar(config, tmp_path, stderr=stderr) as side:
            path = _config_file(tmp_path)
            good = path.read_text()
            control = SimControl(sim.address)

            async def prompts_after_a_run() -> set[str]:
                await control.reset()
                async with AgentClient(side.address) as client:
                    session = await client.create_session()
                    await client.run(session.session_id, "two reads", timeout=20)
                return set(_system_prompts(await control.stats()))

            # A typo: refused by validation, named in the log.
            _rewrite(path, lambda c: c["profiles"]["default"].update(max_stepz=3))
            await _log_has(log, "configuration not reloaded (the file changed)")
            assert "max_stepz" in log.read_text()
            assert await prompts_after_a_run() == {"Kept."}

            # Not YAML at all.
            path.write_text("profiles: [unclosed\n")
            await _log_has(log, "configuration not reloaded", count=2)
            assert await prompts_after_a_run() == {"Kept."}

            # A good profile change alongside one that needs a restart: none of it applies.
            path.write_text(good)

            def both(c: dict[str, Any]) -> None:
                c["profiles"]["default"]["system_prompt"] = "Changed."
                c["server"]["max_message_bytes"] = 1 << 20

            _rewrite(path, both)
            await _log_has(log, "take effect only at a restart: server")
            assert await prompts_after_a_run() == {"Kept."}

            # Put right, the file is picked up by the watch alone.
            path.write_text(good)
            _rewrite(path, lambda c: c["profiles"]["default"].update(system_prompt="Fixed."))
            await _log_has(log, "configuration reloaded (the file changed): profiles")
            assert await prompts_after_a_run() == {"Fixed."}
            assert side.popen.poll() is None  # still serving throughout
