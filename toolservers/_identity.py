"""Who a call serves: the sidecar's identity metadata, and the assertion that proves it.

The sidecar sends the principal, session, run and call as metadata with every call
(``agentsidecar.tool_identity`` is the contract); a handler reads them as
``ctx.identity``. Plain metadata proves nothing: anything that reaches the port can send
it. With the sidecar's public keys configured (``--identity-keys``), the server verifies
the signed assertion (``x-agent-identity``, a JWT) of every call before the handler runs:
its signature, issuer, audience (this server's name in the sidecar's configuration) and
lifetime, and that the plain metadata says what the assertion says. The claims are then
the identity; a call whose assertion fails is ``UNAUTHENTICATED`` and its tool never runs.
With ``--require-identity`` a call without an assertion fails the same way.

A given assertion is verified once: the sidecar reuses one per run and server, so a run's
later calls cost a lookup. The keys file is reread within a second of a change (a key
rotation), which forgets what was verified before.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from agentsidecar.tls import FileWatch
from agentsidecar.tool_identity import (
    ALGORITHMS,
    ASSERTION_KEY,
    CALL_ID_KEY,
    LABELS_CLAIM,
    LABELS_KEY,
    MAX_ASSERTION_BYTES,
    PRINCIPAL_KEY,
    RUN_CLAIM,
    RUN_ID_KEY,
    SESSION_CLAIM,
    SESSION_ID_KEY,
    decode_labels,
    decode_text,
    entries,
)
from toolservers._identity_keys import FetchedKeys

if TYPE_CHECKING:
    from toolservers._identity_keys import FetchedKeys

logger = logging.getLogger("toolservers")

_NO_LABELS: Mapping[str, str] = MappingProxyType({})
_NO_CLAIMS: Mapping[str, Any] = MappingProxyType({})
_REQUIRED_CLAIMS = ("iss", "aud", "exp", "iat", SESSION_CLAIM, RUN_CLAIM)
_LATEST = 253402300799  # 9999-12-31T23:59:59Z: the last second a claim may name
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")
_CACHE_SIZE = 1024  # assertions remembered as verified (one per run in flight, about)
_REREAD_EVERY = 1.0  # seconds between checks of the keys file


@dataclass(frozen=True, slots=True)
class CallerIdentity:
    """Who a call serves, as the sidecar says; with ``verified``, as its signature proves.

    Without a verified assertion anyone who can reach the server could have sent these:
    use them for logs and defaults, not for decisions, unless the network is trusted.
    """

    principal: str = ""
    """The principal's name; empty for the sidecar's anonymous principal (or no sidecar)."""
    session_id: str = ""
    """The session's id, as the sidecar's caller knows it."""
    run_id: str = ""
    """The run (turn) the call belongs to."""
    call_id: str = ""
    """The call's id."""
    labels: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    """The session's labels; empty when it has none (or they were too large to send)."""
    labels_omitted: bool = False
    """The session has labels, but too many to send (over 2 KiB of JSON)."""
    verified: bool = False
    """The identity comes from an assertion whose signature, issuer, audience and
    lifetime this server verified."""
    claims: Mapping[str, Any] = field(default_factory=lambda: _NO_CLAIMS)
    """The verified assertion's claims (``iss``, ``sub``, ``aud``, ``exp``, ``jti`` …);
    empty when not verified."""


class IdentityRefused(Exception):
    """A call's identity does not verify; the message says why (never the token)."""


def plain_identity(metadata: Sequence[tuple[str, str | bytes]], call_id: str) -> CallerIdentity:
    """The identity a call's metadata states, unverified.

    Raises:
        ValueError: the identity metadata is malformed.
    """
    found = entries(metadata)
    labels = decode_labels(found.get(LABELS_KEY))
    return CallerIdentity(
        principal=_text(found.get(PRINCIPAL_KEY)),
        session_id=_text(found.get(SESSION_ID_KEY)),
        run_id=_text(found.get(RUN_ID_KEY)),
        call_id=_text(found[CALL_ID_KEY]) if CALL_ID_KEY in found else call_id,
        labels=MappingProxyType(labels) if labels else _NO_LABELS,
        labels_omitted=labels is None,
    )


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        raise ValueError("a text entry of the identity metadata arrived as bytes")
    return decode_text(value)


class IdentityVerifier:
    """Verifies the identity assertion of each call.

    Args:
        keys_file: The sidecar's public keys: a JWKS (``agent-sidecar identity jwks``
            prints it) or a PEM public key.
        audience: This server's name in the sidecar's configuration
            (``tool_servers[].name``): an assertion for another server is refused.
        issuer: The issuer the sidecar signs as (``auth.tool_assertion.issuer``).
        required: Refuse calls that carry no assertion; otherwise they run with the
            plain, unverified identity.
        leeway: Seconds of clock difference allowed when checking ``exp`` and ``iat``.
        clock: Wall-clock seconds (tests pass their own).

    Raises:
        ValueError: the keys file cannot be read or holds no key the sidecar signs with.
    """

    def __init__(
        self,
        keys_file: str | None,
        audience: str,
        issuer: str,
        *,
        fetched: FetchedKeys | None = None,
        required: bool = False,
        leeway: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._file = keys_file
        self._fetched = fetched
        self.audience = audience
        self.issuer = issuer
        self.required = required
        self._leeway = leeway
        self._clock = clock
        self._keys: dict[str | None, Any] = {}
        self._watch: FileWatch | None = None
        if keys_file is not None:
            self._keys = _load_keys(keys_file)
            self._watch = FileWatch([keys_file])
        elif fetched is None:
            raise ValueError("the identity keys come from a file or from a sidecar: give one")
        self._seen = 0  # the version of the fetched keys held
        self._checked = time.monotonic()
        self._verified: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def verify(self, metadata: Sequence[tuple[str, str | bytes]], call_id: str) -> CallerIdentity:
        """The verified identity of a call (or, when not required and none is sent, the
        plain one).

        Raises:
            IdentityRefused: the assertion is missing (when required), malformed,
                tampered with, signed by an unknown key, for another server or issuer,
                expired, or contradicted by the plain metadata.
        """
        try:
            found = entries(metadata)
        except ValueError as exc:
            raise IdentityRefused(f"the call's identity metadata is malformed: {exc}") from None
        token = found.get(ASSERTION_KEY)
        if token is None:
            if self.required:
                raise IdentityRefused(
                    f"the call carries no identity assertion ({ASSERTION_KEY}); this tool "
                    "server requires one: the sidecar signs them with auth.tool_assertion"
                )
            try:
                return plain_identity(metadata, call_id)
            except ValueError as exc:
                raise IdentityRefused(f"the call's identity metadata is malformed: {exc}") from None
        if not isinstance(token, str):
            raise IdentityRefused(f"{ASSERTION_KEY} arrived as bytes; it is text")
        claims = self._claims(token)
        return _checked_against(claims, found, call_id)

    def _claims(self, token: str) -> dict[str, Any]:
        self._reread()
        now = self._clock()
        cached = self._verified.get(token)
        if cached is not None:
            if now > cached["exp"] + self._leeway:
                raise IdentityRefused(_expired(cached["exp"]))
            self._verified.move_to_end(token)
            return cached
        claims = self._decode(token, now)
        self._verified[token] = claims
        if len(self._verified) > _CACHE_SIZE:
            self._verified.popitem(last=False)
        return claims

    def _decode(self, token: str, now: float) -> dict[str, Any]:
        """The claims of ``token`` by the rule every SDK follows (docs/tool-servers.md,
        "The rule every verifier follows"): PyJWT checks the signature, nothing more."""
        if len(token) > MAX_ASSERTION_BYTES:
            raise IdentityRefused(f"the identity assertion is over {MAX_ASSERTION_BYTES} bytes")
        header, claims, signing_input, signature = _parts(token)
        alg = header.get("alg")
        if alg not in ALGORITHMS or "crit" in header or "b64" in header:
            what = "crit" if "crit" in header else "b64" if "b64" in header else f"alg {alg!r}"
            raise IdentityRefused(f"the identity assertion's header is refused ({what})")
        kid = header.get("kid")
        key = self._keys.get(kid) if isinstance(kid, str) else None
        if key is None and None in self._keys and len(self._keys) == 1:
            key = self._keys[None]  # a PEM key: no key ids
        if key is None and self._fetched is not None:
            if self._fetched.keys is None:
                raise IdentityRefused(
                    f"the identity keys are not fetched yet from {self._fetched.target}: "
                    "is the sidecar up, and does it sign (auth.tool_assertion)?"
                )
            self._fetched.want_refresh()  # a rotation this server has not seen yet
        if key is None:
            raise IdentityRefused(
                f"the identity assertion is signed by a key this server does not know "
                f"(kid {str(kid)[:64]!r}): give it the sidecar's current JWKS"
            )
        if key.algorithm_name != alg:
            raise IdentityRefused(
                f"the identity assertion's header is refused (the key signs "
                f"{key.algorithm_name}, not {alg})"
            )
        if not key.Algorithm.verify(signing_input, key.key, signature):
            raise IdentityRefused(
                "the identity assertion's signature does not verify: it was changed on the "
                "way, or signed with another key"
            )
        _check_claims(claims, self.issuer, self.audience, self._leeway, now)
        return claims

    def _reread(self) -> None:
        fetched = self._fetched
        if fetched is not None:
            if fetched.version != self._seen and fetched.keys is not None:
                self._keys, self._seen = fetched.keys, fetched.version
                self._verified.clear()  # a key may be gone
            return
        assert self._watch is not None and self._file is not None
        now = time.monotonic()
        if now - self._checked < _REREAD_EVERY:
            return
        self._checked = now
        if not self._watch.changed():
            return
        try:
            keys = _load_keys(self._file)
        except ValueError as exc:  # half-written: keep the keys we have
            logger.warning("identity keys not reloaded: %s", exc)
            return
        self._keys = keys
        self._verified.clear()  # a key may be gone
        logger.info("identity keys reloaded from %s: %d keys", self._file, len(keys))


def _expired(exp: float) -> str:
    return f"the identity assertion expired at {_when(exp)}"


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _parts(token: str) -> tuple[dict[str, Any], dict[str, Any], bytes, bytes]:
    """The header, the claims, the signing input and the signature of a compact JWS.

    Raises:
        IdentityRefused: not three base64url parts, or a header or payload that is no
            JSON object.
    """
    pieces = token.split(".")
    try:
        if len(pieces) != 3 or not all(_BASE64URL.fullmatch(p) for p in pieces):
            raise ValueError
        header, claims = (json.loads(_unbase64(p)) for p in pieces[:2])
        signature = _unbase64(pieces[2])
    except ValueError:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise IdentityRefused("the identity assertion is not a JWT") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise IdentityRefused("the identity assertion is not a JWT")
    return header, claims, f"{pieces[0]}.{pieces[1]}".encode(), signature


def _unbase64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _check_claims(
    claims: Mapping[str, Any], issuer: str, audience: str, leeway: float, now: float
) -> None:
    """Steps 7 to 11 of the rule: presence, types, issuer, audience, lifetime.

    Raises:
        IdentityRefused: the first step that fails, saying which claim.
    """
    for name in _REQUIRED_CLAIMS:
        if name not in claims:
            raise IdentityRefused(f"the identity assertion lacks the claim {name!r}")
    for name in ("exp", "iat", "nbf"):
        if name in claims and not _is_seconds(claims[name]):
            raise IdentityRefused(
                f"the identity assertion's claim {name!r} is not a whole number of seconds "
                f"from 0 to {_LATEST}"
            )
    for name in ("iss", "sub", SESSION_CLAIM, RUN_CLAIM):
        if name in claims and not isinstance(claims[name], str):
            raise IdentityRefused(f"the identity assertion's claim {name!r} is not a string")
    aud = claims["aud"]
    audiences = [aud] if isinstance(aud, str) else aud
    if (
        not isinstance(audiences, list)
        or not audiences
        or not all(isinstance(a, str) for a in audiences)
    ):
        raise IdentityRefused(
            "the identity assertion's claim 'aud' is not a string or a list of strings"
        )
    labels = claims.get(LABELS_CLAIM, {})
    if LABELS_CLAIM in claims and not (
        isinstance(labels, dict) and all(isinstance(v, str) for v in labels.values())
    ):
        raise IdentityRefused("the identity assertion's claim 'labels' is not an object of strings")
    if claims["iss"] != issuer:
        raise IdentityRefused(f"the identity assertion's issuer is not {issuer!r}")
    if audience not in audiences:
        raise IdentityRefused(
            f"the identity assertion is for another tool server; this one is "
            f"{audience!r} (tool_servers[].name in the sidecar's configuration)"
        )
    if now > claims["exp"] + leeway:
        raise IdentityRefused(_expired(claims["exp"]))
    if claims["iat"] - leeway > now:
        raise IdentityRefused(
            "the identity assertion is issued in the future: are the clocks of the "
            "sidecar and this server apart by more than the leeway?"
        )
    if "nbf" in claims and claims["nbf"] - leeway > now:
        raise IdentityRefused(f"the identity assertion is not valid before {_when(claims['nbf'])}")


def _is_seconds(value: Any) -> bool:
    """A JSON number with a whole value in range: ``1e300``, ``1.5``, ``true`` are not."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return (isinstance(value, int) or value.is_integer()) and 0 <= value <= _LATEST


def _checked_against(
    claims: Mapping[str, Any], found: Mapping[str, str | bytes], call_id: str
) -> CallerIdentity:
    """The identity of verified ``claims``, when the plain metadata agrees with them.

    Raises:
        IdentityRefused: an entry of the plain metadata contradicts the claims.
    """
    principal = claims.get("sub", "")
    labels_claim = claims.get(LABELS_CLAIM)  # its type checked by _check_claims
    try:
        stated = {
            PRINCIPAL_KEY: _text(found[PRINCIPAL_KEY]) if PRINCIPAL_KEY in found else None,
            SESSION_ID_KEY: _text(found[SESSION_ID_KEY]) if SESSION_ID_KEY in found else None,
            RUN_ID_KEY: _text(found[RUN_ID_KEY]) if RUN_ID_KEY in found else None,
            CALL_ID_KEY: _text(found[CALL_ID_KEY]) if CALL_ID_KEY in found else None,
        }
        labels = decode_labels(found[LABELS_KEY]) if LABELS_KEY in found else {}
    except ValueError as exc:
        raise IdentityRefused(f"the call's identity metadata is malformed: {exc}") from None
    asserted = {
        PRINCIPAL_KEY: principal,
        SESSION_ID_KEY: claims[SESSION_CLAIM],
        RUN_ID_KEY: claims[RUN_CLAIM],
        CALL_ID_KEY: call_id,
    }
    for key, value in stated.items():
        if value is not None and value != asserted[key]:
            what = "the request's call_id" if key == CALL_ID_KEY else "the identity assertion"
            raise IdentityRefused(f"{key} contradicts {what}")
    if LABELS_KEY in found and labels != labels_claim:
        raise IdentityRefused(f"{LABELS_KEY} contradicts the identity assertion")
    return CallerIdentity(
        principal=principal,
        session_id=claims[SESSION_CLAIM],
        run_id=claims[RUN_CLAIM],
        call_id=call_id,
        labels=MappingProxyType(dict(labels_claim)) if labels_claim else _NO_LABELS,
        labels_omitted=labels_claim is None,
        verified=True,
        claims=MappingProxyType(dict(claims)),
    )


def _load_keys(path: str) -> dict[str | None, Any]:
    """The keys of a JWKS file (by ``kid``) or of a PEM public key (under None).

    Raises:
        ValueError: the file cannot be read, or holds no key of an algorithm the sidecar
            signs with.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the identity keys {path}: {exc.strerror}") from None
    return parse_keys(data, path)


def parse_keys(data: bytes, where: str) -> dict[str | None, Any]:
    """The keys of a JWKS (by ``kid``) or of a PEM public key (under None); ``where`` says
    where they came from, in errors.

    Raises:
        ValueError: no key of an algorithm the sidecar signs with.
    """
    import jwt
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    unusable = ValueError(
        f"{where} holds no usable key: an Ed25519 (EdDSA) or ECDSA P-256 (ES256) public key "
        "as PEM, or a JWKS as 'agent-sidecar identity jwks' prints it (each key with a kid)"
    )
    if data.lstrip().startswith(b"-----BEGIN"):
        try:
            public = load_pem_public_key(data)
        except (ValueError, UnsupportedAlgorithm):
            raise unusable from None
        if isinstance(public, ed25519.Ed25519PublicKey):
            jwk = jwt.algorithms.OKPAlgorithm.to_jwk(public, as_dict=True)
            return {None: jwt.PyJWK(jwk, algorithm="EdDSA")}
        if isinstance(public, ec.EllipticCurvePublicKey) and isinstance(public.curve, ec.SECP256R1):
            jwk = jwt.algorithms.ECAlgorithm.to_jwk(public, as_dict=True)
            return {None: jwt.PyJWK(jwk, algorithm="ES256")}
        raise unusable
    try:
        keys = json.loads(data)["keys"]
    except (ValueError, KeyError, TypeError):
        raise ValueError(
            f"{where} is neither a JWKS (a JSON object with 'keys') nor a PEM key"
        ) from None
    found: dict[str | None, Any] = {}
    for entry in keys if isinstance(keys, list) else ():
        if not isinstance(entry, dict) or not isinstance(entry.get("kid"), str):
            continue
        try:
            key = jwt.PyJWK(entry)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, KeyError, TypeError):
            continue  # a key of another kind: not the sidecar's
        if key.algorithm_name in ALGORITHMS:
            found[entry["kid"]] = key
    if not found:
        raise unusable
    return found
