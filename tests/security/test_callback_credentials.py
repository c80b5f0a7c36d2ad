"""A push notification's credentials for its receiver, kept with the run in the session
store sealed under the principal's callback secret: they open only under that secret and
for that run, and the stored bytes never hold them in the clear."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.security.webhooks import open_authorization, seal_authorization

HEADERS = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=300)
SECRETS = st.binary(min_size=16, max_size=64)
RUN_IDS = st.text("0123456789abcdef", min_size=32, max_size=32)


@given(header=HEADERS, secret=SECRETS, run_id=RUN_IDS)
def test_sealed_credentials_open_only_under_their_secret_and_for_their_run(
    header: str, secret: bytes, run_id: str
) -> None:
    sealed = seal_authorization(secret, run_id, header)
    assert open_authorization(secret, run_id, sealed) == header
    if len(header) >= 8:  # shorter ones may turn up in random bytes by chance
        assert header.encode() not in sealed
    with pytest.raises(ValueError, match="another callback secret"):
        open_authorization(secret + b"rotated", run_id, sealed)
    with pytest.raises(ValueError):
        open_authorization(secret, run_id[::-1] + "x", sealed)
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(ValueError):
        open_authorization(secret, run_id, tampered)
    # Each sealing is fresh: two runs, or two configs of one, never share bytes.
    assert seal_authorization(secret, run_id, header) != sealed
