"""Credentials a gRPC server of the project serves with: TLS that follows its files, and
a bearer-token check.

- :func:`server_credentials`: grpc asks :class:`ReloadingCertificates` for the
  certificate before each new connection's handshake; it rereads the files at most
  every ``reload_interval`` seconds and only when one changed, so a rotated certificate
  (a Kubernetes Secret updated in place, cert-manager renewing) serves new connections
  while calls in flight keep theirs. With a client CA, every caller must present a
  certificate that chains to it (mutual TLS).
- :class:`TokenCheck`: a server interceptor that admits a call only with one of the
  expected tokens, compared as SHA-256 digests in constant time; health and reflection
  stay open for probes.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

import grpc

from agentsidecar.tls import FileWatch, TlsFileError, read_pem

__all__ = ["ReloadingCertificates", "TokenCheck", "server_credentials"]

log = logging.getLogger(__name__)

_OPEN_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


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
