"""The official MCP conformance suite (@modelcontextprotocol/conformance, ``make
mcp-tools``) against the sidecar's MCP endpoint, with the suite's fixture tools served by
an MCP server of ours that the sidecar bridges: the endpoint, the dispatch and the bridge
are tested together. Scenarios that do not apply are in ``conformance-baseline.yaml``,
each with its reason; any other failure fails the test, and so does a listed scenario that
starts to pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import SUPPORT
from tests.support.mcp_stack import CONFORMANCE, NODE
from tests.support.stack import sidecar, sidecar_config, simulator

BASELINE = Path(__file__).with_name("conformance-baseline.yaml")


@pytest.mark.parametrize("suite", ["active", "pending"])
def test_the_endpoint_passes_every_server_scenario_that_applies(tmp_path: Path, suite: str) -> None:
    assert CONFORMANCE.exists(), "the conformance suite is missing: run 'make mcp-tools'"
    fixtures = {
        "name": "fixtures",
        "command": sys.executable,
        "args": [str(SUPPORT / "mcp_conformance_fixtures.py")],
        "approval": "never",
        # The fixtures ask with requests of their own (elicitation/create), which only the
        # 2025 revisions carry.
        "protocol": "legacy",
    }
    with simulator() as sim:
        config = sidecar_config(sim, [], mcp_servers=[fixtures], mcp={"port": 0})
        with sidecar(config, tmp_path) as side:
            url = side.announced("mcp on ")
            run = subprocess.run(
                [
                    str(NODE),
                    str(CONFORMANCE),
                    "server",
                    "--url",
                    url,
                    "--suite",
                    suite,
                    "--expected-failures",
                    str(BASELINE),
                ],
                capture_output=True,
                text=True,
                cwd=tmp_path,
                timeout=300,
            )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "Baseline check passed" in run.stdout or "0 failed" in run.stdout
