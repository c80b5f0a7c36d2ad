"""What the simulator reads in a user's text: words, ID-like tokens, numbers, quotes.

Everything here is a pure function of its input and cached, because benchmarks send the
same texts and tool names thousands of times.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

GENERIC_WORDS = frozenset(
    {
        "get", "set", "check", "lookup", "fetch", "query", "list", "find", "status", "info",
        "details", "data", "tool", "the", "of", "by", "for", "a", "an", "and", "to", "in",
        "on", "with", "from", "is",
    }
)  # fmt: skip
"""Name tokens that say nothing about what a tool is about, so never select one."""

# An ID is a run of 4+ digits or letters-dash-digits (X-100, ORD-2025-7); it must be one
# token so "X-100" does not fall apart into a letter and a small number.
_TOKEN_RE = re.compile(r"[A-Za-z]+-\d+(?:-[A-Za-z0-9]+)*|\d+(?:\.\d+)?|[A-Za-z]+")
_LONG_DIGITS_RE = re.compile(r"\d{4,}")
_QUOTED_RE = re.compile(r"\"([^\"]+)\"|“([^”]+)”|(?:^|\s)'([^']+)'")
_CAMEL_RE = re.compile(r"([a-z0-9])([A-Z])")
_SPLIT_RE = re.compile(r"[^A-Za-z0-9]+")

WORD, NUMBER, IDENT = 0, 1, 2
"""Token kinds; a long digit run is both an ID and a number, and is marked IDENT."""

_NEAR = 3
"""How many tokens before a value may name the property the value belongs to."""


def split_name(name: str) -> tuple[str, ...]:
    """Lower-case tokens of an identifier split on ``_ - .``, other punctuation and camelCase."""
    return tuple(t for t in _SPLIT_RE.split(_CAMEL_RE.sub(r"\1_\2", name).lower()) if t)


@lru_cache(maxsize=4096)
def name_tokens(name: str) -> frozenset[str]:
    """The tokens of a tool or property name that can match a user's words."""
    return frozenset(t for t in split_name(name) if len(t) > 1 and t not in GENERIC_WORDS)


@dataclass(frozen=True, slots=True)
class TextFacts:
    """A user text taken apart once for tool selection and argument filling."""

    text: str
    lowered: str
    tokens: tuple[tuple[str, int, str], ...]
    """(lower-case token, kind, token as written), in text order."""
    words: frozenset[str]
    quoted: tuple[str, ...]

    def match_word(self, token: str) -> str | None:
        """The word of the text ``token`` matches, with or without a trailing "s"."""
        if token in self.words:
            return token
        if token + "s" in self.words:
            return token + "s"
        if token.endswith("s") and token[:-1] in self.words:
            return token[:-1]
        return None

    def names_exactly(self, name: str) -> bool:
        """Whether the text spells out this tool name, e.g. "call get_price"."""
        return _exact_name_re(name.lower()).search(self.lowered) is not None

    def first_id(self) -> str | None:
        """The first ID-like token of the text."""
        for _, kind, raw in self.tokens:
            if kind == IDENT:
                return raw
        return None

    def value_near(self, prop_tokens: frozenset[str], *, numeric: bool) -> str | None:
        """The first ID (or, if ``numeric``, number) just after a word matching
        ``prop_tokens`` (e.g. "order 20250101" for ``order_id``), or else just before one."""
        if not prop_tokens:
            return None
        tokens = self.tokens
        after: str | None = None
        for i, (_, kind, raw) in enumerate(tokens):
            if numeric:
                if kind == WORD or (kind == IDENT and not raw.isdigit()):
                    continue
            elif kind != IDENT:
                continue
            if any(_matches(prop_tokens, t[0]) for t in tokens[max(0, i - _NEAR) : i]):
                return raw
            if after is None and any(_matches(prop_tokens, t[0]) for t in tokens[i + 1 : i + 2]):
                after = raw
        return after

    def explicit_value(self, prop: str) -> str | None:
        """A value the text assigns by name: ``prop: value``, ``prop = "value"``."""
        pattern = _assignment_re(prop)
        match = pattern.search(self.text) if pattern is not None else None
        if match is None:
            return None
        return next(group for group in match.groups() if group is not None)


def _matches(prop_tokens: frozenset[str], word: str) -> bool:
    if word in prop_tokens or word + "s" in prop_tokens:
        return True
    return word.endswith("s") and word[:-1] in prop_tokens


@lru_cache(maxsize=1024)
def text_facts(text: str) -> TextFacts:
    """Take ``text`` apart (cached: the same text yields the same object)."""
    tokens: list[tuple[str, int, str]] = []
    for raw in _TOKEN_RE.findall(text):
        lowered = raw.lower()
        if "-" in raw or _LONG_DIGITS_RE.fullmatch(raw):
            kind = IDENT
        elif raw[0].isdigit():
            kind = NUMBER
        else:
            kind = WORD
        tokens.append((lowered, kind, raw))
    words = frozenset(t for token in tokens for t in _SPLIT_RE.split(token[0]) if t)
    quoted = tuple(next(g for g in m.groups() if g) for m in _QUOTED_RE.finditer(text))
    return TextFacts(text, text.lower(), tuple(tokens), words, quoted)


@lru_cache(maxsize=4096)
def _exact_name_re(name: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w.-])" + re.escape(name) + r"(?![\w-])")


@lru_cache(maxsize=4096)
def _assignment_re(prop: str) -> re.Pattern[str] | None:
    parts = split_name(prop)
    if not parts:
        return None
    words = r"[\s_-]*".join(re.escape(t) for t in parts)
    return re.compile(
        r"\b" + words + r"\s*[:=]\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s,;\"']+))", re.IGNORECASE
    )
