"""The identity a tool call carries, as data: the metadata contract, its encoding, the
assertion's signing and reuse, and the SDK's verification of it.

The encoding is property-tested: whatever a caller puts in a session id or a label, the
metadata holds the documented keys once each, every text value is printable ASCII, and
the tool server decodes exactly what was sent.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jwt
import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from hypothesis import example, given
from hypothesis import strategies as st

from agentsidecar.tool_identity import (
    ASSERTION_KEY,
    KEYS,
    LABELS_KEY,
    MAX_ASSERTION_BYTES,
    MAX_LABELS_BYTES,
    PRINCIPAL_KEY,
    decode_text,
    encode_text,
)
from sidecar.agent.limits import LABEL_KEY_PATTERN, MAX_LABEL_VALUE
from sidecar.config import ToolAssertionConfig
from sidecar.errors import StartupError
from sidecar.security.identity import ANONYMOUS, Principal
from sidecar.security.tool_identity import AssertionSigner, ToolIdentity
from toolservers._identity import IdentityRefused, IdentityVerifier, plain_identity

PRINTABLE = re.compile(r"[\x20-\x7e]*")
PRINCIPAL_NAMES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}", fullmatch=True)
IDS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}", fullmatch=True)
# What check_labels lets a caller store: any text without the control characters it
# refuses (tab, newline and carriage return pass).
_CONTROLS = "".join(chr(c) for c in (*range(0, 9), 11, 12, *range(14, 32), 127))
LABEL_VALUES = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters=_CONTROLS),
    max_size=MAX_LABEL_VALUE,
)
LABEL_KEYS = st.from_regex(LABEL_KEY_PATTERN, fullmatch=True)
LABELS = st.dictionaries(LABEL_KEYS, LABEL_VALUES, max_size=12)


def _ed25519_pem(path: Path) -> Path:
    key = ed25519.Ed25519PrivateKey.generate()
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


def _signer(tmp_path: Path, **config: Any) -> AssertionSigner:
    key = _ed25519_pem(tmp_path / "key.pem")
    return AssertionSigner(ToolAssertionConfig(key_file=str(key), **config))


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@given(
    principal=st.one_of(st.just(""), PRINCIPAL_NAMES),
    session_id=IDS,
    labels=LABELS,
    call_id=st.text(max_size=80),
)
def test_the_metadata_holds_each_key_once_in_printable_ascii_and_decodes_to_what_was_sent(
    principal: str, session_id: str, labels: dict[str, str], call_id: str
) -> None:
    run = ToolIdentity().for_run(Principal(principal), session_id, "run-1", labels)
    metadata = run.call_metadata("tools", call_id, [("traceparent", "00-ab-cd-01")])

    assert metadata[0] == ("traceparent", "00-ab-cd-01")
    ours = [key for key, _ in metadata[1:]]
    assert len(ours) == len(set(ours)) and set(ours) <= KEYS - {ASSERTION_KEY}
    assert (PRINCIPAL_KEY in ours) == bool(principal)
    assert (LABELS_KEY in ours) == bool(labels)
    for key, value in metadata:
        if key.endswith("-bin"):
            assert isinstance(value, bytes)
        else:
            assert isinstance(value, str) and PRINTABLE.fullmatch(value), (key, value)
    seen = plain_identity(metadata, "ignored")
    assert (seen.principal, seen.session_id, seen.run_id, seen.call_id) == (
        principal,
        session_id,
        "run-1",
        call_id,
    )
    if len(orjson.dumps(labels)) <= MAX_LABELS_BYTES:
        assert dict(seen.labels) == labels and not seen.labels_omitted
    else:
        assert dict(seen.labels) == {} and seen.labels_omitted


@given(text=st.text(max_size=200))
def test_text_values_round_trip_and_never_hold_a_separator(text: str) -> None:
    encoded = encode_text(text)
    assert PRINTABLE.fullmatch(encoded)
    assert not set(encoded) & set(" ,;\r\n\t\"'")
    assert decode_text(encoded) == text


def test_ids_the_sidecar_accepts_travel_as_they_are() -> None:
    for plain in ("user-1", "alice@example.com", "a:b.c_d~e", "call_0123abcd"):
        assert encode_text(plain) == plain
    assert encode_text("50%+ off") == "50%25%2B%20off"


def test_labels_too_large_to_send_are_announced_not_cut() -> None:
    labels = {f"k{i}": "é" * 200 for i in range(20)}
    run = ToolIdentity().for_run(ANONYMOUS, "s", "r", labels)
    sent = dict(run.call_metadata("tools", "c", ()))
    assert sent[LABELS_KEY] == b"null"
    seen = plain_identity(tuple(sent.items()), "c")
    assert seen.labels_omitted and not seen.labels


def test_a_repeated_identity_key_is_malformed() -> None:
    run = ToolIdentity().for_run(Principal("alice"), "s", "r", {})
    metadata = (*run.call_metadata("tools", "c", ()), (PRINCIPAL_KEY, "mallory"))
    with pytest.raises(ValueError, match="more than once"):
        plain_identity(metadata, "c")


# -- the assertion --------------------------------------------------------------------------


def test_one_assertion_per_run_and_server_is_reused_until_three_quarters_of_its_life(
    tmp_path: Path,
) -> None:
    clock = Clock(1_800_000_000.0)
    key = _ed25519_pem(tmp_path / "key.pem")
    signer = AssertionSigner(ToolAssertionConfig(key_file=str(key), ttl=100), clock=clock)
    run = ToolIdentity(signer).for_run(Principal("alice"), "s-1", "r-1", {"team": "blue"})

    first = run.assertion("orders")
    assert run.assertion("orders") == first  # the next call: no signature
    other = run.assertion("shop")
    assert other != first
    assert jwt.decode(other, options={"verify_signature": False})["aud"] == "shop"
    clock.now += 74
    assert run.assertion("orders") == first
    clock.now += 2  # 76 of 100 seconds gone
    renewed = run.assertion("orders")
    assert renewed != first
    claims = jwt.decode(renewed, options={"verify_signature": False})
    assert claims["iat"] == int(clock.now) and claims["exp"] == int(clock.now) + 100
    # Another run signs its own.
    again = ToolIdentity(signer).for_run(Principal("alice"), "s-1", "r-2", {})
    assert again.assertion("orders") != renewed


def test_the_claims_name_issuer_principal_audience_session_run_and_labels(tmp_path: Path) -> None:
    signer = _signer(tmp_path, issuer="sidecar.shop")
    run = ToolIdentity(signer).for_run(Principal("alice"), "user-1", "r-9", {"t": "Zürich"})
    token = dict(run.call_metadata("orders", "call_1", ()))[ASSERTION_KEY]
    assert isinstance(token, str)
    header = jwt.get_unverified_header(token)
    assert header["alg"] == "EdDSA" and header["kid"] == signer.kid
    public = jwt.PyJWK(signer.jwks()["keys"][0])
    claims = jwt.decode(token, public, algorithms=["EdDSA"], audience="orders")
    assert {k: claims[k] for k in ("iss", "sub", "aud", "sid", "run_id", "labels")} == {
        "iss": "sidecar.shop",
        "sub": "alice",
        "aud": "orders",
        "sid": "user-1",
        "run_id": "r-9",
        "labels": {"t": "Zürich"},
    }
    assert claims["exp"] - claims["iat"] == 300 and len(claims["jti"]) == 32
    anonymous = ToolIdentity(signer).for_run(ANONYMOUS, "s", "r", {}).assertion("orders")
    assert "sub" not in jwt.decode(anonymous, options={"verify_signature": False})


def test_without_a_signer_no_assertion_travels(tmp_path: Path) -> None:
    run = ToolIdentity().for_run(Principal("alice"), "s", "r", {})
    assert ASSERTION_KEY not in dict(run.call_metadata("orders", "c", ()))


def test_a_p256_key_signs_es256_and_the_jwks_publishes_every_key_once(tmp_path: Path) -> None:
    ec_key = ec.generate_private_key(ec.SECP256R1())
    signing = tmp_path / "ec.pem"
    signing.write_bytes(
        ec_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    previous = _ed25519_pem(tmp_path / "old.pem")
    previous_public = tmp_path / "old.pub"
    private = serialization.load_pem_private_key(previous.read_bytes(), None)
    previous_public.write_bytes(
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    signer = AssertionSigner(
        ToolAssertionConfig(
            key_file=str(signing),
            published_key_files=[str(previous_public), str(previous), str(signing)],
        )
    )
    keys = signer.jwks()["keys"]
    assert [k["alg"] for k in keys] == ["ES256", "EdDSA"]
    assert keys[0]["kid"] == signer.kid and len({k["kid"] for k in keys}) == 2
    assert all("d" not in k for k in keys)  # public halves only
    token = ToolIdentity(signer).for_run(ANONYMOUS, "s", "r", {}).assertion("t")
    assert jwt.decode(token, jwt.PyJWK(keys[0]), algorithms=["ES256"], audience="t")["sid"] == "s"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read it"),
        (b"", "the file is empty"),
        (b"-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n", "not a PEM"),
        ("encrypted", "the key is encrypted"),
        ("rsa", "not supported"),
        ("p384", "not supported"),
    ],
)
def test_a_key_that_cannot_sign_stops_the_start_with_the_file_named_and_no_key_shown(
    tmp_path: Path, content: bytes | str | None, expected: str
) -> None:
    path = tmp_path / "key.pem"
    if content == "encrypted":
        key = ed25519.Ed25519PrivateKey.generate()
        data = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret-pass"),
        )
    elif content in ("rsa", "p384"):
        other = (
            rsa.generate_private_key(65537, 2048)
            if content == "rsa"
            else ec.generate_private_key(ec.SECP384R1())
        )
        data = other.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    else:
        data = content  # type: ignore[assignment]
    if data is not None:
        path.write_bytes(data)
    with pytest.raises(StartupError) as refused:
        AssertionSigner(ToolAssertionConfig(key_file=str(path)))
    message = str(refused.value)
    assert message.startswith(f"auth.tool_assertion.key_file {path}: ")
    assert expected in message
    if data:
        body = b"".join(data.splitlines()[1:-1]).decode()
        assert body[:40] not in message


def test_the_jwks_command_prints_the_public_keys_and_a_missing_key_exits_2(
    tmp_path: Path,
) -> None:
    key = _ed25519_pem(tmp_path / "key.pem")
    config = tmp_path / "sidecar.yaml"
    config.write_text(f"auth:\n  tool_assertion:\n    key_file: {key}\n")
    done = subprocess.run(
        [sys.executable, "-m", "sidecar", "identity", "jwks", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    jwks = json.loads(done.stdout)
    assert [k["kty"] for k in jwks["keys"]] == ["OKP"]
    assert "d" not in jwks["keys"][0]
    key.unlink()
    for args in (["identity", "jwks"], ["serve"]):
        failed = subprocess.run(
            [sys.executable, "-m", "sidecar", *args, "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert failed.returncode == 2
        assert f"auth.tool_assertion.key_file {key}: cannot read it" in failed.stderr


# -- the SDK's verification ---------------------------------------------------------------


@pytest.fixture
def signed(tmp_path: Path) -> tuple[AssertionSigner, Path]:
    signer = _signer(tmp_path)
    keys = tmp_path / "jwks.json"
    keys.write_text(json.dumps(signer.jwks()))
    return signer, keys


def _call(signer: AssertionSigner | None, server: str = "orders") -> tuple[Any, ...]:
    run = ToolIdentity(signer).for_run(Principal("alice"), "user-1", "r-1", {"team": "ü"})
    return run.call_metadata(server, "call_1", ())


def test_a_verified_identity_comes_from_the_claims(signed: tuple[AssertionSigner, Path]) -> None:
    signer, keys = signed
    identity = IdentityVerifier(str(keys), "orders", "agent-sidecar").verify(
        _call(signer), "call_1"
    )
    assert identity.verified and identity.principal == "alice"
    assert (identity.session_id, identity.run_id, identity.call_id) == ("user-1", "r-1", "call_1")
    assert dict(identity.labels) == {"team": "ü"} and identity.claims["aud"] == "orders"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("missing", "carries no identity assertion"),
        ("audience", "for another tool server"),
        ("issuer", "issuer is not"),
        ("tampered", "signature does not verify"),
        ("expired", "expired at"),
        ("future", "issued in the future"),
        ("unknown key", "a key this server does not know"),
        ("principal", "x-agent-principal contradicts the identity assertion"),
        ("labels", "x-agent-labels-bin contradicts the identity assertion"),
        ("call id", "x-agent-call-id contradicts the request's call_id"),
        ("garbage", "not a JWT"),
    ],
)
def test_an_assertion_that_does_not_verify_is_refused_with_the_reason(
    signed: tuple[AssertionSigner, Path], tmp_path: Path, change: str, reason: str
) -> None:
    signer, keys = signed
    verifier = IdentityVerifier(str(keys), "orders", "agent-sidecar", required=True, leeway=5)
    metadata = dict(_call(signer))
    token = str(metadata[ASSERTION_KEY])
    claims = jwt.decode(token, options={"verify_signature": False})
    call_id = "call_1"
    if change == "missing":
        del metadata[ASSERTION_KEY]
    elif change == "audience":
        metadata = dict(_call(signer, "shop"))
    elif change == "issuer":
        verifier = IdentityVerifier(str(keys), "orders", "someone-else")
    elif change == "tampered":
        header, _, signature = token.split(".")
        body = jwt.utils.base64url_encode(json.dumps({**claims, "sub": "bob"}).encode()).decode()
        metadata[ASSERTION_KEY] = f"{header}.{body}.{signature}"
        metadata[PRINCIPAL_KEY] = "bob"
    elif change in ("expired", "future"):
        shift = -3600 if change == "expired" else 3600
        moved = {**claims, "iat": claims["iat"] + shift, "exp": claims["exp"] + shift}
        metadata[ASSERTION_KEY] = signer.sign(moved, "orders", claims["iat"] + shift)[0]
    elif change == "unknown key":
        (tmp_path / "stranger").mkdir()
        stranger = _signer(tmp_path / "stranger")
        metadata = dict(_call(stranger))
    elif change == "principal":
        metadata[PRINCIPAL_KEY] = "bob"
    elif change == "labels":
        metadata[LABELS_KEY] = b'{"team":"red"}'
    elif change == "call id":
        call_id = "call_2"
    elif change == "garbage":
        metadata[ASSERTION_KEY] = "not.a.token"
    with pytest.raises(IdentityRefused, match=re.escape(reason)) as refused:
        verifier.verify(tuple(metadata.items()), call_id)
    assert token not in str(refused.value)


def test_without_required_a_call_without_an_assertion_gets_the_plain_identity(
    signed: tuple[AssertionSigner, Path],
) -> None:
    _, keys = signed
    identity = IdentityVerifier(str(keys), "orders", "agent-sidecar").verify(_call(None), "call_1")
    assert not identity.verified and identity.principal == "alice" and not identity.claims


def test_a_verified_assertion_is_remembered_but_expires_all_the_same(
    signed: tuple[AssertionSigner, Path],
) -> None:
    signer, keys = signed
    metadata = _call(signer)
    exp = jwt.decode(str(dict(metadata)[ASSERTION_KEY]), options={"verify_signature": False})["exp"]
    clock = Clock(exp - 100)
    verifier = IdentityVerifier(str(keys), "orders", "agent-sidecar", leeway=0, clock=clock)
    assert verifier.verify(metadata, "call_1").verified
    clock.now = exp + 1
    with pytest.raises(IdentityRefused, match="expired"):
        verifier.verify(metadata, "call_1")


def test_a_keys_file_that_holds_no_usable_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    for content in ('{"keys": []}', "[1, 2]", '{"keys": [{"kty": "RSA", "kid": "x"}]}'):
        path.write_text(content)
        with pytest.raises(ValueError, match=str(path)):
            IdentityVerifier(str(path), "orders", "agent-sidecar")


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
_ODD_NUMBERS = st.sampled_from([1e300, -1e300, 2**80, -(2**80), 0.5, "1700000000", None, [1], {}])


@given(
    header=st.dictionaries(
        st.sampled_from(["crit", "typ", "cty", "b64", "x5u", "jku", "zip"]), _JSON, max_size=3
    ),
    claims=st.dictionaries(
        st.sampled_from(["exp", "iat", "nbf", "aud", "iss", "sub", "agent_session", "agent_run"]),
        _JSON | _ODD_NUMBERS,
        max_size=4,
    ),
    padding=st.integers(0, 9000),
)
def test_a_signed_assertion_of_any_shape_is_verified_or_refused_never_an_error(
    tmp_path_factory: pytest.TempPathFactory,
    header: dict[str, Any],
    claims: dict[str, Any],
    padding: int,
) -> None:
    # Signed with the right key, so every check past the signature is reached: an odd
    # header (crit), an odd claim (exp as text, 1e300), a token of 9 KB.
    tmp = tmp_path_factory.mktemp("odd")
    key_file = _ed25519_pem(tmp / "key.pem")
    signer = AssertionSigner(ToolAssertionConfig(key_file=str(key_file)))
    keys = tmp / "jwks.json"
    keys.write_text(json.dumps(signer.jwks()))
    kid = signer.jwks()["keys"][0]["kid"]
    key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    now = 1_800_000_000
    body = {
        "iss": "agent-sidecar", "aud": "orders", "iat": now, "exp": now + 60,
        "agent_session": "s-1", "agent_run": "r-1", "pad": "x" * padding, **claims,
    }  # fmt: skip

    # Built by hand: PyJWT's encoder refuses some of what a verifier must refuse.
    def part(value: Any) -> str:
        return jwt.utils.base64url_encode(json.dumps(value).encode()).decode()

    signing_input = f"{part({**header, 'alg': 'EdDSA', 'kid': kid})}.{part(body)}"
    assert isinstance(key, ed25519.Ed25519PrivateKey)
    signature = jwt.utils.base64url_encode(key.sign(signing_input.encode())).decode()
    token = f"{signing_input}.{signature}"
    verifier = IdentityVerifier(str(keys), "orders", "agent-sidecar", clock=lambda: now)
    try:
        identity = verifier.verify(((ASSERTION_KEY, token),), "call_1")
    except IdentityRefused:
        return
    assert identity.verified


@example(principal="p" * 128, session_id="s" * 128, labels={"k": "é" * 1000})
@given(
    principal=PRINCIPAL_NAMES,
    session_id=IDS,
    labels=st.dictionaries(
        LABEL_KEYS, st.text(st.sampled_from('aé€😀\\"'), max_size=MAX_LABEL_VALUE), max_size=64
    ),
)
def test_whatever_the_sidecar_signs_fits_the_size_every_sdk_takes_and_verifies(
    tmp_path_factory: pytest.TempPathFactory,
    principal: str,
    session_id: str,
    labels: dict[str, str],
) -> None:
    # The longest names the configuration allows; labels whose escapes (PyJWT writes
    # non-ASCII as \u escapes) would triple them.
    tmp = tmp_path_factory.mktemp("largest")
    config = ToolAssertionConfig(key_file=str(_ed25519_pem(tmp / "key.pem")), issuer="i" * 256)
    signer = AssertionSigner(config)
    keys = tmp / "jwks.json"
    keys.write_text(json.dumps(signer.jwks()))
    server = "s" + "x" * 31
    run = ToolIdentity(signer).for_run(Principal(principal), session_id, "r" * 36, labels)
    metadata = run.call_metadata(server, "call_1", ())
    token = dict(metadata)[ASSERTION_KEY]
    assert len(token) <= MAX_ASSERTION_BYTES
    identity = IdentityVerifier(str(keys), server, "i" * 256).verify(metadata, "call_1")
    assert identity.verified
    assert dict(identity.labels) == (labels if not identity.labels_omitted else {})
