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
    protos = sorted(str(p) for p in (ROOT / "protos").rglob("*.proto"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{ROOT / 'protos'}",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            *protos,
        ],
        check=True,
    )
    committed = ROOT / "clients" / "python" / "agentsidecar" / "v1"
    for generated in (tmp_path / "agentsidecar" / "v1").iterdir():
        assert generated.read_text() == (committed / generated.name).read_text(), generated.name
