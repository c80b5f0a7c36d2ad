"""Processes for the benchmarks: the LLM simulator, example tool servers, sidecars.

Each is its own process on 127.0.0.1, started on port 0; every server prints
``listening on HOST:PORT`` once it accepts connections (the sidecar prints
``metrics on HOST:PORT`` first when metrics are on), and that is how its address is
learned. Everything is stopped with SIGTERM when the stack's ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
READY = "listening on "


@dataclass
class Proc:
    """A started server process."""

    popen: subprocess.Popen[bytes]
    address: str
    preamble: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def cpu_seconds(self) -> float:
        """User plus system CPU time of the process so far, all threads (from /proc)."""
        with open(f"/proc/{self.pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
        return ticks / os.sysconf("SC_CLK_TCK")


def start(args: Sequence[str], *, timeout: float = 60.0, source: Path | None = None) -> Proc:
    """Start ``python ARGS`` and wait for its address.

    ``source`` runs the code of another source tree (an older release, say) instead of
    this one.
    """
    env = dict(os.environ, PYTHONUNBUFFERED="1", GROQ_API_KEY="")
    if source is not None:
        env["PYTHONPATH"] = f"{source}{os.pathsep}{source / 'clients' / 'python'}"
    popen = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=source or ROOT,
    )
    assert popen.stdout is not None
    fd = popen.stdout.fileno()
    selector = selectors.DefaultSelector()
    selector.register(fd, selectors.EVENT_READ)
    pending, preamble = b"", []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not selector.select(deadline - time.monotonic()):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"{' '.join(args)} exited before listening")
            pending += chunk
            while b"\n" in pending:
                raw, pending = pending.split(b"\n", 1)
                line = raw.decode()
                if line.startswith(READY):
                    return Proc(popen, line[len(READY) :].strip(), preamble)
                preamble.append(line)
    finally:
        selector.close()
    popen.kill()
    raise RuntimeError(f"{' '.join(args)} printed no address within {timeout}s")


def stop(proc: Proc) -> None:
    if proc.popen.poll() is None:
        proc.popen.send_signal(signal.SIGTERM)
        try:
            proc.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.popen.kill()
            proc.popen.wait()


@contextlib.contextmanager
def running(args: Sequence[str], source: Path | None = None) -> Iterator[Proc]:
    proc = start(args, source=source)
    try:
        yield proc
    finally:
        stop(proc)


def simulator(*flags: str) -> contextlib.AbstractContextManager[Proc]:
    """The LLM simulator (instant unless latency flags say otherwise)."""
    return running(["-m", "sidecar.llm.simulator", "--port", "0", *flags])


def tool_server(
    name: str, latency_ms: float, *flags: str
) -> contextlib.AbstractContextManager[Proc]:
    """One of the example tool servers, with simulated handler latency."""
    return running(
        [
            "-m",
            f"toolservers.examples.{name}",
            "--port",
            "0",
            "--latency-ms",
            str(latency_ms),
            "--log-level",
            "WARNING",
            *flags,
        ]
    )


@contextlib.contextmanager
def sidecar(
    sim: Proc, tools: dict[str, Proc], source: Path | None = None, **sections: Any
) -> Iterator[Proc]:
    """A sidecar against ``sim`` and ``tools``; ``sections`` are extra config sections,
    ``source`` another source tree to run."""
    config: dict[str, Any] = {
        "server": {"port": 0, "grace_period": 2},
        "model": {"base_url": f"http://{sim.address}/openai/v1", "model": "llm-simulator"},
        "tool_servers": [{"name": n, "address": p.address} for n, p in tools.items()],
    }
    config.update(sections)
    with tempfile.TemporaryDirectory() as workdir:
        # Each sidecar gets a session store of its own: a SQLite file takes one process.
        config.setdefault("sessions", {"sqlite": {"path": f"{workdir}/sessions.db"}})
        path = Path(workdir) / "sidecar.yaml"
        path.write_text(yaml.safe_dump(config))
        with running(["-m", "sidecar.cli", "serve", "--config", str(path)], source) as proc:
            yield proc
