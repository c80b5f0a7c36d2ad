"""Identity for tools: who each tool call serves, and the signed assertion that proves it.

Every tool call carries the principal, the session, the run and the call as gRPC metadata
(``agentsidecar.tool_identity`` is the contract). The run's part is built once, when the
run starts (:meth:`ToolIdentity.for_run`); each call adds only its call id.

With ``auth.tool_assertion`` the sidecar also signs a JWT (``x-agent-identity``) a tool
server verifies with the published public key, so it need not trust the network between
them. One is signed per run and tool server (its audience), on the run's first call to
that server, and reused for the run's later calls there until three quarters of its
lifetime have passed. Off, nothing here signs or imports a JWT library.

The signing key is read when the sidecar starts (or reloads): an unreadable, encrypted or
unsupported key stops it with a :class:`~sidecar.errors.StartupError` that names the file
and never shows the key.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from agentsidecar.tool_identity import (
    ASSERTION_KEY,
    CALL_ID_KEY,
    LABELS_CLAIM,
    LABELS_KEY,
    MAX_LABELS_BYTES,
    PRINCIPAL_KEY,
    RUN_CLAIM,
    RUN_ID_KEY,
    SESSION_CLAIM,
    SESSION_ID_KEY,
    encode_labels,
    encode_text,
)
from sidecar.config import ToolAssertionConfig
from sidecar.errors import StartupError

if TYPE_CHECKING:
    from sidecar.security.identity import Principal

__all__ = ["AssertionSigner", "RunIdentity", "ToolIdentity"]

Metadata = tuple[tuple[str, str | bytes], ...]

_REFRESH_AT = 0.75  # of an assertion's lifetime: then the next call gets a new one
_TOO_LARGE = b"null"


class ToolIdentity:
    """Builds each run's identity for its tool calls, and signs its assertions when
    configured.

    Args:
        signer: Signs the assertions; None: the plain metadata alone.
    """

    def __init__(self, signer: AssertionSigner | None = None) -> None:
        self.signer = signer

    @classmethod
    def from_config(cls, config: ToolAssertionConfig | None) -> ToolIdentity:
        """The identity ``auth.tool_assertion`` asks for.

        Raises:
            StartupError: the signing key cannot be used (the message names the file).
        """
        return cls(AssertionSigner(config) if config is not None else None)

    def for_run(
        self, principal: Principal, session_id: str, run_id: str, labels: Mapping[str, str]
    ) -> RunIdentity:
        """The identity of one run's tool calls.

        Args:
            principal: Who runs it (the anonymous principal is left out).
            session_id: The session's id as the caller knows it.
            run_id: The run's id.
            labels: The session's labels.
        """
        base: list[tuple[str, str | bytes]] = []
        if principal.name:
            base.append((PRINCIPAL_KEY, encode_text(principal.name)))
        base.append((SESSION_ID_KEY, encode_text(session_id)))
        base.append((RUN_ID_KEY, encode_text(run_id)))
        encoded = encode_labels(labels)
        if self.signer is not None and encoded not in (None, _TOO_LARGE):
            # The assertion carries them as PyJWT writes JSON (non-ASCII as \\u escapes,
            # up to three times longer): too large there is too large in both places, so
            # the assertion stays under MAX_ASSERTION_BYTES.
            if len(json.dumps(dict(sorted(labels.items())), separators=(",", ":"))) > (
                MAX_LABELS_BYTES
            ):
                encoded = _TOO_LARGE
        if encoded is not None:
            base.append((LABELS_KEY, encoded))
        claims: dict[str, Any] | None = None
        if self.signer is not None:
            claims = {"iss": self.signer.issuer}
            if principal.name:
                claims["sub"] = principal.name
            claims[SESSION_CLAIM] = session_id
            claims[RUN_CLAIM] = run_id
            if encoded is None:
                claims[LABELS_CLAIM] = {}
            elif encoded != _TOO_LARGE:
                claims[LABELS_CLAIM] = dict(sorted(labels.items()))
        return RunIdentity(tuple(base), self.signer, claims)


class RunIdentity:
    """One run's identity: the metadata of its tool calls, and its assertions by server."""

    __slots__ = ("_base", "_claims", "_signer", "_tokens")

    def __init__(
        self,
        base: Metadata,
        signer: AssertionSigner | None,
        claims: dict[str, Any] | None,
    ) -> None:
        self._base = base
        self._signer = signer
        self._claims = claims
        self._tokens: dict[str, tuple[str, float]] = {}  # server -> (token, renew after)

    @property
    def metadata(self) -> Metadata:
        """The entries every call of the run carries (the call id aside)."""
        return self._base

    def call_metadata(
        self, server: str, call_id: str, metadata: Sequence[tuple[str, str | bytes]]
    ) -> Metadata:
        """``metadata`` with the run's identity and the call's id added, and the assertion
        for ``server`` when signing is on."""
        call = (CALL_ID_KEY, encode_text(call_id))
        if self._signer is None:
            return (*metadata, *self._base, call)
        return (*metadata, *self._base, call, (ASSERTION_KEY, self.assertion(server)))

    def assertion(self, server: str) -> str:
        """The run's assertion for ``server``: the one signed before while it has a
        quarter of its lifetime left, else a new one."""
        signer = self._signer
        assert signer is not None and self._claims is not None
        now = signer.clock()
        held = self._tokens.get(server)
        if held is not None and now < held[1]:
            return held[0]
        token, renew_after = signer.sign(self._claims, server, now)
        self._tokens[server] = (token, renew_after)
        return token


class AssertionSigner:
    """Signs assertions with the key of ``auth.tool_assertion``, and publishes its public
    half (and those of ``published_key_files``) as a JWKS.

    Args:
        config: ``auth.tool_assertion``.
        clock: Wall-clock seconds since the epoch (tests pass their own).

    Raises:
        StartupError: a key file cannot be read or holds no usable key.
    """

    def __init__(
        self, config: ToolAssertionConfig, *, clock: Callable[[], float] = time.time
    ) -> None:
        import jwt  # only when signing is on

        self._encode = jwt.encode
        self.issuer = config.issuer
        self.ttl = config.ttl
        self.clock = clock
        where = "auth.tool_assertion.key_file"
        self._key = _private_key(config.key_file, where)
        self.algorithm, jwk = _public_jwk(self._key.public_key())
        self.kid: str = jwk["kid"]
        self._jwks = [jwk]
        for i, path in enumerate(config.published_key_files):
            key = _any_key(path, f"auth.tool_assertion.published_key_files[{i}]")
            published = _public_jwk(key)[1]
            if all(published["kid"] != k["kid"] for k in self._jwks):
                self._jwks.append(published)

    def sign(self, claims: Mapping[str, Any], audience: str, now: float) -> tuple[str, float]:
        """A new assertion of ``claims`` for ``audience``, issued at ``now``; and the time
        after which a new one should be signed."""
        issued = int(now)
        payload = {
            **claims,
            "aud": audience,
            "iat": issued,
            "exp": issued + int(self.ttl),
            "jti": secrets.token_hex(16),
        }
        token = self._encode(
            payload, self._key, algorithm=self.algorithm, headers={"kid": self.kid}
        )
        return token, issued + self.ttl * _REFRESH_AT

    def jwks(self) -> dict[str, Any]:
        """The JWKS tool servers verify with: the signing key first, then the published."""
        return {"keys": [dict(k) for k in self._jwks]}


def _read(path: str, where: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise StartupError(f"{where} {path}: cannot read it: {exc.strerror}") from None
    if not data.strip():
        raise StartupError(f"{where} {path}: the file is empty")
    return data


def _private_key(path: str, where: str) -> Any:
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    data = _read(path, where)
    try:
        key = load_pem_private_key(data, password=None)
    except TypeError:  # the key is encrypted
        raise StartupError(
            f"{where} {path}: the key is encrypted; store it unencrypted, readable by the "
            "sidecar's user alone"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        # Our own words: no library message may echo a byte of the key.
        raise StartupError(
            f"{where} {path}: not a PEM private key (an Ed25519 or ECDSA P-256 key, e.g. "
            "from 'openssl genpkey -algorithm ed25519')"
        ) from None
    _check_kind(key, path, where)
    return key


def _any_key(path: str, where: str) -> Any:
    """The public key of a PEM file holding a public or a private key."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    data = _read(path, where)
    try:
        key = load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        return _private_key(path, where).public_key()
    _check_kind(key, path, where)
    return key


def _check_kind(key: Any, path: str, where: str) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey):
        return
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey) and isinstance(
        key.curve, ec.SECP256R1
    ):
        return
    raise StartupError(
        f"{where} {path}: this kind of key ({type(key).__name__}) is not supported; use "
        "an Ed25519 key (EdDSA) or an ECDSA P-256 key (ES256)"
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _public_jwk(key: Any) -> tuple[str, dict[str, str]]:
    """The algorithm a public key's private half signs with, and the public JWK with its
    RFC 7638 thumbprint as ``kid``."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    if isinstance(key, ec.EllipticCurvePublicKey):
        numbers = key.public_numbers()
        jwk = {
            "crv": "P-256",
            "kty": "EC",
            "x": _b64(numbers.x.to_bytes(32, "big")),
            "y": _b64(numbers.y.to_bytes(32, "big")),
        }
        algorithm = "ES256"
    else:
        raw = key.public_bytes(Encoding.Raw, PublicFormat.Raw)
        jwk = {"crv": "Ed25519", "kty": "OKP", "x": _b64(raw)}
        algorithm = "EdDSA"
    # RFC 7638: the SHA-256 of the required members, sorted, without whitespace.
    kid = _b64(hashlib.sha256(orjson.dumps(jwk, option=orjson.OPT_SORT_KEYS)).digest())
    return algorithm, {**jwk, "kid": kid, "alg": algorithm, "use": "sig"}
