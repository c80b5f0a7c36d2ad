"""The official MCP conformance suite's 0.2 line (``conformance-2026``, ``make
mcp-tools``) against the sidecar's MCP endpoint: the 2026-07-28 revision (stateless
requests, headers, multi-round-trip input) and the tasks extension. The suite's fixture
tools come from two MCP servers of ours that the sidecar bridges: one speaking the 2025
handshake (its tools ask with requests of their own; the endpoint runs five of them as
tasks), one speaking 2026-07-28 (its tools ask with input-required results, which the
endpoint relays to the host). Scenarios that do not apply are in
``conformance-baseline-2026.yaml``, each with its reason; any other failure fails the
test, and so does a listed scenario that starts to pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support import SUPPORT
from tests.support.mcp_stack import CONFORMANCE_2026, NODE
from tests.support.stack import sidecar, sidecar_config, simulator

BASELINE = Path(__file__).with_name("conformance-baseline-2026.yaml")
FIXTURES = str(SUPPORT / "mcp_conformance_fixtures.py")
TASKS = {
    "slow_compute": "optional",
    "failing_job": "required",
    "protocol_error_job": "optional",
    "confirm_delete": "optional",
    "multi_input": "optional",
}


def test_the_endpoint_passes_every_2026_and_tasks_scenario_that_applies(tmp_path: Path) -> None:
    assert CONFORMANCE_2026.exists(), "the conformance suite is missing: run 'make mcp-tools'"
    servers = [
        {
            "name": "fixtures",
            "command": sys.executable,
            "args": [FIXTURES],
            "approval": "never",
            "protocol": "legacy",
        },
        {
            "name": "fixtures26",
            "command": sys.executable,
            "args": [FIXTURES, "--set", "2026"],
            "approval": "never",
            "protocol": "2026-07-28",
        },
    ]
    with simulator() as sim:
        config = sidecar_config(
            sim, [], mcp_servers=servers, mcp={"port": 0, "tasks": {"tools": TASKS}}
        )
        with sidecar(config, tmp_path) as side:
            url = side.announced("mcp on ")
            run = subprocess.run(
                [
                    str(NODE),
                    str(CONFORMANCE_2026),
                    "server",
                    "--url",
                    url,
                    "--suite",
                    "all",
                    "--expected-failures",
                    str(BASELINE),
                ],
                capture_output=True,
                text=True,
                cwd=tmp_path,
                timeout=600,
            )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "Baseline check passed" in run.stdout or "0 failed" in run.stdout
