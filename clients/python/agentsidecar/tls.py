"""TLS and bearer tokens for the channels that dial a gRPC server, and the PEM files
behind them (read whole, watched for changes).

- :func:`channel_credentials`: what a channel dials with: TLS (with a client certificate
  for mutual TLS) and, optionally, a bearer token sent on every call. A token over
  plaintext is allowed to loopback only (grpc's local credentials check it).
- :func:`read_pem` and :class:`FileWatch`: a PEM file's bytes, and whether files changed:
  shared with the serving side (:mod:`agentsidecar.serving`), which reloads a rotated
  certificate.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import grpc

__all__ = ["FileWatch", "TlsFileError", "channel_credentials", "read_pem"]


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
