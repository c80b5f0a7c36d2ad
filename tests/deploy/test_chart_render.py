"""The chart's rendered output: what each scenario's manifests say, checked without a cluster.

Every scenario (helm/agent-sidecar/ci/*-values.yaml and the documented examples) is
rendered with the real helm; the sidecar's configuration in its ConfigMap is checked with
the sidecar's own validation (``sidecar.config.parse_config``) and its start-time check of
what the configuration exposes (``sidecar.security.exposure.check_exposure``), so the chart
never renders a key the sidecar would refuse, nor a listen address it would not start on.
"""

from __future__ import annotations

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
        "model": "llama-3.3-70b-versatile",
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
