"""Addresses on this machine, for both ends of every link: whether a host or a gRPC
target stays on it (the one rule a secret, a bearer token or a model key, must pass to
travel without TLS)."""

from __future__ import annotations

import ipaddress

__all__ = ["is_local_target", "is_loopback"]


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (a name or address, without port; ``[::1]`` as well) is this
    machine only: ``localhost``, 127.0.0.0/8, ``::1`` or a ``unix:`` socket.
    ``127.evil.example`` is a host name like any other."""
    if not host:
        return False
    host = host.strip("[]")
    if host.lower() == "localhost" or host.startswith("unix:"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_local_target(target: str) -> bool:
    """Whether a gRPC target (``host:port``, ``[v6]:port``, ``unix:path``) is this machine.
    Anything else (a ``dns:///`` target, a bare IPv6 address without brackets) is not."""
    if target.startswith("unix:"):
        return True
    host, separator, port = target.rpartition(":")
    if not separator or not port.isdigit() or (":" in host and not host.startswith("[")):
        host = target
    return is_loopback(host)
