"""The images' contents: the production ones leave the LLM simulator out, and still serve.

No container engine runs here, so the images are not built. What goes into them is read
from deploy/Dockerfile instead: its stages, their ``FROM`` and ``COPY`` lines. The
package's wheel is then built from exactly the files the build stage copies (with the
same ``pip wheel``, minus the download of its dependencies), its contents are checked, and
it is run: unpacked on an interpreter path that holds it and the dependencies but not
this checkout (``python -S``, which also leaves out the checkout's editable install), as
the production image runs it and as the dev image runs it with the simulator added.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar import testing
from sidecar.testing import ProcessStartError, ServerProcess, start_process
from tests.deploy.helm_chart import CHART, RELEASE, ROOT, of_kind, render

pytestmark = pytest.mark.timeout(900)  # a first render may build helm (make helm-path)

DOCKERFILE = ROOT / "deploy" / "Dockerfile"
PRODUCTION = ("sidecar", "toolserver")
"""The production targets (docs/kubernetes.md, "Images")."""
TOOLS_VALUES = CHART / "ci" / "toolservers-values.yaml"
TEST_POD = "templates/tests/test-health.yaml"
SITE_PACKAGES = sysconfig.get_paths()["purelib"]
"""The dependencies, as the image's ``pip install`` puts them beside the package."""


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def copies(self) -> list[tuple[list[str], str]]:
        """``(sources, destination)`` of each ``COPY`` from the build context."""
        out = []
        for keyword, rest in self.instructions:
            words = rest.split()
            if keyword == "COPY" and not any(w.startswith("--from") for w in words):
                flags = [w for w in words if w.startswith("--")]
                paths = words[len(flags) :]
                out.append((paths[:-1], paths[-1]))
        return out


def stages() -> dict[str, Stage]:
    """The Dockerfile's stages by name, each with its instructions."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found: dict[str, Stage] = {}
    current: Stage | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        if keyword == "FROM":
            match = re.fullmatch(r"(\S+) AS (\S+)", rest.strip())
            assert match, f"every stage is named: {line}"
            current = Stage(match[2], match[1])
            found[current.name] = current
        elif current is not None:
            current.instructions.append((keyword, rest.strip()))
    return found


def lineage(all_stages: dict[str, Stage], name: str) -> list[Stage]:
    """A stage and the stages it is built FROM, and those whose files it mounts."""
    stage = all_stages[name]
    out = [stage]
    if stage.base in all_stages:
        out += lineage(all_stages, stage.base)
    for _, rest in stage.instructions:
        for source in re.findall(r"from=(\w[\w-]*)", rest):
            out += lineage(all_stages, source)
    return out


def test_no_production_image_copies_the_simulator_and_the_dev_image_adds_it() -> None:
    all_stages = stages()
    for target in PRODUCTION:
        chain = lineage(all_stages, target)
        assert {s.name for s in chain} >= {target, "runtime", "build"}
        for stage in chain:
            for sources, _ in stage.copies():
                assert not [s for s in sources if "llmsim" in s], (target, stage.name, sources)
    dev = all_stages["dev"]
    assert dev.base == "runtime"
    ((sources, destination),) = dev.copies()
    assert sources == ["llmsim"]
    (path,) = [rest for keyword, rest in dev.instructions if keyword == "ENV"]
    assert path == f"PYTHONPATH={Path(destination).parent}"
    # The build context lets the simulator through for the dev image.
    ignore = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
    assert "!llmsim/" in ignore


@pytest.fixture(scope="module")
def production_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package's wheel, built from the files the build stage copies."""
    context = tmp_path_factory.mktemp("context")
    build = stages()["build"]
    for sources, destination in build.copies():
        for source in sources:
            target = context / destination.rstrip("/")
            if destination.endswith("/") or len(sources) > 1:
                target = target / Path(source).name
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(ROOT / source, target)
    wheels = tmp_path_factory.mktemp("wheels")
    # The image's `pip wheel`, with the dependencies left out (they come from PyPI there)
    # and this environment's setuptools as the build backend.
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    done = subprocess.run(
        [*pip_wheel, "-q", "--wheel-dir", str(wheels), str(context)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = wheels.glob("agent_sidecar-*.whl")
    return wheel


def test_the_production_wheel_holds_the_sidecar_the_sdk_and_the_client_but_no_simulator(
    production_wheel: Path,
) -> None:
    with zipfile.ZipFile(production_wheel) as wheel:
        names = wheel.namelist()
        top = {name.split("/", 1)[0] for name in names}
        (metadata,) = [n for n in top if n.endswith(".dist-info")]
        entry_points = wheel.read(f"{metadata}/entry_points.txt").decode()
    assert top - {metadata} == {"sidecar", "toolservers", "agentsidecar"}
    assert not [n for n in names if "llmsim" in n]
    assert "sidecar/testing/scenario.yaml" in names  # package data still there
    assert "agent-sidecar = sidecar.commands.cli:main" in entry_points
    assert "agent-toolserver = toolservers.cli:main" in entry_points


@dataclass
class Installed:
    """The unpacked wheel, and how to run Python the way an image does."""

    root: Path
    workdir: Path

    def pythonpath(self, *extra: Path) -> str:
        return ":".join([str(self.root), *map(str, extra), SITE_PACKAGES])

    def run(self, *args: str, extra: tuple[Path, ...] = ()) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-S", *args],
            capture_output=True,
            text=True,
            cwd=self.workdir,
            env={"PYTHONPATH": self.pythonpath(*extra), "PATH": "/usr/bin:/bin"},
            timeout=60,
            check=False,
        )

    def start(self, *args: str, extra: tuple[Path, ...] = ()) -> ServerProcess:
        return start_process(
            ["-S", *args],
            cwd=self.workdir,
            env={"PYTHONPATH": self.pythonpath(*extra), "GROQ_API_KEY": ""},
        )


@pytest.fixture(scope="module")
def installed(production_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(production_wheel) as wheel:
        wheel.extractall(root)
    return Installed(root, tmp_path_factory.mktemp("workdir"))


def test_without_the_simulator_the_command_line_says_so(installed: Installed) -> None:
    where = installed.run("-c", "import sidecar, toolservers; print(sidecar.__file__)")
    assert where.returncode == 0, where.stderr
    assert where.stdout.startswith(str(installed.root))  # the wheel's code, not the checkout's
    missing = installed.run("-c", "import llmsim")
    assert "No module named 'llmsim'" in missing.stderr
    sim = installed.run("-m", "sidecar", "llm-sim")
    assert sim.returncode == 2
    assert "the LLM simulator (the llmsim package) is not installed here" in sim.stderr
    config = installed.workdir / "no-model.yaml"
    config.write_text(yaml.safe_dump({"server": {"port": 0}}))
    no_model = installed.run("-m", "sidecar", "serve", "--config", str(config))
    assert no_model.returncode == 2
    assert "the LLM simulator is not installed" in no_model.stderr


@pytest.fixture(scope="module")
def simulator() -> Iterator[ServerProcess]:
    # A model endpoint, as the production sidecar would have one: another process.
    with testing.simulator(scenario=testing.SCENARIO) as sim:
        yield sim


async def test_the_production_install_serves_a_run_with_a_tool_server(
    installed: Installed, simulator: ServerProcess
) -> None:
    with (
        installed.start("-m", "toolservers.examples.orders", "--port", "0") as orders,
        installed.start("-m", "toolservers.examples.logistics", "--port", "0") as logistics,
    ):
        config = installed.workdir / "sidecar.yaml"
        config.write_text(
            yaml.safe_dump(
                testing.sidecar_config(
                    simulator.address,
                    {"orders": orders.address, "logistics": logistics.address},
                    sessions={"sqlite": {"path": str(installed.workdir / "sessions.db")}},
                )
            )
        )
        with installed.start("-m", "sidecar", "serve", "--config", str(config)) as side:
            testing.wait_serving(side.address)
            # `helm test`'s pod runs its check in this image, against the Service.
            (pod,) = of_kind(render([TOOLS_VALUES], extra=["--show-only", TEST_POD]), "Pod")
            (check,) = pod["spec"]["containers"]
            assert check["command"][:2] == ["python", "-c"]
            code = check["command"][2].replace(f"{RELEASE}:50051", side.address)
            assert side.address in code
            helm_test = installed.run("-c", code)
            assert helm_test.returncode == 0, helm_test.stderr
            async with AgentClient(side.address) as client:
                session = await client.create_session("default")
                result = await client.run(
                    session.session_id,
                    "What is the status of order 20250101, and where is its parcel?",
                    timeout=30,
                )
    assert result.result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    assert result.result.tool_calls == 2


def test_the_dev_image_adds_the_simulator_beside_the_production_install(
    installed: Installed, tmp_path: Path
) -> None:
    # What the dev stage does: the simulator's sources on PYTHONPATH, nothing else.
    dev = tmp_path / "opt"
    shutil.copytree(ROOT / "llmsim", dev / "llmsim", ignore=shutil.ignore_patterns("__pycache__"))
    with installed.start("-m", "llmsim", "--port", "0", extra=(dev,)) as sim:
        assert sim.address.startswith("127.0.0.1:")
    with pytest.raises(ProcessStartError, match="exited with 1"):
        installed.start("-m", "llmsim", "--port", "0")  # the production install alone
