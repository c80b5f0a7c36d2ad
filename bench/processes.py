"""The benchmark's processes: simulators, tool servers, sidecars and contender workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
READY = "listening on "


class Server:
    """A server process that announced ``listening on HOST:PORT``."""

    def __init__(self, *args: str, log: Path | None = None) -> None:
        """Start ``python ARGS...``; its stderr goes to ``log`` (appended) or nowhere."""
        with open(log, "a") if log is not None else open(os.devnull, "w") as stderr:
            self.popen = subprocess.Popen(
                [sys.executable, *args],
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                text=True,
                cwd=ROOT,
            )
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            if line.startswith(READY):
                self.address = line[len(READY) :].strip()
                break
        else:
            raise RuntimeError(f"{' '.join(args)} exited before listening")

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
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def simulator(*flags: str) -> Server:
    return Server("-m", "sidecar.llm.simulator", "--port", "0", *flags)


def shop(tool_ms: dict[str, float]) -> Server:
    latency = [f for name, ms in tool_ms.items() if ms for f in ("--latency", f"{name}={ms:g}")]
    return Server("-m", "toolservers.examples.shop", "--port", "0", *latency)


def sidecar(
    sim: Server,
    tools: list[tuple[str, Server]],
    workdir: Path,
    transport: str = "direct",
    store: str = "sqlite",
) -> Server:
    """A sidecar on ``sim`` and ``tools``; ``store`` is its session store (each sidecar
    gets a SQLite file of its own in ``workdir``)."""
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
        yaml.safe_dump(config, config_file)
    return Server("-m", "sidecar.cli", "serve", "--config", config_file.name)


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
