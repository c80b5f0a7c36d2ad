"""What a background run's completion callback may reach, and how it proves who sent it.

A callback's URL comes from a caller: untrusted. Three walls keep it from reaching what the
configuration does not name (server-side request forgery):

1. **The host.** It must be one of ``background.callbacks.allowed_hosts`` (an exact name,
   ``*.domain`` for the names under a domain, or an IP address), over ``https`` unless
   ``allow_http``. Checked when the run starts (CALLBACK_NOT_ALLOWED) and at delivery.
2. **The address.** At delivery the name is resolved, and the connection goes only to the
   addresses that resolution gave which are public (``ipaddress``'s ``is_global``, not
   multicast; an IPv4-mapped IPv6 address is judged as its IPv4 one), unless
   ``allow_private_networks``. The connection uses exactly the addresses checked, so a name
   that resolves to a public address when checked and a private one a moment later (DNS
   rebinding) cannot slip through.
3. **No detours.** No proxy from the environment, and no redirect followed: a 3xx answer is
   a failed delivery.

The signature is Standard Webhooks' (https://www.standardwebhooks.com): headers
``webhook-id`` (the run id: a receiver drops a delivery it has seen), ``webhook-timestamp``
(seconds since the epoch: a receiver refuses one too old, so a captured delivery cannot be
replayed later) and ``webhook-signature``: ``v1,`` and the base64 HMAC-SHA256, keyed with the
principal's secret, of ``ID.TIMESTAMP.BODY``. A secret written ``whsec_<base64>`` is the
base64-decoded bytes, as the Standard Webhooks libraries take it; any other, its UTF-8 bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from sidecar.config import CallbackConfig, SidecarConfig
from sidecar.errors import CallbackNotAllowed, FieldViolation, StartupError

__all__ = [
    "AddressRefused",
    "VettedResolver",
    "address_allowed",
    "callback_secrets",
    "check_allowed",
    "sign",
    "url_problems",
]

MAX_URL = 2048


def url_problems(url: str, field: str = "callback.url") -> list[FieldViolation]:
    """What is wrong with a callback URL's form (not whether it is allowed)."""
    if len(url) > MAX_URL:
        return [FieldViolation(field, f"is {len(url)} characters; at most {MAX_URL}")]
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        return [FieldViolation(field, "must not hold whitespace or control characters")]
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing it is the check
    except ValueError:
        return [FieldViolation(field, "is not a URL")]
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return [FieldViolation(field, "must be an http or https URL with a host")]
    if parts.username is not None or parts.password is not None:
        return [FieldViolation(field, "must not hold a user or a password")]
    if not parts.hostname.isascii():
        return [FieldViolation(field, "must name its host in ASCII (the punycode form)")]
    return []


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address ``host`` names (brackets and a zone left out; an IPv4-mapped IPv6
    address as its IPv4 one), or None for a name."""
    try:
        address = ipaddress.ip_address(host.removeprefix("[").removesuffix("]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def address_allowed(host: str, *, allow_private: bool) -> bool:
    """Whether a callback may connect to the IP address ``host``."""
    address = _ip(host)
    if address is None or address.is_multicast or address.is_unspecified:
        return False
    return allow_private or address.is_global


def _host_allowed(host: str, patterns: list[str]) -> bool:
    host = host.lower().rstrip(".")
    literal = _ip(host)
    for pattern in patterns:
        pattern = pattern.lower()
        if pattern.startswith("*."):
            if literal is None and host.endswith(pattern[1:]) and host != pattern[2:]:
                return True
        elif literal is not None:
            if literal == _ip(pattern):
                return True
        elif host == pattern:
            return True
    return False


def check_allowed(url: str, config: CallbackConfig) -> None:
    """A well-formed URL the configuration lets callbacks go to.

    Raises:
        CallbackNotAllowed: its scheme, host or IP address is not allowed.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme == "http" and not config.allow_http:
        raise CallbackNotAllowed(
            "callbacks go over https only (background.callbacks.allow_http is off)",
            metadata={"host": host},
        )
    if not _host_allowed(host, config.allowed_hosts):
        raise CallbackNotAllowed(
            f"callbacks may not go to {host!r}: it is not in background.callbacks.allowed_hosts",
            metadata={"host": host},
        )
    if _ip(host) is not None and not address_allowed(
        host, allow_private=config.allow_private_networks
    ):
        raise CallbackNotAllowed(
            f"callbacks may not go to {host}: not a public address (and "
            "background.callbacks.allow_private_networks is off)",
            metadata={"host": host},
        )


class AddressRefused(OSError):
    """A callback's host resolved to no address it may connect to."""


class VettedResolver(AbstractResolver):
    """Resolves a callback's host and keeps only the addresses it may connect to; the
    connection then goes to those and no other."""

    def __init__(self, *, allow_private: bool) -> None:
        self._inner = aiohttp.ThreadedResolver()
        self._allow_private = allow_private

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        allowed = [
            r for r in found if address_allowed(r["host"], allow_private=self._allow_private)
        ]
        if not allowed:
            raise AddressRefused(
                f"{host} resolves to no address callbacks may reach "
                f"({', '.join(sorted({r['host'] for r in found}))})"
            )
        return allowed

    async def close(self) -> None:
        await self._inner.close()


def _key(secret: str) -> bytes:
    if secret.startswith("whsec_"):
        try:
            return base64.b64decode(secret[len("whsec_") :], validate=True)
        except binascii.Error:
            pass
    return secret.encode()


def sign(secret: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header of a delivery."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


_SEAL_INFO = b"agent-sidecar/callback-authorization/v1"


def _seal_key(secret: bytes) -> AESGCM:
    key = HKDF(algorithm=SHA256(), length=32, salt=None, info=_SEAL_INFO).derive(secret)
    return AESGCM(key)


def seal_authorization(secret: bytes, run_id: str, value: str) -> bytes:
    """``value`` (an ``Authorization`` header for the receiver) encrypted for keeping with
    run ``run_id``, under a key derived from its principal's callback secret."""
    nonce = os.urandom(12)
    return nonce + _seal_key(secret).encrypt(nonce, value.encode(), run_id.encode())


def open_authorization(secret: bytes, run_id: str, sealed: bytes) -> str:
    """The header :func:`seal_authorization` sealed.

    Raises:
        ValueError: sealed under another secret (rotated since), or for another run.
    """
    try:
        return _seal_key(secret).decrypt(sealed[:12], sealed[12:], run_id.encode()).decode()
    except (InvalidTag, UnicodeDecodeError):
        raise ValueError("sealed under another callback secret") from None


def _read_secret(
    env: str | None, file: str | None, environ: Mapping[str, str], who: str
) -> bytes | None:
    if env is not None:
        value = environ.get(env, "").strip()
        if not value:
            raise StartupError(f"{who}: the environment variable {env} is unset or empty")
        return _key(value)
    if file is not None:
        try:
            value = Path(file).read_text().strip()
        except OSError as exc:
            raise StartupError(f"{who}: cannot read {file}: {exc.strerror}") from None
        if not value:
            raise StartupError(f"{who}: {file} is empty")
        return _key(value)
    return None


def callback_secrets(config: SidecarConfig, environ: Mapping[str, str]) -> dict[str, bytes]:
    """Each principal's callback signing key, by name ("" for the anonymous principal).

    Raises:
        StartupError: a secret's variable is unset or its file unreadable or empty.
    """
    secrets: dict[str, bytes] = {}
    for p in config.auth.principals:
        key = _read_secret(
            p.callback_secret_env, p.callback_secret_file, environ, f"principal {p.name}"
        )
        if key is not None:
            secrets[p.name] = key
    if not config.auth.principals:
        callbacks = config.background.callbacks
        key = _read_secret(
            callbacks.secret_env, callbacks.secret_file, environ, "background.callbacks"
        )
        if key is not None:
            secrets[""] = key
    return secrets
