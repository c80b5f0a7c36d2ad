"""The benchmarks' processes: the LLM simulator, tool servers, sidecars, contender workers.

Each server is its own process on 127.0.0.1, usually started on port 0; every server
prints ``listening on HOST:PORT`` once it accepts connections (the sidecar prints
``metrics on HOST:PORT`` first when metrics are on), and that is how its address is
learned. A ``Server`` is stopped with SIGTERM by ``stop()`` or at the end of its
``with`` block.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
READY = "listening on "


class Server:
    """A server process that announced ``listening on HOST:PORT``."""

    def __init__(
        self,
        *args: str,
        log: Path | None = None,
        timeout: float = 60.0,
        source: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """Start ``python ARGS...`` and wait up to ``timeout`` seconds for its address.

        Its stderr goes to ``log`` (appended) or nowhere; the lines it printed before
        the address are kept in ``preamble``. ``source`` runs the code of another source
        tree (an older release, say) instead of this one; ``env`` adds to this process's
        environment. The process never sees a ``GROQ_API_KEY``.
        """
        env = dict(os.environ, **(env or {}), PYTHONUNBUFFERED="1", GROQ_API_KEY="")
        if source is not None:
            env["PYTHONPATH"] = f"{source}{os.pathsep}{source / 'clients' / 'python'}"
        with open(log, "a") if log is not None else open(os.devnull, "w") as stderr:
            self.popen = subprocess.Popen(
                [sys.executable, *args],
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=source or ROOT,
            )
        self.preamble: list[str] = []
        self.address = self._await_address(args, timeout)

    def _await_address(self, args: tuple[str, ...], timeout: float) -> str:
        assert self.popen.stdout is not None
        fd = self.popen.stdout.fileno()
        selector = selectors.DefaultSelector()
        selector.register(fd, selectors.EVENT_READ)
        pending = b""
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
                        return line[len(READY) :].strip()
                    self.preamble.append(line)
        finally:
            selector.close()
        self.kill()
        raise RuntimeError(f"{' '.join(args)} printed no address within {timeout}s")

    def __enter__(self) -> Server:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def cpu_seconds(self) -> float:
        """User + system CPU the process has used so far."""
        fields = Path(f"/proc/{self.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])  # utime, stime
        return ticks / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        """Peak resident memory so far (VmHWM), in MiB."""
        return self._status_mib("VmHWM:")

    def current_rss_mib(self) -> float:
        """Resident memory now (VmRSS), in MiB."""
        return self._status_mib("VmRSS:")

    def _status_mib(self, key: str) -> float:
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) / 1024
        return 0.0

    def kill(self) -> None:
        """SIGKILL the process and reap it."""
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()

    def stop(self) -> None:
        """SIGTERM the process and reap it (SIGKILL after 15 s)."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def simulator(*flags: str) -> Server:
    """The LLM simulator (instant unless latency flags say otherwise)."""
    return Server("-m", "sidecar.llm.simulator", "--port", "0", *flags)


def shop(tool_ms: dict[str, float]) -> Server:
    """The example shop tool server, with simulated handler latency per tool."""
    latency = [f for name, ms in tool_ms.items() if ms for f in ("--latency", f"{name}={ms:g}")]
    return Server("-m", "toolservers.examples.shop", "--port", "0", *latency)


def tool_server(name: str, latency_ms: float, *flags: str) -> Server:
    """One of the example tool servers, with the same simulated latency for every tool."""
    return Server(
        "-m",
        f"toolservers.examples.{name}",
        "--port",
        "0",
        "--latency-ms",
        str(latency_ms),
        "--log-level",
        "WARNING",
        *flags,
    )


def sidecar(
    sim: Server,
    tools: list[tuple[str, Server]],
    workdir: Path,
    transport: str = "direct",
    store: str = "sqlite",
    profiles: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> Server:
    """A sidecar on ``sim`` and ``tools``; ``store`` is its session store (each sidecar
    gets a SQLite file of its own in ``workdir``); ``profiles`` replaces the default one;
    ``env`` adds to its environment."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=workdir, delete=False) as config_file:
        sessions: dict[str, Any] = {"store": store}
        if store == "sqlite":
            sessions["sqlite"] = {"path": str(Path(config_file.name).with_suffix(".db"))}
        config: dict[str, Any] = {
            "server": {"port": 0},
            "model": {
                "base_url": f"http://{sim.address}/openai/v1",
                "model": "bench-model",
                "transport": transport,
            },
            "tool_servers": [{"name": name, "address": s.address} for name, s in tools],
            "sessions": sessions,
        }
        if profiles is not None:
            config["profiles"] = profiles
        yaml.safe_dump(config, config_file)
    return Server("-m", "sidecar.cli", "serve", "--config", config_file.name, env=env)


@contextlib.contextmanager
def configured_sidecar(
    sim: Server, tools: dict[str, Server], source: Path | None = None, **sections: Any
) -> Iterator[Server]:
    """A sidecar against ``sim`` and ``tools`` for a ``with`` block; ``sections`` are extra
    config sections, ``source`` another source tree to run. Its config and its SQLite
    session store live in a temporary directory, removed once it has stopped."""
    config: dict[str, Any] = {
        "server": {"port": 0, "grace_period": 2},
        "model": {"base_url": f"http://{sim.address}/openai/v1", "model": "llm-simulator"},
        "tool_servers": [{"name": n, "address": s.address} for n, s in tools.items()],
    }
    config.update(sections)
    with tempfile.TemporaryDirectory() as workdir:
        # Each sidecar gets a session store of its own: a SQLite file takes one process.
        config.setdefault("sessions", {"sqlite": {"path": f"{workdir}/sessions.db"}})
        path = Path(workdir) / "sidecar.yaml"
        path.write_text(yaml.safe_dump(config))
        with Server("-m", "sidecar.cli", "serve", "--config", str(path), source=source) as server:
            yield server


class Worker:
    """A contender process (``bench.worker``) that runs batches on command."""

    def __init__(self, name: str, module: str | None = None) -> None:
        self.name = name
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "bench.worker", module or name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
        )
        self._read()  # {"ready": name}

    def _read(self) -> dict[str, Any]:
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()
        if not line:
            raise RuntimeError(f"contender {self.name} died")
        result: dict[str, Any] = json.loads(line)
        return result

    def command(self, **command: Any) -> dict[str, Any]:
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps(command) + "\n")
        self.popen.stdin.flush()
        return self._read()

    def stop(self) -> None:
        if self.popen.stdin is not None:
            self.popen.stdin.close()
        try:
            self.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.popen.kill()
