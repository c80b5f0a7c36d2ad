"""Today's Groq through real sidecars: models the endpoint does not serve are refused before
a run, reasoning streams as its own events and is counted, unpriced models say so, and each
run class gets its service tier."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from tests.support.stack import (
    SimControl,
    eventually,
    run_events,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
)


def _write(tmp_path: Path, config: dict[str, Any], name: str = "sidecar.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _command(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "GROQ_API_KEY"}
    return subprocess.run(
        [sys.executable, "-m", "sidecar", *args],
        capture_output=True,
        text=True,
        timeout=90,
        env=environ,
        check=False,
    )


def _model_calls(result: agent_pb2.RunResult) -> list[agent_pb2.Stage]:
    return [s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_MODEL_CALL]


def test_a_retired_model_stops_the_sidecar_at_start_naming_its_replacement(
    tmp_path: Path,
) -> None:
    # No key and no base_url: the built-in simulator, which serves today's Groq models.
    path = _write(
        tmp_path,
        {
            "server": {"port": 0},
            "sessions": {"store": "memory"},
            "model": {"model": "llama-3.3-70b-versatile"},
        },
    )
    done = _command("serve", "--config", str(path))
    assert done.returncode == 2, done.stderr
    assert "names llama-3.3-70b-versatile, which the model endpoint does not serve" in done.stderr
    assert "replaced by openai/gpt-oss-120b" in done.stderr and "Traceback" not in done.stderr


def test_check_refuses_an_unserved_model_and_warns_of_the_retirement_schedule(
    tmp_path: Path,
) -> None:
    with simulator() as sim:
        config = sidecar_config(
            sim, [], profiles={"default": {"tools_model": {"model": "llama-3.1-8b-instant"}}}
        )
        done = _command("check", "--config", str(_write(tmp_path, config)))
        served = _command("check", "--config", str(_write(tmp_path, sidecar_config(sim, []))))
    assert done.returncode == 2, done.stdout + done.stderr
    refused = [line for line in done.stdout.splitlines() if line.startswith("refused:")]
    assert (
        len(refused) == 1
        and "profiles.default.tools_model names llama-3.1-8b-instant" in (refused[0])
    )
    assert "closest it serves: " in refused[0] and "openai/gpt-oss-20b" in refused[0]
    assert "which Groq shut down on 2026-08-16: use openai/gpt-oss-20b" in done.stdout
    assert served.returncode == 0, served.stdout + served.stderr


def test_a_profile_allowing_more_tools_than_a_request_carries_is_refused(tmp_path: Path) -> None:
    config = {"profiles": {"wide": {"tools": [f"tool_{n}" for n in range(129)]}}}
    done = _command("check", "--offline", "--config", str(_write(tmp_path, config)))
    assert done.returncode == 2
    assert "profiles.wide.tools allows 129 tools" in done.stdout
    assert "model.max_tools_per_request: 128" in done.stdout


async def test_reasoning_streams_as_its_own_events_and_is_counted_and_priced(
    tmp_path: Path,
) -> None:
    profiles = {
        "default": {"reasoning": {"stream": True}},
        "quiet": {},
        "preview": {},
        "flex": {"service_tiers": {"caller": "flex"}},
    }
    with simulator() as sim:
        config = sidecar_config(sim, [], profiles=profiles)
        config["model"]["model"] = "openai/gpt-oss-20b"
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                events, result = await run_events(client, "hello there")
                _, quiet = await run_events(client, "hello there", profile="quiet")
                _, flex = await run_events(client, "hello there", profile="flex")
    reasoning = "".join(e.reasoning_delta.text for e in events if e.HasField("reasoning_delta"))
    answer = "".join(e.text_delta.text for e in events if e.HasField("text_delta"))
    assert reasoning.startswith("[simulated reasoning]") and "hello there" in reasoning
    assert "[simulated reasoning]" not in answer and answer == result.answer
    assert result.usage.reasoning_tokens > 0 and quiet.usage.reasoning_tokens > 0
    [call] = _model_calls(result)
    assert call.model_call.usage.reasoning_tokens == result.usage.reasoning_tokens
    assert call.model_call.service_tier == "on_demand"
    # Reasoning tokens are completion tokens, billed at the completion price.
    assert result.cost.priced_as == "openai/gpt-oss-20b"
    assert abs(result.cost.completion_usd - result.usage.completion_tokens * 0.30e-6) < 1e-12
    [flex_call] = _model_calls(flex)
    assert flex_call.model_call.service_tier == "flex"


async def test_a_run_on_a_model_with_no_price_says_unpriced(tmp_path: Path) -> None:
    with simulator() as sim:
        config = sidecar_config(sim, [])
        config["model"]["model"] = "qwen/qwen3.6-27b"
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                _, result = await run_events(client, "hello")
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED, result.error
    assert not result.HasField("cost") and list(result.unpriced_models) == ["qwen/qwen3.6-27b"]


async def test_a_reload_naming_an_unserved_model_is_refused_and_the_sidecar_keeps_serving(
    tmp_path: Path,
) -> None:
    log = tmp_path / "sidecar.log"
    with simulator() as sim:
        config = sidecar_config(sim, [])
        with log.open("wb") as stderr, sidecar(config, tmp_path, stderr=stderr) as side:
            path = tmp_path / "sidecar.yaml"
            changed = yaml.safe_load(path.read_text())
            changed["profiles"]["default"]["tools_model"] = {"model": "qwen/qwen3-32b"}
            path.write_text(yaml.safe_dump(changed))
            side.send_signal(signal.SIGHUP)

            async def refused() -> bool:
                return "configuration not reloaded (SIGHUP)" in log.read_text()

            await eventually(refused, timeout=30)
            async with AgentClient(side.address) as client:
                _, result = await run_events(client, "hello")
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    [line] = [x for x in log.read_text().splitlines() if "not reloaded (SIGHUP)" in x]
    assert "qwen/qwen3-32b, which the model endpoint does not serve" in line
    assert "replaced by qwen/qwen3.6-27b" in line


async def test_a_full_flex_tier_sends_the_step_to_the_light_path_model(tmp_path: Path) -> None:
    light = {"model": {"model": "openai/gpt-oss-20b", "service_tier": "on_demand"}}
    profiles = {"default": {"light": light}, "heavy": {}}
    with simulator() as sim:
        config = sidecar_config(sim, [], profiles=profiles)
        config["model"].update(model="openai/gpt-oss-120b", service_tier="flex")
        config["model"]["flex_fallback"] = "light"
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                await SimControl(sim.address).flex_full(True)
                _, fell_back = await run_events(client, "hello there")
                _, failed = await run_events(client, "hello there", profile="heavy")
                await SimControl(sim.address).flex_full(False)
                _, flex = await run_events(client, "hello there")
    assert fell_back.stop_reason == agent_pb2.STOP_REASON_ANSWERED, fell_back.error
    full, answered = _model_calls(fell_back)
    assert (full.name, full.model_call.error_code) == ("openai/gpt-oss-120b", "model_unavailable")
    assert full.model_call.attempts == 3
    assert (answered.name, answered.model_call.service_tier) == ("openai/gpt-oss-20b", "on_demand")
    # Priced call by call: only the light model's tokens were spent.
    parts = {m.model: m.total_usd for m in fell_back.cost.models}
    assert parts.keys() == {"openai/gpt-oss-120b", "openai/gpt-oss-20b"}
    assert parts["openai/gpt-oss-120b"] == 0 < parts["openai/gpt-oss-20b"]
    # A profile with no light variant fails as before; once flex has room, it answers.
    assert failed.stop_reason == agent_pb2.STOP_REASON_MODEL_ERROR
    assert failed.error.code == "model_unavailable"
    [call] = _model_calls(flex)
    assert (call.name, call.model_call.service_tier) == ("openai/gpt-oss-120b", "flex")


def test_a_light_path_on_the_flex_tier_it_falls_back_from_is_refused(tmp_path: Path) -> None:
    config = {
        "model": {"service_tier": "flex", "flex_fallback": "light"},
        "profiles": {"default": {"light": {"model": {"model": "openai/gpt-oss-20b"}}}},
    }
    done = _command("check", "--offline", "--config", str(_write(tmp_path, config)))
    assert done.returncode == 2
    assert "profiles.default.light.model would be sent on the flex tier" in done.stdout


async def test_discovered_tools_over_the_cap_are_refused_by_check_and_never_sent(
    tmp_path: Path,
) -> None:
    # No tools list: what the profile allows is known once the tool server answers. check
    # asks it and refuses; the sidecar says so when it is ready, and a run fails unsent.
    log = tmp_path / "sidecar.log"
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(sim, [{"name": "scripted", "address": tools.address}])
        config["model"]["max_tools_per_request"] = 3
        checked = _command("check", "--config", str(_write(tmp_path, config, "check.yaml")))
        with log.open("wb") as stderr, sidecar(config, tmp_path, stderr=stderr) as side:
            async with AgentClient(side.address) as client:
                await client.wait_ready(20)
                before = (await SimControl(sim.address).stats())["requests"]
                _, result = await run_events(client, "call slow_read tag=a ms=1")
                after = (await SimControl(sim.address).stats())["requests"]
    assert checked.returncode == 2, checked.stdout
    assert "model.max_tools_per_request: 3" in checked.stdout
    assert result.stop_reason == agent_pb2.STOP_REASON_MODEL_ERROR
    assert result.error.code == "model_too_many_tools" and not result.error.retryable
    assert after == before  # never sent
    assert "more than one model request may carry (model.max_tools_per_request: 3)" in (
        log.read_text()
    )
