"""Each client's documented install path, from an empty directory (docs/clients.md).

For Go, TypeScript and Java: a new directory outside the repository, the files the doc
shows (read from the doc), the commands it gives, then the program it shows, run against a
real sidecar: a streamed run whose approval a callback answers, and an error branched on by
its reason. Only the package registries are reached (through the caches under .tools/).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar import testing
from tests.languages._builds import M2, NPM_CACHE, ROOT, TOOLS, built, program, run
from tests.languages._docs import files, write

pytestmark = pytest.mark.timeout(600)

EXPECTED = ("approving refund_order", "answer: [simulated]", "no such session: SESSION_NOT_FOUND")


@pytest.fixture(scope="module")
def sidecar_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with testing.example_stack(tmp_path_factory.mktemp("install-clients")) as stack:
        testing.wait_serving(stack.sidecar.address)
        yield stack.sidecar.address


def _assert_ran(output: str) -> None:
    for line in EXPECTED:
        assert line in output, output


def test_the_go_client_installs_with_the_documented_replace(
    tmp_path: Path, sidecar_address: str
) -> None:
    shown = files("clients.md", "go-client")
    write(tmp_path, shown, skip=("install.sh",))
    env = {**os.environ, "AGENT_SIDECAR": str(ROOT)}
    run(["bash", "-euc", shown["install.sh"]], tmp_path, timeout=300, env=env)
    _assert_ran(run([str(tmp_path / "myservice"), sidecar_address], tmp_path, timeout=60))


def test_the_typescript_client_installs_from_its_tarball_alone(
    tmp_path: Path, sidecar_address: str
) -> None:
    tarball = built(TOOLS / "packs" / "agent-sidecar-client-0.1.0.tgz")
    shutil.copy(tarball, tmp_path)
    write(tmp_path, files("clients.md", "ts-client"))
    installed = run(
        [program("npm"), "install", "--no-audit", "--no-fund", "--cache", str(NPM_CACHE)],
        tmp_path,
        timeout=300,
    )
    # One package, no build tools, no warning about install scripts.
    assert "install-scripts" not in installed, installed
    modules = tmp_path / "node_modules"
    assert (modules / "@agent-sidecar" / "client" / "dist" / "gen" / "agentsidecar").is_dir()
    assert (modules / "@grpc" / "grpc-js").is_dir()  # the client's dependency, installed here
    _assert_ran(run([program("node"), "main.mjs", sidecar_address], tmp_path, timeout=60))


def test_the_java_client_builds_with_the_documented_pom(
    tmp_path: Path, sidecar_address: str
) -> None:
    built(M2 / "dev" / "agentsidecar" / "agent-sidecar-client" / "0.1.0-SNAPSHOT")
    write(tmp_path, files("clients.md", "java-client"))
    mvn = [program("mvn"), "-B", "-ntp", "-q", f"-Dmaven.repo.local={M2}"]
    output = run(
        [*mvn, "compile", "exec:java", f"-Dexec.args={sidecar_address}"], tmp_path, timeout=400
    )
    _assert_ran(output)
