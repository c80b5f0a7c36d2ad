"""The Python SDK's keys fetched from a sidecar (``--identity-keys-from``): a real gRPC
server plays the sidecar's ``IdentityKeysService``, answering what the test says."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519
from google.protobuf.duration_pb2 import Duration

from agentsidecar.tool_identity import ASSERTION_KEY
from agentsidecar.v1 import identity_pb2, identity_pb2_grpc
from sidecar.testing import scaled
from tests.support.stack import eventually
from toolservers._identity import IdentityRefused, IdentityVerifier
from toolservers._identity_keys import FetchedKeys


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class _Key:
    def __init__(self, kid: str) -> None:
        self.kid = kid
        self.private = ed25519.Ed25519PrivateKey.generate()
        raw = self.private.public_key().public_bytes_raw()
        self.jwk = {"kty": "OKP", "crv": "Ed25519", "x": _b64(raw), "kid": kid, "alg": "EdDSA"}

    def assertion(self) -> str:
        now = int(time.time())
        claims = {
            "iss": "agent-sidecar", "aud": "orders", "sid": "s-1", "run_id": "r-1",
            "iat": now, "exp": now + 300,
        }  # fmt: skip
        header = {"alg": "EdDSA", "kid": self.kid}
        head = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        return f"{head}.{_b64(self.private.sign(head.encode()))}"


class _Sidecar(identity_pb2_grpc.IdentityKeysServiceServicer):
    """Answers the keys it holds, or UNAVAILABLE while it holds none."""

    def __init__(self) -> None:
        self.keys: list[_Key] | None = None
        self.asked = 0

    async def GetIdentityKeys(self, request: Any, context: Any) -> Any:
        self.asked += 1
        if self.keys is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "starting")
        jwks = json.dumps({"keys": [k.jwk for k in self.keys or []]})
        return identity_pb2.GetIdentityKeysResponse(jwks=jwks, max_age=Duration(seconds=300))


@pytest.fixture
async def served() -> AsyncIterator[tuple[_Sidecar, str]]:
    sidecar = _Sidecar()
    server = grpc.aio.server()
    identity_pb2_grpc.add_IdentityKeysServiceServicer_to_server(sidecar, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield sidecar, f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


def _call(verifier: IdentityVerifier, key: _Key) -> Any:
    return verifier.verify(((ASSERTION_KEY, key.assertion()),), "call_1")


async def test_calls_wait_for_the_first_keys_then_verify_and_a_new_kid_is_fetched_soon(
    served: tuple[_Sidecar, str],
) -> None:
    sidecar, target = served
    fetched = FetchedKeys(target, first_retry=0.05, last_retry=0.2, soonest=0.1)
    verifier = IdentityVerifier(None, "orders", "agent-sidecar", fetched=fetched, required=True)
    first, second = _Key("k1"), _Key("k2")
    running = asyncio.get_running_loop().create_task(fetched.run())
    try:

        async def refused_once() -> bool:
            return sidecar.asked > 0

        await eventually(refused_once, timeout=5)  # the sidecar is not up yet
        with pytest.raises(IdentityRefused, match="the identity keys are not fetched yet"):
            _call(verifier, first)
        sidecar.keys = [first]  # the sidecar is up: the next retry gets them

        async def keys_arrived() -> bool:
            return fetched.keys is not None

        await eventually(keys_arrived, timeout=5)
        assert _call(verifier, first).verified
        # A rotation: the sidecar signs with a key this server has not fetched yet.
        sidecar.keys = [first, second]
        with pytest.raises(IdentityRefused, match="does not know"):
            _call(verifier, second)

        async def rotated() -> bool:
            try:
                return bool(_call(verifier, second).verified)
            except IdentityRefused:
                return False

        await eventually(rotated, timeout=5)
        # The sidecar goes away: the keys held stay in use.
        sidecar.keys = None
        asked = sidecar.asked
        await asyncio.sleep(0.15)  # past the least time between two asked-for fetches
        fetched.want_refresh()
        await asyncio.sleep(scaled(0.3))
        assert sidecar.asked > asked
        assert _call(verifier, first).verified and _call(verifier, second).verified
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


def test_keys_travel_in_plaintext_only_on_this_machine(tmp_path: Any) -> None:
    assert FetchedKeys("127.0.0.1:50051")._credentials is None
    assert FetchedKeys("unix:/run/sidecar.sock")._credentials is None
    assert FetchedKeys("agent-sidecar.default.svc:50051")._credentials is not None
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"")  # read, not parsed, until a fetch dials
    assert FetchedKeys("127.0.0.1:50051", str(ca))._credentials is not None
    with pytest.raises(ValueError, match="cannot read"):
        FetchedKeys("agent-sidecar:50051", str(tmp_path / "missing-ca.pem"))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--identity-keys", "k.json", "--identity-keys-from", "127.0.0.1:1"],
            "--identity-keys and --identity-keys-from: give one of them",
        ),
        (["--identity-keys-from", "127.0.0.1:1"], "needs --identity-audience"),
        (["--identity-keys-ca", "ca.pem"], "--identity-keys-ca needs --identity-keys-from"),
    ],
)
def test_the_flags_say_what_goes_with_what(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolservers._options import parse_serve_args

    with pytest.raises(SystemExit):
        parse_serve_args("orders", flags, [])
    assert message in capsys.readouterr().err
