"""``agent-sidecar replay``: recorded turns run again against a configuration, compared.

Each recorded turn (live runs only: shadow runs are left out) runs again on the
configuration's profile (the recorded one, or ``--profile``) and variant (its stable
one, or ``--variant``), from the conversation the recorded turn saw and with its input.
Its tool calls are answered from the recording, so nothing touches a real system; with
``--live-read-only`` the configuration's tool servers are connected and read-only tools
run for real. The replay uses the configuration's model (the embedded simulator when no
key is set), an in-memory session store, and writes no recording, metrics or audit of
its own. Each new run is compared with its recording (:mod:`sidecar.recording.compare`,
a judge model when ``replay.answers: judge``); ``replay.fail`` decides the exit code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentsidecar.v1 import tool_pb2
from sidecar.agent.replay.judge import judge
from sidecar.agent.replay.rerun import RerunPlan, answered_from, rerun
from sidecar.agent.runtime import Runtime
from sidecar.agent.snapshot import Snapshot
from sidecar.agent.variants import RunModels
from sidecar.config import (
    AuthConfig,
    RecordingConfig,
    SessionsConfig,
    SidecarConfig,
    TelemetryConfig,
)
from sidecar.errors import ConfigError
from sidecar.llm.model import Model
from sidecar.recording.compare import TurnComparison, compare_turn
from sidecar.recording.format import RecordedTurn
from sidecar.redaction import Redactor

__all__ = ["ReplayedTurn", "check_turns", "replay"]


RECORDED_SERVER = "recorded"
"""The server a recorded tool is listed under when its recording names none."""


@dataclass(slots=True)
class ReplayedTurn:
    """One turn: its recording, its new run and how they compare."""

    recorded: RecordedTurn
    replayed: RecordedTurn
    comparison: TurnComparison


def check_turns(
    config: SidecarConfig, turns: Sequence[RecordedTurn], profile: str | None, variant: str | None
) -> None:
    """Refuse a replay the configuration cannot run, naming what does not match.

    Raises:
        ConfigError: a profile the turns need is not configured, ``variant`` is not one
            of its variants, or a turn's input is longer than its profile takes (a live
            sidecar would refuse it, so its replay would say nothing of one).
    """
    names = {profile} if profile is not None else {t.profile for t in turns}
    missing = sorted(n for n in names if n not in config.profiles)
    if missing:
        how = "--profile names" if profile is not None else "the recording's turns run on"
        raise ConfigError(
            f"{how} profile(s) {', '.join(missing)}, which the configuration does not "
            f"have (it has: {', '.join(sorted(config.profiles))}); pass --profile to run "
            "them on another"
        )
    too_long = [
        (t, limit)
        for t in turns
        if len(t.input) > (limit := config.profiles[profile or t.profile].max_input_chars)
    ]
    if too_long:
        shown = ", ".join(f"{t.run_id} ({len(t.input)} characters)" for t, _ in too_long[:5])
        raise ConfigError(
            f"{len(too_long)} recorded turn(s) have an input longer than their profile's "
            f"max_input_chars ({too_long[0][1]}), which a live sidecar refuses: {shown}; "
            "export the recording without them (record export), or raise the limit"
        )
    if variant is None:
        return
    for name in sorted(names):
        variants = [v.name for v in config.profiles[name].variants]
        if variant not in variants:
            raise ConfigError(
                f"profile {name} has no variant {variant!r} (it has: "
                f"{', '.join(variants) or 'none'})"
            )


def _plan(snapshot: Snapshot, default: Model, profile: str, variant: str | None) -> RerunPlan:
    found = snapshot.profiles[profile]
    router = snapshot.routers.get(profile)
    if router is None:
        models, system, name = RunModels(default), found.system_message, ""
    else:
        chosen = router.variants[variant] if variant is not None else router.stable
        models, system, name = chosen.models, chosen.system_message, chosen.name
    return RerunPlan(
        profile=found,
        models=models,
        system_message=system,
        variant=name,
        prices=snapshot.prices,
        tool_versions=snapshot.tool_versions,
    )


def _recorded_tools(
    turns: Sequence[RecordedTurn], skip: Sequence[str]
) -> dict[str, tool_pb2.ListToolsResponse]:
    """The tools the recording offered, as their servers would list them (servers in
    ``skip`` are connected: their own lists stand)."""
    by_server: dict[str, dict[str, tool_pb2.ToolDescriptor]] = {}
    for turn in turns:
        for tool in turn.tools:
            server = str(tool.get("server") or RECORDED_SERVER)
            function = tool.get("definition", {}).get("function", {})
            name = str(tool.get("name", ""))
            if server in skip or not name:
                continue
            by_server.setdefault(server, {})[name] = tool_pb2.ToolDescriptor(
                name=name,
                description=str(function.get("description", "")),
                input_schema=json.dumps(function.get("parameters") or {"type": "object"}),
                read_only=bool(tool.get("read_only", False)),
                idempotent=bool(tool.get("idempotent", False)),
            )
    return {
        server: tool_pb2.ListToolsResponse(tools=list(tools.values()))
        for server, tools in by_server.items()
    }


def replay_config(config: SidecarConfig, *, live: bool) -> SidecarConfig:
    """The configuration a replay runs on: ``config`` with its own store in memory, and
    no telemetry, audit, callers, recording or (unless ``live``) tool servers."""
    return config.model_copy(
        update={
            "sessions": SessionsConfig(store="memory"),
            "telemetry": TelemetryConfig(),
            "auth": AuthConfig(),
            "recording": RecordingConfig(),
            "tool_servers": config.tool_servers if live else [],
        }
    )


async def replay(
    config: SidecarConfig,
    turns: Sequence[RecordedTurn],
    *,
    api_key: str | None,
    redactor: Redactor,
    environ: Mapping[str, str],
    profile: str | None = None,
    variant: str | None = None,
    live: bool = False,
    timeout: float = 120.0,
) -> list[ReplayedTurn]:
    """Run each of ``turns`` again on ``config`` and compare it with its recording.

    Raises:
        ConfigError: the configuration does not match the recording (:func:`check_turns`).
        StartupError: a model the configuration names cannot be used.
    """
    check_turns(config, turns, profile, variant)
    runtime = Runtime(
        replay_config(config, live=live), api_key=api_key, redactor=redactor, environ=environ
    )
    await runtime.start()
    try:
        if live:
            await runtime.ready()
        catalog = runtime.catalog
        recorded = _recorded_tools(turns, skip=list(runtime.connections))
        catalog.set_server_order([*runtime.connections, *recorded])
        for server, listed in recorded.items():
            catalog.update(server, listed)
        loop = runtime.loop
        assert loop is not None
        connected = set(runtime.connections)
        judge_model = runtime.models.model_for(config.replay.judge) if config.replay.judge else None
        done = []
        for turn in turns:
            plan = _plan(runtime.snapshot, runtime.models.default, profile or turn.profile, variant)
            answer, _ = answered_from(
                turn,
                (lambda tool: tool.read_only and tool.server in connected) if live else None,
            )
            document = await rerun(loop, plan, turn, answer=answer, timeout=timeout)
            new = RecordedTurn(document, where=f"replay of {turn.run_id}")
            verdict = None
            if judge_model is not None and new.answer != turn.answer:
                verdict = await judge(
                    judge_model, turn.input, turn.answer, new.answer, timeout=timeout
                )
            comparison = compare_turn(
                turn,
                new,
                answers=config.replay.answers,
                fields=config.replay.fields,
                judged=verdict,
            )
            done.append(ReplayedTurn(turn, new, comparison))
        return done
    finally:
        await runtime.close()
