"""The contracts: lint-clean, and the committed generated code matches them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

BUF = ROOT / ".tools" / "node_modules" / ".bin" / "buf"


def test_buf_lint_passes_on_the_protos() -> None:
    assert BUF.exists(), "buf is missing: run 'make test', which installs it"
    proc = subprocess.run(
        [str(BUF), "lint"], cwd=ROOT / "protos", capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_generated_code_matches_the_protos(tmp_path: Path) -> None:
    # The Python plugins of protos/buf.gen.yaml, as `make proto` runs them.
    template = subprocess.run(
        [sys.executable, "protos/tools/template.py", "clients/python"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    proc = subprocess.run(
        [str(BUF), "generate", "--template", template, "--output", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    generated = tmp_path / "clients" / "python" / "agentsidecar" / "v1"
    committed = ROOT / "clients" / "python" / "agentsidecar" / "v1"
    names = sorted(p.name for p in generated.iterdir())
    assert names == [
        "agent_pb2.py",
        "agent_pb2.pyi",
        "agent_pb2_grpc.py",
        "identity_pb2.py",
        "identity_pb2.pyi",
        "identity_pb2_grpc.py",
        "tool_pb2.py",
        "tool_pb2.pyi",
        "tool_pb2_grpc.py",
        "variants_pb2.py",
        "variants_pb2.pyi",
        "variants_pb2_grpc.py",
    ]
    for name in names:
        assert (generated / name).read_text() == (committed / name).read_text(), (
            f"{name} is stale: run 'make proto' and commit"
        )
