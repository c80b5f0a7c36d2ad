"""The chart's rendered output: what each scenario's manifests say, checked without a cluster.

Every scenario (helm/agent-sidecar/ci/*-values.yaml and the documented examples) is
rendered with the real helm; the sidecar's configuration in its ConfigMap is checked with
the sidecar's own validation (``sidecar.config.parse_config``) and its start-time check of
what the configuration exposes (``sidecar.security.exposure.check_exposure``), so the chart
never renders a key the sidecar would refuse, nor a listen address it would not start on.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.config import parse_config
from sidecar.errors import StartupError
from sidecar.security.exposure import check_exposure
from tests.deploy.helm_chart import (
    CHART,
    RELEASE,
    ROOT,
    SCENARIOS,
    RenderError,
    component,
    containers,
    env_of,
    of_kind,
    one,
    pod_spec,
    render,
    selects,
    sidecar_config,
    sidecar_container,
    sidecar_containers,
)

pytestmark = pytest.mark.timeout(900)  # the first render may build helm (make helm-path)

TOOLS = CHART / "ci" / "toolservers-values.yaml"
STANDALONE = CHART / "ci" / "standalone-values.yaml"
SIDECAR = CHART / "ci" / "sidecar-values.yaml"
CLASSIC = CHART / "ci" / "sidecar-classic-values.yaml"
TLS = CHART / "ci" / "tls-values.yaml"
POSTGRES = CHART / "ci" / "postgres-values.yaml"
AUTOSCALING = CHART / "ci" / "autoscaling-values.yaml"
EXISTING = CHART / "examples" / "existing-deployment-values.yaml"
KEY = {"modelKey.existingSecret": "model-api-key"}


def scenario_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name.removesuffix('-values.yaml')}"


@pytest.fixture(scope="module", params=SCENARIOS, ids=scenario_id)
def scenario(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render([request.param])


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return of_kind(docs, "Deployment")


def labels_of_pods(workload: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


def test_every_scenario_renders_a_configuration_the_sidecar_accepts(
    scenario: list[dict[str, Any]],
) -> None:
    config = parse_config(sidecar_config(scenario), source="the rendered ConfigMap")
    assert config.server.host == "0.0.0.0"
    for container in sidecar_containers(scenario):
        assert config.server.port == container["ports"][0]["containerPort"]
    # The check the sidecar makes at start on 0.0.0.0: it starts locked down (TLS and
    # principals) or because the configuration says insecure, and for no other reason.
    locked_down = config.server.tls is not None and bool(config.auth.principals)
    assert config.server.insecure is not locked_down
    warnings = check_exposure(config)
    assert bool(warnings) is not locked_down, warnings
    if not locked_down:
        strict = config.server.model_copy(update={"insecure": False})
        with pytest.raises(StartupError, match=r"server\.insecure"):
            check_exposure(config.model_copy(update={"server": strict}))


def test_every_probe_is_grpc_on_the_port_the_server_listens_on(
    scenario: list[dict[str, Any]],
) -> None:
    checked = 0
    for workload in workloads(scenario):
        for container in containers(workload):
            if container["name"] not in ("agent-sidecar", "tool-server"):
                continue
            grpc_port = next(p for p in container["ports"] if p["name"] == "grpc")
            probed = grpc_port["containerPort"]
            server = sidecar_config(scenario)["server"]
            if container["name"] == "agent-sidecar" and "tls" in server:
                # The kubelet's probes speak no TLS: they dial the plaintext health port.
                health = next(p for p in container["ports"] if p["name"] == "health")
                assert health["containerPort"] == server["health_port"] != probed
                probed = health["containerPort"]
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                assert container[probe]["grpc"] == {"port": probed}, probe
                checked += 1
            if container["name"] == "tool-server":
                args = container["args"]
                assert args[args.index("--port") + 1] == str(grpc_port["containerPort"])
    assert checked >= 3


def test_every_container_runs_locked_down(scenario: list[dict[str, Any]]) -> None:
    for workload in workloads(scenario):
        spec = pod_spec(workload)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["automountServiceAccountToken"] is False
        volumes = {v["name"]: v for v in spec["volumes"]}
        for container in containers(workload):
            if container["name"] == "application":
                continue  # the application's own; the chart's default applies unless set
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}
            writable = {
                m["mountPath"]
                for m in container.get("volumeMounts", [])
                if not m.get("readOnly") and "configMap" not in volumes[m["name"]]
            }
            allowed = {
                "/tmp",
                "/var/lib/agent-sidecar",
                "/var/run/agent-sidecar",
                "/var/log/agent-sidecar",
            }
            assert writable <= allowed, writable
            for mount in container.get("volumeMounts", []):
                if "secret" in volumes[mount["name"]]:
                    assert mount["readOnly"] is True


def test_no_scenario_renders_a_secret_or_a_credential(scenario: list[dict[str, Any]]) -> None:
    assert of_kind(scenario, "Secret") == []
    for workload in workloads(scenario):
        for container in containers(workload):
            for name, env in env_of(container).items():
                if name in ("GROQ_API_KEY", "SIDECAR_POSTGRES_DSN"):
                    assert "valueFrom" in env or env.get("value") == "", name


def test_the_model_key_and_the_dsn_come_from_their_secrets() -> None:
    env = env_of(sidecar_container(render([STANDALONE])))
    assert env["GROQ_API_KEY"] == {
        "name": "GROQ_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "model-api-key", "key": "groq"}},
    }
    docs = render([POSTGRES], {"config.sessions.postgres.dsn_env": "PG_DSN"})
    env = env_of(sidecar_container(docs))
    assert env["PG_DSN"]["valueFrom"] == {
        "secretKeyRef": {"name": "agent-sidecar-postgres", "key": "dsn"}
    }
    assert sidecar_config(docs)["sessions"]["postgres"]["dsn_env"] == "PG_DSN"


def test_a_renamed_key_variable_is_the_one_the_secret_fills() -> None:
    docs = render([STANDALONE], {"config.model.api_key_env": "OPENAI_API_KEY"})
    env = env_of(sidecar_container(docs))
    assert "GROQ_API_KEY" not in env
    assert env["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "model-api-key"


def test_config_values_reach_the_configmap() -> None:
    config = sidecar_config(render([STANDALONE]))
    assert config["profiles"]["default"] == {
        "max_steps": 6,
        "budget": {"total": 20, "policy": "answer"},
    }
    assert config["model"] == {
        "model": "openai/gpt-oss-120b",
        "temperature": 0.2,
        "max_tokens": 1024,
    }
    assert config["server"]["grace_period"] == 20
    assert config["sessions"] == {
        "store": "sqlite",
        "idle_ttl": 86400,
        "sqlite": {"path": "/var/lib/agent-sidecar/sessions.db"},
    }


def test_the_sqlite_file_lives_on_the_data_volume() -> None:
    docs = render([STANDALONE])
    path = sidecar_config(docs)["sessions"]["sqlite"]["path"]
    mounts = {m["mountPath"]: m["name"] for m in sidecar_container(docs)["volumeMounts"]}
    assert mounts[str(Path(path).parent)] == "data"
    deployment = one(docs, "Deployment", RELEASE)
    volumes = {v["name"]: v for v in pod_spec(deployment)["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == f"{RELEASE}-data"
    claim = one(docs, "PersistentVolumeClaim", f"{RELEASE}-data")
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    # One pod at a time may hold the file's lock.
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}


def test_tool_servers_are_wired_through_their_services() -> None:
    docs = render([TOOLS])
    entries = {t["name"]: t for t in sidecar_config(docs)["tool_servers"]}
    assert list(entries) == ["orders", "logistics", "shop"]
    assert entries["logistics"]["timeout"] == 5
    assert entries["logistics"]["retry"] == {"max_attempts": 2}
    for name, entry in entries.items():
        host, port = entry["address"].rsplit(":", 1)
        service_name, namespace, svc, *domain = host.split(".")
        assert (namespace, svc, ".".join(domain)) == ("agents", "svc", "cluster.local")
        service = one(docs, "Service", service_name)
        assert service["spec"]["ports"][0]["port"] == int(port)
        backing = [
            w for w in workloads(docs) if selects(service["spec"]["selector"], labels_of_pods(w))
        ]
        assert [w["metadata"]["name"] for w in backing] == [f"{RELEASE}-tool-{name}"]
        (container,) = containers(backing[0])
        target = service["spec"]["ports"][0]["targetPort"]
        assert [p["containerPort"] for p in container["ports"] if p["name"] == target] == [
            int(port)
        ]
    shop = one(docs, "Deployment", f"{RELEASE}-tool-shop")
    assert shop["spec"]["replicas"] == 2


def test_tool_servers_outside_the_chart_are_kept_before_the_charts_own() -> None:
    docs = render(
        [TOOLS],
        {
            "config.tool_servers[0].name": "billing",
            "config.tool_servers[0].address": "billing.finance:7000",
        },
    )
    names = [t["name"] for t in sidecar_config(docs)["tool_servers"]]
    assert names == ["billing", "orders", "logistics", "shop"]
    with pytest.raises(RenderError, match='tool server name "orders" is used twice'):
        render(
            [TOOLS],
            {"config.tool_servers[0].name": "orders", "config.tool_servers[0].address": "x:1"},
        )


def test_a_configuration_change_rolls_the_pods_and_nothing_else_does() -> None:
    def checksum(docs: list[dict[str, Any]]) -> str:
        deployment = one(docs, "Deployment", RELEASE)
        value: str = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        return value

    before = checksum(render([STANDALONE]))
    assert checksum(render([STANDALONE])) == before
    assert checksum(render([STANDALONE], {"resources.limits.memory": "1Gi"})) == before
    assert checksum(render([STANDALONE], {"config.profiles.default.max_steps": "7"})) != before


def test_the_standalone_network_policy_admits_only_the_clients_on_the_grpc_port() -> None:
    docs = render([STANDALONE])
    policy = one(docs, "NetworkPolicy", RELEASE)
    deployment = one(docs, "Deployment", RELEASE)
    assert selects(policy["spec"]["podSelector"]["matchLabels"], labels_of_pods(deployment))
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": 50051, "protocol": "TCP"}]
    assert rule["from"] == [
        {"podSelector": {"matchLabels": {"app": "checkout"}}},
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "support"}},
            "podSelector": {"matchLabels": {"app": "support-bot"}},
        },
    ]
    default = one(render([TOOLS]), "NetworkPolicy", RELEASE)
    assert default["spec"]["ingress"][0]["from"] == [
        {"podSelector": {"matchLabels": {f"{RELEASE}-client": "true"}}}
    ]


def test_only_the_sidecar_pods_reach_the_tool_servers() -> None:
    for values in (TOOLS, SIDECAR):
        docs = render([values])
        policy = one(docs, "NetworkPolicy", f"{RELEASE}-tool-servers")
        guarded = policy["spec"]["podSelector"]["matchLabels"]
        (rule,) = policy["spec"]["ingress"]
        (peer,) = rule["from"]
        callers = peer["podSelector"]["matchLabels"]
        for workload in workloads(docs):
            labels = labels_of_pods(workload)
            is_tool_server = component(workload) == "tool-server"
            carries_sidecar = any(c["name"] == "agent-sidecar" for c in containers(workload))
            assert selects(guarded, labels) == is_tool_server, workload["metadata"]["name"]
            assert selects(callers, labels) == carries_sidecar, workload["metadata"]["name"]
        ports = sorted(p["port"] for p in rule["ports"])
        wanted = sorted(t["port"] for t in yaml.safe_load(values.read_text())["toolServers"])
        assert ports == wanted


def test_in_sidecar_mode_other_pods_reach_only_the_applications_ports() -> None:
    docs = render([SIDECAR])
    policy = one(docs, "NetworkPolicy", RELEASE)
    application = one(docs, "Deployment", RELEASE)
    assert selects(policy["spec"]["podSelector"]["matchLabels"], labels_of_pods(application))
    assert policy["spec"]["ingress"] == [{"ports": [{"port": 8080, "protocol": "TCP"}]}]


def test_sidecar_mode_runs_a_native_sidecar_the_application_dials_on_a_shared_socket() -> None:
    docs = render([SIDECAR])
    application = one(docs, "Deployment", RELEASE)
    spec = pod_spec(application)
    (sidecar,) = spec["initContainers"]
    assert sidecar["name"] == "agent-sidecar"
    assert sidecar["restartPolicy"] == "Always"
    assert "lifecycle" not in sidecar  # it stops after the application: no preStop delay
    (app,) = spec["containers"]
    # The sidecar listens on a socket in a directory both containers mount from one
    # emptyDir, and the application is given that socket's address.
    path = parse_config(sidecar_config(docs)).server.unix_socket
    assert path == "/var/run/agent-sidecar/sidecar.sock"
    assert env_of(app)["AGENT_SIDECAR_ADDRESS"]["value"] == f"unix://{path}"
    shared = {"name": "socket", "mountPath": str(Path(path).parent)}
    assert shared in app["volumeMounts"]
    assert shared in sidecar["volumeMounts"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes["socket"]
    # Without socket.enabled: no socket, no shared directory, the loopback address.
    plain = render([SIDECAR], {"socket.enabled": "false"})
    (plain_app,) = pod_spec(one(plain, "Deployment", RELEASE))["containers"]
    assert env_of(plain_app)["AGENT_SIDECAR_ADDRESS"]["value"] == "127.0.0.1:50051"
    assert "volumeMounts" not in plain_app
    assert "unix_socket" not in sidecar_config(plain)["server"]
    # The application's grace covers its own drain, then the sidecar's.
    assert spec["terminationGracePeriodSeconds"] == 5 + 10 + 20 + 5


def test_without_native_sidecars_the_sidecar_is_a_second_container_with_a_prestop() -> None:
    docs = render([CLASSIC])
    spec = pod_spec(one(docs, "Deployment", RELEASE))
    assert "initContainers" not in spec
    assert [c["name"] for c in spec["containers"]] == ["application", "agent-sidecar"]
    sidecar = spec["containers"][1]
    assert sidecar["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "5"]


def test_the_standalone_grace_period_covers_the_prestop_and_the_drain() -> None:
    docs = render([STANDALONE])
    spec = pod_spec(one(docs, "Deployment", RELEASE))
    assert sidecar_container(docs)["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "5"]
    assert spec["terminationGracePeriodSeconds"] == 5 + 20 + 5
    longer = render([STANDALONE], {"terminationGracePeriodSeconds": "60"})
    assert pod_spec(one(longer, "Deployment", RELEASE))["terminationGracePeriodSeconds"] == 60
    with pytest.raises(RenderError, match="must exceed preStopSeconds"):
        render([STANDALONE], {"terminationGracePeriodSeconds": "25"})


def test_several_replicas_need_the_shared_store() -> None:
    with pytest.raises(RenderError, match="3 replicas need the shared session store"):
        render([STANDALONE], {"replicaCount": "3"})
    with pytest.raises(RenderError, match="8 replicas need the shared session store"):
        render([AUTOSCALING], {"config.sessions.store": "sqlite"})
    docs = render([POSTGRES])
    assert one(docs, "Deployment", RELEASE)["spec"]["replicas"] == 3
    assert one(docs, "PodDisruptionBudget", RELEASE)["spec"]["maxUnavailable"] == 1
    assert one(docs, "Service", RELEASE)["spec"]["clusterIP"] == "None"


def test_autoscaling_leaves_the_replicas_to_the_autoscaler() -> None:
    docs = render([AUTOSCALING])
    deployment = one(docs, "Deployment", RELEASE)
    assert "replicas" not in deployment["spec"]
    hpa = one(docs, "HorizontalPodAutoscaler", RELEASE)
    assert hpa["spec"]["scaleTargetRef"]["name"] == RELEASE
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 8)
    assert one(docs, "PodDisruptionBudget", RELEASE)


def test_metrics_are_served_on_all_interfaces_and_scraped_through_a_service_monitor() -> None:
    docs = render([AUTOSCALING])
    assert sidecar_config(docs)["telemetry"]["metrics"] == {
        "enabled": True,
        "host": "0.0.0.0",
        "port": 9464,
    }
    service = one(docs, "Service", f"{RELEASE}-metrics")
    monitor = one(docs, "ServiceMonitor", RELEASE)
    assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert selects(service["spec"]["selector"], labels_of_pods(one(docs, "Deployment", RELEASE)))
    policy = one(docs, "NetworkPolicy", RELEASE)
    assert policy["spec"]["ingress"][1] == {
        "ports": [{"port": 9464, "protocol": "TCP"}],
        "from": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        ],
    }


def test_a_principals_callback_secret_operator_and_background_settings_reach_the_sidecar() -> None:
    # The secret itself comes from the pod's environment (extraEnv from a Secret).
    sets = {
        "auth.principals[0].callback_secret_env": "CHECKOUT_CALLBACKS",
        "auth.principals[1].callback_secret_file": "/etc/callbacks/console",
        "auth.principals[1].quota.background_runs": "50",
        "auth.principals[1].operator": "true",
        "config.background.max_running": "16",
        "config.background.callbacks.allowed_hosts[0]": "hooks.example.com",
    }
    parsed = parse_config(sidecar_config(render([TLS], sets)))
    principals = {p.name: p for p in parsed.auth.principals}
    assert principals["checkout"].callback_secret_env == "CHECKOUT_CALLBACKS"
    assert principals["support-console"].callback_secret_file == "/etc/callbacks/console"
    assert principals["support-console"].quota.background_runs == 50
    assert principals["support-console"].operator and not principals["checkout"].operator
    assert parsed.background.max_running == 16
    assert parsed.background.callbacks.allowed_hosts == ["hooks.example.com"]


def test_tls_principals_and_the_audit_record_are_rendered_from_their_secrets() -> None:
    docs = render([TLS])
    container = sidecar_container(docs)
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec(one(docs, "Deployment", RELEASE))["volumes"]}
    config = sidecar_config(docs)
    parsed = parse_config(config)

    def mounted_from(path: str) -> dict[str, Any]:
        """The volume holding ``path``, by the deepest mount above it."""
        holders = [m for m in mounts.values() if path.startswith(m["mountPath"] + "/")]
        mount = max(holders, key=lambda m: len(m["mountPath"]))
        volume: dict[str, Any] = volumes[mount["name"]]
        return volume

    # server.tls: the kubernetes.io/tls Secret's three keys, ca.crt as the client CA.
    assert parsed.server.tls is not None
    tls_files = {
        parsed.server.tls.cert_file: "tls.crt",
        parsed.server.tls.key_file: "tls.key",
        parsed.server.tls.client_ca_file: "ca.crt",
    }
    for path, key in tls_files.items():
        assert path is not None and Path(path).name == key
        assert mounted_from(path)["secret"]["secretName"] == "agent-sidecar-tls"
    assert mounts["tls"]["readOnly"] is True
    assert parsed.server.health_port == 8086
    assert parsed.server.insecure is False
    # Principals: a token file per token principal, from the Secret mounted whole (no
    # subPath), so that an update of the Secret reaches the file and rotates the token.
    principals = {p.name: p for p in parsed.auth.principals}
    assert set(principals) == {"checkout", "support-console"}
    checkout, console = principals["checkout"], principals["support-console"]
    assert checkout.token_file is None
    assert checkout.san == "spiffe://cluster.local/ns/shop/sa/checkout"
    assert checkout.profiles == ["default"]
    assert checkout.quota.concurrent_runs == 20
    assert checkout.quota.runs_per_minute == 600
    assert console.token_file == "/etc/agent-sidecar/auth/support-console"
    assert console.profiles == ["default", "structured"]
    assert mounted_from(console.token_file)["secret"]["secretName"] == "agent-sidecar-tokens"
    assert all("subPath" not in m for m in mounts.values())
    # The audit file's directory is a writable volume of its own.
    assert parsed.auth.audit.path == "/var/log/agent-sidecar/audit.jsonl"
    assert mounted_from(parsed.auth.audit.path) == {"name": "audit", "emptyDir": {}}
    assert not mounts["audit"].get("readOnly")
    assert "token_sha256" not in str(config) and "token_env" not in str(config)


def test_the_health_port_is_reachable_where_the_grpc_port_is_when_tls_is_on() -> None:
    docs = render([TLS])
    service = one(docs, "Service", RELEASE)
    assert {"name": "health", "port": 8086, "targetPort": "health", "protocol": "TCP"} in (
        service["spec"]["ports"]
    )
    (rule,) = one(docs, "NetworkPolicy", RELEASE)["spec"]["ingress"]
    assert rule["ports"] == [
        {"port": 50051, "protocol": "TCP"},
        {"port": 8086, "protocol": "TCP"},
    ]
    # `helm test` checks health without TLS, on the health port.
    (test_pod,) = of_kind(docs, "Pod")
    (check,) = test_pod["spec"]["containers"]
    assert f'wait_serving("{RELEASE}:8086"' in check["command"][-1]
    # Without TLS there is no health port: the probes and the test use the gRPC port.
    plain = render([TOOLS])
    assert [p["name"] for p in one(plain, "Service", RELEASE)["spec"]["ports"]] == ["grpc"]
    assert "health_port" not in sidecar_config(plain)["server"]
    (plain_pod,) = of_kind(plain, "Pod")
    assert f'wait_serving("{RELEASE}:50051"' in plain_pod["spec"]["containers"][0]["command"][-1]


def test_without_tls_and_principals_the_configuration_says_insecure() -> None:
    insecure = {
        "no tls, no principals": {},
        "tls without principals": {"tls.enabled": "true", "tls.existingSecret": "tls"},
        "principals without tls": {
            "auth.principals[0].name": "checkout",
            "auth.existingSecret": "tokens",
        },
    }
    for case, sets in insecure.items():
        server = sidecar_config(render([TOOLS], sets))["server"]
        assert server["insecure"] is True, case
    assert "insecure" not in sidecar_config(render([TLS]))["server"]
    # TLS and a certificate-only principal are locked down too.
    docs = render(
        [TLS],
        {
            "auth.existingSecret": "",
            "auth.principals[1].token": "false",
            "auth.principals[1].san": "spiffe://cluster.local/ns/ops/sa/console",
        },
    )
    config = parse_config(sidecar_config(docs))
    assert config.server.insecure is False
    assert [p.token_file for p in config.auth.principals] == [None, None]
    assert "auth" not in {m["name"] for m in sidecar_container(docs)["volumeMounts"]}


def test_an_audit_record_on_stdout_or_the_data_volume_needs_no_volume_of_its_own() -> None:
    for path in ("-", "/var/lib/agent-sidecar/audit.jsonl"):
        docs = render([TLS], {"auth.audit.path": path})
        assert sidecar_config(docs)["auth"]["audit"] == {"path": path}
        assert "audit" not in {m["name"] for m in sidecar_container(docs)["volumeMounts"]}
    docs = render([TLS], {"auth.audit.path": ""})
    assert "audit" not in sidecar_config(docs)["auth"]


def test_the_chart_owns_the_listen_address_and_refuses_it_under_config() -> None:
    with pytest.raises(RenderError, match="additional properties 'port' not allowed"):
        render([STANDALONE], {"config.server.port": "9000"})
    for owned in ("tls.cert_file", "insecure", "health_port", "unix_socket"):
        with pytest.raises(RenderError, match="additional properties"):
            render([STANDALONE], {f"config.server.{owned}": "x"})
    with pytest.raises(RenderError, match="additional properties 'auth' not allowed"):
        render([STANDALONE], {"config.auth.audit.path": "-"})
    with pytest.raises(RenderError, match="additional properties 'modle' not allowed"):
        render([STANDALONE], {"config.model.modle": "typo"})
    with pytest.raises(RenderError, match="additional properties 'address' not allowed"):
        render([TOOLS], {"toolServers[0].config.address": "elsewhere:1"})


def test_the_defaults_ask_for_a_model_key_before_anything_is_rendered() -> None:
    with pytest.raises(RenderError, match=re.escape("set modelKey.existingSecret")):
        render()
    assert render(sets=KEY)  # a key is all the defaults need


def test_settings_that_cannot_work_are_refused_with_what_to_do() -> None:
    refusals = {
        "postgres without its secret": (
            {"config.sessions.store": "postgres"},
            "postgres.existingSecret",
        ),
        "tls without a secret": ({"tls.enabled": "true"}, "tls.enabled needs tls.existingSecret"),
        "a token principal without the Secret": (
            {"auth.principals[0].name": "checkout"},
            "auth.principals[0] (checkout) authenticates with a token: set auth.existingSecret",
        ),
        "a principal that cannot authenticate": (
            {"auth.principals[0].name": "checkout", "auth.principals[0].token": "false"},
            "has token: false and no san",
        ),
        "a san without mutual TLS": (
            {
                "auth.principals[0].name": "checkout",
                "auth.principals[0].token": "false",
                "auth.principals[0].san": "spiffe://x/checkout",
            },
            "it needs tls.enabled and tls.clientAuth",
        ),
        "a principal name that is no Secret key": (
            {"auth.principals[0].name": "ops@console", "auth.existingSecret": "tokens"},
            '"ops@console" is no valid Secret key',
        ),
        "a token Secret nobody uses": (
            {"auth.existingSecret": "tokens"},
            "no entry of auth.principals uses a token",
        ),
        "an audit file on the configuration's volume": (
            {"auth.audit.path": "/etc/agent-sidecar/audit.jsonl"},
            "its directory /etc/agent-sidecar belongs to another volume",
        ),
        "the health port on the gRPC port": (
            {"tls.enabled": "true", "tls.existingSecret": "t", "healthPort": "50051"},
            "healthPort must differ from port",
        ),
        "the A2A listener on the MCP port": (
            {
                "mcp.enabled": "true",
                "a2aHttp.enabled": "true",
                "a2aHttp.port": "8765",
                "config.a2a.skills[0].profile": "default",
                "config.a2a.skills[0].id": "a",
                "config.a2a.skills[0].name": "A",
                "config.a2a.skills[0].description": "d",
            },
            "mcp.port and a2aHttp.port are both 8765",
        ),
        "metrics on the gRPC port": (
            {"metrics.enabled": "true", "metrics.port": "50051"},
            "port and metrics.port are both 50051",
        ),
        "a socket off sidecar mode": ({"socket.enabled": "true"}, "it needs mode: sidecar"),
        "an unknown mode": ({"mode": "daemonset"}, "mode"),
        "an existing Deployment without its labels": (
            {"mode": "sidecar", "application.enabled": "false"},
            "needs application.podSelector",
        ),
        "the simulator and a base_url": (
            {"devSimulator.enabled": "true", "config.model.base_url": "http://x/v1"},
            "leave config.model.base_url unset",
        ),
    }
    for case, (sets, message) in refusals.items():
        with pytest.raises(RenderError, match=re.escape(message)):
            render(sets={**KEY, **sets})
        assert case


def test_the_existing_deployment_patch_adds_the_container_the_chart_renders() -> None:
    patch = yaml.safe_load((CHART / "examples" / "existing-deployment-patch.yaml").read_text())
    (patched,) = patch["spec"]["template"]["spec"]["initContainers"]
    rendered = sidecar_container(render([SIDECAR], {"socket.enabled": "false"}))
    probes = ("startupProbe", "readinessProbe", "livenessProbe")
    for key in (
        "name",
        "image",
        "imagePullPolicy",
        "command",
        "ports",
        "env",
        "resources",
        *probes,
    ):
        assert patched[key] == rendered[key], key
    assert patched["restartPolicy"] == "Always"
    # The patched pod's securityContext is the application's: the container sets its user.
    own_user = ("runAsUser", "runAsGroup")
    context = {k: v for k, v in patched["securityContext"].items() if k not in own_user}
    assert context == rendered["securityContext"]
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in patched["volumeMounts"]}
    assert mounts == {m["mountPath"]: m.get("readOnly", False) for m in rendered["volumeMounts"]}
    volumes = {v["name"]: v for v in patch["spec"]["template"]["spec"]["volumes"]}
    assert volumes["agent-sidecar-config"]["configMap"]["name"] == f"{RELEASE}-config"
    docs = render([EXISTING])
    assert one(docs, "ConfigMap", f"{RELEASE}-config")
    assert [d for d in workloads(docs) if component(d) != "tool-server"] == []


def test_the_image_versions_agree_with_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert re.search(r"^ARG VERSION=(\S+)$", dockerfile, re.M)[1] == project["version"]  # type: ignore[index]
    assert chart["appVersion"] == project["version"]
    pinned = {
        re.split(r"==", line)[0].lower().replace("_", "-")
        for line in (ROOT / "deploy" / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    for requirement in project["dependencies"]:
        name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        assert name in pinned, f"deploy/constraints.txt lacks {name}: run make image-constraints"


# -- volumes, environment and the pod settings every cluster asks for ----------------------

MODEL_CA = CHART / "ci" / "model-ca-values.yaml"


def mounted_volume(container: dict[str, Any], spec: dict[str, Any], path: str) -> dict[str, Any]:
    """The volume that holds ``path`` in ``container``, by the deepest mount above it."""
    holders = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    assert holders, f"nothing is mounted above {path}"
    mount = max(holders, key=lambda m: len(m["mountPath"]))
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    return {"mount": mount, **volume}


def test_the_model_ca_file_is_mounted_from_extra_volumes_in_standalone_mode() -> None:
    docs = render([MODEL_CA])
    config = parse_config(sidecar_config(docs))
    assert config.model.ca_file == "/etc/model-ca/ca.crt"
    spec = pod_spec(one(docs, "Deployment", RELEASE))
    held = mounted_volume(sidecar_container(docs), spec, config.model.ca_file)
    assert held["secret"] == {"secretName": "model-ca", "defaultMode": 0o440}
    assert held["mount"]["readOnly"] is True
    # The chart's own volumes are all still there, beside the extra one.
    assert [v["name"] for v in spec["volumes"]] == ["config", "data", "tmp", "model-ca"]
    # Without the mount the file would not exist in the pod: the schema lets the key
    # through (it cannot know), the volume is what makes it real.
    bare = render([MODEL_CA], {"extraVolumes": "null", "extraVolumeMounts": "null"})
    assert "model-ca" not in {m["name"] for m in sidecar_container(bare)["volumeMounts"]}


def test_extra_volumes_reach_the_application_pod_in_sidecar_mode() -> None:
    docs = render(
        [SIDECAR],
        {
            "extraVolumes[0].name": "model-ca",
            "extraVolumes[0].configMap.name": "company-ca",
            "extraVolumeMounts[0].name": "model-ca",
            "extraVolumeMounts[0].mountPath": "/etc/model-ca",
            "extraVolumeMounts[0].readOnly": "true",
        },
    )
    spec = pod_spec(one(docs, "Deployment", RELEASE))
    held = mounted_volume(sidecar_container(docs), spec, "/etc/model-ca/ca.crt")
    assert held["configMap"] == {"name": "company-ca"}
    (app,) = spec["containers"]
    assert "model-ca" not in {m["name"] for m in app["volumeMounts"]}  # the sidecar's alone


def test_extra_env_and_env_from_reach_the_sidecar_after_the_charts_own() -> None:
    docs = render([MODEL_CA], {"env[0].name": "EARLIER", "env[0].value": "1"})
    container = sidecar_container(docs)
    names = [e["name"] for e in container["env"]]
    assert names == [
        "PYTHONDONTWRITEBYTECODE",
        "AGENT_SIDECAR_LOG_LEVEL",
        "AGENT_SIDECAR_LOG_FORMAT",
        "GROQ_API_KEY",
        "EARLIER",
        "DEPLOYMENT_ENVIRONMENT",
        "POD_NAMESPACE",
    ]
    assert env_of(container)["POD_NAMESPACE"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.namespace"}
    }
    assert container["envFrom"] == [{"configMapRef": {"name": "egress-proxy", "optional": True}}]
    assert "envFrom" not in sidecar_container(render([STANDALONE]))


def test_the_log_level_and_format_reach_the_sidecar_and_others_are_refused() -> None:
    plain = env_of(sidecar_container(render([STANDALONE])))
    assert plain["AGENT_SIDECAR_LOG_LEVEL"]["value"] == "WARNING"
    assert plain["AGENT_SIDECAR_LOG_FORMAT"]["value"] == "text"
    told = env_of(
        sidecar_container(render([STANDALONE], {"log.level": "INFO", "log.format": "json"}))
    )
    assert told["AGENT_SIDECAR_LOG_LEVEL"]["value"] == "INFO"
    assert told["AGENT_SIDECAR_LOG_FORMAT"]["value"] == "json"
    for key, value in (("log.level", "LOUD"), ("log.format", "xml")):
        with pytest.raises(RenderError, match=key.split(".")[1]):
            render([STANDALONE], {key: value})


def test_pod_settings_reach_every_pod_and_tool_servers_may_override_them() -> None:
    docs = render([MODEL_CA])
    sidecar_pods = one(docs, "Deployment", RELEASE)["spec"]["template"]
    assert sidecar_pods["metadata"]["labels"]["team"] == "support"
    assert (
        sidecar_pods["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"]
        == "true"
    )
    assert "checksum/config" in sidecar_pods["metadata"]["annotations"]
    assert sidecar_pods["spec"]["priorityClassName"] == "agents-high"
    orders = one(docs, "Deployment", f"{RELEASE}-tool-orders")["spec"]["template"]
    assert orders["metadata"]["labels"]["team"] == "support"  # toolServerDefaults.podLabels
    assert orders["metadata"]["annotations"] == {"prometheus.io/scrape": "false"}
    assert orders["spec"]["priorityClassName"] == "agents-normal"
    # Without an override, every pod of the chart takes priorityClassName.
    simulated = render([TOOLS], {"priorityClassName": "agents-high"})
    classes = {
        w["metadata"]["name"]: pod_spec(w).get("priorityClassName") for w in workloads(simulated)
    }
    assert set(classes.values()) == {"agents-high"}, classes
    (test_pod,) = of_kind(simulated, "Pod")
    assert test_pod["spec"]["priorityClassName"] == "agents-high"
    assert all("priorityClassName" not in pod_spec(w) for w in workloads(render([TOOLS])))


def test_image_pull_secrets_take_objects_and_plain_names_alike() -> None:
    docs = render([MODEL_CA])
    for workload in workloads(docs):
        assert pod_spec(workload)["imagePullSecrets"] == [
            {"name": "registry-credentials"},
            {"name": "mirror-credentials"},
        ], workload["metadata"]["name"]
    with pytest.raises(RenderError, match="imagePullSecrets/0"):
        render([STANDALONE], {"imagePullSecrets[0].secret": "x"})


def test_spread_constraints_without_a_selector_select_each_deployments_own_pods() -> None:
    docs = render([MODEL_CA])
    for workload in workloads(docs):
        (constraint,) = pod_spec(workload)["topologySpreadConstraints"]
        assert constraint["topologyKey"] == "topology.kubernetes.io/zone"
        own = workload["spec"]["selector"]["matchLabels"]
        assert constraint["labelSelector"] == {"matchLabels": own}
        assert selects(own, labels_of_pods(workload))
    # A constraint with a selector of its own is kept as it is, in every Deployment.
    mine = {"matchLabels": {"app": "checkout"}}
    docs = render(
        [TOOLS],
        {
            "topologySpreadConstraints[0].maxSkew": "1",
            "topologySpreadConstraints[0].topologyKey": "kubernetes.io/hostname",
            "topologySpreadConstraints[0].whenUnsatisfiable": "DoNotSchedule",
            "topologySpreadConstraints[0].labelSelector.matchLabels.app": "checkout",
        },
    )
    for workload in workloads(docs):
        (constraint,) = pod_spec(workload)["topologySpreadConstraints"]
        assert constraint["labelSelector"] == mine
    (test_pod,) = of_kind(docs, "Pod")
    assert "topologySpreadConstraints" not in test_pod["spec"]


def test_the_global_registry_prefixes_every_image_that_names_no_registry() -> None:
    def images(docs: list[dict[str, Any]]) -> set[str]:
        found = {c["image"] for w in workloads(docs) for c in containers(w)}
        return found | {c["image"] for p in of_kind(docs, "Pod") for c in p["spec"]["containers"]}

    mirrored = images(render([TOOLS], {"global.imageRegistry": "mirror.example:5000/"}))
    assert mirrored == {
        "mirror.example:5000/agent-sidecar/sidecar:0.1.0",
        "mirror.example:5000/agent-sidecar/toolserver:0.1.0",
        "mirror.example:5000/agent-sidecar/dev:0.1.0",
    }
    # A repository that names its registry keeps it: the application's, here.
    sidecar_mode = images(render([SIDECAR], {"global.imageRegistry": "mirror.example"}))
    assert "registry.example.com/shop-frontend:2.4.1" in sidecar_mode
    assert "mirror.example/agent-sidecar/sidecar:0.1.0" in sidecar_mode
    for repository in ("localhost/agent", "localhost:5000/agent", "quay.io/agent"):
        docs = render(
            [STANDALONE], {"global.imageRegistry": "mirror.example", "image.repository": repository}
        )
        assert sidecar_container(docs)["image"] == f"{repository}:0.1.0"
    docs = render(
        [STANDALONE], {"global.imageRegistry": "mirror.example", "image.repository": "sidecar"}
    )
    assert sidecar_container(docs)["image"] == "mirror.example/sidecar:0.1.0"
    assert images(render([TOOLS])) == {
        "agent-sidecar/sidecar:0.1.0",
        "agent-sidecar/toolserver:0.1.0",
        "agent-sidecar/dev:0.1.0",
    }
    with pytest.raises(RenderError, match="global/imageRegistry"):
        render([STANDALONE], {"global.imageRegistry": "https://mirror.example"})


def test_an_application_image_takes_a_digest_and_defaults_to_latest() -> None:
    digest = "sha256:" + "a" * 64
    docs = render([SIDECAR], {"application.image.digest": digest})
    (app,) = pod_spec(one(docs, "Deployment", RELEASE))["containers"]
    assert app["image"] == f"registry.example.com/shop-frontend@{digest}"
    docs = render([SIDECAR], {"application.image.tag": ""})
    (app,) = pod_spec(one(docs, "Deployment", RELEASE))["containers"]
    assert app["image"] == "registry.example.com/shop-frontend:latest"


def test_tool_servers_take_probes_volumes_environment_and_resources() -> None:
    docs = render([MODEL_CA])
    (orders,) = containers(one(docs, "Deployment", f"{RELEASE}-tool-orders"))
    # Probes: the defaults, toolServerDefaults.probes over them, the entry's over those.
    assert orders["startupProbe"] == {
        "grpc": {"port": 50061},
        "periodSeconds": 2,
        "failureThreshold": 30,
    }
    assert orders["readinessProbe"] == {
        "grpc": {"port": 50061},
        "periodSeconds": 3,
        "failureThreshold": 2,
    }
    assert orders["livenessProbe"] == {
        "grpc": {"port": 50061},
        "periodSeconds": 20,
        "failureThreshold": 3,
        "timeoutSeconds": 3,
    }
    assert orders["resources"] == {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"cpu": "500m", "memory": "256Mi"},
    }
    assert env_of(orders)["ORDERS_DB_PASSWORD_FILE"]["value"] == "/etc/orders-db/password"
    spec = pod_spec(one(docs, "Deployment", f"{RELEASE}-tool-orders"))
    held = mounted_volume(orders, spec, "/etc/orders-db/password")
    assert held["secret"]["secretName"] == "orders-db" and held["mount"]["readOnly"] is True
    # The defaults' lists come first, an entry's are added; maps merge, the entry winning.
    sets = {
        "toolServerDefaults.extraEnv[0].name": "REGION",
        "toolServerDefaults.extraEnv[0].value": "eu",
        "toolServerDefaults.extraEnvFrom[0].secretRef.name": "shared",
        "toolServerDefaults.extraVolumes[0].name": "ca",
        "toolServerDefaults.extraVolumes[0].configMap.name": "company-ca",
        "toolServerDefaults.extraVolumeMounts[0].name": "ca",
        "toolServerDefaults.extraVolumeMounts[0].mountPath": "/etc/ca",
        "toolServerDefaults.extraVolumeMounts[0].readOnly": "true",
        "toolServerDefaults.podAnnotations.owner": "platform",
        "toolServerDefaults.podAnnotations.prometheus\\.io/scrape": "enabled",
        "toolServerDefaults.priorityClassName": "tools",
        "toolServers[0].envFrom[0].configMapRef.name": "orders",
        "toolServers[0].podLabels.tier": "backend",
    }
    docs = render([MODEL_CA], sets)
    workload = one(docs, "Deployment", f"{RELEASE}-tool-orders")
    (orders,) = containers(workload)
    assert [e["name"] for e in orders["env"]] == [
        "PYTHONDONTWRITEBYTECODE",
        "REGION",
        "ORDERS_DB_PASSWORD_FILE",
    ]
    assert orders["envFrom"] == [
        {"secretRef": {"name": "shared"}},
        {"configMapRef": {"name": "orders"}},
    ]
    assert [m["name"] for m in orders["volumeMounts"]] == ["tmp", "ca", "orders-db"]
    assert [v["name"] for v in pod_spec(workload)["volumes"]] == ["tmp", "ca", "orders-db"]
    annotations = workload["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"owner": "platform", "prometheus.io/scrape": "false"}
    labels = labels_of_pods(workload)
    assert (labels["team"], labels["tier"]) == ("support", "backend")
    assert selects(workload["spec"]["selector"]["matchLabels"], labels)
    assert pod_spec(workload)["priorityClassName"] == "agents-normal"  # the entry's own
    tools = render([TOOLS], {"toolServerDefaults.priorityClassName": "tools"})
    assert {
        pod_spec(w).get("priorityClassName")
        for w in workloads(tools)
        if component(w) == "tool-server"
    } == {"tools"}
    assert "priorityClassName" not in pod_spec(one(tools, "Deployment", RELEASE))


def test_resources_are_checked_as_kubernetes_quantities_before_anything_is_sent() -> None:
    where = {
        "resources": STANDALONE,
        "toolServerDefaults.resources": TOOLS,
        "toolServers[0].resources": TOOLS,
        "devSimulator.resources": TOOLS,
        "application.resources": SIDECAR,
    }
    for key, values in where.items():
        path = "/" + key.replace("[0]", "/0").replace(".", "/")
        with pytest.raises(RenderError) as refused:
            render([values], {f"{key}.limits.cpu": "lots"})
        message = str(refused.value)
        assert f"at '{path}/limits/cpu': 'lots' does not match pattern" in message, message
        assert len(message) < 400, message  # one line that names the value, not a dump
    for good in ("0.5", "250m", "2", "1e3", "1.5Gi", ".5"):
        docs = render([STANDALONE], {"resources.limits.cpu": good})
        assert str(sidecar_container(docs)["resources"]["limits"]["cpu"]) == good
    docs = render(
        [STANDALONE],
        {"resources.limits.hugepages-2Mi": "64Mi", "resources.limits.example\\.com/gpu": "1"},
    )
    assert sidecar_container(docs)["resources"]["limits"]["example.com/gpu"] == 1
    refusals = {
        "resources.limit.cpu": "additional properties 'limit' not allowed",
        "resources.requests.memory": "does not match pattern",
    }
    for key, message in refusals.items():
        with pytest.raises(RenderError, match=message):
            render([STANDALONE], {key: "-1Gi" if "memory" in key else "1"})


def test_every_new_list_value_is_refused_with_its_missing_field() -> None:
    refusals = {
        "extraVolumes[0].secret.secretName": ("extraVolumes/0", "missing property 'name'"),
        "extraVolumeMounts[0].name": ("extraVolumeMounts/0", "missing property 'mountPath'"),
        "extraEnv[0].value": ("extraEnv/0", "missing property 'name'"),
        "toolServers[0].volumeMounts[0].mountPath": (
            "toolServers/0/volumeMounts/0",
            "missing property 'name'",
        ),
        "priorityClassName": ("priorityClassName", "does not match pattern"),
    }
    for key, (path, message) in refusals.items():
        with pytest.raises(RenderError) as refused:
            render([TOOLS], {key: "Bad_Value"})
        assert f"at '/{path}'" in str(refused.value) and message in str(refused.value), str(
            refused.value
        )


# -- the chart's documentation ---------------------------------------------------------------


def documented_keys() -> list[str]:
    """The keys of the README's values table."""
    table = (CHART / "README.md").read_text().split("## Values", 1)[1]
    return re.findall(r"^\| ([^ |]+) \| ", table, re.M)[1:]  # the header's "Key" first


def leaves(node: Any, prefix: str = "") -> list[str]:
    """The dotted paths of a values tree's leaves (lists and empty maps are leaves)."""
    if isinstance(node, dict) and node:
        return [p for key, value in node.items() for p in leaves(value, f"{prefix}{key}.")]
    return [prefix.removesuffix(".")]


def test_the_readme_values_table_documents_every_value_with_a_description() -> None:
    keys = documented_keys()
    assert len(keys) > 100
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for leaf in leaves(values):
        parts = leaf.split(".")
        covered = [".".join(parts[:n]) for n in range(1, len(parts) + 1)]
        assert any(c in keys for c in covered), f"{leaf} is not in the README's values table"
    table = (CHART / "README.md").read_text().split("## Values", 1)[1]
    for row in re.findall(r"^\| .* \|$", table, re.M)[2:]:
        description = row.rsplit("|", 2)[-2].strip()
        assert description, f"a value without a description: {row}"
    schema = json.loads((CHART / "values.schema.json").read_text())

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            node = schema["$defs"][node["$ref"].removeprefix("#/$defs/")]
        return node

    for key in keys:  # every documented value is one the schema knows
        node: dict[str, Any] | None = schema
        for part in key.split("."):
            node = resolve(node)["properties"].get(part) if node else None
        assert node is not None, f"{key} is in the values table but not in values.schema.json"


def test_the_chart_names_its_home_icon_and_maintainers() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["home"].startswith("https://")
    assert chart["maintainers"] and all(m["name"] for m in chart["maintainers"])
    prefix = "https://raw.githubusercontent.com/agent-sidecar/agent-sidecar/main/"
    assert chart["icon"].startswith(prefix)
    icon = ROOT / chart["icon"].removeprefix(prefix)
    assert icon.suffix == ".svg" and "<svg" in icon.read_text()


def test_the_readme_install_pulls_every_image_from_the_registry_it_pushes_to() -> None:
    readme = (CHART / "README.md").read_text()
    (build,) = re.findall(r"```sh\n(REGISTRY=.*?)```", readme, re.S)
    pushed = set(re.findall(r"--target \$target\s*\\\n\s*-t (\S+) --push", build))
    (pattern,) = pushed
    targets = re.search(r"for target in ([\w ]+); do", build)[1].split()  # type: ignore[index]
    registry = re.search(r"REGISTRY=(\S+)", build)[1]  # type: ignore[index]
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    made = {
        pattern.replace("$REGISTRY", registry).replace("$target", t).replace(version, "VERSION")
        for t in targets
    }
    install = re.search(
        r"helm install agent-sidecar ./helm/agent-sidecar (.*?)\n(?!\s)", readme, re.S
    )[1]  # type: ignore[index]
    sets = dict(
        s.split("=", 1) for s in re.findall(r"--set (\S+)", install.replace("$REGISTRY", registry))
    )
    docs = render(sets=sets)
    used = {
        c["image"].replace(version, "VERSION") for w in workloads(docs) for c in containers(w)
    } | {
        c["image"].replace(version, "VERSION")
        for p in of_kind(docs, "Pod")
        for c in p["spec"]["containers"]
    }
    assert used <= made, f"the install uses {used - made}, which the build does not push"
    # The tool servers' image too, once there are tool servers.
    sets["toolServers[0].name"] = "orders"
    sets["toolServers[0].command[0]"] = "agent-toolserver"
    sets["toolServers[0].port"] = "50061"
    docs = render(sets=sets)
    used = {c["image"].replace(version, "VERSION") for w in workloads(docs) for c in containers(w)}
    assert used <= made and len(used) == 2, used


def test_the_mcp_endpoint_and_the_a2a_listener_get_ports_a_service_and_the_clients() -> None:
    fronts = {
        "mcp.enabled": "true",
        "a2aHttp.enabled": "true",
        "config.a2a.skills[0].profile": "default",
    }
    docs = render([STANDALONE], fronts)
    config = parse_config(sidecar_config(docs), source="the rendered ConfigMap")
    assert (config.mcp.host, config.mcp.port) == ("0.0.0.0", 8765)
    assert config.a2a is not None and config.a2a.http is not None
    assert (config.a2a.http.host, config.a2a.http.port) == ("0.0.0.0", 8080)
    (container,) = sidecar_containers(docs)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": 50051, "mcp": 8765, "a2a-http": 8080}
    service = one(docs, "Service", RELEASE)
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {
        "grpc": "grpc",
        "mcp": "mcp",
        "a2a-http": "a2a-http",
    }
    (rule,) = one(docs, "NetworkPolicy", RELEASE)["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == [50051, 8765, 8080]
    # In sidecar mode they are the application's, on loopback.
    beside = sidecar_config(render([SIDECAR], fronts))
    assert beside["mcp"]["host"] == beside["a2a"]["http"]["host"] == "127.0.0.1"
    # The addresses are the chart's; an A2A listener needs the A2A section.
    with pytest.raises(RenderError, match="additional properties 'port' not allowed"):
        render([STANDALONE], {"config.mcp.port": "9000"})
    with pytest.raises(RenderError, match=r"set config\.a2a"):
        render([STANDALONE], {"a2aHttp.enabled": "true"})
