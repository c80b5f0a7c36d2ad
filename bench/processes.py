"""The benchmarks' processes: the LLM simulator, tool servers, sidecars, contender workers.

Servers start through ``sidecar.testing`` (each its own process on 127.0.0.1, usually on
port 0, its address read from the ``listening on HOST:PORT`` line it prints); a
``ServerProcess`` is stopped with SIGTERM by ``stop()`` or at the end of its ``with``
block. Benchmark servers run from the repository root, send stderr to a log file or
nowhere, and never see a ``GROQ_API_KEY``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from sidecar.testing import ServerProcess, start_process

ROOT = Path(__file__).resolve().parent.parent


def start(
    *args: str,
    log: Path | None = None,
    timeout: float = 60.0,
    source: Path | None = None,
    env: dict[str, str] | None = None,
) -> ServerProcess:
    """Start ``python ARGS...`` and wait up to ``timeout`` seconds for its address.

    Its stderr goes to ``log`` (appended) or nowhere. ``source`` runs the code of another
    source tree (an older release, say) instead of this one; ``env`` adds to this
    process's environment.
    """
    env = {**(env or {}), "GROQ_API_KEY": ""}
    if source is not None:
        env["PYTHONPATH"] = f"{source}{os.pathsep}{source / 'clients' / 'python'}"
    with open(log, "a") if log is not None else open(os.devnull, "w") as stderr:
        return start_process(args, env=env, cwd=source or ROOT, stderr=stderr, timeout=timeout)


def _sidecar_module(source: Path | None) -> str:
    """``python -m`` target of the sidecar in ``source`` (older trees had no ``__main__``)."""
    tree = source or ROOT
    return "sidecar" if (tree / "sidecar" / "__main__.py").exists() else "sidecar.cli"


BENCH_MODELS = ("bench-model", "bench-light-model", "soak-model", "simulated")
"""Model names the benchmarks' sidecars send: served by their simulators beside Groq's
current ones, as a local endpoint's models (which do not reason)."""
SERVE_BENCH_MODELS = tuple(f for name in BENCH_MODELS for f in ("--serve-model", name))
"""The simulator's flags that serve :data:`BENCH_MODELS`."""


def simulator(*flags: str) -> ServerProcess:
    """The LLM simulator (instant unless latency flags say otherwise)."""
    return start("-m", "llmsim", "--port", "0", *SERVE_BENCH_MODELS, *flags)


def shop(
    tool_ms: dict[str, float],
    *flags: str,
    env: dict[str, str] | None = None,
    source: Path | None = None,
) -> ServerProcess:
    """The example shop tool server, with simulated handler latency per tool; ``flags``
    and ``env`` add to its command line and environment (TLS, a token); ``source`` runs
    another source tree's."""
    latency = [f for name, ms in tool_ms.items() if ms for f in ("--latency", f"{name}={ms:g}")]
    return start(
        "-m", "toolservers.examples.shop", "--port", "0", *latency, *flags, env=env, source=source
    )


def tool_server(name: str, latency_ms: float, *flags: str) -> ServerProcess:
    """One of the example tool servers, with the same simulated latency for every tool."""
    return start(
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
    sim: ServerProcess,
    tools: list[tuple[str, ServerProcess]],
    workdir: Path,
    transport: str = "direct",
    store: str = "sqlite",
    profiles: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    server: dict[str, Any] | None = None,
    tool_server: dict[str, Any] | None = None,
    auth: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
    source: Path | None = None,
    prices: dict[str, Any] | None = None,
    telemetry: dict[str, Any] | None = None,
) -> ServerProcess:
    """A sidecar on ``sim`` and ``tools``; ``store`` is its session store (each sidecar
    gets a SQLite file of its own in ``workdir``); ``profiles`` replaces the default one;
    ``env`` adds to its environment; ``server``, ``auth``, ``model``, ``prices``,
    ``telemetry`` and ``tool_server`` (merged into every tool server's entry) add
    configuration; ``source`` runs another source tree's sidecar (an older commit's, for
    a before and after)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=workdir, delete=False) as config_file:
        sessions: dict[str, Any] = {"store": store}
        if store == "sqlite":
            sessions["sqlite"] = {"path": str(Path(config_file.name).with_suffix(".db"))}
        config: dict[str, Any] = {
            "server": {"port": 0},
            "model": {
                "base_url": f"http://{sim.address}/openai/v1",
                "keyless": True,
                "model": "bench-model",
                "transport": transport,
            },
            "tool_servers": [
                {"name": name, "address": s.address, **(tool_server or {})} for name, s in tools
            ],
            "sessions": sessions,
        }
        if server is not None:
            config["server"].update(server)
        if model is not None:
            config["model"].update(model)
        if source is not None and not _tree_mentions(source, "keyless"):
            del config["model"]["keyless"]  # older trees ran keyless without being told
        if auth is not None:
            config["auth"] = auth
        if profiles is not None:
            config["profiles"] = profiles
        if prices is not None:
            config["prices"] = prices
        if telemetry is not None:
            config["telemetry"] = telemetry
        yaml.safe_dump(config, config_file)
    return start(
        "-m", _sidecar_module(source), "serve", "--config", config_file.name, env=env, source=source
    )


@contextlib.contextmanager
def configured_sidecar(
    sim: ServerProcess, tools: dict[str, ServerProcess], source: Path | None = None, **sections: Any
) -> Iterator[ServerProcess]:
    """A sidecar against ``sim`` and ``tools`` for a ``with`` block; ``sections`` are extra
    config sections, ``source`` another source tree to run. Its config and its SQLite
    session store live in a temporary directory, removed once it has stopped."""
    config: dict[str, Any] = {
        "server": {"port": 0, "grace_period": 2},
        "model": {
            "base_url": f"http://{sim.address}/openai/v1",
            "model": "llm-simulator",
            "keyless": True,
        },
        "tool_servers": [{"name": n, "address": s.address} for n, s in tools.items()],
    }
    config.update(sections)
    with tempfile.TemporaryDirectory() as workdir:
        # Each sidecar gets a session store of its own: a SQLite file takes one process.
        config.setdefault("sessions", {"sqlite": {"path": f"{workdir}/sessions.db"}})
        path = Path(workdir) / "sidecar.yaml"
        path.write_text(yaml.safe_dump(config))
        with start(
            "-m", _sidecar_module(source), "serve", "--config", str(path), source=source
        ) as server:
            yield server


class Worker:
    """A contender process (``bench.peers.worker``) that runs batches on command."""

    def __init__(
        self, name: str, module: str | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "bench.peers.worker", module or name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
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


def _tree_mentions(source: Path, word: str) -> bool:
    """Whether the configuration code of the source tree ``source`` mentions ``word`` (a
    single ``sidecar/config.py`` in older trees, a package in newer ones)."""
    single = source / "sidecar" / "config.py"
    files = [single] if single.exists() else sorted((source / "sidecar" / "config").glob("*.py"))
    return any(word in f.read_text() for f in files)
