"""The sidecar on a Unix domain socket (``server.unix_socket``), through real processes.

The socket is one more address of the same server: the same services, the same TLS and
the same callers as the TCP port. A socket left behind by a process that died is
replaced; one a live sidecar serves is never taken over.
"""

from __future__ import annotations

import functools
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentsidecar.client import AgentClient
from agentsidecar.errors import error_details
from agentsidecar.v1 import agent_pb2
from sidecar import testing
from sidecar.config import parse_config
from sidecar.errors import ConfigError
from sidecar.testing import ProcessStartError, ServerProcess
from sidecar.testing.certs import TestCA

FOUNDING = "What is the status of order 20250101, and where is its parcel?"
TOKEN = "unix-socket-caller-token"


@pytest.fixture(scope="module")
def stack() -> Iterator[dict[str, ServerProcess]]:
    with (
        testing.simulator(scenario=testing.SCENARIO) as sim,
        testing.tool_server("toolservers.examples.orders") as orders,
        testing.tool_server("toolservers.examples.logistics") as logistics,
    ):
        yield {"simulator": sim, "orders": orders, "logistics": logistics}


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # Short: a socket's path holds at most 107 bytes, and pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="sock-") as directory:
        yield Path(directory)


def config_of(stack: dict[str, ServerProcess], **server: object) -> dict[str, object]:
    return testing.sidecar_config(
        stack["simulator"].address,
        {"orders": stack["orders"].address, "logistics": stack["logistics"].address},
        server={"port": 0, "grace_period": 1, **server},
    )


def start(config: dict[str, object], workdir: Path, log: Path) -> ServerProcess:
    with log.open("ab") as stderr:
        return testing.sidecar(config, workdir, stderr=stderr)


async def health(target: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
    return int(reply.status)


async def test_a_run_over_the_unix_socket_is_a_run_of_the_same_server(
    stack: dict[str, ServerProcess], socket_dir: Path, tmp_path: Path
) -> None:
    path = socket_dir / "sidecar.sock"
    with start(config_of(stack, unix_socket=str(path)), tmp_path, tmp_path / "log") as side:
        assert side.announced("socket on ") == f"unix:{path}"
        mode = path.lstat().st_mode
        assert stat.S_ISSOCK(mode)
        assert stat.S_IMODE(mode) == 0o660  # the sidecar's user and group only
        testing.wait_serving(f"unix:{path}")
        async with AgentClient(f"unix:{path}") as local:
            session = await local.create_session("default")
            result = (await local.run(session.session_id, FOUNDING, timeout=30)).result
        assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED, result
        calls = [s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL]
        assert {c.name for c in calls} == {"get_order_status", "track_parcel"}
        assert all(c.tool_call.status == agent_pb2.TOOL_CALL_STATUS_OK for c in calls)
        # One server: the session created over the socket is there over TCP.
        async with AgentClient(side.address) as remote:
            seen = await remote.get_session(session.session_id)
        assert [t.answer for t in seen.turns] == [result.answer]
        assert side.stop() == 0
    # The socket goes with the server.
    assert not path.exists()


async def test_the_socket_serves_the_same_tls_and_callers_as_the_port(
    stack: dict[str, ServerProcess], socket_dir: Path, tmp_path: Path
) -> None:
    ca = TestCA(tmp_path / "ca")
    served = ca.issue("sidecar")  # for localhost
    path = socket_dir / "sidecar.sock"
    config = config_of(
        stack,
        unix_socket=str(path),
        tls={"cert_file": served.cert_file, "key_file": served.key_file},
    )
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    config["auth"] = {"principals": [{"name": "app", "token_file": str(token_file)}]}
    with start(config, tmp_path, tmp_path / "log"):
        target = f"unix:{path}"
        with pytest.raises(grpc.aio.AioRpcError) as plaintext:
            await health(target)
        assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE
        # A unix: target names no host: the client says which name the certificate must
        # carry.
        tls = functools.partial(
            AgentClient, target, tls=True, ca_file=ca.ca_file, server_name="localhost"
        )
        async with tls() as anonymous:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await anonymous.create_session("default")
        assert error_details(refused.value).reason == "UNAUTHENTICATED"
        async with tls(token=TOKEN) as app:
            session = await app.create_session("default")
            result = (await app.run(session.session_id, FOUNDING, timeout=30)).result
        assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED


async def test_a_token_travels_over_the_socket_without_tls(
    stack: dict[str, ServerProcess], socket_dir: Path, tmp_path: Path
) -> None:
    path = socket_dir / "sidecar.sock"
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    config = config_of(stack, unix_socket=str(path))
    config["auth"] = {"principals": [{"name": "app", "token_file": str(token_file)}]}
    with start(config, tmp_path, tmp_path / "log"):
        target = f"unix:{path}"
        testing.wait_serving(target)
        # A socket is local, like loopback: the token may travel in plaintext there.
        async with AgentClient(target, token=TOKEN) as app:
            session = await app.create_session("default")
            result = (await app.run(session.session_id, FOUNDING, timeout=30)).result
        assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
        for token in (None, "not-" + TOKEN):
            async with AgentClient(target, token=token) as stranger:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stranger.create_session("default")
            assert error_details(refused.value).reason == "UNAUTHENTICATED"


async def test_a_stale_socket_is_replaced_and_a_live_one_is_never_taken_over(
    stack: dict[str, ServerProcess], socket_dir: Path, tmp_path: Path
) -> None:
    path = socket_dir / "sidecar.sock"
    # What a killed process leaves behind: a socket file nothing listens on.
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(path))
    log = tmp_path / "log"
    config = config_of(stack, unix_socket=str(path))
    with start(config, tmp_path / "first", log) as first:
        testing.wait_serving(f"unix:{path}")  # the stale file replaced by a live socket
        with pytest.raises(ProcessStartError, match="exited with 2"):
            start(config, tmp_path / "second", log)
        assert f"another process listens on {path}" in log.read_text()
        # The first sidecar still has its socket.
        async with AgentClient(f"unix:{path}") as client:
            session = await client.create_session("default")
        async with AgentClient(first.address) as client:
            assert (await client.get_session(session.session_id)).session_id
    path.write_text("not a socket")
    with pytest.raises(ProcessStartError, match="exited with 2"):
        start(config, tmp_path / "third", log)
    assert f"{path} exists and is not a socket" in log.read_text()
    assert path.read_text() == "not a socket"  # left as it was


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("unix:/run/sidecar.sock", "without the unix: prefix"),
        ("/run/agent-sidecar/", "not its directory"),
        ("/run/" + "s" * 103, "at most 107 bytes"),
    ],
)
def test_a_socket_path_that_cannot_work_is_refused_at_start(path: str, says: str) -> None:
    with pytest.raises(ConfigError, match=r"server\.unix_socket") as refused:
        parse_config({"server": {"unix_socket": path}})
    assert says in str(refused.value)
    assert parse_config({"server": {"unix_socket": "/run/" + "s" * 102}}).server.unix_socket
