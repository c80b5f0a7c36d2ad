"""Who a tool call serves, as it travels to a tool server: the metadata contract.

The sidecar sends these gRPC metadata entries with every ``CallTool`` (one module for
both ends: the sidecar encodes, the tool-server SDK decodes; ``docs/tool-servers.md``,
"Who the call serves", is the contract for tool servers in any language):

=========================  ==================================================================
``x-agent-principal``      the principal's name; absent for the anonymous principal
``x-agent-session-id``     the session id, as the caller knows it
``x-agent-run-id``         the run (turn) id
``x-agent-call-id``        the tool call's id (the same as ``CallToolRequest.call_id``)
``x-agent-labels-bin``     the session's labels: a JSON object of strings, UTF-8; absent when
                           the session has none; ``null`` when they exceed
                           :data:`MAX_LABELS_BYTES` (they are then not sent at all)
``x-agent-identity``       the signed assertion (a JWT), when the sidecar is configured to
                           sign one (``auth.tool_assertion``)
=========================  ==================================================================

Text values are percent-encoded UTF-8 (RFC 3986): every byte outside
``A-Z a-z 0-9 - . _ ~ : @`` is ``%XX``, so a value is always printable ASCII (as gRPC
requires of a key without ``-bin``) and no value can hold a separator or a line break.
Ids the sidecar accepts today never need escaping, so they travel as they are; decode
with any percent-decoder all the same. Labels may hold any text, so they travel in a
``-bin`` entry (gRPC carries its bytes base64-encoded and hands them back as bytes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from urllib.parse import quote, unquote

import orjson

__all__ = [
    "ALGORITHMS",
    "ASSERTION_KEY",
    "CALL_ID_KEY",
    "DEFAULT_ISSUER",
    "KEYS",
    "LABELS_CLAIM",
    "LABELS_KEY",
    "MAX_ASSERTION_BYTES",
    "MAX_LABELS_BYTES",
    "PRINCIPAL_KEY",
    "RUN_CLAIM",
    "RUN_ID_KEY",
    "SESSION_CLAIM",
    "SESSION_ID_KEY",
    "decode_labels",
    "decode_text",
    "encode_labels",
    "encode_text",
    "entries",
]

PRINCIPAL_KEY = "x-agent-principal"
SESSION_ID_KEY = "x-agent-session-id"
RUN_ID_KEY = "x-agent-run-id"
CALL_ID_KEY = "x-agent-call-id"
LABELS_KEY = "x-agent-labels-bin"
ASSERTION_KEY = "x-agent-identity"
KEYS = frozenset(
    {PRINCIPAL_KEY, SESSION_ID_KEY, RUN_ID_KEY, CALL_ID_KEY, LABELS_KEY, ASSERTION_KEY}
)
"""Every key of the contract: a tool server may trust no other entry of these names."""

DEFAULT_ISSUER = "agent-sidecar"
"""The assertion's issuer (``iss``) unless the sidecar's configuration names another."""
SESSION_CLAIM = "sid"
"""The assertion's claim of the session id (OpenID Connect's name for a session)."""
RUN_CLAIM = "run_id"
"""The assertion's claim of the run id."""
LABELS_CLAIM = "labels"
"""The assertion's claim of the session's labels (absent when they are too large)."""
ALGORITHMS = ("EdDSA", "ES256")
"""The algorithms the sidecar signs with: Ed25519 keys sign EdDSA, P-256 keys ES256."""

MAX_ASSERTION_BYTES = 6144
"""The largest identity assertion a tool server verifies (longer ones are refused before
any parsing); the sidecar's own stay well under it (``MAX_LABELS_BYTES`` of labels, short
ids)."""
MAX_LABELS_BYTES = 2048
"""The largest labels (their JSON, in bytes) that travel. gRPC servers refuse a call whose
metadata exceeds 8 KiB (C-core's default soft limit), and labels travel twice when the
assertion is on (base64 in the entry and in the token)."""

_SAFE = ":@"  # besides RFC 3986's unreserved characters, which quote() never escapes
_PLAIN = re.compile(r"[A-Za-z0-9\-._~:@]*")
_NULL = b"null"


def encode_text(value: str) -> str:
    """A text value as it travels: percent-encoded UTF-8, printable ASCII."""
    if _PLAIN.fullmatch(value):
        return value
    return quote(value, safe=_SAFE)


def decode_text(value: str) -> str:
    """The text :func:`encode_text` encoded (invalid UTF-8 escapes become U+FFFD)."""
    return unquote(value, errors="replace") if "%" in value else value


def encode_labels(labels: Mapping[str, str]) -> bytes | None:
    """The labels entry's value: their JSON (keys sorted), ``null`` when it is longer than
    :data:`MAX_LABELS_BYTES`; None when there are no labels (the entry is left out)."""
    if not labels:
        return None
    data = orjson.dumps(dict(labels), option=orjson.OPT_SORT_KEYS)
    return data if len(data) <= MAX_LABELS_BYTES else _NULL


def decode_labels(value: bytes | str | None) -> dict[str, str] | None:
    """The labels of an entry's value: ``{}`` for no entry, None for ``null`` (too large
    to send).

    Raises:
        ValueError: it is neither a JSON object of strings nor ``null``.
    """
    if value is None:
        return {}
    try:
        decoded = orjson.loads(value)
    except orjson.JSONDecodeError:
        raise ValueError("the labels entry is not JSON") from None
    if decoded is None:
        return None
    if not isinstance(decoded, dict) or not all(isinstance(v, str) for v in decoded.values()):
        raise ValueError("the labels entry is not a JSON object of strings")
    return decoded


def entries(metadata: Sequence[tuple[str, str | bytes]]) -> dict[str, str | bytes]:
    """The contract's entries of a call's metadata, by key.

    Raises:
        ValueError: a key of the contract occurs more than once (the sidecar sends each
            once: a second one was added on the way).
    """
    found: dict[str, str | bytes] = {}
    for key, value in metadata:
        if key in KEYS:
            if key in found:
                raise ValueError(f"the metadata holds {key} more than once")
            found[key] = value
    return found
