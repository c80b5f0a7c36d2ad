"""Why a TCP port cannot be listened on, said before a server tries: the process that
holds it (from ``/proc``), an address no interface has, a port that needs privileges.

gRPC's own refusal is a C-core log line and "No address added"; the HTTP listeners' is
``EADDRINUSE`` alone. Every listener of the project (the sidecar's, the tool-server
SDK's) asks here first, so an operator reads who is in the way.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

__all__ = ["cannot_listen", "port_holder"]

_LISTEN = "0A"  # the TCP state LISTEN in /proc/net/tcp{,6}


def cannot_listen(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on now, or ``None`` when it can.

    The probe binds as the project's servers do (``SO_REUSEADDR``, no ``SO_REUSEPORT``)
    every address ``host`` resolves to, and closes at once. Port 0 always can.
    """
    if port == 0:
        return None
    name = host.strip("[]") or None
    try:
        resolved = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"{host} does not resolve ({exc.strerror})"
    for family, kind, proto, _, address in resolved:
        probe = socket.socket(family, kind, proto)
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
        except OSError as exc:
            return _reason(exc, host, port)
        finally:
            probe.close()
    return None


def _reason(exc: OSError, host: str, port: int) -> str:
    if exc.errno == errno.EADDRINUSE:
        return f"port {port} is in use by {port_holder(port) or 'another process'}"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"no interface of this machine has the address {host}"
    if exc.errno == errno.EACCES:
        return f"port {port} needs privileges (below 1024: root or CAP_NET_BIND_SERVICE)"
    return exc.strerror or str(exc)


def port_holder(port: int) -> str | None:
    """The process listening on TCP ``port``, as ``process PID (COMMAND)``, its command
    line's first three words (or ``this process``), or ``None`` when ``/proc`` does not
    show it (another user's, another network namespace's, no ``/proc``)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    for pid in _pids():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                return _describe(pid)
    return None


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN:
                local_port = fields[1].rpartition(":")[2]
                if int(local_port, 16) == port:
                    inodes.add(fields[9])
    return inodes


def _pids() -> list[int]:
    # This process first: a listener of its own is the likeliest holder in tests and
    # the cheapest to find.
    own = os.getpid()
    others = sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != own)
    return [own, *others]


def _describe(pid: int) -> str:
    if pid == os.getpid():
        return "this process"
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return f"process {pid}"
    # The first words only, values after "=" cut: a command line may carry a secret.
    words = [part.decode(errors="replace") for part in raw.split(b"\0") if part][:3]
    command = " ".join(w.partition("=")[0] + "=..." if "=" in w else w for w in words)
    command = " ".join(command.split())[:120]  # one line, whatever the words held
    return f"process {pid} ({command})" if command else f"process {pid}"
