"""Client certificates on the HTTP listeners (the MCP endpoint, A2A's HTTP bindings), so a
principal named by its certificate's SAN is recognised there as on the gRPC port.

ASGI carries no TLS details to the application, so the listener's connection class is
extended: as a connection opens (after its TLS handshake) it notes the subject alternative
names of the certificate the client presented, under the connection's peer address, and
forgets them when the connection closes; a request's ``client`` in its scope is that
address. The identity handed to :meth:`Authenticator.authenticate` is the shape gRPC's
auth context has (``x509_subject_alternative_name``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

__all__ = ["PeerCertificates"]

_SAN_KEY = "x509_subject_alternative_name"

Scope = MutableMapping[str, Any]


def _names(transport: asyncio.BaseTransport) -> list[bytes]:
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return []
    certificate = ssl_object.getpeercert() or {}
    return [str(value).encode() for _, value in certificate.get("subjectAltName", ())]


class PeerCertificates:
    """The client certificates of one listener's open connections."""

    def __init__(self) -> None:
        self._by_peer: dict[tuple[str, int], list[bytes]] = {}

    def protocol(self, base: type[Any]) -> type[Any]:
        """``base`` (the server's connection class), noting each connection's names."""
        peers = self._by_peer

        class Noting(base):  # type: ignore[misc]
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                peer = transport.get_extra_info("peername")
                names = _names(transport)
                if names and isinstance(peer, tuple):
                    self._noted = (str(peer[0]), int(peer[1]))
                    peers[self._noted] = names
                super().connection_made(transport)

            def connection_lost(self, exc: Exception | None) -> None:
                noted = getattr(self, "_noted", None)
                if noted is not None:
                    peers.pop(noted, None)
                super().connection_lost(exc)

        Noting.__name__ = f"PeerNoting{base.__name__}"
        return Noting

    def identity(self, scope: Scope) -> Mapping[str, Sequence[bytes]]:
        """The request's client certificate, as the authenticator reads it."""
        client = scope.get("client")
        if not client:
            return {}
        names = self._by_peer.get((str(client[0]), int(client[1])))
        return {_SAN_KEY: names} if names else {}
