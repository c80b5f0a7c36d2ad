"""Start real server processes for tests and learn the address they bound.

Every server in this project (tool servers, the LLM simulator, the sidecar)
prints one line to stdout once it accepts connections: ``listening on HOST:PORT``.
Lines it prints before that one (the sidecar's ``metrics on HOST:PORT``) are kept
as the process's ``preamble``. Tests start servers on port 0 and read those lines,
so no port is ever guessed and no test sleeps waiting for a server.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

READY_PREFIX = "listening on "


class ProcessStartError(RuntimeError):
    """A server process exited or stayed silent instead of announcing its address."""


@dataclass
class ServerProcess:
    """A running server child process and the address it announced."""

    popen: subprocess.Popen[str]
    address: str
    preamble: list[str] = field(default_factory=list)
    """Lines printed before the ``listening on`` line."""

    def announced(self, prefix: str) -> str:
        """The rest of the preamble line that starts with ``prefix``.

        Raises:
            LookupError: no such line was printed.
        """
        for line in self.preamble:
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        raise LookupError(f"no line starting with {prefix!r} in {self.preamble}")

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    @property
    def pid(self) -> int:
        return self.popen.pid

    def send_signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL the process and reap it."""
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM the process, wait for it, SIGKILL it if it lingers; return its exit code."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        return self.popen.returncode


def spawn(
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> ServerProcess:
    """Start ``python ARGS...`` and wait until it prints its listening address.

    Raises:
        ProcessStartError: the process exited, or printed nothing within ``timeout``.
    """
    full_env = dict(os.environ)
    full_env["PYTHONUNBUFFERED"] = "1"
    if env:
        full_env.update(env)
    popen = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=full_env,
    )
    assert popen.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(popen.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    # Raw reads: a buffered readline() could swallow the ready line along with an earlier
    # one, and the selector would then wait for output that already arrived.
    fd = popen.stdout.fileno()
    pending = b""
    preamble: list[str] = []
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                popen.kill()
                popen.wait()
                raise ProcessStartError(f"{' '.join(args)}: no address within {timeout}s")
            if not selector.select(remaining):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                code = popen.wait()
                raise ProcessStartError(f"{' '.join(args)}: exited with {code} before listening")
            pending += chunk
            while b"\n" in pending:
                raw, pending = pending.split(b"\n", 1)
                line = raw.decode()
                if line.startswith(READY_PREFIX):
                    return ServerProcess(popen, line[len(READY_PREFIX) :].strip(), preamble)
                preamble.append(line)
    finally:
        selector.close()
