"""The history window: what of a session's past turns goes into the model's input.

The input is ``[system prompt] [memory] [history] [this turn]`` with the tool schemas
beside it. The system prompt and the tool schemas come first and never change between
turns, byte for byte, so the provider's prompt cache keeps hitting; everything the window
does happens after them.

Under the profile's token budget (an estimate: about 4 characters per token, see
:mod:`sidecar.tokens`), in this order:

1. Everything fits: every turn is sent whole.
2. Otherwise the tool results of older turns (all but the ``keep_recent_turns`` most
   recent) are cut to ``old_tool_result_chars``, with a marker saying how much was cut.
3. If that is still too much, the oldest turns are dropped, ``drop_batch_turns`` at a
   time: the first turn sent then stays the same for several turns, so the provider can
   keep caching the history too, and memory is summarised once per batch.

The recent turns are always sent whole, even when they alone exceed the budget.

With memory on, a dropped turn is not lost: it is summarised into the session's memory
(after the turn that dropped it, off the hot path; see :mod:`sidecar.context.memory`),
and until the memory covers it, it is still sent. The memory goes right after the system
prompt, as a second system message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.config import ContextConfig
from sidecar.context.trim import cap
from sidecar.tokens import tokens_of, tokens_of_messages, tokens_of_size
from sidecar.types import Turn

MEMORY_PREFIX = "Memory of the earlier conversation (a summary; those turns are not shown):\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """What one run sends of its session's past."""

    messages: list[dict[str, Any]]
    """The memory message (when there is one) and the history, oldest first."""
    first_turn: int
    """Index of the oldest turn sent; the turns before it are left out."""
    trimmed_results: int
    """Tool results of older turns that were cut."""
    tokens: int
    """Estimated tokens of the input at the start of the run: prefix, memory, history
    and the user's input."""
    summarise: tuple[int, int] | None = None
    """With memory on: the turns ``[start, end)`` the window would drop but the memory
    does not cover yet; they are sent this time and should be summarised."""


def memory_message(memory: str) -> dict[str, Any]:
    """The system message that carries a session's memory."""
    return {"role": "system", "content": MEMORY_PREFIX + memory}


def turn_tokens(turn: Turn) -> int:
    """A turn's estimated tokens, computed once and kept on the turn."""
    if not turn.tokens and turn.messages:
        turn.tokens = tokens_of_messages(turn.messages)
    return turn.tokens


def trimmed(
    messages: Sequence[dict[str, Any]], limit: int
) -> tuple[list[dict[str, Any]], int, int]:
    """Messages with each tool result cut to ``limit`` characters; the characters cut and
    how many results were cut."""
    out: list[dict[str, Any]] = []
    chars = count = 0
    for message in messages:
        content = message.get("content")
        if message.get("role") == "tool" and isinstance(content, str) and len(content) > limit:
            short = cap(content, limit)
            chars += len(content) - len(short)
            count += 1
            message = {**message, "content": short}
        out.append(message)
    return out, chars, count


class WindowPolicy:
    """A profile's window settings, with the budget arithmetic."""

    __slots__ = ("batch", "max_tokens", "memory", "old_result_chars", "recent", "summarise")

    def __init__(self, config: ContextConfig, *, summarise: bool = True) -> None:
        self.max_tokens = config.max_tokens
        self.recent = config.keep_recent_turns
        self.old_result_chars = config.old_tool_result_chars
        self.batch = config.drop_batch_turns
        self.memory = config.memory
        self.summarise = config.memory and summarise
        """Turns it drops are kept until the memory holds them (and then summarised);
        without, a window with memory sends what memory there is and drops the rest."""

    def build(
        self,
        turns: Sequence[Turn],
        *,
        memory: str,
        memory_turns: int,
        prefix_tokens: int,
        input_tokens: int,
        scale: float = 1.0,
    ) -> Window:
        """The window for a run.

        Args:
            turns: the session's turns, oldest first.
            memory: the session's memory text ('' when none).
            memory_turns: how many of the oldest turns the memory covers.
            prefix_tokens: estimated tokens of the system prompt and tool schemas.
            input_tokens: estimated tokens of the user's new input.
            scale: provider tokens per estimated token (``TokenCalibration``): the
                budget is ``max_tokens`` of the provider's tokens.
        """
        n = len(turns)
        use_memory = self.memory and bool(memory)
        base = min(memory_turns, n) if use_memory else 0
        head = [memory_message(memory)] if use_memory else []
        fixed = prefix_tokens + input_tokens + (tokens_of(head[0]) if head else 0)
        sizes = [turn_tokens(t) for t in turns]
        whole = sum(sizes[base:])
        limit = None if self.max_tokens is None else int(self.max_tokens / scale)
        if limit is None or fixed + whole <= limit:
            return Window(
                messages=head + _flatten(turns[base:]),
                first_turn=base,
                trimmed_results=0,
                tokens=fixed + whole,
            )

        budget = limit - fixed
        recent = max(base, n - self.recent)
        old: list[list[dict[str, Any]]] = []  # older turns, tool results cut
        old_sizes: list[int] = []
        old_cuts: list[int] = []  # tool results cut, per older turn
        for turn, size in zip(turns[base:recent], sizes[base:recent], strict=True):
            messages, cut, count = trimmed(turn.messages, self.old_result_chars)
            old.append(messages)
            old_sizes.append(max(0, size - tokens_of_size(cut)))
            old_cuts.append(count)
        recent_size = sum(sizes[recent:])

        # The fewest oldest turns to drop so the rest fits, rounded up to a whole batch.
        start = base
        total = sum(old_sizes) + recent_size
        while start < recent and total > budget:
            total -= old_sizes[start - base]
            start += 1
        if start > base:
            start = min(recent, -(-start // self.batch) * self.batch)

        summarise = None
        if self.summarise and start > base:
            # Never lose a turn the memory does not hold yet: send it until it does.
            summarise = (base, start)
            start = base
        skip = start - base
        kept = [m for messages in old[skip:] for m in messages]
        tokens = fixed + sum(old_sizes[skip:]) + recent_size
        return Window(
            messages=head + kept + _flatten(turns[recent:]),
            first_turn=start,
            trimmed_results=sum(old_cuts[skip:]),
            tokens=tokens,
            summarise=summarise,
        )


def _flatten(turns: Sequence[Turn]) -> list[dict[str, Any]]:
    return [m for t in turns for m in t.messages]
