"""A process of its own that holds a TCP port, as an operator's other server would: the
listeners' refusals must name it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_HOLDER = (
    "import socket, sys, time\n"
    "s = socket.socket()\n"
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('127.0.0.1', 0)); s.listen()\n"
    "print(s.getsockname()[1], flush=True)\n"
    "time.sleep(300)\n"
)


@contextmanager
def held_port() -> Iterator[tuple[int, int]]:
    """Yield ``(port, pid)``: a port on 127.0.0.1 that process ``pid`` listens on."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        yield int(holder.stdout.readline()), holder.pid
    finally:
        holder.kill()
        holder.communicate()
