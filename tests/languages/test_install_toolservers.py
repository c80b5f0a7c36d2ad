"""Each tool-server library's documented install path, from an empty directory
(docs/tool-servers.md, "Libraries in other languages").

For Go, TypeScript and Java: a new directory outside the repository, the files the doc shows
(read from the doc), the commands it gives; then the server it builds is started, called over
real gRPC (a result, and an invalid-arguments result naming the field), and stopped with
SIGTERM, after which it exits 0.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import grpc
import pytest

from agentsidecar.v1 import tool_pb2, tool_pb2_grpc
from sidecar import testing
from sidecar.testing import ServerProcess
from tests.languages._builds import M2, NPM_CACHE, ROOT, TOOLS, built, program, run
from tests.languages._docs import files, write

pytestmark = pytest.mark.timeout(600)


def _call_greet(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.address) as channel:
        stub = tool_pb2_grpc.ToolServiceStub(channel)
        listed = stub.ListTools(tool_pb2.ListToolsRequest(), timeout=10)
        assert [t.name for t in listed.tools] == ["greet"]
        assert json.loads(listed.tools[0].input_schema)["required"] == ["name"]
        reply = stub.CallTool(
            tool_pb2.CallToolRequest(call_id="c1", tool_name="greet", arguments='{"name": "Ada"}'),
            timeout=10,
        )
        assert json.loads(reply.result.output) == {"greeting": "Hello, Ada!"}
        wrong = stub.CallTool(
            tool_pb2.CallToolRequest(tool_name="greet", arguments='{"name": 7}'), timeout=10
        )
        assert wrong.result.error.kind == tool_pb2.TOOL_ERROR_KIND_INVALID_ARGUMENTS
        assert "name" in wrong.result.error.message
    assert server.stop() == 0


def test_the_go_library_installs_with_the_two_documented_replaces(tmp_path: Path) -> None:
    shown = files("tool-servers.md", "go-toolserver")
    write(tmp_path, shown, skip=("install.sh",))
    env = {**os.environ, "AGENT_SIDECAR": str(ROOT)}
    run(["bash", "-euc", shown["install.sh"]], tmp_path, timeout=300, env=env)
    with testing.start_process(
        ["--port", "0", "--log-level", "warn"], executable=str(tmp_path / "greeter")
    ) as server:
        _call_greet(server)


def test_the_typescript_library_installs_from_its_tarball_alone(tmp_path: Path) -> None:
    shutil.copy(built(TOOLS / "packs" / "agent-sidecar-toolserver-0.1.0.tgz"), tmp_path)
    write(tmp_path, files("tool-servers.md", "ts-toolserver"))
    installed = run(
        [program("npm"), "install", "--no-audit", "--no-fund", "--cache", str(NPM_CACHE)],
        tmp_path,
        timeout=300,
    )
    assert "install-scripts" not in installed, installed
    with testing.start_process(
        ["main.mjs", "--port", "0", "--log-level", "warn"], executable=program("node"), cwd=tmp_path
    ) as server:
        _call_greet(server)


def test_the_java_library_builds_with_the_documented_pom(tmp_path: Path) -> None:
    built(M2 / "dev" / "agentsidecar" / "agent-sidecar-toolserver" / "0.1.0-SNAPSHOT")
    write(tmp_path, files("tool-servers.md", "java-toolserver"))
    mvn = [program("mvn"), "-B", "-ntp", "-q", f"-Dmaven.repo.local={M2}"]
    run(
        [*mvn, "compile", "dependency:build-classpath", "-Dmdep.outputFile=classpath.txt"],
        tmp_path,
        timeout=400,
    )
    # Started with java on the classpath Maven resolved for the pom rather than through
    # `mvn exec:java` (which serves the same), whose output starts with a terminal reset.
    classpath = f"{tmp_path / 'target' / 'classes'}:{(tmp_path / 'classpath.txt').read_text()}"
    with testing.start_process(
        ["-cp", classpath, "com.example.Greeter", "--port", "0"],
        executable=program("java"),
        cwd=tmp_path,
        timeout=60,
    ) as server:
        _call_greet(server)
