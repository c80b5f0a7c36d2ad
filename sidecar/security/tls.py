"""The sidecar's TLS settings as gRPC credentials (built by :mod:`agentsidecar.tls`).

A file that cannot be read at start is a :class:`~sidecar.errors.StartupError` naming
the setting; later, a changed file that cannot be read leaves the old credentials in use.
"""

from __future__ import annotations

import grpc

from agentsidecar.serving import server_credentials as _server_credentials
from agentsidecar.tls import TlsFileError
from agentsidecar.tls import channel_credentials as _channel_credentials
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
    what: str, config: ClientTlsConfig | None
) -> grpc.ChannelCredentials | None:
    """TLS credentials for a channel the sidecar dials (``what`` names it in errors);
    None for plaintext.

    Raises:
        StartupError: a file cannot be read.
    """
    if config is None:
        return None
    try:
        return _channel_credentials(
            tls=True, ca_file=config.ca_file, cert_file=config.cert_file, key_file=config.key_file
        )
    except TlsFileError as exc:
        raise StartupError(f"{what}: {exc}") from None
