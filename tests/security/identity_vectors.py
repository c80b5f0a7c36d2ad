"""The identity assertion's verification rule as cases every tool-server SDK runs: each
case an assertion, the metadata beside it, and what a verifier must conclude (verified,
with the identity; or refused, with the phrase its message holds).

``python -m tests.security.identity_vectors`` writes ``identity-vectors.json`` beside this
file with fresh keys (the private halves are thrown away); the Python, Go, TypeScript and
Java SDKs' tests read that file. The rule itself is in docs/tool-servers.md ("The rule
every verifier follows").
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from sidecar.security.tool_identity import _public_jwk

VECTORS = Path(__file__).with_name("identity-vectors.json")

NOW = 1_800_000_000
AUDIENCE = "orders"
ISSUER = "agent-sidecar"
LEEWAY = 10
CALL_ID = "call_1"

# The phrase each kind of refusal's message holds, in every SDK.
REASONS = {
    "too_large": "is over 6144 bytes",
    "not_jwt": "is not a JWT",
    "header": "header is refused",
    "unknown_key": "does not know",
    "signature": "signature does not verify",
    "missing_claim": "lacks the claim",
    "bad_claim": "the identity assertion's claim",
    "expired": "expired at",
    "future": "issued in the future",
    "not_yet": "not valid before",
    "audience": "for another tool server",
    "issuer": "issuer is not",
    "contradicts": "contradicts",
    "missing": "carries no identity assertion",
}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _part(value: Any) -> str:
    return _b64(value if isinstance(value, bytes) else json.dumps(value).encode())


class _Keys:
    def __init__(self) -> None:
        self.ed = ed25519.Ed25519PrivateKey.generate()
        self.ec = ec.generate_private_key(ec.SECP256R1())
        self.ed_alg, self.ed_jwk = _public_jwk(self.ed.public_key())
        self.ec_alg, self.ec_jwk = _public_jwk(self.ec.public_key())

    def sign(self, header: dict[str, Any], payload: Any, *, with_ec: bool = False) -> str:
        signing_input = f"{_part(header)}.{_part(payload)}".encode()
        if with_ec:
            r, s = decode_dss_signature(self.ec.sign(signing_input, ec.ECDSA(hashes.SHA256())))
            signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        else:
            signature = self.ed.sign(signing_input)
        return f"{signing_input.decode()}.{_b64(signature)}"


def _claims(**changes: Any) -> dict[str, Any]:
    claims: dict[str, Any] = {
        "iss": ISSUER,
        "sub": "alice",
        "aud": AUDIENCE,
        "sid": "s-1",
        "run_id": "r-1",
        "labels": {"tenant": "acme"},
        "iat": NOW - 5,
        "exp": NOW + 295,
        "jti": "j-1",
    }
    for name, value in changes.items():
        if value is _DROP:
            claims.pop(name, None)
        else:
            claims[name] = value
    return claims


_DROP = object()


def _metadata(**changes: str | None) -> list[list[str]]:
    entries = {
        "x-agent-principal": "alice",
        "x-agent-session-id": "s-1",
        "x-agent-run-id": "r-1",
        "x-agent-call-id": CALL_ID,
        "x-agent-labels-bin": '{"tenant":"acme"}',
    }
    for key, value in changes.items():
        name = "x-agent-" + key.replace("_", "-")
        if value is None:
            entries.pop(name, None)
        else:
            entries[name] = value
    return [[k, v] for k, v in entries.items()]


def _cases(keys: _Keys) -> list[dict[str, Any]]:
    ed = {"alg": "EdDSA", "kid": keys.ed_jwk["kid"], "typ": "JWT"}
    es = {"alg": "ES256", "kid": keys.ec_jwk["kid"], "typ": "JWT"}
    sign: Callable[..., str] = keys.sign
    cases: list[dict[str, Any]] = []

    def verified(name: str, token: str, identity: dict[str, Any], **meta: str | None) -> None:
        cases.append(
            {"name": name, "token": token, "metadata": _metadata(**meta), "verified": identity}
        )

    def refused(name: str, token: str | None, reason: str, **meta: str | None) -> None:
        assert reason in REASONS
        cases.append(
            {"name": name, "token": token, "metadata": _metadata(**meta), "refused": reason}
        )

    alice = {
        "principal": "alice",
        "session_id": "s-1",
        "run_id": "r-1",
        "call_id": CALL_ID,
        "labels": {"tenant": "acme"},
        "labels_omitted": False,
    }
    good = sign(ed, _claims())
    verified("an EdDSA assertion", good, alice)
    verified("an ES256 assertion", sign(es, _claims(), with_ec=True), alice)
    verified(
        "the anonymous principal: no sub, no principal entry",
        sign(ed, _claims(sub=_DROP)),
        {**alice, "principal": ""},
        principal=None,
    )
    verified(
        "labels too large to send: no labels claim, the entry null",
        sign(ed, _claims(labels=_DROP)),
        {**alice, "labels": {}, "labels_omitted": True},
        labels_bin="null",
    )
    verified(
        "no labels: an empty labels claim, no entry",
        sign(ed, _claims(labels={})),
        {**alice, "labels": {}},
        labels_bin=None,
    )
    verified(
        "an audience list that holds this server", sign(ed, _claims(aud=["x", "orders"])), alice
    )
    verified("expired within the leeway", sign(ed, _claims(exp=NOW - 5)), alice)
    verified("issued ahead within the leeway", sign(ed, _claims(iat=NOW + 5)), alice)
    verified("a whole number written as a float", sign(ed, _claims(exp=float(NOW + 295))), alice)
    verified("nbf passed", sign(ed, _claims(nbf=NOW - 1)), alice)
    verified("only the plain entries it states: none", good, alice, principal=None,
             session_id=None, run_id=None, call_id=None, labels_bin=None)  # fmt: skip
    verified("an unknown header parameter is ignored", sign({**ed, "x5t": "abc"}, _claims()), alice)

    refused("no assertion, where one is required", None, "missing")
    padded = sign(ed, _claims(pad="x" * 5000))
    assert len(padded) > 6144
    refused("an assertion over 6144 bytes", padded, "too_large")
    refused("two parts", "abc.def", "not_jwt")
    refused("a header that is no JSON", f"{_b64(b'{nope')}.{_part(_claims())}.AAAA", "not_jwt")
    refused("a payload that is no JSON object", sign(ed, [1, 2]), "not_jwt")
    refused("a header that is no JSON object", sign([ed], _claims()), "not_jwt")  # type: ignore[list-item]
    refused("bad base64 in the signature", good[:-4] + "*!*!", "not_jwt")
    refused("base64 padding in the signature", good + "==", "not_jwt")
    refused("crit", sign({**ed, "crit": ["exp"]}, _claims()), "header")
    refused("crit, empty", sign({**ed, "crit": []}, _claims()), "header")
    refused("b64, an unencoded payload", sign({**ed, "b64": True}, _claims()), "header")
    refused("alg none", f"{_part({'alg': 'none', 'kid': ed['kid']})}.{_part(_claims())}.", "header")
    refused("alg HS256", sign({**ed, "alg": "HS256"}, _claims()), "header")
    refused("no alg", sign({"kid": ed["kid"]}, _claims()), "header")
    refused(
        "the key's algorithm is not the header's", sign({**ed, "alg": "ES256"}, _claims()), "header"
    )
    refused("an unknown kid", sign({**ed, "kid": "someone-else"}, _claims()), "unknown_key")
    refused("no kid", sign({"alg": "EdDSA"}, _claims()), "unknown_key")
    head, body, signature = good.split(".")
    flipped = signature[:10] + ("A" if signature[10] != "A" else "B") + signature[11:]
    refused("a changed signature", f"{head}.{body}.{flipped}", "signature")
    other = _part(_claims(sub="mallory"))
    refused("a changed payload", f"{head}.{other}.{signature}", "signature", principal="mallory")
    refused("expired", sign(ed, _claims(exp=NOW - 60)), "expired")
    refused("issued in the future", sign(ed, _claims(iat=NOW + 60)), "future")
    refused("not valid before a time to come", sign(ed, _claims(nbf=NOW + 60)), "not_yet")
    for claim in ("iss", "aud", "exp", "iat", "sid", "run_id"):
        refused(f"no {claim}", sign(ed, _claims(**{claim: _DROP})), "missing_claim")
    for claim, value in (
        ("exp", str(NOW + 295)),
        ("exp", NOW + 295.5),
        ("exp", 1e300),
        ("exp", 10**20),
        ("exp", -1),
        ("exp", True),
        ("exp", None),
        ("iat", "yesterday"),
        ("nbf", "now"),
        ("sub", 42),
        ("sid", 7),
        ("run_id", ["r-1"]),
        ("iss", {"name": ISSUER}),
        ("aud", 3),
        ("aud", []),
        ("aud", ["orders", 3]),
        ("labels", ["tenant"]),
        ("labels", {"tenant": 1}),
        ("labels", "acme"),
        ("labels", None),
        ("sub", None),
    ):
        refused(f"{claim} as {json.dumps(value)}", sign(ed, _claims(**{claim: value})), "bad_claim")
    refused("for another server", sign(ed, _claims(aud="billing")), "audience")
    refused("an audience list without this server", sign(ed, _claims(aud=["billing"])), "audience")
    refused("another issuer", sign(ed, _claims(iss="someone")), "issuer")
    refused("a principal entry that says otherwise", good, "contradicts", principal="mallory")
    refused("a session entry that says otherwise", good, "contradicts", session_id="s-2")
    refused("a run entry that says otherwise", good, "contradicts", run_id="r-2")
    refused("a call id entry that is not the request's", good, "contradicts", call_id="call_2")
    refused("a labels entry that says otherwise", good, "contradicts", labels_bin='{"tenant":"x"}')
    refused(
        "a labels entry where the claim is absent",
        sign(ed, _claims(labels=_DROP)),
        "contradicts",
    )
    return cases


def build() -> dict[str, Any]:
    keys = _Keys()
    return {
        "about": (
            "The identity assertion's verification rule (docs/tool-servers.md); written by "
            "python -m tests.security.identity_vectors. Verify each case's token with the "
            "jwks, the audience, issuer and leeway here, at the clock `now`, as a call "
            "whose call_id is `call_id` and whose metadata holds `metadata` (entries "
            "ending -bin are bytes: their UTF-8), identity required. `verified` is the "
            "identity expected; `refused` names a reason, whose phrase the refusal's "
            "message holds."
        ),
        "now": NOW,
        "audience": AUDIENCE,
        "issuer": ISSUER,
        "leeway": LEEWAY,
        "call_id": CALL_ID,
        "jwks": {"keys": [keys.ed_jwk, keys.ec_jwk]},
        "reasons": REASONS,
        "cases": _cases(keys),
    }


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(VECTORS.read_text())
    return data


if __name__ == "__main__":
    VECTORS.write_text(json.dumps(build(), indent=1) + "\n")
    print(f"wrote {VECTORS}")
