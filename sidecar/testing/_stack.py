"""The processes of a test stack: the LLM simulator, tool servers, the sidecar."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sidecar.testing._process import ServerProcess, start_process

__all__ = [
    "EXAMPLE_TOOL_SERVERS",
    "SCENARIO",
    "SIMULATOR_MODEL",
    "Stack",
    "example_stack",
    "sidecar",
    "sidecar_config",
    "simulator",
    "tool_server",
]

SIMULATOR_MODULE = "llmsim"
SIDECAR_MODULE = "sidecar"
SIMULATOR_MODEL = "llm-simulator"
"""The model name test sidecars send to the simulator: its own, which it serves beside
Groq's current models."""
SCENARIO = Path(__file__).with_name("scenario.yaml")
"""Scripted simulator rules for clients' tests: ``slow answer`` (a 3 s first token, for
deadlines and cancellation) and ``refund order`` (a call that needs approval)."""
EXAMPLE_TOOL_SERVERS = ("orders", "logistics", "shop")
"""The SDK's example tool servers (``toolservers.examples.NAME``)."""


def simulator(
    *flags: str,
    scenario: str | Path | None = None,
    recording: str | Path | None = None,
    models: tuple[str, ...] = (),
    **kwargs: Any,
) -> ServerProcess:
    """Start the LLM simulator on a free port.

    Args:
        flags: More of its flags (``--ttft-ms``, ``--fault-rate-429`` ...).
        models: Model names it serves besides Groq's current ones (as a local
            endpoint's, which do not reason); any other name is a 404.
        scenario: A scenario file of scripted rules.
        recording: A recording (``agent-sidecar record export``) whose model side the
            simulator serves: each recorded input is answered as the model answered it.
        kwargs: Passed to :func:`~sidecar.testing.start_process`.
    """
    args = ["-m", SIMULATOR_MODULE, "--port", "0"]
    if scenario is not None:
        args += ["--scenario", str(scenario)]
    if recording is not None:
        args += ["--recording", str(recording)]
    for name in models:
        args += ["--serve-model", name]
    return start_process([*args, *flags], **kwargs)


def tool_server(target: str, *flags: str, **kwargs: Any) -> ServerProcess:
    """Start a tool server on a free port.

    Args:
        target: A module run with ``python -m`` (``toolservers.examples.orders``) or the
            path of a script ending ``.py``; either takes ``--port``.
        flags: More of its flags (``--latency-ms 10`` ...).
        kwargs: Passed to :func:`~sidecar.testing.start_process`.
    """
    head = [target] if target.endswith(".py") else ["-m", target]
    return start_process([*head, "--port", "0", *flags], **kwargs)


def sidecar_config(
    simulator_address: str,
    tool_servers: Mapping[str, str] | Sequence[Mapping[str, Any]],
    *,
    profiles: Mapping[str, Any] | None = None,
    **sections: Any,
) -> dict[str, Any]:
    """A sidecar configuration on the simulator and the named tool servers.

    Args:
        simulator_address: ``HOST:PORT`` of the LLM simulator.
        tool_servers: Tool server name to ``HOST:PORT``, or whole ``tool_servers``
            entries (with ``timeout``, ``retry``, ``breaker`` ...), in the order the
            sidecar lists their tools.
        profiles: The agent profiles; unset: one ``default`` profile.
        sections: More top-level sections (``telemetry``, ``sessions`` ...); replace
            the ones built here.
    """
    config: dict[str, Any] = {
        "server": {"port": 0, "grace_period": 5},
        "model": {
            "base_url": f"http://{simulator_address}/openai/v1",
            "model": SIMULATOR_MODEL,
            "keyless": True,
        },
        "profiles": dict(profiles or {"default": {}}),
        "tool_servers": [{"name": n, "address": a} for n, a in tool_servers.items()]
        if isinstance(tool_servers, Mapping)
        else [dict(s) for s in tool_servers],
    }
    config.update(sections)
    return config


def sidecar(
    config: Mapping[str, Any],
    workdir: str | Path,
    *,
    flags: Sequence[str] = (),
    **kwargs: Any,
) -> ServerProcess:
    """Start a sidecar with ``config`` on a free port (unless the config names one).

    Its configuration file goes to ``workdir``; so does its SQLite session store, unless
    ``config`` names another store or another file (never the working directory's default
    file, which would outlive the test). The process sees no ``GROQ_API_KEY``.

    Args:
        config: The configuration, as :func:`sidecar_config` builds it.
        workdir: A directory of this sidecar's own.
        flags: More flags of ``agent-sidecar serve``.
        kwargs: Passed to :func:`~sidecar.testing.start_process`.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    config = dict(config)
    sessions = dict(config.get("sessions") or {})
    if sessions.get("store", "sqlite") == "sqlite":
        sqlite = dict(sessions.get("sqlite") or {})
        sqlite.setdefault("path", str(workdir / "sessions.db"))
        sessions["sqlite"] = sqlite
    config["sessions"] = sessions
    path = workdir / "sidecar.yaml"
    suffix = 1
    while path.exists():  # several sidecars may share one directory
        suffix += 1
        path = workdir / f"sidecar-{suffix}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    env = {"GROQ_API_KEY": "", **kwargs.pop("env", {})}
    args = ["-m", SIDECAR_MODULE, "serve", "--config", str(path), *flags]
    return start_process(args, env=env, **kwargs)


@dataclass
class Stack:
    """A running simulator, tool servers and sidecar."""

    simulator: ServerProcess
    tool_servers: dict[str, ServerProcess]
    sidecar: ServerProcess
    config: dict[str, Any] = field(default_factory=dict)
    """The sidecar's configuration."""

    def describe(self) -> dict[str, Any]:
        """The addresses, as the launcher prints them."""
        return {
            "sidecar": self.sidecar.address,
            "simulator": self.simulator.address,
            "tool_servers": {n: s.address for n, s in self.tool_servers.items()},
            "profiles": sorted(self.config.get("profiles", {})),
        }


STRUCTURED_ANSWER = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}
CLIENT_PROFILES: dict[str, Any] = {
    "default": {"approval_timeout": 30},
    "structured": {"answer_schema": STRUCTURED_ANSWER},
}
"""The launcher's profiles: ``default`` (every example tool) and ``structured`` (answers
are JSON objects with a string ``answer``, in Run's structured mode)."""


@contextlib.contextmanager
def example_stack(
    workdir: str | Path,
    *,
    simulator_flags: Sequence[str] = (),
    scenario: str | Path | None = SCENARIO,
    tool_latency_ms: float = 0.0,
    profiles: Mapping[str, Any] | None = None,
    **sections: Any,
) -> Iterator[Stack]:
    """The simulator, the three example tool servers and a sidecar on them.

    Args:
        workdir: A directory for the sidecar's configuration and session store.
        simulator_flags: More flags of the simulator.
        scenario: The simulator's scripted rules; None: planning only.
        tool_latency_ms: Simulated handler latency of every example tool.
        profiles: The sidecar's profiles; unset: :data:`CLIENT_PROFILES`.
        sections: More sidecar configuration sections.
    """
    with contextlib.ExitStack() as stack:
        sim = stack.enter_context(simulator(*simulator_flags, scenario=scenario))
        servers = {
            name: stack.enter_context(
                tool_server(
                    f"toolservers.examples.{name}",
                    "--latency-ms",
                    str(tool_latency_ms),
                    "--log-level",
                    "WARNING",
                )
            )
            for name in EXAMPLE_TOOL_SERVERS
        }
        config = sidecar_config(
            sim.address,
            {n: s.address for n, s in servers.items()},
            profiles=CLIENT_PROFILES if profiles is None else profiles,
            **sections,
        )
        side = stack.enter_context(sidecar(config, workdir))
        yield Stack(sim, servers, side, config)
