"""TLS and bearer tokens for gRPC links: credentials from PEM files, reloaded when they change.

One module for both ends of every link (the sidecar's port, its channels to tool
servers, the tool-server SDK, this package's client):

- :func:`server_credentials`: grpc asks :class:`ReloadingCertificates` for the
  certificate before each new connection's handshake; it rereads the files at most
  every ``reload_interval`` seconds and only when one changed, so a rotated certificate
  (a Kubernetes Secret updated in place, cert-manager renewing) serves new connections
  while calls in flight keep theirs. With a client CA, every caller must present a
  certificate that chains to it (mutual TLS).
- :func:`channel_credentials`: what a channel dials with: TLS (with a client certificate
  for mutual TLS) and, optionally, a bearer token sent on every call. A token over
  plaintext is allowed to loopback only (grpc's local credentials check it).
- :class:`TokenCheck`: a server interceptor that admits a call only with one of the
  expected tokens, compared as SHA-256 digests in constant time; health and reflection
  stay open for probes.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path

import grpc

__all__ = [
    "FileWatch",
    "ReloadingCertificates",
    "TlsFileError",
    "TokenCheck",
    "channel_credentials",
    "read_pem",
    "server_credentials",
]

log = logging.getLogger(__name__)

_OPEN_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


class TlsFileError(Exception):
    """A certificate, key or CA file cannot be read."""


def read_pem(path: str, what: str) -> bytes:
    """The bytes of a PEM file.

    Raises:
        TlsFileError: it cannot be read (or is empty), naming ``what`` it is.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TlsFileError(f"cannot read {what} {path}: {exc.strerror}") from None
    if not data.strip():
        raise TlsFileError(f"{what} {path} is empty")
    return data


class FileWatch:
    """Whether any of some files changed (modification time, size, inode) since last asked."""

    def __init__(self, paths: Iterable[str | None]) -> None:
        self._paths = [p for p in paths if p]
        self._seen = self._state()

    def _state(self) -> tuple[tuple[float, int, int] | None, ...]:
        out: list[tuple[float, int, int] | None] = []
        for path in self._paths:
            try:
                stat = os.stat(path)
            except OSError:
                out.append(None)
            else:
                out.append((stat.st_mtime, stat.st_size, stat.st_ino))
        return tuple(out)

    def changed(self) -> bool:
        state = self._state()
        if state == self._seen:
            return False
        self._seen = state
        return True


class ReloadingCertificates:
    """grpc's certificate fetcher for a server whose certificate files may change.

    Raises:
        TlsFileError: a file cannot be read at start.
    """

    def __init__(
        self,
        cert_file: str,
        key_file: str,
        client_ca_file: str | None = None,
        *,
        reload_interval: float = 5.0,
    ) -> None:
        self._files = (cert_file, key_file, client_ca_file)
        self._interval = reload_interval
        self._watch = FileWatch(self._files)
        self._checked = time.monotonic()
        self.initial = self._load()
        self.reloads = 0

    def _load(self) -> grpc.ServerCertificateConfiguration:
        cert_file, key_file, client_ca_file = self._files
        key = read_pem(key_file, "the TLS key")
        chain = read_pem(cert_file, "the TLS certificate")
        roots = read_pem(client_ca_file, "the client CA") if client_ca_file else None
        return grpc.ssl_server_certificate_configuration([(key, chain)], roots)

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        now = time.monotonic()
        if now - self._checked < self._interval:
            return None
        self._checked = now
        if not self._watch.changed():
            return None
        try:
            loaded = self._load()
        except TlsFileError as exc:  # half-written files: keep serving the old ones
            log.warning("TLS certificate not reloaded: %s", exc)
            return None
        self.reloads += 1
        log.info("TLS certificate reloaded from %s", self._files[0])
        return loaded


def server_credentials(
    cert_file: str,
    key_file: str,
    client_ca_file: str | None = None,
    *,
    reload_interval: float = 5.0,
) -> grpc.ServerCredentials:
    """Credentials for a server port; mutual TLS when ``client_ca_file`` is set.

    Raises:
        TlsFileError: a file cannot be read.
    """
    certificates = ReloadingCertificates(
        cert_file, key_file, client_ca_file, reload_interval=reload_interval
    )
    return grpc.dynamic_ssl_server_credentials(
        certificates.initial,
        certificates,
        require_client_authentication=client_ca_file is not None,
    )


def channel_credentials(
    *,
    tls: bool,
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    token: str | None = None,
) -> grpc.ChannelCredentials | None:
    """What a channel dials with; None for plaintext without a token.

    Args:
        tls: Dial TLS. Without it a ``token`` still travels, to loopback only.
        ca_file: CA bundle the server's certificate must chain to; unset: the system's.
        cert_file: Client certificate chain (mutual TLS), with ``key_file``.
        key_file: Its private key.
        token: A bearer token sent as ``authorization: Bearer …`` on every call.

    Raises:
        TlsFileError: a file cannot be read.
    """
    if tls:
        roots = read_pem(ca_file, "the CA bundle") if ca_file else None
        key = read_pem(key_file, "the TLS key") if key_file else None
        chain = read_pem(cert_file, "the TLS certificate") if cert_file else None
        credentials = grpc.ssl_channel_credentials(roots, key, chain)
    elif token:
        # grpc refuses to send call credentials over plaintext, except to a local peer.
        credentials = grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
    else:
        return None
    if token:
        credentials = grpc.composite_channel_credentials(
            credentials, grpc.access_token_call_credentials(token)
        )
    return credentials


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class TokenCheck(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Admits a call only with ``authorization: Bearer <token>`` naming an expected token.

    Health and reflection stay open, so probes and tools like grpcurl's ``describe`` work
    without the token. Refused calls end UNAUTHENTICATED before their handler runs.
    """

    def __init__(self, tokens: Sequence[str]) -> None:
        if not tokens or not all(tokens):
            raise ValueError("TokenCheck needs at least one non-empty token")
        self._digests = [_digest(t) for t in tokens]

    def admits(self, metadata: Sequence[tuple[str, str | bytes]] | None) -> bool:
        for key, value in metadata or ():
            if key != "authorization":
                continue
            text = value.decode(errors="replace") if isinstance(value, bytes) else value
            if text[:7].lower() != "bearer ":
                return False
            presented = _digest(text[7:].strip())
            # Every digest is compared: the time says nothing about which came close.
            return sum(hmac.compare_digest(presented, d) for d in self._digests) > 0
        return False

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = handler_call_details.method or ""
        if method.startswith(_OPEN_SERVICES) or self.admits(
            handler_call_details.invocation_metadata
        ):
            return await continuation(handler_call_details)
        return _REFUSE


async def _refuse(request: object, context: grpc.aio.ServicerContext) -> None:
    await context.abort(
        grpc.StatusCode.UNAUTHENTICATED,
        "this server requires 'authorization: Bearer <token>' metadata with its token",
    )


_REFUSE = grpc.unary_unary_rpc_method_handler(_refuse)
