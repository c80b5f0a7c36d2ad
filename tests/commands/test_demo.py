"""The README's main job, as a newcomer runs it: the demo, end to end."""

from __future__ import annotations

import json
import subprocess
import sys

from sidecar.testing import start_process


def test_the_demo_answers_both_scenarios_with_their_tool_calls() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sidecar", "demo", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "GROQ_API_KEY": ""},
    )
    assert proc.returncode == 0, proc.stderr
    founding, presales = (json.loads(line) for line in proc.stdout.splitlines())
    for result, calls in ((founding, 2), (presales, 3)):
        assert result["stopReason"] == "STOP_REASON_ANSWERED"
        assert result["toolCalls"] == calls
        assert result["answer"].startswith("[simulated]")
    assert "20250101" in founding["answer"]
    for result in (founding, presales):  # Groq's prices ship with the sidecar: no config
        cost = result["cost"]
        assert cost["simulated"] is True and cost["pricedAs"] == "llama-3.3-70b-versatile"
        assert cost["totalUsd"] > 0
    stages = presales["timeline"]["stages"]
    tools = [s["name"] for s in stages if s["kind"] == "STAGE_KIND_TOOL_CALL"]
    assert sorted(tools) == ["check_inventory", "get_discount", "get_price"]


def test_the_llm_sim_command_serves_the_simulator() -> None:
    proc = start_process(["-m", "sidecar", "llm-sim", "--port", "0"])
    try:
        assert proc.port > 0
    finally:
        assert proc.stop() == 0
