"""The chart against a real Kubernetes API server (helm/tests/cluster.py).

Every scenario's manifests are applied with ``kubectl apply --dry-run=server``: the server
decodes, defaults, validates and admits each object (field validation strict, PodSecurity
``restricted`` enforced and warned in the namespace) without storing it. A real
``helm install`` then stores a release, an upgrade with a configuration change rolls the
pods (their template's checksum changes), a rollback restores it, and an uninstall removes
it. Values the chart's schema lets through, and values rendered past the schema, are
refused by the server itself. ``helm install --dry-run=server`` alone would not show any of
this: it does not send the manifests to the server for validation.

No controller, scheduler or kubelet runs, so no pod starts: tests/deploy's wiring test
runs the rendered containers as local processes instead.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import Cluster

from sidecar.testing.certs import TestCA
from tests.deploy.helm_chart import (
    CHART,
    NAMESPACE,
    RELEASE,
    SCENARIOS,
    RenderError,
    render_text,
    value_args,
)

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).parent
TOOLS = CHART / "ci" / "toolservers-values.yaml"
TLS = CHART / "ci" / "tls-values.yaml"
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/warn": "restricted",
}


def scenario_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name.removesuffix('-values.yaml')}"


def helm(
    cluster: Cluster, tools: Mapping[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tools["HELM"], *args],
        capture_output=True,
        text=True,
        env=cluster.env(),
        timeout=180,
        check=False,
    )


def namespace(cluster: Cluster, name: str) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": RESTRICTED},
    }
    done = cluster.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def ready(cluster: Cluster) -> Cluster:
    """The namespace of the dry runs, and the ServiceMonitor CRD, established."""
    namespace(cluster, NAMESPACE)
    done = cluster.kubectl("apply", "-f", str(HERE / "crds" / "servicemonitor.yaml"))
    assert done.returncode == 0, done.stderr
    done = cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "crd/servicemonitors.monitoring.coreos.com",
        "--timeout=60s",
    )
    assert done.returncode == 0, done.stderr
    return cluster


def dry_run(
    cluster: Cluster, manifests: str, ns: str = NAMESPACE
) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-n", ns, "-f", "-", stdin=manifests
    )


def kinds_and_names(manifests: str) -> list[str]:
    return sorted(
        f"{d['kind'].lower()}/{d['metadata']['name']}" for d in yaml.safe_load_all(manifests) if d
    )


@pytest.mark.parametrize("values", SCENARIOS, ids=scenario_id)
def test_the_server_accepts_every_manifest_of_every_scenario(ready: Cluster, values: Path) -> None:
    # The helm test Pod is left out: it names the release's ServiceAccount, which a dry run
    # does not create (test_a_real_install... applies it after the install).
    manifests = render_text([values], extra=["--skip-tests"])
    done = dry_run(ready, manifests)
    assert done.returncode == 0, done.stderr
    # Nothing the restricted Pod Security Standard would refuse in a pod of the templates.
    assert "Warning" not in done.stderr, done.stderr
    accepted = sorted(
        line.removesuffix(" created (server dry run)")
        for line in done.stdout.splitlines()
        if line.endswith(" created (server dry run)")
    )
    assert len(accepted) == len(kinds_and_names(manifests)), done.stdout
    assert any(name.startswith("deployment.apps/") for name in accepted)


def test_a_real_install_upgrade_and_rollback(ready: Cluster, tools: dict[str, str]) -> None:
    ns = "release-test"
    namespace(ready, ns)
    values = ["-n", ns, *value_args([TOOLS])]
    done = helm(ready, tools, "install", RELEASE, str(CHART), *values)
    assert done.returncode == 0, done.stderr
    assert "NOTES:" in done.stdout

    def state() -> tuple[str, int, dict[str, Any]]:
        deployment = ready.get("deployment", RELEASE, "-n", ns)
        config = ready.get("configmap", f"{RELEASE}-config", "-n", ns)
        checksum = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        return (
            checksum,
            deployment["metadata"]["generation"],
            yaml.safe_load(config["data"]["sidecar.yaml"]),
        )

    installed, generation, config = state()
    assert config["profiles"]["default"] == {}
    listed = ready.get(
        "deployments,services,networkpolicies",
        "-n",
        ns,
        "-l",
        f"app.kubernetes.io/instance={RELEASE}",
    )
    names = sorted(f"{i['kind']}/{i['metadata']['name']}" for i in listed["items"])
    assert "Deployment/agent-sidecar-tool-orders" in names
    assert "Service/agent-sidecar-llm-simulator" in names
    assert "NetworkPolicy/agent-sidecar-tool-servers" in names

    # The helm test Pod, now that its ServiceAccount exists.
    test_pod = render_text(
        [TOOLS], extra=["--show-only", "templates/tests/test-health.yaml"], namespace=ns
    )
    done = dry_run(ready, test_pod, ns)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr

    done = helm(
        ready,
        tools,
        "upgrade",
        RELEASE,
        str(CHART),
        *values,
        "--set",
        "config.profiles.default.max_steps=3",
    )
    assert done.returncode == 0, done.stderr
    upgraded, upgraded_generation, config = state()
    assert config["profiles"]["default"] == {"max_steps": 3}
    assert upgraded != installed  # a new pod template: the pods roll
    assert upgraded_generation == generation + 1

    done = helm(
        ready,
        tools,
        "upgrade",
        RELEASE,
        str(CHART),
        *values,
        "--set",
        "config.profiles.default.max_steps=3",
        "--set",
        "toolServerDefaults.resources.limits.memory=300Mi",
    )
    assert done.returncode == 0, done.stderr
    assert state()[0] == upgraded  # no configuration change: the sidecar's pods stay

    done = helm(ready, tools, "rollback", RELEASE, "1", "-n", ns)
    assert done.returncode == 0, done.stderr
    rolled_back, _, config = state()
    assert rolled_back == installed
    assert config["profiles"]["default"] == {}
    history = json.loads(helm(ready, tools, "history", RELEASE, "-n", ns, "-o", "json").stdout)
    assert [h["revision"] for h in history] == [1, 2, 3, 4]
    assert history[-1]["status"] == "deployed"

    done = helm(ready, tools, "uninstall", RELEASE, "-n", ns)
    assert done.returncode == 0, done.stderr
    left = ready.get(
        "deployments,services,configmaps,networkpolicies",
        "-n",
        ns,
        "-l",
        f"app.kubernetes.io/instance={RELEASE}",
    )
    assert left["items"] == []


def notes(ready: Cluster, tools: dict[str, str], values: Sequence[Path]) -> str:
    done = helm(
        ready,
        tools,
        "install",
        RELEASE,
        str(CHART),
        "-n",
        NAMESPACE,
        "--dry-run=server",
        *value_args(values),
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split("NOTES:", 1)[1]


def test_notes_warn_about_risky_settings(ready: Cluster, tools: dict[str, str]) -> None:
    tls = notes(ready, tools, [TLS])
    assert "TLS on port 50051 (certificate from agent-sidecar-tls, client certificates" in tls
    assert "the probes use the plaintext health port 8086" in tls
    assert "Principals: checkout, support-console." in tls
    assert "Audit record: /var/log/agent-sidecar/audit.jsonl." in tls
    for absent in ("no TLS off loopback", "anonymous", "server.insecure"):
        assert absent not in tls

    simulated = notes(ready, tools, [TOOLS])
    assert "the model is the LLM simulator" in simulated
    assert "SQLite session store is on an emptyDir" in simulated
    assert "no TLS off loopback" in simulated
    assert "every caller is anonymous" in simulated
    assert "server.insecure: true (it lacks TLS and principals)" in simulated

    classic = notes(ready, tools, [CHART / "ci" / "sidecar-classic-values.yaml"])
    assert "2 application replicas, each with its own sidecar" in classic
    assert "no TLS off loopback" not in classic  # the application dials 127.0.0.1

    shared = notes(ready, tools, [CHART / "ci" / "postgres-values.yaml"])
    assert "SQLite" not in shared
    assert "replicas, each with its own" not in shared


@pytest.mark.parametrize(
    ("sets", "schema_refuses", "server_says"),
    [
        # A quantity the schema refuses, rendered past it: the server refuses it too.
        ({"resources.requests.cpu": "lots"}, True, "quantities must match the regular expression"),
        # A port the schema refuses, rendered past it: the server refuses it too.
        ({"port": "70000"}, True, "must be between 1 and 65535"),
        # A seccomp profile type the server does not know.
        ({"securityContext.seccompProfile.type": "Permissive"}, False, "Unsupported value"),
    ],
    ids=["cpu", "port", "seccomp"],
)
def test_the_server_refuses_a_bad_value(
    ready: Cluster, sets: dict[str, str], schema_refuses: bool, server_says: str
) -> None:
    if schema_refuses:
        with pytest.raises(RenderError):
            render_text([TOOLS], sets)
    manifests = render_text([TOOLS], sets, extra=["--skip-tests", "--skip-schema-validation"])
    done = dry_run(ready, manifests)
    assert done.returncode != 0
    assert server_says in done.stderr, done.stderr


def test_a_bad_quantity_fails_the_install_before_a_release_is_stored(
    ready: Cluster, tools: dict[str, str]
) -> None:
    ns = "bad-quantity"
    namespace(ready, ns)
    done = helm(
        ready,
        tools,
        "install",
        RELEASE,
        str(CHART),
        "-n",
        ns,
        *value_args([TOOLS], {"resources.limits.cpu": "lots"}),
    )
    assert done.returncode != 0
    assert "at '/resources/limits/cpu': 'lots' does not match pattern" in done.stderr
    assert len(done.stderr) < 400, done.stderr  # not the API server's 5,000 characters
    # Nothing was stored: no failed revision in the history, nothing to roll back.
    history = helm(ready, tools, "history", RELEASE, "-n", ns)
    assert history.returncode != 0
    assert "release: not found" in history.stderr
    assert json.loads(helm(ready, tools, "list", "-n", ns, "-a", "-o", "json").stdout) == []


def test_the_server_warns_about_a_pod_the_restricted_standard_would_refuse(
    ready: Cluster,
) -> None:
    # What the dry runs above assert the absence of.
    loosened = {"podSecurityContext.runAsNonRoot": "false"}
    done = dry_run(ready, render_text([TOOLS], loosened, extra=["--skip-tests"]))
    assert done.returncode == 0, done.stderr
    assert 'would violate PodSecurity "restricted:latest"' in done.stderr


def test_the_existing_deployment_patch_is_accepted_by_the_server(ready: Cluster) -> None:
    application = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "checkout"},
        "spec": {
            "selector": {"matchLabels": {"app": "checkout"}},
            "template": {
                "metadata": {"labels": {"app": "checkout"}},
                "spec": {
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 20000,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "checkout",
                            "image": "registry.example.com/checkout:3.1.0",
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }
    done = ready.kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(application))
    assert done.returncode == 0, done.stderr
    patch = CHART / "examples" / "existing-deployment-patch.yaml"
    done = ready.kubectl(
        "patch", "deployment", "checkout", "-n", NAMESPACE, "--patch-file", str(patch), "-o", "json"
    )
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr
    spec = json.loads(done.stdout)["spec"]["template"]["spec"]
    (sidecar,) = spec["initContainers"]
    assert (sidecar["name"], sidecar["restartPolicy"]) == ("agent-sidecar", "Always")
    assert [c["name"] for c in spec["containers"]] == ["checkout"]
    assert {v["name"] for v in spec["volumes"]} == {
        "agent-sidecar-config",
        "agent-sidecar-data",
        "agent-sidecar-tmp",
    }


def test_a_locked_down_release_installs_on_secrets_of_their_real_types(
    ready: Cluster, tools: dict[str, str], tmp_path: Path
) -> None:
    ns = "locked-down"
    namespace(ready, ns)
    ca = TestCA(tmp_path)
    served = ca.issue("agent-sidecar", dns=(f"{RELEASE}.{ns}.svc",), ips=())

    def b64(path: str) -> str:
        return base64.b64encode(Path(path).read_bytes()).decode()

    secrets = [
        {  # what cert-manager writes: a kubernetes.io/tls Secret with the CA beside
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "agent-sidecar-tls"},
            "type": "kubernetes.io/tls",
            "data": {
                "tls.crt": b64(served.cert_file),
                "tls.key": b64(served.key_file),
                "ca.crt": b64(ca.ca_file),
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "agent-sidecar-tokens"},
            "type": "Opaque",
            "stringData": {"support-console": "a-token-made-for-this-test"},
        },
    ]
    for secret in secrets:
        done = ready.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(secret))
        assert done.returncode == 0, done.stderr
    done = helm(ready, tools, "install", RELEASE, str(CHART), "-n", ns, *value_args([TLS]))
    assert done.returncode == 0, done.stderr
    deployment = ready.get("deployment", RELEASE, "-n", ns)
    spec = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    for name, secret in (("tls", "agent-sidecar-tls"), ("auth", "agent-sidecar-tokens")):
        assert volumes[name]["secret"]["secretName"] == secret
        # The Secret holds the keys the configuration names as files.
        stored = ready.get("secret", secret, "-n", ns)
        config = yaml.safe_load(
            ready.get("configmap", f"{RELEASE}-config", "-n", ns)["data"]["sidecar.yaml"]
        )
        files = (
            [config["server"]["tls"][k] for k in ("cert_file", "key_file", "client_ca_file")]
            if name == "tls"
            else [p["token_file"] for p in config["auth"]["principals"] if "token_file" in p]
        )
        assert {Path(f).name for f in files} == set(stored["data"]), name
    (container,) = spec["containers"]
    assert container["readinessProbe"]["grpc"] == {"port": 8086, "service": ""}
    service = ready.get("service", RELEASE, "-n", ns)
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "grpc": 50051,
        "health": 8086,
    }
    # The helm test pod, which checks health on the plaintext port.
    test_pod = render_text(
        [TLS], extra=["--show-only", "templates/tests/test-health.yaml"], namespace=ns
    )
    done = dry_run(ready, test_pod, ns)
    assert done.returncode == 0, done.stderr
    done = helm(ready, tools, "uninstall", RELEASE, "-n", ns)
    assert done.returncode == 0, done.stderr
