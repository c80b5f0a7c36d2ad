"""Render the chart in helm/agent-sidecar with the helm that `make helm-path` builds.

``helm()`` finds helm under .tools/, building it through the make target when it is
missing (about 2.5 minutes on a cold machine), and fails with the target's output when
that is not possible: these tests never skip for a missing tool.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "agent-sidecar"
SCENARIOS = sorted(CHART.glob("ci/*-values.yaml")) + sorted(CHART.glob("examples/*-values.yaml"))
"""Every values file the chart's tests render: the ci/ scenarios and the documented examples."""
RELEASE = "agent-sidecar"
NAMESPACE = "agents"


class RenderError(AssertionError):
    """helm refused the values; the message is helm's."""


@functools.cache
def helm() -> str:
    """The path of the chart's helm binary, built by `make helm-path` when missing."""
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", "helm-path"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not Path(lines[-1]).is_file():
        raise AssertionError(
            "could not build helm with `make helm-path` (it installs helm from the Go module "
            f"proxy into .tools/; needs Go):\n{done.stdout}\n{done.stderr}"
        )
    return lines[-1]


def run_helm(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run helm with ``args``; the caller checks the outcome."""
    return subprocess.run(
        [helm(), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )


def value_args(
    values: Iterable[str | Path] = (), sets: Mapping[str, str] | None = None
) -> list[str]:
    """helm's ``-f`` and ``--set`` arguments."""
    args: list[str] = []
    for path in values:
        args += ["-f", str(path)]
    for key, value in (sets or {}).items():
        args += ["--set", f"{key}={value}"]
    return args


def render_text(
    values: Iterable[str | Path] = (),
    sets: Mapping[str, str] | None = None,
    *,
    extra: Sequence[str] = (),
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> str:
    """``helm template`` output.

    Raises:
        RenderError: helm refused the values (the chart's own checks or its schema).
    """
    done = run_helm(
        "template", release, str(CHART), "-n", namespace, *value_args(values, sets), *extra
    )
    if done.returncode != 0:
        raise RenderError(done.stderr.strip())
    return done.stdout


def render(
    values: Iterable[str | Path] = (),
    sets: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """The rendered manifests, parsed."""
    return [doc for doc in yaml.safe_load_all(render_text(values, sets, **kwargs)) if doc]


def of_kind(docs: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: Iterable[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def component(doc: dict[str, Any]) -> str:
    return str(doc["metadata"]["labels"].get("app.kubernetes.io/component", ""))


def sidecar_config(docs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The sidecar's configuration file from the rendered ConfigMap."""
    config = one(docs, "ConfigMap", f"{RELEASE}-config")
    parsed: dict[str, Any] = yaml.safe_load(config["data"]["sidecar.yaml"])
    return parsed


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def containers(workload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every container of a workload's pods, init containers first."""
    spec = pod_spec(workload)
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def sidecar_containers(docs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The agent-sidecar containers, wherever the mode puts them (none for an existing
    Deployment, which the example patch gives one)."""
    return [
        c
        for d in of_kind(docs, "Deployment")
        for c in containers(d)
        if c["name"] == "agent-sidecar"
    ]


def sidecar_container(docs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The one agent-sidecar container."""
    found = sidecar_containers(docs)
    assert len(found) == 1, f"expected one agent-sidecar container, found {len(found)}"
    return found[0]


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Whether a matchLabels selector selects an object with ``labels``."""
    return all(labels.get(k) == v for k, v in selector.items())


def env_of(container: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}
