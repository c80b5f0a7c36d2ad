"""A recording's model side as scripted rules: the simulator answers as the model did.

An agent-sidecar recording (JSON lines, one turn a line; ``docs/replay.md``) holds each
model call of a turn and its response. Each recorded turn becomes a rule that matches its
input exactly (the whole last user message) and whose steps are the responses of its
model calls, step by step: its tool calls (their arguments as recorded) or its text,
sent verbatim (a recorded answer is not the simulator's own: no ``[simulated]`` prefix;
the response's ``system_fingerprint`` and ``x-simulator`` header still say who answers).
Turns with the same input are answered as the first of them was. Past a turn's recorded
steps, or for an input no turn had, the simulator plans as usual.

The simulator imports nothing of the sidecar's: it reads the format itself, and refuses
anything but format ``agent-sidecar-recording`` at a version up to :data:`VERSION`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from llmsim._errors import ScenarioError
from llmsim._scenario import ScenarioRule, ScenarioStep, ScriptedCall

FORMAT = "agent-sidecar-recording"
VERSION = 1
"""The newest recording version the simulator reads."""


def recording_rules(path: str | Path) -> tuple[ScenarioRule, ...]:
    """One rule per recorded turn of the file (or of each ``*.jsonl`` file of a directory).

    Raises:
        ScenarioError: the file cannot be read, or a line is not a recording the
            simulator reads; the message names the file and line.
    """
    source = Path(path)
    files = sorted(source.glob("*.jsonl")) if source.is_dir() else [source]
    rules: list[ScenarioRule] = []
    seen: set[str] = set()
    for file in files:
        try:
            lines = file.read_bytes().splitlines()
        except OSError as exc:
            raise ScenarioError(f"cannot read recording {file}: {exc.strerror}") from None
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            turn = _turn(line, f"{file}:{number}")
            if turn is None or turn["input"] in seen:
                continue
            seen.add(turn["input"])
            rules.append(_rule(turn))
    return tuple(rules)


def _turn(line: bytes, where: str) -> Mapping[str, Any] | None:
    """The turn of a line; None for a shadow variant's run (it answered no user)."""
    try:
        turn = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ScenarioError(f"{where}: not JSON ({exc})") from None
    if not isinstance(turn, dict) or turn.get("format") != FORMAT:
        raise ScenarioError(f"{where}: not an agent-sidecar recording")
    version = turn.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise ScenarioError(
            f"{where}: recording version {version!r}; the simulator reads up to {VERSION}"
        )
    if not isinstance(turn.get("input"), str) or not isinstance(turn.get("exchanges"), list):
        raise ScenarioError(f"{where}: a recorded turn needs 'input' and 'exchanges'")
    return None if turn.get("shadow_of") else turn


def _rule(turn: Mapping[str, Any]) -> ScenarioRule:
    by_step: dict[int, ScenarioStep] = {}
    for exchange in turn["exchanges"]:
        response = exchange.get("response") if isinstance(exchange, dict) else None
        if not isinstance(response, dict) or not isinstance(exchange.get("step"), int):
            continue  # a failed call: the step's answer is the call that followed it
        calls = tuple(
            ScriptedCall(str(c.get("name", "")), str(c.get("arguments", "")))
            for c in response.get("tool_calls") or ()
            if isinstance(c, dict)
        )
        text = None if calls else str(response.get("text") or response.get("refusal") or "")
        # The last response of a step is the one the run went on with.
        by_step[exchange["step"]] = ScenarioStep(text, calls, verbatim=True)
    last = max(by_step, default=0)
    steps = tuple(by_step.get(step, ScenarioStep()) for step in range(1, last + 1))
    pattern = re.compile(r"\A" + re.escape(turn["input"]) + r"\Z")
    return ScenarioRule(pattern, steps or (ScenarioStep(),))
