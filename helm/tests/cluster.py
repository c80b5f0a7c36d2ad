"""A real Kubernetes API server on 127.0.0.1, with etcd, for the chart's tests.

``api_server(workdir, kube_apiserver, kubectl)`` starts Debian's etcd and the
kube-apiserver that `make test-helm` builds from the Go module proxy, each on a free
loopback port, with a CA, a serving certificate, a service-account key pair and an admin
token made for this run only, and waits until ``/readyz`` answers ok. No controllers,
scheduler or kubelet run: objects are stored and validated (admission included), and no
pod starts. ``--endpoint-reconciler-type=none`` keeps the server from publishing its
loopback address as the ``kubernetes`` Service's endpoint, which it refuses to do.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

_POLL = 0.1  # seconds between readiness checks of a process that announces nothing


class ClusterError(RuntimeError):
    """etcd or the API server did not start; the message carries their logs."""


@dataclass
class Cluster:
    """A running API server and how to reach it."""

    server: str
    kubeconfig: Path
    kubectl_path: str
    token: str
    ca: Path

    def env(self) -> dict[str, str]:
        """An environment whose kubectl and helm talk to this server."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(
        self, *args: str, stdin: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against the server; the caller checks the outcome."""
        return subprocess.run(
            [self.kubectl_path, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
            check=False,
        )

    def get(self, *args: str) -> Any:
        """``kubectl get ARGS -o json``, parsed."""
        done = self.kubectl("get", *args, "-o", "json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def free_port() -> int:
    """A loopback port free right now, for servers that cannot announce one they chose."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_credentials(pki: Path) -> str:
    """A CA, a serving certificate for 127.0.0.1, a service-account key pair and an admin
    token (returned), for this run only."""
    pki.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=agent-sidecar test CA",
        cwd=pki,
    )  # fmt: skip
    (pki / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=kube-apiserver",
        cwd=pki,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "1", "-extfile", "server.ext", "-out", "server.crt",
        cwd=pki,
    )  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
    token = secrets.token_hex(24)
    (pki / "tokens.csv").write_text(f'{token},admin,admin,"system:masters"\n')
    return token


def _wait(
    check_url: str,
    ready: Callable[[str], bool],
    procs: Sequence[tuple[str, subprocess.Popen[bytes], Path]],
    timeout: float,
    context: ssl.SSLContext | None = None,
    token: str | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(check_url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    last = ""
    while time.monotonic() < deadline:
        for name, proc, log in procs:
            if proc.poll() is not None:
                raise ClusterError(
                    f"{name} exited with {proc.returncode}:\n{log.read_text()[-4000:]}"
                )
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as reply:
                body = reply.read().decode()
                if ready(body):
                    return
                last = body
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            last = str(exc)
        time.sleep(_POLL)
    name, _, log = procs[-1]
    raise ClusterError(
        f"{check_url} not ready within {timeout}s ({last}):\n{log.read_text()[-4000:]}"
    )


def _stop(proc: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    log.close()


@contextlib.contextmanager
def api_server(
    workdir: Path, kube_apiserver: str, kubectl: str, etcd: str = "etcd"
) -> Iterator[Cluster]:
    """etcd and a kube-apiserver on loopback, until the block ends."""
    workdir.mkdir(parents=True, exist_ok=True)
    pki = workdir / "pki"
    token = make_credentials(pki)
    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    with contextlib.ExitStack() as stack:
        etcd_log_path = workdir / "etcd.log"
        etcd_log = etcd_log_path.open("wb")
        etcd_proc = subprocess.Popen(
            [
                etcd,
                "--name",
                "agent-sidecar-test",
                "--data-dir",
                str(workdir / "etcd"),
                "--listen-client-urls",
                etcd_url,
                "--advertise-client-urls",
                etcd_url,
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-cluster",
                f"agent-sidecar-test=http://127.0.0.1:{peer_port}",
                "--log-level",
                "warn",
            ],
            stdin=subprocess.DEVNULL,
            stdout=etcd_log,
            stderr=subprocess.STDOUT,
        )
        stack.callback(_stop, etcd_proc, etcd_log)
        _wait(
            f"{etcd_url}/health",
            lambda body: json.loads(body).get("health") == "true",
            [("etcd", etcd_proc, etcd_log_path)],
            timeout=60,
        )

        api_log_path = workdir / "kube-apiserver.log"
        api_log = api_log_path.open("wb")
        api_proc = subprocess.Popen(
            [
                kube_apiserver,
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--cert-dir={workdir / 'certs'}",
                f"--tls-cert-file={pki / 'server.crt'}",
                f"--tls-private-key-file={pki / 'server.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--endpoint-reconciler-type=none",
                "--profiling=false",
            ],
            stdin=subprocess.DEVNULL,
            stdout=api_log,
            stderr=subprocess.STDOUT,
        )
        stack.callback(_stop, api_proc, api_log)
        server = f"https://127.0.0.1:{api_port}"
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        _wait(
            f"{server}/readyz",
            lambda body: body.strip() == "ok",
            [("etcd", etcd_proc, etcd_log_path), ("kube-apiserver", api_proc, api_log_path)],
            timeout=120,
            context=context,
            token=token,
        )
        kubeconfig = workdir / "kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "test",
                            "cluster": {
                                "server": server,
                                "certificate-authority": str(pki / "ca.crt"),
                            },
                        }
                    ],
                    "users": [{"name": "admin", "user": {"token": token}}],
                    "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
                    "current-context": "test",
                }
            )
        )
        kubeconfig.chmod(0o600)
        yield Cluster(server, kubeconfig, kubectl, token, pki / "ca.crt")
