"""What every HTTP listener of the sidecar must do with careless and hostile clients,
checked the same way for each: a half-sent request is closed within the read timeout,
connections beyond the cap are closed as they are accepted, and once they are gone the
listener serves again."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the other end closes ``sock`` within ``seconds``."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except OSError:
        return True
    return True


def half_post(path: str) -> bytes:
    """A POST to ``path`` whose body never comes: a 100-byte body announced, one byte sent."""
    return f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{{".encode()


def check_bounded(
    host: str, port: int, *, half_request: bytes, cap: int, serves: Callable[[], bool]
) -> None:
    """Hold the listener at ``host:port`` to its bounds; ``serves`` asks it one request.

    The read timeout under test must be well under the 20 s allowed here (0.5 s is
    generous, and far short of never)."""
    half = socket.create_connection((host, port), timeout=10)
    half.sendall(half_request)
    assert closed_within(half, 20), "a half-sent request was kept open"
    half.close()
    idle = [socket.create_connection((host, port), timeout=10) for _ in range(cap)]
    try:
        time.sleep(0.2)  # each accepted (and, on a threaded server, waiting in its thread)
        extra = socket.create_connection((host, port), timeout=10)
        assert closed_within(extra, 20), "a connection beyond the cap was kept"
        extra.close()
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 20
    while not serves():
        assert time.monotonic() < deadline, "the listener did not serve again"
        time.sleep(0.1)
