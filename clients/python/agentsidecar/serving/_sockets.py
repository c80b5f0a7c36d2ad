"""The Unix domain sockets the sidecar and the tool-server SDK listen on: claimed safely
(grpc would take over any socket at the path, a live server's included) and created
readable only by their user and group."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from collections.abc import Iterator

__all__ = ["SOCKET_MODE", "UnixSocketError", "claim_unix_socket", "socket_umask"]

SOCKET_MODE = 0o660
"""A listening socket's mode: its user and group (the pod's fsGroup) may connect."""


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
