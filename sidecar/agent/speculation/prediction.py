"""Which first-step tool calls follow which inputs: rules learned from a profile's history.

Speculative prefetch starts a call before the model asks for it, so it must know which
call the model will ask for. Agents mostly look up what the user named: "where is order
20250101?" becomes ``get_order_status(order_id="20250101")``. A rule says that:

    get_order_status(order_id = the token after "order" shaped like 20250101)

**Learning.** Each stored turn of the profile is an example: the user's input and the
calls of the model's first step (none, when it answered at once). Every call whose
arguments come from the input is a candidate rule: each string argument must be a token
of the input, verbatim (a number may be too); it becomes a *slot*: the token's shape
(``20250101`` is ``9``, ``X-100`` is ``a-9``) and the word before it (``order``), or only
its shape (the first token shaped so). Other arguments must be the same plain value
(``true``, ``3``, ``null``) every time; a call with any other argument is never learned:
every string a speculated call carries comes from the user's own message, never from
another turn. A candidate's **precision** is, over every example where it fires (each
slot finds a token), the share whose first step holds exactly the call it predicts;
its **support** is how often it fired. Only rules at or above the profile's
``min_precision``, fired at least ``min_support`` times, are kept.

**Predicting** tokenises the input once and applies the kept rules: a few microseconds.

Learning is pure and bounded (candidates are counted first and only those that could
reach the support are evaluated), so it runs off the event loop, in a thread.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from sidecar.types import Turn

__all__ = ["Predictor", "first_step", "tokens"]

_TOKEN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.\-]*[A-Za-z0-9])?")
_DIGITS = re.compile(r"[0-9]+")
_LETTERS = re.compile(r"[A-Za-z]+")
_MAX_TOKENS = 256
"""Tokens of an input looked at: a slot's value is in the first words of a message."""
_MAX_RULES = 64
"""Rules kept per profile, the best first."""
_MAX_CANDIDATES = 512
"""Candidates evaluated per learning, the most frequent first."""

Token = tuple[str, str, str]
"""A token of an input: its text, its shape, the word before it (lower case, or "")."""


def _shape(text: str) -> str:
    return _LETTERS.sub("a", _DIGITS.sub("9", text))


def tokens(text: str) -> list[Token]:
    """The tokens of an input, in order: words, numbers, ids such as ``X-100``."""
    found: list[Token] = []
    before = ""
    for match in _TOKEN.finditer(text):
        word = match.group()
        found.append((word, _shape(word), before))
        before = word.lower() if word.isalpha() else ""
        if len(found) >= _MAX_TOKENS:
            break
    return found


def first_step(turn: Turn) -> list[tuple[str, dict[str, Any]]] | None:
    """The calls of a stored turn's first step, as (tool, arguments); [] when the model
    answered without tools; None when the turn says nothing (it failed, or its messages
    are not the shape the loop writes: stored data is read, never trusted)."""
    messages = turn.messages
    if len(messages) < 2 or not all(isinstance(m, dict) for m in messages[:2]):
        return None
    first = messages[1]
    if messages[0].get("role") != "user" or first.get("role") != "assistant":
        return None
    listed = first.get("tool_calls") or []
    if not isinstance(listed, list):
        return None
    calls = []
    for call in listed:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return None
        text = function.get("arguments") or "{}"
        try:
            arguments = orjson.loads(text) if isinstance(text, str | bytes) else None
        except orjson.JSONDecodeError:
            return None
        if not isinstance(arguments, dict):
            return None
        calls.append((function["name"], arguments))
    return calls


@dataclass(frozen=True, slots=True)
class _Slot:
    """An argument taken from the input: a token of this shape, after this word (None:
    the first token of the shape, wherever it is)."""

    shape: str
    after: str | None
    number: bool
    """The argument is a number: the token's value, not its text."""


@dataclass(frozen=True, slots=True)
class _Rule:
    tool: str
    arguments: tuple[tuple[str, _Slot | Any], ...]
    """Each argument: a slot, or a plain value it always has."""

    def apply(self, found: Sequence[Token]) -> dict[str, Any] | None:
        """The arguments this rule predicts from an input's tokens; None: it does not fire."""
        out: dict[str, Any] = {}
        for name, source in self.arguments:
            if isinstance(source, _Slot):
                word = next(
                    (
                        text
                        for text, shape, before in found
                        if shape == source.shape
                        and (source.after is None or before == source.after)
                    ),
                    None,
                )
                if word is None:
                    return None
                out[name] = int(word) if source.number else word
            else:
                out[name] = source
        return out


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float)


def _candidates(call: tuple[str, Mapping[str, Any]], found: Sequence[Token]) -> list[_Rule]:
    """The rules that would predict ``call`` from these tokens: each slot after its word,
    or each the first of its shape; none when an argument cannot be learned."""
    tool, arguments = call
    anchored: list[tuple[str, Any]] = []
    loose: list[tuple[str, Any]] = []
    for name, value in sorted(arguments.items()):
        number = isinstance(value, int) and not isinstance(value, bool)
        if isinstance(value, str) or number:
            text = str(value)
            at = next((t for t in found if t[0] == text), None)
            if at is None or (number and not text.isdigit()):
                return []  # not in the input: unknowable before the model says it
            anchored.append((name, _Slot(at[1], at[2], number)))
            loose.append((name, _Slot(at[1], None, number)))
        elif _plain(value):
            anchored.append((name, value))
            loose.append((name, value))
        else:
            return []  # nested values are never learned
    return [_Rule(tool, tuple(anchored)), _Rule(tool, tuple(loose))]


def _key(tool: str, arguments: Mapping[str, Any]) -> bytes:
    return tool.encode() + b"\0" + orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)


@dataclass(frozen=True, slots=True)
class Learned:
    """A kept rule with what it scored."""

    rule: _Rule
    precision: float
    support: int


class Predictor:
    """A profile's learned rules."""

    __slots__ = ("examples", "rules")

    def __init__(self, rules: Sequence[Learned], examples: int) -> None:
        self.rules = tuple(rules)
        self.examples = examples
        """How many turns it learned from."""

    @classmethod
    def learn(cls, turns: Iterable[Turn], *, min_precision: float, min_support: int) -> Predictor:
        """Learn from a profile's stored turns (the rules at or above ``min_precision``,
        fired at least ``min_support`` times)."""
        examples: list[tuple[list[Token], set[bytes]]] = []
        counts: Counter[_Rule] = Counter()
        for turn in turns:
            calls = first_step(turn)
            if calls is None:
                continue
            found = tokens(turn.input)
            examples.append((found, {_key(tool, args) for tool, args in calls}))
            for call in calls:
                counts.update(set(_candidates(call, found)))
        # A rule is right at most as often as examples produced it: one that cannot reach
        # the support at the precision asked is not worth evaluating.
        least = max(1, int(min_support * min_precision))
        worth = [rule for rule, n in counts.most_common(_MAX_CANDIDATES) if n >= least]
        kept = []
        for rule in worth:
            fired = hits = 0
            for found, made in examples:
                predicted = rule.apply(found)
                if predicted is not None:
                    fired += 1
                    hits += _key(rule.tool, predicted) in made
            if fired >= min_support and hits / fired >= min_precision:
                kept.append(Learned(rule, hits / fired, fired))
        kept.sort(key=lambda learned: (-learned.precision, -learned.support))
        return cls(kept[:_MAX_RULES], len(examples))

    def predict(self, text: str, limit: int) -> list[tuple[str, dict[str, Any]]]:
        """The calls the rules predict for an input, the most precise first, at most
        ``limit``, each once."""
        if not self.rules:
            return []
        found = tokens(text)
        out: list[tuple[str, dict[str, Any]]] = []
        seen: set[bytes] = set()
        for learned in self.rules:
            arguments = learned.rule.apply(found)
            if arguments is None:
                continue
            key = _key(learned.rule.tool, arguments)
            if key not in seen:
                seen.add(key)
                out.append((learned.rule.tool, arguments))
                if len(out) >= limit:
                    break
        return out
