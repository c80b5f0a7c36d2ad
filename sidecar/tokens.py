"""Token estimates: about 4 characters (or UTF-8 bytes) per token.

This is a stated heuristic, not a tokenizer: English prose and JSON average roughly four
characters per token with the tokenizers of current open models, and the LLM simulator
counts the same way. Budgets built on it should leave the provider's hard limit some
headroom; the context window calibrates it per model and session by the prompt tokens the
provider reports (``sidecar.context.calibration``). Estimating costs one length, never a
tokenizer call on the hot path. Sessions (a stored turn's size) and the context window
both estimate, so the estimate lives below both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

__all__ = ["CHARS_PER_TOKEN", "tokens_of", "tokens_of_messages", "tokens_of_size"]

CHARS_PER_TOKEN = 4
"""Characters (or UTF-8 bytes) per estimated token."""


def tokens_of_size(chars: int) -> int:
    """Estimated tokens of ``chars`` characters (or UTF-8 bytes) of text."""
    return (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def tokens_of(value: Any) -> int:
    """Estimated tokens of a JSON-serialisable value (a message, a tool list), as sent."""
    return tokens_of_size(len(orjson.dumps(value)))


def tokens_of_messages(messages: Sequence[dict[str, Any]]) -> int:
    """Estimated tokens of a list of model messages, as sent."""
    return tokens_of(messages) if messages else 0
