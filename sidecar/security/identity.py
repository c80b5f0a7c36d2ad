"""Who is calling: principals, and how a call proves it is one of them.

A caller proves who it is with a bearer token (``authorization: Bearer …`` metadata) or,
with mutual TLS, with its client certificate (a subject alternative name the principal
names). Tokens are never kept: each principal's is held as its SHA-256 digest, and a
presented token is hashed and compared with every principal's digest in constant time,
so neither the comparison's time nor its order says how close a guess came.

With no principals configured every caller is :data:`ANONYMOUS`, whose sessions keep the
ids callers gave them; a named principal's sessions live under its name in the store
(``alice/user-1``), so no caller can read, run, delete or squat another's ids.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentsidecar.tls import FileWatch
from sidecar.config import AuthConfig, PrincipalConfig, QuotaConfig
from sidecar.errors import StartupError, Unauthenticated

_NO_QUOTA = QuotaConfig()

__all__ = ["ANONYMOUS", "Authenticator", "Principal", "token_digest"]

log = logging.getLogger(__name__)

_BEARER = "bearer "
_REREAD_EVERY = 1.0  # seconds between checks of the token files
_SAN_KEY = "x509_subject_alternative_name"


def token_digest(token: str) -> bytes:
    """The SHA-256 of a token, the only form in which the sidecar keeps one."""
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True, slots=True)
class Principal:
    """A caller the sidecar knows, and what it may use."""

    name: str
    """Empty for :data:`ANONYMOUS`."""
    profiles: frozenset[str] | None = None
    """The profiles it may use; None: every one."""
    quota: QuotaConfig = _NO_QUOTA
    operator: bool = False
    """Whether it may change the sidecar's operation (the variants of its profiles)."""

    def may_use(self, profile: str) -> bool:
        return self.profiles is None or profile in self.profiles

    def key(self, session_id: str) -> str:
        """The store's key of the principal's session ``session_id``."""
        return f"{self.name}/{session_id}" if self.name else session_id

    def shown(self, key: str) -> str:
        """The id the principal knows its session by, from the store's key."""
        return key[len(self.name) + 1 :] if self.name else key

    @property
    def prefix(self) -> str:
        """What every key of the principal's sessions starts with."""
        return f"{self.name}/" if self.name else ""


ANONYMOUS = Principal("", operator=True)
"""Every caller, when no principal is configured: with authentication off, every caller
may do everything."""


class _TokenSource:
    """One principal's token digest: fixed, or read from a file and reread when it changes."""

    def __init__(self, config: PrincipalConfig, environ: Mapping[str, str]) -> None:
        self._name = config.name
        self._file = config.token_file
        self._watch: FileWatch | None = None
        self._checked = 0.0
        self.digest: bytes | None = None
        if config.token_sha256 is not None:
            self.digest = bytes.fromhex(config.token_sha256)
        elif config.token_env is not None:
            token = environ.get(config.token_env, "").strip()
            if not token:
                raise StartupError(
                    f"principal {config.name!r}: the environment variable "
                    f"{config.token_env} is unset or empty"
                )
            self.digest = token_digest(token)
        elif self._file is not None:
            self._watch = FileWatch([self._file])
            self.digest = self._read(startup=True)
            self._checked = time.monotonic()

    def _read(self, *, startup: bool) -> bytes | None:
        """The digest of the file's token. After start, a file that is gone, unreadable or
        empty revokes the token (None): removing a token is how an operator takes a
        caller's access away, so the old one never outlives its file."""
        assert self._file is not None
        try:
            token = Path(self._file).read_text().strip()
        except OSError as exc:
            if startup:
                raise StartupError(
                    f"cannot read the token file {self._file}: {exc.strerror}"
                ) from None
            log.warning(
                "principal %s: token file %s unreadable (%s): its token is revoked",
                self._name,
                self._file,
                exc.strerror,
            )
            return None
        if not token:
            if startup:
                raise StartupError(f"the token file {self._file} is empty")
            log.warning(
                "principal %s: token file %s is empty: its token is revoked",
                self._name,
                self._file,
            )
            return None
        return token_digest(token)

    def current(self) -> bytes | None:
        if self._watch is not None:
            now = time.monotonic()
            if now - self._checked >= _REREAD_EVERY:
                self._checked = now
                if self._watch.changed():
                    self.digest = self._read(startup=False)
                    log.info("principal %s: token file reread", self._name)
        return self.digest


class Authenticator:
    """Names the principal of each call from its metadata and its TLS peer.

    Args:
        config: ``auth`` of the configuration.
        environ: The environment variables the principals' ``token_env`` name (the
            command reads them).

    Raises:
        StartupError: a token source cannot be read.
    """

    def __init__(self, config: AuthConfig, environ: Mapping[str, str]) -> None:
        self.enabled = bool(config.principals)
        self._principals: list[tuple[Principal, _TokenSource | None]] = []
        self._by_san: dict[str, Principal] = {}
        for p in config.principals:
            principal = Principal(
                p.name,
                frozenset(p.profiles) if p.profiles is not None else None,
                p.quota,
                operator=p.operator,
            )
            has_token = p.token_sha256 or p.token_env or p.token_file
            source = _TokenSource(p, environ) if has_token else None
            self._principals.append((principal, source))
            if p.san is not None:
                self._by_san[p.san] = principal

    def principal(self, name: str) -> Principal | None:
        """The principal named ``name`` (the anonymous one is ""), as configured now; None
        when there is no such principal any more."""
        if not self.enabled:
            return ANONYMOUS if not name else None
        return next((p for p, _ in self._principals if p.name == name), None)

    def authenticate(
        self,
        metadata: Sequence[tuple[str, str | bytes]],
        peer_identity: Mapping[str, Sequence[bytes]],
    ) -> Principal:
        """The principal of a call.

        A bearer token, when the call carries one, decides (a wrong token is refused,
        never passed over for the certificate); otherwise the client certificate's SANs.

        Raises:
            Unauthenticated: no credentials, or none that name a principal.
        """
        if not self.enabled:
            return ANONYMOUS
        token = _bearer(metadata)
        if token is not None:
            return self._by_token(token)
        for san in peer_identity.get(_SAN_KEY, ()):
            principal = self._by_san.get(san.decode(errors="replace"))
            if principal is not None:
                return principal
        if peer_identity.get(_SAN_KEY):
            raise Unauthenticated("the client certificate names no principal")
        raise Unauthenticated(
            "the call carries no credentials: send 'authorization: Bearer <token>' metadata"
            " or present a client certificate"
        )

    def _by_token(self, token: str) -> Principal:
        presented = token_digest(token)
        found: Principal | None = None
        for principal, source in self._principals:
            digest = source.current() if source is not None else None
            # Every digest is compared, matched or not: the time says nothing.
            if digest is not None and hmac.compare_digest(presented, digest) and found is None:
                found = principal
        if found is None:
            raise Unauthenticated("the bearer token names no principal")
        return found


def _bearer(metadata: Sequence[tuple[str, str | bytes]]) -> str | None:
    for key, value in metadata:
        if key == "authorization":
            text = value.decode(errors="replace") if isinstance(value, bytes) else value
            if text[: len(_BEARER)].lower() == _BEARER:
                return text[len(_BEARER) :].strip()
            return ""  # present but not a bearer token: refused as a bad token
    return None
