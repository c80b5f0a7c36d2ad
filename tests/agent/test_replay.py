"""Record, replay and serve back, through real processes.

A sidecar on the LLM simulator and the scripted tool server records its turns; the
recording is exported per session, replayed with ``agent-sidecar replay`` against the
same configuration (it passes) and against another model (the differences are reported
and it exits 1), and served back by the simulator to a sidecar whose answers are then the
recorded ones. The tool server sees each call once: a replay answers from the recording.
Bad input (a corrupt, foreign or newer recording, a configuration that does not match)
gets a clear message and exit 2, never a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from agentsidecar.client import AgentClient
from sidecar import testing
from sidecar.testing import ServerProcess
from tests.support.stack import (
    MODEL,
    TEST_MODELS,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
    tool_stats,
)

PRICES = {MODEL: {"prompt": 1.0, "completion": 2.0}}
INPUTS = ("two reads", "hello there", "conflicting reservations")


@pytest.fixture(scope="module")
def tools() -> Iterator[ServerProcess]:
    with scripted_toolserver() as server:
        yield server


async def _tool_calls(address: str) -> dict[str, int]:
    """The calls the scripted tool server ran, but those asking it for this."""
    calls: dict[str, int] = (await tool_stats(address))["calls"]
    return {name: count for name, count in calls.items() if name != "stats"}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sidecar", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "GROQ_API_KEY": ""},
        check=False,
    )


def _config(sim: ServerProcess, tools: ServerProcess, tmp_path: Path, **profile: Any) -> Any:
    return sidecar_config(
        sim,
        [{"name": "scripted", "address": tools.address}],
        profiles={"default": {"record": 1.0, **profile}},
        recording={"path": str(tmp_path / "recordings")},
        prices=PRICES,
    )


def _write(config: Any, path: Path) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


async def _record(
    sim: ServerProcess, tools: ServerProcess, tmp_path: Path
) -> tuple[Any, str, list[str]]:
    """Run INPUTS in one session of a recording sidecar; its config, session, answers."""
    config = _config(sim, tools, tmp_path)
    with sidecar(config, tmp_path / "live") as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            answers = [
                (await client.run(session.session_id, text, timeout=20)).result.answer
                for text in INPUTS
            ]
            other = await client.create_session()
            await client.run(other.session_id, "hello from another session", timeout=20)
    return config, session.session_id, answers


async def test_recorded_turns_replay_the_same_on_the_same_configuration_and_differ_on_another(
    tools: ServerProcess, tmp_path: Path
) -> None:
    with simulator() as sim:
        config, session_id, answers = await _record(sim, tools, tmp_path)
        calls_after_live = await _tool_calls(tools.address)
        export = tmp_path / "session.jsonl"
        exported = _cli(
            "record", "export", "--dir", config["recording"]["path"],
            "--session", session_id, "-o", str(export), cwd=tmp_path,
        )  # fmt: skip
        assert exported.returncode == 0, exported.stderr
        turns = testing.recorded_turns(export)
        assert [t.input for t in turns] == list(INPUTS)
        assert [t.answer for t in turns] == answers
        first = turns[0]
        assert [c.name for c in first.calls] == ["slow_read", "slow_read"]
        assert {c.content for c in first.calls} == {"read x", "read y"}
        assert first.cost_usd is not None and first.cost_usd > 0

        same = _write(config, tmp_path / "same.yaml")
        report = tmp_path / "same.json"
        replayed = _cli(
            "replay", str(export), "--config", str(same), "--json", str(report), cwd=tmp_path
        )
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert "verdict: pass" in replayed.stdout
        document = json.loads(report.read_text())
        assert document["summary"]["same_tool_calls"] == 1.0
        assert document["summary"]["same_answers"] == 1.0
        assert [t["same_tool_calls"] for t in document["turns"]] == [True, True, True]
        # Every tool call of the replay was answered from the recording.
        assert await _tool_calls(tools.address) == calls_after_live

    # Another model: a simulator without the scripted rules plans on its own.
    with testing.simulator(models=TEST_MODELS) as planner:
        other = sidecar_config(
            planner, [{"name": "scripted", "address": tools.address}], prices=PRICES
        )
        changed = _write(other, tmp_path / "changed.yaml")
        report = tmp_path / "changed.json"
        replayed = _cli(
            "replay", str(export), "--config", str(changed), "--json", str(report), cwd=tmp_path
        )
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "REGRESSIONS" in replayed.stdout and "min_same_tool_calls" in replayed.stdout
    assert "turn 1 tool calls: was" in replayed.stdout
    document = json.loads(report.read_text())
    assert document["summary"]["passed"] is False
    assert document["turns"][0]["same_tool_calls"] is False
    assert document["turns"][0]["recorded_calls"] == [
        'slow_read({"ms":1,"tag":"x"})',
        'slow_read({"ms":1,"tag":"y"})',
    ]
    assert await _tool_calls(tools.address) == calls_after_live


async def test_a_recording_served_by_the_simulator_answers_as_the_model_did(
    tools: ServerProcess, tmp_path: Path
) -> None:
    with simulator() as sim:
        _, session_id, answers = await _record(sim, tools, tmp_path)
    export = tmp_path / "session.jsonl"
    assert _cli(
        "record", "export", "--config", str(tmp_path / "live" / "sidecar.yaml"),
        "--session", session_id, "-o", str(export), cwd=tmp_path,
    ).returncode == 0  # fmt: skip
    turns = testing.recorded_turns(export)
    # No scenario: what the simulator says now comes from the recording alone.
    with testing.simulator(recording=export, models=TEST_MODELS) as served:
        served_config = sidecar_config(served, [{"name": "scripted", "address": tools.address}])
        with sidecar(served_config, tmp_path / "served") as side:
            async with AgentClient(side.address) as client:
                session = await client.create_session()
                for turn in turns:
                    result = await client.run(session.session_id, turn.input, timeout=20)
                    assert result.result.answer == turn.answer
                    assert result.result.tool_calls == len(turn.calls)
    assert [t.answer for t in turns] == answers


def _recording_line(**changes: Any) -> bytes:
    line: dict[str, Any] = {
        "format": "agent-sidecar-recording",
        "version": 1,
        "run_id": "r1",
        "session_id": "s1",
        "profile": "default",
        "started_at": 1.0,
        "duration": 0.01,
        "input": "hello",
        "history": 1,
        "messages": [],
        "exchanges": [],
        "tool_calls": [],
        "answer": "hi",
        "stop_reason": "ANSWERED",
        "usage": {},
    }
    line.update(changes)
    return orjson.dumps({k: v for k, v in line.items() if v is not None}) + b"\n"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json\n", "not JSON"),
        (b'{"hello": "world"}\n', "not an agent-sidecar recording"),
        (_recording_line(version=2), "format version 2, newer than this agent-sidecar reads (1)"),
        (_recording_line(input=None), "the field 'input' is missing"),
        (_recording_line(stop_reason="EXPLODED"), "unknown stop_reason"),
    ],
)
def test_a_recording_that_cannot_be_read_is_refused_with_its_line_named(
    tmp_path: Path, content: bytes, message: str
) -> None:
    recording = tmp_path / "bad.jsonl"
    recording.write_bytes(_recording_line() + content)
    config = _write({"profiles": {"default": {}}}, tmp_path / "config.yaml")
    replayed = _cli("replay", str(recording), "--config", str(config), cwd=tmp_path)
    assert replayed.returncode == 2
    assert f"{recording}:2: " in replayed.stderr and message in replayed.stderr
    assert "Traceback" not in replayed.stderr
    exported = _cli("record", "export", "--dir", str(recording), cwd=tmp_path)
    assert exported.returncode == 2 and message in exported.stderr
    assert "Traceback" not in exported.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ((), "profile(s) default, which the configuration does not have (it has: other)"),
        (("--profile", "missing"), "--profile names profile(s) missing"),
        (("--profile", "other", "--variant", "v9"), "profile other has no variant 'v9'"),
    ],
)
def test_a_configuration_that_does_not_match_the_recording_is_refused(
    tmp_path: Path, flags: tuple[str, ...], message: str
) -> None:
    recording = tmp_path / "one.jsonl"
    recording.write_bytes(_recording_line())
    config = _write({"profiles": {"other": {}}}, tmp_path / "config.yaml")
    replayed = _cli("replay", str(recording), "--config", str(config), *flags, cwd=tmp_path)
    assert replayed.returncode == 2, replayed.stdout + replayed.stderr
    assert message in replayed.stderr and "Traceback" not in replayed.stderr


def test_a_turn_whose_input_the_profile_would_refuse_live_is_not_replayed(
    tmp_path: Path,
) -> None:
    recording = tmp_path / "one.jsonl"
    recording.write_bytes(_recording_line(input="x" * 500))
    config = _write({"profiles": {"default": {"max_input_chars": 100}}}, tmp_path / "c.yaml")
    replayed = _cli("replay", str(recording), "--config", str(config), cwd=tmp_path)
    assert replayed.returncode == 2, replayed.stdout + replayed.stderr
    assert "longer than their profile's max_input_chars (100)" in replayed.stderr
    assert "(500 characters)" in replayed.stderr and "Traceback" not in replayed.stderr


async def test_a_profile_that_records_none_of_its_turns_writes_nothing(
    tools: ServerProcess, tmp_path: Path
) -> None:
    with simulator() as sim:
        config = _config(sim, tools, tmp_path, record=0.0)
        with sidecar(config, tmp_path / "live") as side:
            async with AgentClient(side.address) as client:
                session = await client.create_session()
                await client.run(session.session_id, "two reads", timeout=20)
    assert not list((tmp_path / "recordings").glob("*.jsonl"))


async def test_live_read_only_replays_run_read_only_tools_on_the_configured_servers(
    tools: ServerProcess, tmp_path: Path
) -> None:
    with simulator() as sim:
        config, _, _ = await _record(sim, tools, tmp_path)
        before = await _tool_calls(tools.address)
        configured = _write(config, tmp_path / "config.yaml")
        replayed = _cli(
            "replay", str(tmp_path / "recordings"), "--config", str(configured),
            "--live-read-only", cwd=tmp_path,
        )  # fmt: skip
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        after = await _tool_calls(tools.address)
    # slow_read is read-only: run again, live; reserve writes: answered from the recording.
    assert after["slow_read"] == before["slow_read"] + 2
    assert after["reserve"] == before["reserve"]
