"""What a gRPC server of the project needs, shared by the sidecar and the tool-server SDK:
TLS credentials that follow their files, a bearer-token check, Unix sockets claimed and
created safely, and server reflection that describes the project's services.

Callers of a server need none of it: the client is :mod:`agentsidecar.client`.
"""

from agentsidecar.serving._credentials import ReloadingCertificates, TokenCheck, server_credentials
from agentsidecar.serving._reflection import SERVICE_NAMES, enable_reflection
from agentsidecar.serving._sockets import (
    SOCKET_MODE,
    UnixSocketError,
    claim_unix_socket,
    socket_umask,
)

__all__ = [
    "SERVICE_NAMES",
    "SOCKET_MODE",
    "ReloadingCertificates",
    "TokenCheck",
    "UnixSocketError",
    "claim_unix_socket",
    "enable_reflection",
    "server_credentials",
    "socket_umask",
]
