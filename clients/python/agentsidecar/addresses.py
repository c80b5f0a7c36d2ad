"""Addresses on this machine, for both ends of every link: whether a host or a gRPC
target stays on it (the one rule a secret, a bearer token or a model key, must pass to
travel without TLS), and the Unix sockets the sidecar and the tool-server SDK listen on."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import stat
from collections.abc import Iterator

__all__ = [
    "SOCKET_MODE",
    "UnixSocketError",
    "claim_unix_socket",
    "is_local_target",
    "is_loopback",
    "socket_umask",
]

SOCKET_MODE = 0o660
"""A listening socket's mode: its user and group (the pod's fsGroup) may connect."""


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


class UnixSocketError(Exception):
    """A Unix socket cannot be listened on at a path; the message says why."""


def claim_unix_socket(path: str) -> None:
    """Make way for a socket at ``path``: remove one that nothing listens on any more.

    gRPC alone would take over a live socket, and refuses a stale one.

    Raises:
        UnixSocketError: a live process listens there, the path is something else, or
            a stale socket cannot be removed.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise UnixSocketError(f"{path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)  # a live listener with a full backlog does not answer at once
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        try:
            os.unlink(path)  # left by a process that died without removing it
        except OSError as exc:
            raise UnixSocketError(
                f"cannot remove the stale socket {path}: {exc.strerror}"
            ) from None
        return
    except TimeoutError:
        pass  # it listens, busy
    except OSError as exc:
        raise UnixSocketError(f"cannot check {path}: {exc.strerror}") from None
    finally:
        probe.close()
    raise UnixSocketError(f"another process listens on {path}")


@contextlib.contextmanager
def socket_umask(enabled: bool = True) -> Iterator[None]:
    """While binding: sockets are created with no access beyond user and group (a chmod
    after binding would leave a moment when anyone may connect)."""
    previous = os.umask(0o777 & ~SOCKET_MODE) if enabled else None
    try:
        yield
    finally:
        if previous is not None:
            os.umask(previous)
