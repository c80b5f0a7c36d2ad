"""The sidecar's TLS settings as gRPC credentials (built by :mod:`agentsidecar.tls`).

A file that cannot be read at start is a :class:`~sidecar.errors.StartupError` naming
the setting; later, a changed file that cannot be read leaves the old credentials in use.
"""

from __future__ import annotations

import grpc

from agentsidecar.tls import TlsFileError
from agentsidecar.tls import channel_credentials as _channel_credentials
from agentsidecar.tls import server_credentials as _server_credentials
from sidecar.config import ClientTlsConfig, ServerTlsConfig
from sidecar.errors import StartupError

__all__ = ["channel_credentials", "server_credentials"]


def server_credentials(config: ServerTlsConfig) -> grpc.ServerCredentials:
    """Credentials for the sidecar's port (``server.tls``).

    Raises:
        StartupError: a file cannot be read.
    """
    try:
        return _server_credentials(
            config.cert_file,
            config.key_file,
            config.client_ca_file,
            reload_interval=config.reload_interval,
        )
    except TlsFileError as exc:
        raise StartupError(f"server.tls: {exc}") from None


def channel_credentials(
    what: str, config: ClientTlsConfig | None, token: str | None
) -> grpc.ChannelCredentials | None:
    """Credentials for a channel the sidecar dials (``what`` names it in errors).

    Raises:
        StartupError: a file cannot be read.
    """
    try:
        return _channel_credentials(
            tls=config is not None,
            ca_file=config.ca_file if config else None,
            cert_file=config.cert_file if config else None,
            key_file=config.key_file if config else None,
            token=token,
        )
    except TlsFileError as exc:
        raise StartupError(f"{what}: {exc}") from None
