"""The A2A compatibility kit (a2aproject/a2a-tck, branch 1.0-dev, vendored in
third_party/a2a-tck; ``make a2a-tck`` installs it into .tools/a2a-tck) against a real
sidecar serving the three bindings (gRPC, JSON-RPC, HTTP+JSON). Tests that do not apply
are in ``tck-baseline.yaml`` with their reasons; any other failure fails this test, and so
does a listed test that starts to pass."""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import yaml

from tests.a2a.conftest import BACKGROUND
from tests.support.a2a import A2A_SKILLS
from tests.support.stack import scripted_toolserver, sidecar, sidecar_config, simulator

ROOT = Path(__file__).resolve().parents[2]
TCK = ROOT / "third_party" / "a2a-tck"
PYTHON = ROOT / ".tools" / "a2a-tck" / "bin" / "python"
BASELINE = Path(__file__).with_name("tck-baseline.yaml")


def _failures(report: Path) -> set[str]:
    failed = set()
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            module = case.get("classname", "").split(".")
            # classname: tests.compatibility.x.test_y[.Class]; name: test_z[param]
            path, rest = [], []
            for i, part in enumerate(module):
                path.append(part)
                if part.startswith("test_"):
                    rest = module[i + 1 :]
                    break
            failed.add("::".join(["/".join(path) + ".py", *rest, case.get("name", "")]))
    return failed


def test_the_sidecar_passes_every_tck_test_that_applies(tmp_path: Path) -> None:
    assert PYTHON.exists(), "the A2A TCK is missing: run 'make a2a-tck'"
    expected = set(yaml.safe_load(BASELINE.read_text()))
    with simulator() as sim, scripted_toolserver() as tools:
        config: dict[str, Any] = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            # The TCK's push configs name https://example.com on finished tasks (never
            # delivered: a finished task has no more updates), its webhook receiver
            # localhost.
            background={
                **BACKGROUND,
                "callbacks": {
                    **BACKGROUND["callbacks"],
                    "allowed_hosts": ["127.0.0.1", "localhost", "example.com"],
                    "secret_env": "TCK_CALLBACK_SECRET",
                },
            },
            a2a={"skills": A2A_SKILLS, "http": {"port": 0}},
        )
        env = {"TCK_CALLBACK_SECRET": "tck-callback-secret"}
        with sidecar(config, tmp_path / "sidecar", env=env) as side:
            base = "http://" + side.announced("a2a http on ")
            report = tmp_path / "tck.xml"
            run = subprocess.run(
                [
                    str(PYTHON),
                    "-m",
                    "pytest",
                    "tests/compatibility/",
                    f"--sut-host={base}",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    f"--junitxml={report}",
                ],
                cwd=TCK,
                capture_output=True,
                text=True,
                timeout=300,
            )
    assert report.exists(), run.stdout[-4000:] + run.stderr[-2000:]
    failed = _failures(report)
    assert failed - expected == set(), run.stdout[-6000:]
    assert expected - failed == set(), "passing now: remove from tck-baseline.yaml"
