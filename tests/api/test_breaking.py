"""buf breaking holds protos/ to the contract as released (protos/released/v1.binpb).

`make lint` runs the same check on the protos themselves (`make check-breaking`); these
tests show that it passes for what a release may add, and that it catches what would break
callers: each edits a copy of the protos and runs the real buf against the released image.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import ROOT

BUF = ROOT / ".tools" / "node_modules" / ".bin" / "buf"
RELEASED = ROOT / "protos" / "released" / "v1.binpb"
TOOL_PROTO = Path("agentsidecar") / "v1" / "tool.proto"
AGENT_PROTO = Path("agentsidecar") / "v1" / "agent.proto"


@pytest.fixture
def protos(tmp_path: Path) -> Path:
    """A copy of protos/ (the module, its buf.yaml and its rules) to edit."""
    assert BUF.exists(), "buf is missing: run 'make test', which installs it"
    copy = tmp_path / "protos"
    shutil.copytree(
        ROOT / "protos", copy, ignore=shutil.ignore_patterns("released", "tools", "*.py")
    )
    return copy


def breaking(protos: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BUF), "breaking", str(protos), "--against", str(RELEASED)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} is not in {path.name} exactly once"
    path.write_text(text.replace(old, new))


def test_the_protos_keep_the_released_contract() -> None:
    proc = breaking(ROOT / "protos")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_new_field_and_a_new_rpc_keep_the_contract(protos: Path) -> None:
    edit(
        protos / TOOL_PROTO,
        "  bool call_stream = 3;\n",
        "  bool call_stream = 3;\n  string server_version = 4;\n",
    )
    edit(
        protos / TOOL_PROTO,
        "  rpc ListTools(ListToolsRequest) returns (ListToolsResponse);\n",
        "  rpc ListTools(ListToolsRequest) returns (ListToolsResponse);\n"
        "  rpc ListAllTools(ListToolsRequest) returns (ListToolsResponse);\n",
    )
    proc = breaking(protos)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_deleting_a_field_breaks_the_contract(protos: Path) -> None:
    edit(protos / TOOL_PROTO, "  string tool_set_version = 2;\n", "")
    proc = breaking(protos)
    assert proc.returncode != 0
    assert 'field "2" with name "tool_set_version" on message "ListToolsResponse"' in (
        proc.stdout
    ), proc.stdout + proc.stderr


def test_deleting_a_field_breaks_the_contract_even_when_its_number_is_reserved(
    protos: Path,
) -> None:
    # Generated code loses the field's accessors, so v1 keeps every field it released.
    edit(protos / TOOL_PROTO, "  string tool_set_version = 2;\n", "  reserved 2;\n")
    proc = breaking(protos)
    assert proc.returncode != 0
    assert '"tool_set_version"' in proc.stdout, proc.stdout + proc.stderr


def test_renaming_an_rpc_breaks_the_contract(protos: Path) -> None:
    edit(protos / TOOL_PROTO, "  rpc ListTools(", "  rpc ListToolDescriptors(")
    proc = breaking(protos)
    assert proc.returncode != 0
    assert 'RPC "ListTools" on service "ToolService" was deleted' in proc.stdout, (
        proc.stdout + proc.stderr
    )


def test_renaming_a_field_breaks_the_contract(protos: Path) -> None:
    # Same number, same wire format, but another JSON name and other accessors.
    edit(protos / TOOL_PROTO, "  string tool_name = 2;\n", "  string tool = 2;\n")
    proc = breaking(protos)
    assert proc.returncode != 0
    assert 'on message "CallToolRequest" changed name from "tool_name" to "tool"' in (
        proc.stdout
    ), proc.stdout + proc.stderr


def test_changing_a_field_type_breaks_the_contract(protos: Path) -> None:
    edit(protos / AGENT_PROTO, "  uint32 steps = 7;\n", "  uint64 steps = 7;\n")
    proc = breaking(protos)
    assert proc.returncode != 0
    assert 'name "steps" on message "RunResult" changed type from "uint32" to "uint64"' in (
        proc.stdout
    ), proc.stdout + proc.stderr
