"""Decides what the simulator "says": text, tool calls, or a JSON document.

No model is involved. The rules are deliberately simple and deterministic (same request,
same answer; only ids are random):

* a scenario step, if one matches, scripts the answer;
* after tool results, the answer summarises them;
* otherwise offered tools whose name tokens appear in the user's text are called, with
  arguments filled from their JSON schema and the text;
* otherwise the answer echoes the request.

Text answers start with ``[simulated]``; ``docs/llm-simulator.md`` spells out the rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from llmsim._arguments import PLACEHOLDER, fill_object, violate
from llmsim._options import TEXT_PREFIX
from llmsim._scenario import Scenario, ScenarioStep, StepMatch
from llmsim._text import TextFacts, name_tokens, text_facts

_SNIPPET = 200
"""Characters of a user text or tool result quoted back in an answer."""

_TEXT_FIELDS: Final = ("answer", "summary", "text", "message", "content", "reply", "response")
"""``json_schema`` string properties that receive the text answer itself."""

_UNKNOWN_TOOL = "simulated_unknown_tool"


@dataclass(frozen=True, slots=True)
class PlannedCall:
    """A tool call as the simulated model emits it; ``arguments`` is JSON text."""

    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Reply:
    """The simulated model's answer to one request.

    Attributes:
        text: the message content (``None`` when the answer is tool calls).
        tool_calls: the calls, in order.
        latency_ms: a scenario step's latency override, else ``None``.
        step: the scenario step that scripted this answer (its fault is counted by it).
    """

    text: str | None = None
    tool_calls: tuple[PlannedCall, ...] = ()
    latency_ms: float | None = None
    step: StepMatch | None = None

    @property
    def finish_reason(self) -> str:
        """``tool_calls`` or ``stop``, as in the chat-completions protocol."""
        return "tool_calls" if self.tool_calls else "stop"


@dataclass(frozen=True, slots=True)
class Turn:
    """The conversation since the last user message."""

    user_text: str
    assistant_turns: int
    called_tools: bool
    tool_results: tuple[tuple[str, str], ...]
    """(tool name, result content) in message order."""


class Planner:
    """Turns a chat-completions request body into a :class:`Reply`."""

    def __init__(self, scenario: Scenario | None = None) -> None:
        self._scenario = scenario

    def plan(self, body: Mapping[str, Any]) -> Reply:
        """The answer to a validated request body."""
        turn = read_turn(body["messages"])
        facts = text_facts(turn.user_text)
        choice = body.get("tool_choice")
        tools = {} if choice == "none" else offered_tools(body)
        parallel = body.get("parallel_tool_calls") is not False
        match = None
        if self._scenario is not None:
            match = self._scenario.step_for(turn.user_text, turn.assistant_turns)
        if match is not None and (match.step.text is not None or match.step.tool_calls):
            reply = _scripted(match.step, body, tools, facts, parallel)
        else:
            reply = _planned(body, turn, tools, facts, parallel, choice)
        if match is None:
            return reply
        return Reply(reply.text, reply.tool_calls, match.step.latency_ms, match)

    def corrupt(self, body: Mapping[str, Any], reply: Reply, kind: str) -> Reply:
        """The answer with tool calls broken the way fault ``kind`` says.

        ``malformed_arguments`` truncates the arguments' JSON text, ``invalid_arguments``
        sends valid JSON that breaks the schema, ``unknown_tool`` calls a tool that was not
        offered. A text answer is first turned into a call of the first offered tool.
        """
        tools = offered_tools(body)
        if kind == "unknown_tool":
            name = _UNKNOWN_TOOL
            while name in tools:
                name += "_"
            return Reply(tool_calls=(PlannedCall(name, "{}"),))
        calls = reply.tool_calls or _default_calls(body, tools)
        if kind == "malformed_arguments":
            return Reply(
                tool_calls=tuple(PlannedCall(c.name, _truncate(c.arguments)) for c in calls)
            )
        broken = []
        for call in calls:
            try:
                valid = orjson.loads(call.arguments)
            except orjson.JSONDecodeError:
                valid = {}
            schema = tools.get(call.name, {})
            wrong = violate(schema, valid if isinstance(valid, dict) else {})
            broken.append(PlannedCall(call.name, orjson.dumps(wrong).decode()))
        return Reply(tool_calls=tuple(broken))

    def failed_generation(self, body: Mapping[str, Any], reply: Reply) -> str:
        """The "model output" a ``tool_use_failed`` error quotes: a garbled call."""
        calls = reply.tool_calls or _default_calls(body, offered_tools(body))
        call = calls[0]
        return f"<function={call.name}>{_truncate(call.arguments)}</function>"


def read_turn(messages: Sequence[Any]) -> Turn:
    """What happened since the last user message."""
    last_user = -1
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, Mapping) and message.get("role") == "user":
            last_user = index
            break
    user_text = content_text(messages[last_user].get("content")) if last_user >= 0 else ""
    names: dict[str, str] = {}
    results: list[tuple[str, str]] = []
    assistant_turns = 0
    called = False
    for message in messages[last_user + 1 :]:
        if not isinstance(message, Mapping):
            continue
        role = message.get("role")
        if role == "assistant":
            assistant_turns += 1
            for call in message.get("tool_calls") or ():
                if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
                    called = True
                    names[str(call.get("id"))] = str(call["function"].get("name", "tool"))
        elif role in ("tool", "function"):
            name = names.get(str(message.get("tool_call_id")), str(message.get("name") or "tool"))
            results.append((name, content_text(message.get("content"))))
    return Turn(user_text, assistant_turns, called, tuple(results))


def content_text(content: object) -> str:
    """The text of a message ``content``: a string, or the text parts of a part list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", "")) for part in content if isinstance(part, Mapping)
        ).strip()
    return ""


def offered_tools(body: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Offered function tools, by name, mapped to their parameter schemas."""
    tools: dict[str, Mapping[str, Any]] = {}
    for tool in body.get("tools") or ():
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            params = function.get("parameters")
            tools[function["name"]] = params if isinstance(params, Mapping) else {}
    return tools


def select_tools(names: Sequence[str], facts: TextFacts) -> list[str]:
    """The tools a user's text asks for, in offered order.

    A tool named exactly in the text wins outright. Otherwise a tool qualifies when one of
    its non-generic name tokens is a word of the text; best-covered tools pick first, and a
    tool is only chosen if it matches a word no chosen tool matched yet, so "status of order
    X" picks ``get_order_status`` and not also ``refund_order``.
    """
    named = [name for name in names if facts.names_exactly(name)]
    if named:
        return named
    ranked = []
    for position, name in enumerate(names):
        tokens = name_tokens(name)
        if not tokens:
            continue
        words = {word for token in tokens if (word := facts.match_word(token)) is not None}
        if words:
            coverage = sum(facts.match_word(t) is not None for t in tokens) / len(tokens)
            ranked.append((-coverage, -len(words), position, name, words))
    ranked.sort(key=lambda entry: entry[:3])
    claimed: set[str] = set()
    chosen: list[tuple[int, str]] = []
    for _, _, position, name, words in ranked:
        if words - claimed:
            chosen.append((position, name))
            claimed |= words
    return [name for _, name in sorted(chosen)]


def _planned(
    body: Mapping[str, Any],
    turn: Turn,
    tools: Mapping[str, Mapping[str, Any]],
    facts: TextFacts,
    parallel: bool,
    choice: object,
) -> Reply:
    if turn.tool_results or turn.called_tools:
        return _answer(body, _summary(turn.tool_results), facts, turn.tool_results)
    if tools:
        names = _forced(choice, tools) or select_tools(list(tools), facts)
        if not names and choice in ("required", "any"):
            names = [next(iter(tools))]
        if names:
            if not parallel:
                names = names[:1]
            return Reply(tool_calls=tuple(_call(name, tools[name], facts) for name in names))
    return _answer(body, _echo(turn.user_text), facts, ())


def _scripted(
    step: ScenarioStep,
    body: Mapping[str, Any],
    tools: Mapping[str, Mapping[str, Any]],
    facts: TextFacts,
    parallel: bool,
) -> Reply:
    if step.text is not None:
        text = step.text
        # JSON-mode answers stay verbatim: a prefix would make them invalid JSON.
        if (
            not step.verbatim
            and not text.startswith(TEXT_PREFIX)
            and _response_format(body)[0] is None
        ):
            text = TEXT_PREFIX + text
        return Reply(text=text)
    calls = tuple(
        PlannedCall(c.name, c.arguments)
        if c.arguments is not None
        else _call(c.name, tools.get(c.name, {}), facts)
        for c in step.tool_calls
    )
    return Reply(tool_calls=calls if parallel else calls[:1])


def _forced(choice: object, tools: Mapping[str, Mapping[str, Any]]) -> list[str]:
    if isinstance(choice, Mapping) and isinstance(choice.get("function"), Mapping):
        name = choice["function"].get("name")
        if name in tools:
            return [name]
    return []


def _call(name: str, schema: Mapping[str, Any], facts: TextFacts) -> PlannedCall:
    return PlannedCall(name, orjson.dumps(fill_object(schema, facts)).decode())


def _default_calls(
    body: Mapping[str, Any], tools: Mapping[str, Mapping[str, Any]]
) -> tuple[PlannedCall, ...]:
    if not tools:
        return (PlannedCall("simulated_tool", '{"simulated":true}'),)
    name, schema = next(iter(tools.items()))
    return (_call(name, schema, text_facts(read_turn(body["messages"]).user_text)),)


def _answer(
    body: Mapping[str, Any],
    text: str,
    facts: TextFacts,
    results: Sequence[tuple[str, str]],
) -> Reply:
    kind, schema = _response_format(body)
    if kind == "json_object":
        return Reply(text=orjson.dumps({"simulated": True, "answer": text}).decode())
    if kind == "json_schema":
        found = {field: text for field in _TEXT_FIELDS}
        found.update(_result_values(results))
        return Reply(text=orjson.dumps(fill_object(schema, facts, found)).decode())
    return Reply(text=text)


def _response_format(body: Mapping[str, Any]) -> tuple[str | None, Mapping[str, Any]]:
    fmt = body.get("response_format")
    if not isinstance(fmt, Mapping):
        return None, {}
    kind = fmt.get("type")
    if kind == "json_object":
        return kind, {}
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        return kind, schema if isinstance(schema, Mapping) else {}
    return None, {}


def _result_values(results: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Every key of JSON-object tool results (nested too; the first occurrence wins)."""
    values: dict[str, Any] = {}
    pending: list[Any] = []
    for _, content in results:
        try:
            pending.append(orjson.loads(content))
        except orjson.JSONDecodeError:
            continue
    while pending:
        node = pending.pop(0)
        if isinstance(node, dict):
            for key, value in node.items():
                values.setdefault(key, value)
                pending.append(value)
    return values


def _summary(results: Sequence[tuple[str, str]]) -> str:
    if not results:
        return TEXT_PREFIX + "The requested tools were called; no results came back."
    noun = "result" if len(results) == 1 else "results"
    lines = [f"{TEXT_PREFIX}{len(results)} tool {noun}:"]
    lines.extend(f"- {name}: {_result_snippet(content)}" for name, content in results)
    return "\n".join(lines)


def _echo(user_text: str) -> str:
    if not user_text.strip():
        return TEXT_PREFIX + "No user message to answer."
    return f"{TEXT_PREFIX}You said: {_snippet(user_text)}"


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SNIPPET else text[: _SNIPPET - 1] + "…"


def _result_snippet(content: str) -> str:
    """A tool result quoted back: a JSON object or array is never cut inside a value.

    Its members are kept whole, in order, as many as fit in about ``_SNIPPET`` characters
    (a member too long for the room left is skipped, the ones after it may still fit),
    and the keys left out are named (or, for an array, counted). Other text is cut.
    """
    try:
        value = orjson.loads(content)
    except orjson.JSONDecodeError:
        return _snippet(content)
    whole = orjson.dumps(value).decode()
    if len(whole) <= _SNIPPET:
        return whole
    if isinstance(value, str):
        return _snippet(value)  # text in a JSON string: cut as text, not as JSON
    if isinstance(value, dict):
        kept: dict[str, Any] = {}
        for key, member in value.items():
            if len(orjson.dumps({**kept, key: member})) <= _SNIPPET:
                kept[key] = member
        left = [key for key in value if key not in kept]
        named = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
        return f"{orjson.dumps(kept).decode()} (left out: {named})"
    if not isinstance(value, list):
        return _snippet(whole)  # a number of 200 digits
    items: list[Any] = []
    for item in value:
        if len(orjson.dumps([*items, item])) > _SNIPPET:
            break
        items.append(item)
    return f"{orjson.dumps(items).decode()} (and {len(value) - len(items)} more)"


def _truncate(arguments: str) -> str:
    cut = arguments[: max(1, len(arguments) // 2)]
    try:
        orjson.loads(cut)
    except orjson.JSONDecodeError:
        return cut
    return '{"' + PLACEHOLDER  # the half happened to parse ("1" of "12"): break it for sure
