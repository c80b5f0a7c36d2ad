"""A server child process and the address it announced.

Every server of this project (the sidecar, the LLM simulator, the SDK's tool servers)
prints one line to stdout once it accepts connections: ``listening on HOST:PORT``. Lines
printed before it (the sidecar's ``metrics on HOST:PORT``) are kept as the ``preamble``.
Servers start on port 0 and this line says where they are: no port is ever guessed and
nothing sleeps waiting for a server.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from sidecar.testing._pace import scaled, slowness

__all__ = ["READY_PREFIX", "ProcessStartError", "ServerProcess", "start_process"]

READY_PREFIX = "listening on "


class ProcessStartError(RuntimeError):
    """A server process exited or stayed silent instead of announcing its address."""


class ServerProcess:
    """A running server process; a context manager that stops it on exit.

    Attributes:
        popen: The child process.
        address: ``HOST:PORT`` it announced.
        preamble: The lines it printed before announcing its address.
    """

    def __init__(self, popen: subprocess.Popen[bytes], address: str, preamble: list[str]):
        self.popen = popen
        self.address = address
        self.preamble = preamble

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

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
        self._close()

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM the process and wait for it (SIGKILL after ``timeout`` seconds);
        return its exit code."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        self._close()
        return self.popen.returncode

    def _close(self) -> None:
        if self.popen.stdout is not None:
            self.popen.stdout.close()

    def cpu_seconds(self) -> float:
        """CPU the process has used so far, all its threads (Linux), to the nanosecond:
        the process's own CPU clock (``clock_getcpuclockid``), which counts exactly; the
        tick counts of ``/proc/PID/stat`` (10 ms steps) when that clock cannot be read."""
        try:
            # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED): the kernel's clock id of another
            # process's CPU time, which Python's clock_gettime reads like any clock.
            return time.clock_gettime(((~self.pid) << 3) | 2)
        except OSError:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks = int(fields[11]) + int(fields[12])  # utime, stime
            return ticks / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        """Peak resident memory so far (VmHWM), in MiB (Linux)."""
        return self._status_mib("VmHWM:")

    def current_rss_mib(self) -> float:
        """Resident memory now (VmRSS), in MiB (Linux)."""
        return self._status_mib("VmRSS:")

    def _status_mib(self, key: str) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) / 1024
        return 0.0


def start_process(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    stderr: IO[bytes] | IO[str] | None = None,
    timeout: float = 30.0,
    executable: str = sys.executable,
) -> ServerProcess:
    """Start ``EXECUTABLE ARGS...`` and wait until it announces its address.

    Args:
        args: The program's arguments (``["-m", "toolservers.examples.orders", ...]``).
        env: Added to this process's environment.
        cwd: The working directory; unset: this process's.
        stderr: Where the process's stderr goes; unset: this process's stderr.
        timeout: Seconds to wait for the address on an idle machine; stretched for the
            machine's load now (:func:`sidecar.testing.scaled`).
        executable: The program to run: this Python unless told otherwise (a tool server
            in another language, say).

    Raises:
        ProcessStartError: the process exited, or announced nothing within ``timeout``.
    """
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    popen = subprocess.Popen(
        [executable, *args],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        stderr=stderr,
        env=full_env,
        cwd=cwd,
    )
    assert popen.stdout is not None
    try:
        address, preamble = _await_address(popen, args, scaled(timeout))
    except BaseException:
        if popen.poll() is None:
            popen.kill()
        popen.wait()
        popen.stdout.close()
        raise
    return ServerProcess(popen, address, preamble)


def _await_address(
    popen: subprocess.Popen[bytes], args: Sequence[str], timeout: float
) -> tuple[str, list[str]]:
    assert popen.stdout is not None
    fd = popen.stdout.fileno()
    selector = selectors.DefaultSelector()
    selector.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    # Raw reads: a buffered readline() could swallow the ready line along with an earlier
    # one, and the selector would then wait for output that already arrived.
    pending = b""
    preamble: list[str] = []
    command = " ".join(args)
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProcessStartError(
                    f"{command}: no address within {timeout:.0f}s (waits stretched "
                    f"x{slowness():.1f} for this machine's load)"
                )
            if not selector.select(remaining):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                code = popen.wait()
                raise ProcessStartError(f"{command}: exited with {code} before listening")
            pending += chunk
            while b"\n" in pending:
                raw, pending = pending.split(b"\n", 1)
                line = raw.decode(errors="replace")
                if line.startswith(READY_PREFIX):
                    return line[len(READY_PREFIX) :].strip(), preamble
                preamble.append(line)
    finally:
        selector.close()
