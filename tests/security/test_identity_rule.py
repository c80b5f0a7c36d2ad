"""The identity assertion's rule (docs/tool-servers.md): every case of
``identity-vectors.json`` through the Python SDK's verifier. The Go, TypeScript and Java
SDKs' tests run the same file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentsidecar.tool_identity import ASSERTION_KEY
from tests.security.identity_vectors import load
from toolservers._identity import IdentityRefused, IdentityVerifier

VECTORS = load()


def _metadata(case: dict[str, Any]) -> list[tuple[str, str | bytes]]:
    entries: list[tuple[str, str | bytes]] = [
        (key, value.encode() if key.endswith("-bin") else value) for key, value in case["metadata"]
    ]
    if case["token"] is not None:
        entries.append((ASSERTION_KEY, case["token"]))
    return entries


@pytest.fixture(scope="module")
def verifier(tmp_path_factory: pytest.TempPathFactory) -> IdentityVerifier:
    keys = tmp_path_factory.mktemp("vectors") / "jwks.json"
    keys.write_text(json.dumps(VECTORS["jwks"]))
    return IdentityVerifier(
        str(keys),
        VECTORS["audience"],
        VECTORS["issuer"],
        required=True,
        leeway=VECTORS["leeway"],
        clock=lambda: VECTORS["now"],
    )


@pytest.mark.parametrize("case", VECTORS["cases"], ids=[c["name"] for c in VECTORS["cases"]])
def test_each_case_of_the_rule(verifier: IdentityVerifier, case: dict[str, Any]) -> None:
    metadata = _metadata(case)
    if "refused" in case:
        with pytest.raises(IdentityRefused) as refused:
            verifier.verify(metadata, VECTORS["call_id"])
        assert VECTORS["reasons"][case["refused"]] in str(refused.value)
        if case["token"]:
            assert case["token"] not in str(refused.value)
        return
    identity = verifier.verify(metadata, VECTORS["call_id"])
    expected = case["verified"]
    assert identity.verified
    assert {
        "principal": identity.principal,
        "session_id": identity.session_id,
        "run_id": identity.run_id,
        "call_id": identity.call_id,
        "labels": dict(identity.labels),
        "labels_omitted": identity.labels_omitted,
    } == expected


def test_the_cases_cover_every_reason_and_the_file_is_what_the_script_writes() -> None:
    reasons = {c.get("refused") for c in VECTORS["cases"]} - {None}
    assert reasons == set(VECTORS["reasons"])
    names = [c["name"] for c in VECTORS["cases"]]
    assert len(names) == len(set(names))
    # The cases are the generator's (tokens differ: the keys are fresh each time).
    from tests.security.identity_vectors import build

    assert [c["name"] for c in build()["cases"]] == names
    assert Path(__file__).with_name("identity-vectors.json").is_file()
