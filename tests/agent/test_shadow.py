"""A shadow variant on live traffic, through real processes: it runs a copy of each live
turn with the live run's tool results, no tool runs twice, the caller sees only the live
answer, its cost is counted apart, and it is compared by a metric and a report command;
removing its ``shadow`` key makes it a canary.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from agentsidecar.client import AgentClient
from sidecar import testing
from sidecar.recording import read_turns
from tests.support.stack import (
    MODEL,
    TEST_MODELS,
    eventually,
    scrape,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
    tool_stats,
)

RUNS = 3


def _shadow_report(config: Path, out: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "sidecar", "shadow", "report", "--config", str(config)]
    return subprocess.run(
        [*command, "--json", str(out)], capture_output=True, text=True, timeout=60, check=False
    )


def _profiles(candidate: dict[str, Any]) -> dict[str, Any]:
    return {"default": {"variants": [{"name": "stable", "weight": 1}, candidate]}}


async def test_a_shadow_variant_is_compared_on_live_turns_without_side_effects(
    tmp_path: Path,
) -> None:
    recordings = tmp_path / "recordings"
    with (
        simulator() as sim,
        testing.simulator(models=TEST_MODELS) as planner,
        scripted_toolserver() as tools,
    ):
        # The shadow's model plans on its own: it calls slow_read with other arguments
        # than the live run did, and answers otherwise.
        candidate = {
            "name": "candidate",
            "weight": 1,
            "shadow": 1.0,
            "model": {"base_url": f"http://{planner.address}/openai/v1"},
        }
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            profiles=_profiles(candidate),
            recording={"path": str(recordings)},
            prices={MODEL: {"prompt": 1.0, "completion": 2.0}},
            telemetry={"metrics": {"enabled": True, "port": 0}},
        )
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                costs = []
                for _ in range(RUNS):
                    session = await client.create_session()
                    result = (await client.run(session.session_id, "two reads", timeout=20)).result
                    assert result.variant == "stable"
                    assert result.answer == "[simulated] done"
                    costs.append(result.cost.total_usd)

                async def shadows_done() -> bool:
                    turns = read_turns([recordings]) if recordings.exists() else []
                    return sum(t.shadow_of is not None for t in turns) == RUNS

                await eventually(shadows_done)
                metrics = await scrape(side)
                # Each live call ran once; the shadow's own calls were never run.
                calls = (await tool_stats(tools.address))["calls"]
                assert calls["slow_read"] == 2 * RUNS
                labels = {"profile": "default", "variant": "candidate"}
                compared = metrics.get(
                    "agent_sidecar_shadow_runs_total",
                    same_tool_calls="false",
                    same_answer="false",
                    **labels,
                )
                assert compared == RUNS
                assert metrics.get("agent_sidecar_shadow_cost_usd_total", **labels) > 0
                stable_cost = metrics.get(
                    "agent_sidecar_variant_cost_usd_total", profile="default", variant="stable"
                )
                assert abs(stable_cost - sum(costs)) < 1e-12
                assert (
                    metrics.get("agent_sidecar_variant_runs_total", 0.0, outcome="ok", **labels)
                    == 0
                )

                turns = read_turns([recordings])
                live = {t.run_id: t for t in turns if t.shadow_of is None}
                for shadow in (t for t in turns if t.shadow_of is not None):
                    original = live[shadow.shadow_of or ""]
                    assert shadow.variant == "candidate" and original.variant == "stable"
                    assert shadow.history == original.history and shadow.input == original.input
                    assert all(c.content.startswith("not run:") for c in shadow.calls)

                report = _shadow_report(tmp_path / "sidecar.yaml", tmp_path / "report.json")
                assert report.returncode == 1, report.stdout + report.stderr
                assert f"shadow variant candidate of profile default: {RUNS} run(s)" in (
                    report.stdout
                )
                assert "same tool calls: 0%" in report.stdout

                # Promotion: the shadow key removed, the candidate takes the new sessions.
                promoted = yaml.safe_load((tmp_path / "sidecar.yaml").read_text())
                promoted["profiles"] = _profiles(
                    {k: v for k, v in candidate.items() if k != "shadow"}
                )
                promoted["profiles"]["default"]["variants"][0]["weight"] = 0
                (tmp_path / "sidecar.yaml").write_text(yaml.safe_dump(promoted, sort_keys=False))
                side.send_signal(signal.SIGHUP)

                async def promoted_serves() -> bool:
                    session = await client.create_session()
                    run = await client.run(session.session_id, "hello", timeout=20)
                    return bool(run.result.variant == "candidate")

                await eventually(promoted_serves)
