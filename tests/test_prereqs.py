"""``make test``'s first step (mk/prereqs.sh): every missing tool is one line naming what
to install, run against a PATH of fake tools made for each case."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.support import ROOT

SCRIPT = ROOT / "mk" / "prereqs.sh"
VERSIONS = {
    "node": 'if [ "$1" = -p ]; then echo {major}; else echo v{major}.1.0; fi',
    "npm": "true",
    "go": 'if [ "$1" = env ]; then echo go1.{minor}.0; else echo "go version go1.{minor}.0"; fi',
    "javac": 'echo "javac {major}.0.2" >&2',
    "mvn": "true",
    "etcd": "true",
    "initdb": "true",
    "apt-get": "true",
}


def machine(tmp_path: Path, tools: Mapping[str, str] | None = None, *, root: bool = False) -> Path:
    """A directory for PATH with the shell's tools, Python, and the fakes in ``tools``
    (name: its shell script), whose ``id -u`` says root or not."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sh", "sed", "cut", "ls"):
        found = shutil.which(name)
        assert found is not None, name
        (bin_dir / name).symlink_to(found)
    fakes = {"id": f"echo {0 if root else 1000}", **(tools or {})}
    if "python3" not in fakes:
        (bin_dir / "python3").symlink_to(sys.executable)
    for name, body in fakes.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def check(bin_dir: Path, what: str = "test") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "sh"), str(SCRIPT), what],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": str(bin_dir), "PG_ROOT": str(bin_dir / "no-postgresql")},
        check=False,
    )


def every_tool(major_java: int = 17, major_node: int = 20, minor_go: int = 26) -> dict[str, str]:
    tools = {name: body for name, body in VERSIONS.items() if name != "apt-get"}
    tools["node"] = tools["node"].replace("{major}", str(major_node))
    tools["go"] = tools["go"].replace("{minor}", str(minor_go))
    tools["javac"] = tools["javac"].replace("{major}", str(major_java))
    return tools


def test_a_machine_with_every_tool_passes_in_silence(tmp_path: Path) -> None:
    done = check(machine(tmp_path, every_tool()))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_each_missing_tool_is_one_line_naming_what_to_install(tmp_path: Path) -> None:
    done = check(machine(tmp_path))
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines[-1].startswith("make test: 5 prerequisite(s) missing; README.md")
    wanted = [
        "node and npm are missing: install Node.js 20 or newer",
        "go is missing: install Go 1.21 or newer",
        "a JDK 17 or newer (javac) and Maven is missing: install it (apt-get install "
        "openjdk-17-jdk-headless and maven), or run make as root",
        "etcd (the Kubernetes API server's store in the chart's tests) is missing: install "
        "it (apt-get install etcd-server)",
        "PostgreSQL's server binaries (initdb, pg_ctl; the shared session store's tests) "
        "is missing: install it (apt-get install postgresql)",
    ]
    assert len(lines) == len(wanted) + 1
    for line, start in zip(lines, wanted, strict=False):  # the last line is the count
        assert line.startswith("make test: " + start), line


def test_old_versions_are_named_with_the_version_needed(tmp_path: Path) -> None:
    done = check(machine(tmp_path, every_tool(major_java=11, major_node=18, minor_go=19)))
    assert done.returncode == 1
    assert "make test: node is v18.1.0: install Node.js 20 or newer" in done.stderr
    assert "make test: go is go1.19.0: install Go 1.21 or newer" in done.stderr
    assert "make test: javac is javac 11.0.2: install a JDK 17 or newer" in done.stderr


def test_as_root_on_debian_what_make_installs_itself_is_no_error(tmp_path: Path) -> None:
    tools = {k: v for k, v in every_tool().items() if k not in ("javac", "mvn", "etcd", "initdb")}
    done = check(machine(tmp_path, {**tools, "apt-get": "true"}, root=True))
    assert (done.returncode, done.stderr) == (0, "")
    notes = done.stdout.splitlines()
    assert len(notes) == 3
    assert all("make installs Debian's" in note for note in notes), notes


def test_the_demo_needs_python_alone(tmp_path: Path) -> None:
    done = check(machine(tmp_path), "demo")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    bare = tmp_path / "bare"
    bare.mkdir()
    old = 'if [ "$1" = -c ] && [ "${2#*platform}" != "$2" ]; then echo 3.9.2; else exit 1; fi'
    done = check(machine(bare, {"python3": old}), "demo")
    assert done.returncode == 1
    assert done.stderr.splitlines()[0] == (
        "make demo: python3 is Python 3.9.2: install Python 3.11 or newer, or name one with "
        "PYTHON=python3.12"
    )
