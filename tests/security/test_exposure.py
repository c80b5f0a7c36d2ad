"""A sidecar exposed beyond loopback needs TLS and authentication, or says insecure aloud."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentsidecar.addresses import is_local_target, is_loopback
from agentsidecar.serving import SOCKET_MODE, UnixSocketError, claim_unix_socket, socket_umask
from sidecar import testing
from sidecar.config import parse_config
from sidecar.errors import StartupError
from sidecar.security.exposure import check_exposure
from sidecar.testing import ProcessStartError, ServerProcess
from sidecar.testing.certs import TestCA

PRINCIPAL = {"name": "svc", "token_sha256": "0" * 64}


@pytest.fixture(scope="module")
def simulator() -> Iterator[ServerProcess]:
    with testing.simulator() as sim:
        yield sim


def _start(sim: ServerProcess, tmp_path: Path, server: dict[str, Any], **sections: Any) -> str:
    """Start a sidecar expecting it to refuse; return its stderr."""
    config = testing.sidecar_config(sim.address, [], server={"port": 0, **server}, **sections)
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr, pytest.raises(ProcessStartError):
        testing.sidecar(config, tmp_path, stderr=stderr)
    return log.read_text()


def test_plaintext_on_every_interface_refuses_to_start(
    simulator: ServerProcess, tmp_path: Path
) -> None:
    stderr = _start(simulator, tmp_path, {"host": "0.0.0.0"})
    assert "server.tls is unset" in stderr and "auth.principals is empty" in stderr
    assert "server.insecure" in stderr  # says how to accept it


def test_tls_without_authentication_beyond_loopback_refuses_to_start(
    simulator: ServerProcess, tmp_path: Path
) -> None:
    issued = TestCA(tmp_path / "ca").issue("server")
    tls = {"cert_file": issued.cert_file, "key_file": issued.key_file}
    stderr = _start(simulator, tmp_path, {"host": "0.0.0.0", "tls": tls})
    assert "auth.principals is empty" in stderr and "server.tls is unset" not in stderr


def test_insecure_true_starts_and_warns(simulator: ServerProcess, tmp_path: Path) -> None:
    config = testing.sidecar_config(
        simulator.address, [], server={"port": 0, "host": "0.0.0.0", "insecure": True}
    )
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr, testing.sidecar(config, tmp_path, stderr=stderr) as side:
        testing.wait_serving(f"127.0.0.1:{side.port}")
    warnings = [line for line in log.read_text().splitlines() if "insecure:" in line]
    assert len(warnings) == 2, warnings  # both exposures, each named


def test_loopback_plaintext_is_the_quiet_default(simulator: ServerProcess, tmp_path: Path) -> None:
    config = testing.sidecar_config(simulator.address, [])
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr, testing.sidecar(config, tmp_path, stderr=stderr) as side:
        testing.wait_serving(side.address)
    assert "insecure" not in log.read_text()


_OCTET = st.integers(0, 255)


@given(st.tuples(_OCTET, _OCTET, _OCTET))
def test_every_127_address_is_loopback_and_no_other_ipv4_is(octets: tuple[int, int, int]) -> None:
    assert is_loopback("127.{}.{}.{}".format(*octets))
    first = 10 if octets[0] == 127 else octets[0]
    assert not is_loopback(f"{first}.{octets[1]}.{octets[2]}.1")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("unix:/run/s.sock", True),
        ("0.0.0.0", False),
        ("::", False),
        ("sidecar.example", False),
        ("", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


_BY_CERTIFICATE = {"name": "svc", "san": "spiffe://test/svc"}


@given(
    host=st.sampled_from(["0.0.0.0", "::", "10.0.0.5", "sidecar.internal"]),
    tls=st.booleans(),
    principals=st.sampled_from(["none", "token", "certificate"]),
    insecure=st.booleans(),
)
def test_an_exposed_sidecar_starts_only_when_protected_or_insecure_is_said(
    host: str, tls: bool, principals: str, insecure: bool
) -> None:
    server: dict[str, Any] = {"host": host, "insecure": insecure}
    if tls:
        server["tls"] = {"cert_file": "c.pem", "key_file": "k.pem"}
    listed = {"none": [], "token": [PRINCIPAL], "certificate": [_BY_CERTIFICATE]}[principals]
    config = parse_config({"server": server, "auth": {"principals": listed}})
    protected = tls and principals != "none"
    tokens_in_plaintext = principals == "token" and not tls
    if tokens_in_plaintext:
        # Never allowed: insecure waives anonymous callers and plaintext, not a token
        # crossing the network readable.
        with pytest.raises(StartupError) as refused:
            check_exposure(config)
        assert "plaintext" in str(refused.value)
    elif protected or insecure:
        warnings = check_exposure(config)
        assert bool(warnings) is (not protected)
    else:
        with pytest.raises(StartupError):
            check_exposure(config)


def test_insecure_does_not_let_bearer_tokens_travel_in_plaintext(
    simulator: ServerProcess, tmp_path: Path
) -> None:
    stderr = _start(
        simulator,
        tmp_path,
        {"host": "0.0.0.0", "insecure": True},
        auth={"principals": [PRINCIPAL]},
    )
    assert "in plaintext" in stderr and "server.tls" in stderr and "Traceback" not in stderr


_LABEL = st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)


@given(st.tuples(_OCTET, _OCTET, _OCTET), st.lists(_LABEL, min_size=1, max_size=3), _OCTET)
def test_a_host_name_that_starts_like_a_loopback_address_is_not_local(
    octets: tuple[int, int, int], labels: list[str], port: int
) -> None:
    # "127.0.0.1.evil.example" and "127.evil.example" are names anyone may register.
    name = ".".join(["127", *map(str, octets[: len(labels) % 3]), *labels])
    assert not is_local_target(f"{name}:{port + 1}")
    assert is_local_target("127.{}.{}.{}:{}".format(*octets, port + 1))


@pytest.mark.parametrize(
    ("target", "local"),
    [
        ("127.0.0.1:50051", True),
        ("localhost:50051", True),
        ("[::1]:50051", True),
        ("unix:/run/agent-sidecar/sidecar.sock", True),
        ("unix:///run/agent-sidecar/sidecar.sock", True),
        ("::1", True),
        ("127.0.0.1", True),
        ("sidecar.example:50051", False),
        ("[2001:db8::1]:50051", False),
        ("dns:///127.0.0.1:50051", False),  # a resolver's target: not checked, so not local
        ("10.0.0.1:50051", False),
    ],
)
def test_local_targets(target: str, local: bool) -> None:
    assert is_local_target(target) is local


def test_a_socket_bound_under_socket_umask_is_never_open_beyond_user_and_group(
    tmp_path: Path,
) -> None:
    before = os.umask(0)  # the most permissive umask a container may run with
    try:
        with socket_umask():
            with socket.socket(socket.AF_UNIX) as listener:
                listener.bind(str(tmp_path / "s.sock"))  # what gRPC does as it adds the port
                mode = stat.S_IMODE(os.stat(tmp_path / "s.sock").st_mode)
        assert mode == SOCKET_MODE
        assert os.umask(before) == 0  # restored
    finally:
        os.umask(before)


def test_claiming_a_socket_path(tmp_path: Path) -> None:
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as gone:
        gone.bind(str(stale))  # bound, never listening: as a killed process leaves it
    claim_unix_socket(str(stale))
    assert not stale.exists()
    live = tmp_path / "live.sock"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(live))
        listener.listen(1)
        with pytest.raises(UnixSocketError, match="another process listens on"):
            claim_unix_socket(str(live))
    (tmp_path / "file").write_text("x")
    with pytest.raises(UnixSocketError, match="exists and is not a socket"):
        claim_unix_socket(str(tmp_path / "file"))


@pytest.mark.property
@given(
    host=st.sampled_from(["0.0.0.0", "10.0.0.5", "sidecar.internal"]),
    tls=st.booleans(),
    principals=st.sampled_from(["none", "token"]),
    insecure=st.booleans(),
)
def test_an_exposed_mcp_endpoint_follows_the_grpc_ports_rules(
    host: str, tls: bool, principals: str, insecure: bool
) -> None:
    server: dict[str, Any] = {"insecure": insecure}
    if tls:
        server["tls"] = {"cert_file": "c.pem", "key_file": "k.pem"}
    listed = [PRINCIPAL] if principals == "token" else []
    config = parse_config(
        {"server": server, "auth": {"principals": listed}, "mcp": {"port": 0, "host": host}}
    )
    if principals == "token" and not tls:
        with pytest.raises(StartupError) as refused:
            check_exposure(config)
        assert "mcp.host" in str(refused.value) and "plaintext" in str(refused.value)
    elif (tls and principals == "token") or insecure:
        warnings = check_exposure(config)
        assert bool(warnings) is not (tls and principals == "token")
    else:
        with pytest.raises(StartupError):
            check_exposure(config)


def test_secret_headers_never_go_to_a_plain_http_mcp_server_beyond_loopback() -> None:
    remote = {"name": "remote", "url": "http://tools.internal/mcp"}
    secret = {**remote, "headers_from_env": {"Authorization": "REMOTE_AUTH"}}
    with pytest.raises(StartupError) as refused:
        check_exposure(parse_config({"mcp_servers": [secret], "server": {"insecure": True}}))
    assert "headers_from_env" in str(refused.value) and "REMOTE_AUTH" not in str(refused.value)
    with pytest.raises(StartupError):
        check_exposure(parse_config({"mcp_servers": [remote]}))
    assert check_exposure(parse_config({"mcp_servers": [remote], "server": {"insecure": True}}))
    local = {"name": "local", "url": "http://127.0.0.1:9/mcp", "headers_from_env": {"X": "Y"}}
    assert check_exposure(parse_config({"mcp_servers": [local]})) == []
