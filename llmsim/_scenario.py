"""Scripted conversations for the simulator: rules matched against the user's message.

A scenario is a list of rules. The first rule whose ``match`` regex is found in the last
user message scripts the answer; its ``steps`` are indexed by how many assistant messages
follow that user message (step 0 answers the user, step 1 answers the first tool results,
and so on). Past the last step, or when no rule matches, the simulator plans as usual.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson
import yaml

from llmsim._errors import FaultSpecError, ScenarioError
from llmsim._faults import Fault, parse_fault


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """A tool call a step makes.

    Attributes:
        name: the tool's name, sent as is (even when the request did not offer it).
        arguments: JSON text sent verbatim; ``None`` fills the arguments from the offered
            tool's schema, as planning would.
    """

    name: str
    arguments: str | None


@dataclass(frozen=True, slots=True)
class ScenarioStep:
    """One scripted answer: text, tool calls, or neither (planning answers, the fault or
    latency still apply)."""

    text: str | None = None
    tool_calls: tuple[ScriptedCall, ...] = ()
    latency_ms: float | None = None
    fault: Fault | None = None
    verbatim: bool = False
    """Send ``text`` as it is, without the ``[simulated]`` prefix (a recorded answer)."""


@dataclass(frozen=True, slots=True)
class ScenarioRule:
    """A regex over the last user message and the steps it scripts."""

    pattern: re.Pattern[str]
    steps: tuple[ScenarioStep, ...]


@dataclass(frozen=True, slots=True)
class StepMatch:
    """The step chosen for a request, with its position (used to count its fault)."""

    rule_index: int
    step_index: int
    step: ScenarioStep


@dataclass(frozen=True, slots=True)
class Scenario:
    """Parsed scenario rules, tried in order."""

    rules: tuple[ScenarioRule, ...]

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        """Read a scenario from a YAML or JSON file (JSON is valid YAML).

        Raises:
            ScenarioError: the file cannot be read or parsed, or a rule is malformed.
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
            data = yaml.safe_load(text)
        except (OSError, yaml.YAMLError) as exc:
            raise ScenarioError(f"cannot read scenario {path}: {exc}") from exc
        return cls.from_data(data)

    @classmethod
    def from_recording(cls, path: str | Path) -> Scenario:
        """The model side of an agent-sidecar recording, as rules (``llmsim._recording``).

        Raises:
            ScenarioError: the recording cannot be read or is not one the simulator reads.
        """
        from llmsim._recording import recording_rules

        return cls(recording_rules(path))

    @classmethod
    def from_data(cls, data: object) -> Scenario:
        """Build a scenario from parsed YAML/JSON: a list of rules, or ``{"rules": [...]}``.

        Raises:
            ScenarioError: a rule is malformed; the message names it.
        """
        if isinstance(data, Mapping) and "rules" in data:
            data = data["rules"]
        if not isinstance(data, list):
            raise ScenarioError("a scenario is a list of rules (or an object with 'rules')")
        return cls(tuple(_rule(i, item) for i, item in enumerate(data)))

    def then(self, other: Scenario) -> Scenario:
        """This scenario's rules, then ``other``'s."""
        return Scenario(self.rules + other.rules)

    def step_for(self, user_text: str, assistant_turns: int) -> StepMatch | None:
        """The scripted step for this point of the conversation, if any."""
        for index, rule in enumerate(self.rules):
            if rule.pattern.search(user_text):
                if assistant_turns < len(rule.steps):
                    return StepMatch(index, assistant_turns, rule.steps[assistant_turns])
                return None
        return None


def _rule(index: int, data: object) -> ScenarioRule:
    where = f"rule {index}"
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{where}: a rule is an object with 'match' and 'steps'")
    unknown = set(data) - {"match", "steps", "name"}
    if unknown:
        raise ScenarioError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    match = data.get("match", "")
    if not isinstance(match, str):
        raise ScenarioError(f"{where}: 'match' must be a regex string")
    try:
        pattern = re.compile(match, re.IGNORECASE)
    except re.error as exc:
        raise ScenarioError(f"{where}: bad 'match' regex: {exc}") from exc
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps:
        raise ScenarioError(f"{where}: 'steps' must be a non-empty list")
    return ScenarioRule(pattern, tuple(_step(f"{where} step {i}", s) for i, s in enumerate(steps)))


def _step(where: str, data: object) -> ScenarioStep:
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{where}: a step is an object")
    unknown = set(data) - {"text", "tool_calls", "latency_ms", "fault"}
    if unknown:
        raise ScenarioError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    text = data.get("text")
    if text is not None and not isinstance(text, str):
        raise ScenarioError(f"{where}: 'text' must be a string")
    raw_calls = data.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise ScenarioError(f"{where}: 'tool_calls' must be a list")
    if text is not None and raw_calls:
        raise ScenarioError(f"{where}: a step has either 'text' or 'tool_calls', not both")
    latency = data.get("latency_ms")
    if latency is not None and (
        isinstance(latency, bool) or not isinstance(latency, int | float) or latency < 0
    ):
        raise ScenarioError(f"{where}: 'latency_ms' must be a non-negative number")
    fault = None
    if data.get("fault") is not None:
        try:
            fault = parse_fault(data["fault"])
        except FaultSpecError as exc:
            raise ScenarioError(f"{where}: {exc}") from exc
    calls = tuple(_call(f"{where} call {i}", c) for i, c in enumerate(raw_calls))
    return ScenarioStep(text, calls, None if latency is None else float(latency), fault)


def _call(where: str, data: object) -> ScriptedCall:
    if not isinstance(data, Mapping) or not isinstance(data.get("name"), str):
        raise ScenarioError(f"{where}: a tool call is an object with a string 'name'")
    arguments = data.get("arguments")
    if arguments is None or isinstance(arguments, str):
        return ScriptedCall(data["name"], arguments)
    if isinstance(arguments, Mapping):
        return ScriptedCall(data["name"], orjson.dumps(arguments).decode())
    raise ScenarioError(f"{where}: 'arguments' must be an object or a JSON string")
