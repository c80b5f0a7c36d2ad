"""The chart lints, and its manifests pass the Kubernetes schemas of every version it claims.

``helm lint --strict`` runs over every scenario; every rendered manifest is validated
offline with kubernetes-validate in strict mode (unknown fields refused) against each
Kubernetes minor version in Chart.yaml's ``agent-sidecar/validated-kubernetes``; the
Dockerfile passes hadolint.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.helm_chart import CHART, ROOT, SCENARIOS, render_text, run_helm

CHART_META = yaml.safe_load((CHART / "Chart.yaml").read_text())
VERSIONS = CHART_META["annotations"]["agent-sidecar/validated-kubernetes"].split()
CRD_KINDS = {"ServiceMonitor"}
"""Kinds of custom resources, which have no schema offline; the API server tests apply
them against their CRD."""


def scenario_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name.removesuffix('-values.yaml')}"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("rendered")
    files = {}
    for values in SCENARIOS:
        path = out / f"{values.parent.name}-{values.name}"
        path.write_text(render_text([values]))
        files[scenario_id(values)] = path
    return files


def validate(tool: str, version: str, *paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool, "--strict", "-k", f"{version}.0", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_chart_claims_the_versions_it_is_validated_against() -> None:
    floor = CHART_META["kubeVersion"].removeprefix(">=").removesuffix(".0-0")
    assert VERSIONS[0] == floor
    minors = [int(v.split(".")[1]) for v in VERSIONS]
    assert minors == list(range(minors[0], minors[-1] + 1)), "every minor from the floor on"


@pytest.mark.parametrize("values", SCENARIOS, ids=scenario_id)
def test_helm_lint_passes_strictly(values: Path) -> None:
    done = run_helm("lint", str(CHART), "--strict", "-f", str(values))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_passes_the_strict_schemas_of_each_claimed_version(
    version: str, rendered: dict[str, Path], tools: dict[str, str]
) -> None:
    done = validate(tools["KUBE_VALIDATE"], version, *rendered.values())
    assert done.returncode == 0, done.stdout + done.stderr
    passed = done.stdout.count(" passed for resource ")
    documents = sum(
        1
        for path in rendered.values()
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc["kind"] not in CRD_KINDS
    )
    assert passed == documents, done.stdout
    for line in done.stdout.splitlines() + done.stderr.splitlines():
        if line.startswith("WARN"):
            assert "Couldn't find schema for kind ServiceMonitor" in line, line


def test_the_strict_schemas_refuse_an_unknown_field(
    rendered: dict[str, Path], tools: dict[str, str], tmp_path: Path
) -> None:
    docs = [d for d in yaml.safe_load_all(rendered["ci/toolservers"].read_text()) if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(deployment))
    done = validate(tools["KUBE_VALIDATE"], VERSIONS[-1], broken)
    assert done.returncode != 0
    assert "readinessProbes" in done.stdout + done.stderr


def test_the_chart_packages_with_its_examples(tmp_path: Path) -> None:
    done = run_helm("package", str(CHART), "-d", str(tmp_path))
    assert done.returncode == 0, done.stderr
    (archive,) = tmp_path.glob("agent-sidecar-*.tgz")
    listing = subprocess.run(
        ["tar", "-tzf", str(archive)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "agent-sidecar/examples/existing-deployment-patch.yaml" in listing
    assert "agent-sidecar/values.schema.json" in listing
    assert not [name for name in listing if "/ci/" in name]


def hadolint(tool: str, dockerfile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool, "--no-color", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_dockerfile_passes_hadolint(tools: dict[str, str], tmp_path: Path) -> None:
    done = hadolint(tools["HADOLINT"], ROOT / "deploy" / "Dockerfile")
    assert done.returncode == 0, done.stdout + done.stderr
    # The same linter refuses what the Dockerfile avoids: an unpinned base and pip install.
    careless = tmp_path / "Dockerfile"
    careless.write_text("FROM python:latest\nRUN pip install agent-sidecar\n")
    done = hadolint(tools["HADOLINT"], careless)
    assert done.returncode != 0
    assert "DL3007" in done.stdout and "DL3013" in done.stdout, done.stdout
