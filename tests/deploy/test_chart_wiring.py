"""The chart's configuration works, not only parses: its containers, run as local processes.

The chart is rendered with helm (``make helm-path`` builds it into .tools/ when missing).
For each scenario below, every Deployment's container is started as the pod would start
it: its rendered ``command`` and ``args``, its ``env``, and its volumes as the kubelet
would mount them (the ConfigMap's keys written as files). ``command[0]`` is looked up in
the directory of the interpreter running the tests, the repository's venv: the console
scripts and the python that the image puts on PATH. Then the sidecar must report SERVING
and complete runs through ``agentsidecar.client.AgentClient``, with the tools of the
chart's tool servers.

Only what must differ on a laptop is rewritten, and nothing else:

- listen addresses: ``--host 0.0.0.0`` becomes ``127.0.0.1`` and ``--port P`` becomes
  ``0`` (a free port, which each server announces as ``listening on HOST:PORT``); in the
  sidecar's config, ``server`` and ``telemetry.metrics`` likewise;
- addresses of Services: each ``tool_servers[].address`` and ``model.base_url`` names a
  Service (``NAME.NAMESPACE.svc.DOMAIN:PORT``); the test follows that Service's selector
  and target port to a Deployment and its container port (and fails when they do not
  lead to one), and puts in the address of the local process that runs it. An endpoint
  outside the release (a model server elsewhere in the cluster) is a process the test
  starts, named by the test;
- file paths: every path under a volume's mountPath (the config file, the SQLite file) is
  re-rooted in a temporary directory;
- Secrets: the test makes their contents at run time (a CA, the sidecar's certificate,
  callers' certificates and tokens, in the TLS scenario) and lays them out as the kubelet
  does: each key a file in the volume, reached through the ``..data`` symlink that the
  kubelet swaps atomically when the Secret changes; ``secretKeyRef`` variables get the
  key's value, ``envFrom`` a Secret's every key. A Secret the test did not make fails the
  test (an ``optional`` one it did not make is left out, as the kubelet leaves it out);
  ``fieldRef`` variables get the pod's namespace and name.

The application container of sidecar mode is the user's own image and is not run.
"""

from __future__ import annotations

import asyncio
import filecmp
import json
import os
import secrets
import sys
import tempfile
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import grpc
import pytest
import yaml

from agentsidecar.client import AgentClient
from agentsidecar.errors import error_details
from agentsidecar.v1 import agent_pb2
from sidecar import testing
from sidecar.testing import ServerProcess, start_process, wait_serving
from sidecar.testing.certs import TestCA
from tests.deploy.helm_chart import (
    CHART,
    NAMESPACE,
    containers,
    of_kind,
    one,
    pod_spec,
    render,
    selects,
    sidecar_config,
)
from tests.support.stack import eventually

pytestmark = pytest.mark.timeout(900)  # the first render may build helm (make helm-path)

BIN = Path(sys.executable).parent
"""Where the image's commands are found locally: the venv running the tests."""
LOCAL_HOST = "127.0.0.1"
FOUNDING = "What is the status of order 20250101, and where is its parcel?"


class Pod:
    """One Deployment's container, runnable on this machine."""

    def __init__(self, workload: dict[str, Any], container: dict[str, Any], root: Path):
        self.workload = workload
        self.container = container
        self.root = root
        spec = pod_spec(workload)
        self.volumes = {v["name"]: v for v in spec.get("volumes", [])}
        self.mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]

    @property
    def name(self) -> str:
        return str(self.workload["metadata"]["name"])

    def local_path(self, path: str) -> str:
        """A path under one of the container's mounts, re-rooted in the temp directory."""
        for mount in self.mounts:
            if path == mount or path.startswith(mount.rstrip("/") + "/"):
                return str(self.root / path.lstrip("/"))
        return path

    def mount(
        self,
        docs: list[dict[str, Any]],
        rewrite: dict[str, Any] | None = None,
        secrets: Mapping[str, Mapping[str, bytes]] | None = None,
    ) -> None:
        """Lay out the volumes as the kubelet would (``rewrite``: config file contents;
        ``secrets``: the contents of the Secrets the pod mounts, by name and key)."""
        for mount in self.container.get("volumeMounts", []):
            volume = self.volumes[mount["name"]]
            target = Path(self.local_path(mount["mountPath"]))
            target.mkdir(parents=True, exist_ok=True)
            if "secret" in volume:
                name = volume["secret"]["secretName"]
                assert secrets is not None and name in secrets, f"no contents for Secret {name}"
                write_secret_volume(target, secrets[name])
            if "configMap" in volume:
                config_map = one(docs, "ConfigMap", volume["configMap"]["name"])
                for key, text in config_map["data"].items():
                    if rewrite is not None and key in rewrite:
                        text = yaml.safe_dump(rewrite[key], sort_keys=False)
                    (target / key).write_text(text)

    def argv(self) -> list[str]:
        """command + args, with listen addresses and mounted paths rewritten."""
        words = [*self.container["command"], *self.container.get("args", [])]
        out: list[str] = []
        for i, word in enumerate(words):
            flag = words[i - 1] if i else ""
            if flag == "--host":
                assert word == "0.0.0.0", f"{self.name} listens on {word}, not all interfaces"
                word = LOCAL_HOST
            elif flag == "--port":
                word = "0"
            out.append(self.local_path(word))
        return out

    def env(self, secrets: Mapping[str, Mapping[str, bytes]] | None = None) -> dict[str, str]:
        made = secrets or {}
        env = {}
        for source in self.container.get("envFrom", []):
            kind, ref = next((k, v) for k, v in source.items() if k.endswith("Ref"))
            if ref["name"] not in made:
                assert kind in ("secretRef", "configMapRef") and ref.get("optional"), (
                    f"{self.name}: envFrom {kind} {ref['name']}, not made"
                )
                continue
            for key, data in made[ref["name"]].items():
                env[source.get("prefix", "") + key] = data.decode()
        fields = {"metadata.namespace": NAMESPACE, "metadata.name": f"{self.name}-pod"}
        for entry in self.container.get("env", []):
            source = entry.get("valueFrom")
            if source is None:
                env[entry["name"]] = entry["value"]
            elif "fieldRef" in source:
                env[entry["name"]] = fields[source["fieldRef"]["fieldPath"]]
            else:
                ref = source["secretKeyRef"]
                assert ref["name"] in made, (
                    f"{self.name}: {entry['name']} comes from Secret {ref['name']}, not made"
                )
                env[entry["name"]] = made[ref["name"]][ref["key"]].decode()
        return env

    def start(
        self, log: Path, secrets: Mapping[str, Mapping[str, bytes]] | None = None
    ) -> ServerProcess:
        executable, *args = self.argv()
        program = BIN / executable
        assert program.is_file(), f"{self.name}: {executable} is not in {BIN}"
        with log.open("ab") as stderr:
            return start_process(
                args, executable=str(program), env=self.env(secrets), cwd=self.root, stderr=stderr
            )


def write_secret_volume(target: Path, contents: Mapping[str, bytes]) -> None:
    """Write a Secret volume the way the kubelet's atomic writer does, or update one.

    The keys' files live in a directory of their own (``..TIMESTAMP``); ``..data`` links
    to it and each key is a link through ``..data``. An update writes a new directory and
    renames a new ``..data`` link over the old one: readers see every old file or every
    new one, never a mix, and a file's identity (its inode) changes.
    """
    previous = target / "..data"
    old = os.readlink(previous) if previous.is_symlink() else None
    generation = f"..{secrets.token_hex(6)}"
    (target / generation).mkdir()
    for key, data in contents.items():
        (target / generation / key).write_bytes(data)
        (target / generation / key).chmod(0o440)
    (target / "..data_tmp").symlink_to(generation)
    os.replace(target / "..data_tmp", previous)
    for key in contents:
        if not (target / key).is_symlink():
            (target / key).symlink_to(f"..data/{key}")
    if old is not None:
        for leftover in (target / old).iterdir():
            leftover.unlink()
        (target / old).rmdir()


def service_target(docs: list[dict[str, Any]], address: str) -> tuple[str, int]:
    """The Deployment and container port a cluster address leads to.

    Raises:
        AssertionError: the address names no Service of the release, or its Service selects
            no Deployment, or its port leads to no port of that Deployment's container.
    """
    host, port = address.rsplit(":", 1)
    name, namespace, svc, *_domain = host.split(".")
    assert (namespace, svc) == (NAMESPACE, "svc"), f"{address} is not a Service's name"
    service = one(docs, "Service", name)
    (service_port,) = [p for p in service["spec"]["ports"] if p["port"] == int(port)]
    backing = [
        d
        for d in of_kind(docs, "Deployment")
        if selects(service["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])
    ]
    assert len(backing) == 1, f"Service {name} selects {len(backing)} Deployments"
    (container,) = pod_spec(backing[0])["containers"]
    target = service_port["targetPort"]
    ports = [
        p["containerPort"] for p in container["ports"] if target in (p["name"], p["containerPort"])
    ]
    assert len(ports) == 1, f"Service {name}'s targetPort {target} is no port of its pods"
    return backing[0]["metadata"]["name"], ports[0]


def local_config(
    pod: Pod,
    docs: list[dict[str, Any]],
    addresses: dict[str, str],
    external: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ConfigMap's sidecar.yaml with the laptop's addresses and paths (``external``:
    the local address of each endpoint outside the release, by its address in the cluster)."""
    config = sidecar_config(docs)
    config["server"].update(host=LOCAL_HOST, port=0)
    if "health_port" in config["server"]:
        config["server"]["health_port"] = 0
    metrics = config.get("telemetry", {}).get("metrics")
    if metrics:
        metrics.update(host=LOCAL_HOST, port=0)
    for entry in config.get("tool_servers", []):
        workload, _ = service_target(docs, entry["address"])
        entry["address"] = addresses[workload]
    base_url = config.get("model", {}).get("base_url")
    if base_url:
        parts = urlsplit(base_url)
        if external and parts.netloc in external:
            local = external[parts.netloc]
        else:
            workload, _ = service_target(docs, parts.netloc)
            local = addresses[workload]
        config["model"]["base_url"] = urlunsplit(parts._replace(netloc=local))

    def reroot(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: reroot(v) for k, v in node.items()}
        if isinstance(node, list):
            return [reroot(v) for v in node]
        return pod.local_path(node) if isinstance(node, str) else node

    rerooted: dict[str, Any] = reroot(config)
    return rerooted


def runnable_pods(docs: list[dict[str, Any]], root: Path) -> tuple[list[Pod], Pod]:
    """The tool servers and the simulator, then the sidecar."""
    others, sidecars = [], []
    for workload in of_kind(docs, "Deployment"):
        for container in containers(workload):
            if container["name"] == "application":
                continue  # the user's image
            pod = Pod(workload, container, root / workload["metadata"]["name"])
            (sidecars if container["name"] == "agent-sidecar" else others).append(pod)
    (sidecar,) = sidecars
    return others, sidecar


def files_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        return str(response.read().decode())


class Running:
    def __init__(self, sidecar: ServerProcess, pod: Pod, config: dict[str, Any]):
        self.sidecar = sidecar
        self.pod = pod
        self.config = config


@contextmanager
def release(
    docs: list[dict[str, Any]],
    root: Path,
    secrets: Mapping[str, Mapping[str, bytes]] | None = None,
    external: Mapping[str, str] | None = None,
) -> Iterator[Running]:
    """Every rendered container of ``docs`` running locally, the sidecar SERVING (through
    its probes' port); on exit the sidecar must drain to exit 0. ``external``: local
    addresses of endpoints outside the release, by their addresses in the cluster."""
    others, sidecar_pod = runnable_pods(docs, root)
    log = root / "stderr.log"
    with ExitStack() as stack:
        addresses = {}
        for pod in others:
            pod.mount(docs, secrets=secrets)
            addresses[pod.name] = stack.enter_context(pod.start(log, secrets)).address
        config = local_config(sidecar_pod, docs, addresses, external)
        sidecar_pod.mount(docs, rewrite={"sidecar.yaml": config}, secrets=secrets)
        sidecar = stack.enter_context(sidecar_pod.start(log, secrets))
        # Where the kubelet's probes go: the plaintext health port when TLS is on.
        probed = sidecar.announced("health on ") if "tls" in config["server"] else sidecar.address
        try:
            wait_serving(probed, timeout=30)
        except TimeoutError:
            pytest.fail(f"the sidecar never reported SERVING:\n{log.read_text()[-4000:]}")
        yield Running(sidecar, sidecar_pod, config)
        # The drain the pod's preStop and grace period are sized for ends cleanly.
        assert sidecar.stop() == 0, log.read_text()[-4000:]


SCENARIOS = ["toolservers", "sidecar-classic"]
"""The scenarios that run without a Secret: standalone with three tool servers and the
simulator; sidecar mode (a second container) with metrics and the memory store."""


@pytest.fixture
def running(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Running]:
    docs = render([CHART / "ci" / f"{request.param}-values.yaml"])
    with release(docs, tmp_path) as started:
        yield started


@pytest.mark.parametrize("running", SCENARIOS, indirect=True)
async def test_the_rendered_pods_serve_runs_with_the_charts_tool_servers(
    running: Running,
) -> None:
    async with AgentClient(running.sidecar.address) as client:
        session = await client.create_session("default")
        tools = {t.tool.name for t in await client.list_session_tools(session.session_id)}
        assert {"get_order_status", "track_parcel"} <= tools
        result = (await client.run(session.session_id, FOUNDING, timeout=30)).result
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED, result
    assert result.answer.startswith("[simulated]")
    called = {s.name for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL}
    assert called == {"get_order_status", "track_parcel"}
    for stage in result.timeline.stages:
        if stage.kind == agent_pb2.STAGE_KIND_TOOL_CALL:
            assert stage.tool_call.status == agent_pb2.TOOL_CALL_STATUS_OK, stage


@pytest.mark.parametrize("running", SCENARIOS, indirect=True)
async def test_the_configmaps_profiles_and_store_are_the_ones_in_effect(
    running: Running,
) -> None:
    store = running.config["sessions"]["store"]
    async with AgentClient(running.sidecar.address) as client:
        session = await client.create_session("default")
        await client.run(session.session_id, FOUNDING, timeout=30)
        assert (await client.get_session(session.session_id)).session_id == session.session_id
        if "structured" in running.config["profiles"]:
            structured = await client.create_session("structured")
            result = (await client.run(structured.session_id, "Say hello", timeout=30)).result
            assert yaml.safe_load(result.answer).keys() == {"answer"}
    data = await asyncio.to_thread(files_in, running.pod.root / "var/lib/agent-sidecar")
    if store == "sqlite":
        # The file is where the chart's data volume is mounted.
        path = Path(running.config["sessions"]["sqlite"]["path"])
        assert path.parent == running.pod.root / "var/lib/agent-sidecar"
        assert path.name in data
    else:
        assert store == "memory"
        assert data == []


@pytest.mark.parametrize("running", ["sidecar-classic"], indirect=True)
async def test_metrics_are_served_where_the_chart_expects_them(running: Running) -> None:
    assert running.config["telemetry"]["metrics"]["enabled"] is True
    address = running.sidecar.announced("metrics on ")
    assert {"name": "metrics", "containerPort": 9464, "protocol": "TCP"} in running.pod.container[
        "ports"
    ]
    async with AgentClient(running.sidecar.address) as client:
        session = await client.create_session("default")
        await client.run(session.session_id, FOUNDING, timeout=30)
    text = await asyncio.to_thread(scrape, address)
    assert "agent_sidecar_run_duration_seconds" in text


async def test_in_sidecar_mode_the_application_reaches_its_sidecar_on_the_shared_socket() -> None:
    docs = render([CHART / "ci" / "sidecar-classic-values.yaml"], {"socket.enabled": "true"})
    (application,) = [
        c for d in of_kind(docs, "Deployment") for c in containers(d) if c["name"] == "application"
    ]
    address = next(e["value"] for e in application["env"] if e["name"] == "AGENT_SIDECAR_ADDRESS")
    path = address.removeprefix("unix://")
    assert address.startswith("unix:///") and path == sidecar_config(docs)["server"]["unix_socket"]
    # A socket's path holds at most 107 bytes: the pod's files go under a short root.
    with tempfile.TemporaryDirectory(prefix="pod-") as root, release(docs, Path(root)) as running:
        # The application mounts the very volume the sidecar's socket is in, at the same path.
        (sidecar_mount,) = [
            m
            for m in running.pod.container["volumeMounts"]
            if path.startswith(m["mountPath"] + "/")
        ]
        assert sidecar_mount in application["volumeMounts"]
        local = running.pod.local_path(path)
        assert running.sidecar.announced("socket on ") == f"unix:{local}"
        async with AgentClient(f"unix://{local}") as client:
            session = await client.create_session("default")
            result = (await client.run(session.session_id, FOUNDING, timeout=30)).result
        assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED, result
        assert result.tool_calls == 2


# -- the locked-down scenario (ci/tls-values.yaml): TLS, mutual TLS, principals, audit -------

CHECKOUT_SAN = "spiffe://cluster.local/ns/shop/sa/checkout"


class LockedDown:
    """The TLS scenario running, with the certificates and tokens made for it."""

    def __init__(self, running: Running, ca: TestCA, token: str, tokens_dir: Path):
        self.running = running
        self.address = running.sidecar.address
        self.ca = ca
        self.token = token
        self.tokens_dir = tokens_dir
        self.checkout = ca.issue("checkout", uris=(CHECKOUT_SAN,), client=True)
        # A certificate the CA signed that names no principal: it opens the TLS
        # connection, and only a token says who the caller is.
        self.console = ca.issue(
            "console", uris=("spiffe://cluster.local/ns/ops/sa/x",), client=True
        )

    def client(self, cert: Any = None, token: str | None = None) -> AgentClient:
        return AgentClient(
            self.address,
            tls=True,
            ca_file=self.ca.ca_file,
            cert_file=cert.cert_file if cert else None,
            key_file=cert.key_file if cert else None,
            token=token,
        )

    def audit(self) -> list[dict[str, Any]]:
        path = Path(self.running.config["auth"]["audit"]["path"])
        return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def locked_down(tmp_path: Path) -> Iterator[LockedDown]:
    docs = render([CHART / "ci" / "tls-values.yaml"])
    ca = TestCA(tmp_path / "ca")
    served = ca.issue("sidecar")  # localhost and 127.0.0.1, where the test dials
    token = secrets.token_urlsafe(24)
    contents = {
        "agent-sidecar-tls": {  # a kubernetes.io/tls Secret, as cert-manager writes one
            "tls.crt": Path(served.cert_file).read_bytes(),
            "tls.key": Path(served.key_file).read_bytes(),
            "ca.crt": Path(ca.ca_file).read_bytes(),
        },
        "agent-sidecar-tokens": {"support-console": token.encode()},
    }
    with release(docs, tmp_path / "pods", contents) as started:
        tokens_dir = Path(started.pod.local_path("/etc/agent-sidecar/auth"))
        yield LockedDown(started, ca, token, tokens_dir)


async def test_the_locked_down_release_serves_its_principals_over_mutual_tls(
    locked_down: LockedDown,
) -> None:
    assert locked_down.running.config["server"]["tls"]["client_ca_file"].endswith("/ca.crt")
    # checkout: by its certificate's SAN alone.
    async with locked_down.client(locked_down.checkout) as checkout:
        session = await checkout.create_session("default")
        result = (await checkout.run(session.session_id, FOUNDING, timeout=30)).result
        assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED, result
        called = [s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL]
        assert {s.name for s in called} == {"get_order_status", "track_parcel"}
        assert all(s.tool_call.status == agent_pb2.TOOL_CALL_STATUS_OK for s in called)
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await checkout.create_session("structured")  # not among its profiles
        assert error_details(denied.value).reason == "PERMISSION_DENIED"
    # support-console: by the token from the Secret, over TLS.
    async with locked_down.client(locked_down.console, token=locked_down.token) as console:
        structured = await console.create_session("structured")
        answer = (await console.run(structured.session_id, "Say hello", timeout=30)).result.answer
        assert yaml.safe_load(answer).keys() == {"answer"}
        # checkout's session does not exist for another principal.
        with pytest.raises(grpc.aio.AioRpcError) as hidden:
            await console.get_session(session.session_id)
        assert error_details(hidden.value).reason == "SESSION_NOT_FOUND"
    audit = await asyncio.to_thread(locked_down.audit)
    finished = {(e["principal"], e["stop_reason"]) for e in audit if e["event"] == "run_finished"}
    assert finished == {("checkout", "ANSWERED"), ("support-console", "ANSWERED")}
    assert {e["principal"] for e in audit if e["event"] == "tool_call"} == {"checkout"}
    assert [e["error"] for e in audit if e["event"] == "call_refused"] == ["PermissionDenied"]


async def test_the_locked_down_release_refuses_callers_it_cannot_name(
    locked_down: LockedDown,
) -> None:
    # Plaintext to the TLS port, and TLS without a client certificate: no connection.
    for client in (AgentClient(locked_down.address), locked_down.client()):
        async with client:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await client.create_session("default", timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    # A certificate that names no principal, without a token, or with a wrong one.
    for token in (None, "not-" + locked_down.token):
        async with locked_down.client(locked_down.console, token=token) as stranger:
            with pytest.raises(grpc.aio.AioRpcError) as unknown:
                await stranger.create_session("default")
            assert error_details(unknown.value).reason == "UNAUTHENTICATED"
    audit = await asyncio.to_thread(locked_down.audit)
    assert [e["event"] for e in audit] == ["auth_failed", "auth_failed"]
    assert locked_down.token not in json.dumps(audit)


async def test_updating_the_token_secret_rotates_the_principals_token(
    locked_down: LockedDown,
) -> None:
    rotated = secrets.token_urlsafe(24)

    async def accepted(token: str) -> bool:
        async with locked_down.client(locked_down.console, token=token) as client:
            try:
                await client.create_session("default")
            except grpc.aio.AioRpcError as exc:
                assert error_details(exc).reason == "UNAUTHENTICATED"
                return False
            return True

    assert await accepted(locked_down.token)
    # What the kubelet does when the Secret is updated: a new generation of the files.
    await asyncio.to_thread(
        write_secret_volume, locked_down.tokens_dir, {"support-console": rotated.encode()}
    )
    await eventually(lambda: accepted(rotated), timeout=15, interval=0.2)
    assert not await accepted(locked_down.token)


# -- a model endpoint behind the company's CA (ci/model-ca-values.yaml) ----------------------

MODEL_ENDPOINT = "llm.models.svc.cluster.local:8443"
"""The address of the scenario's model server, outside the release."""


def model_ca_secrets(ca_file: str) -> dict[str, dict[str, bytes]]:
    """The Secrets the scenario names: the CA bundle, the model key, the tool's password."""
    return {
        "model-ca": {"ca.crt": Path(ca_file).read_bytes()},
        "model-api-key": {"api-key": secrets.token_urlsafe(16).encode()},
        "orders-db": {"password": secrets.token_urlsafe(16).encode()},
    }


async def test_the_model_is_trusted_through_the_ca_file_mounted_from_extra_volumes(
    tmp_path: Path,
) -> None:
    docs = render([CHART / "ci" / "model-ca-values.yaml"])
    company = TestCA(tmp_path / "company-ca", name="company-ca")
    served = company.issue("llm")  # localhost and 127.0.0.1, where the sidecar dials
    log = tmp_path / "llm.log"
    with (
        log.open("ab") as stderr,
        testing.simulator(
            "--tls-cert", served.cert_file, "--tls-key", served.key_file, stderr=stderr
        ) as llm,
    ):
        external = {MODEL_ENDPOINT: llm.address}
        contents = model_ca_secrets(company.ca_file)
        with release(docs, tmp_path / "pods", contents, external) as running:
            ca_file = running.config["model"]["ca_file"]
            assert ca_file == running.pod.local_path("/etc/model-ca/ca.crt")
            assert await asyncio.to_thread(filecmp.cmp, ca_file, company.ca_file, shallow=False)
            async with AgentClient(running.sidecar.address) as client:
                session = await client.create_session("default")
                result = (await client.run(session.session_id, FOUNDING, timeout=30)).result
            assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED, result
            assert result.answer.startswith("[simulated]")
            calls = [s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL]
            assert [s.name for s in calls] == ["get_order_status"]  # the scenario's one server
            assert calls[0].tool_call.status == agent_pb2.TOOL_CALL_STATUS_OK

        # The same release with another CA in the Secret: the endpoint is not trusted, so
        # the file the sidecar reads is the mounted one, not the system's bundle.
        stranger = TestCA(tmp_path / "stranger-ca", name="stranger-ca")
        contents = model_ca_secrets(stranger.ca_file)
        with release(docs, tmp_path / "pods-2", contents, external) as running:
            async with AgentClient(running.sidecar.address) as client:
                session = await client.create_session("default")
                result = (await client.run(session.session_id, FOUNDING, timeout=60)).result
            assert result.stop_reason == agent_pb2.STOP_REASON_MODEL_ERROR, result
            assert "certificate" in result.error.message.lower(), result.error
