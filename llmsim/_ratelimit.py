"""Groq-style ``x-ratelimit-*`` headers from fixed budget windows (60 s by default).

An output-token limit (Groq's OTPM, which some organisations have beside the combined
token limit) counts the tokens answers generated, reasoning included; as in Groq's
documented headers, it is not reported, only enforced.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

WINDOW_S = 60.0
"""Default length of the request and token budget windows."""


@dataclass(frozen=True, slots=True)
class Budget:
    """The rate-limit state after admitting one request."""

    remaining_requests: int
    remaining_tokens: int
    reset_s: float
    output_spent: bool = False
    """The window's output tokens were spent before this request."""

    @property
    def exhausted(self) -> bool:
        """Whether the request that was just admitted went over a budget."""
        return self.remaining_requests < 0 or self.remaining_tokens < 0 or self.output_spent


class RateLimits:
    """Counts requests and tokens per window and renders the headers."""

    def __init__(
        self,
        limit_requests: int,
        limit_tokens: int,
        window_s: float = WINDOW_S,
        limit_output: int | None = None,
    ) -> None:
        self._limits = (limit_requests, limit_tokens)
        self.limit_output = limit_output
        self._window = window_s
        self._fixed = {
            "x-ratelimit-limit-requests": str(limit_requests),
            "x-ratelimit-limit-tokens": str(limit_tokens),
        }
        self.reset()

    def reset(self) -> None:
        """Start a fresh window."""
        self._window_start = time.monotonic()
        self._requests = 0
        self._tokens = 0
        self.output = 0

    def generated(self, tokens: int) -> None:
        """Count the output tokens an answer generated."""
        self._roll(time.monotonic())
        self.output += tokens

    def _roll(self, now: float) -> None:
        if now - self._window_start >= self._window:
            self._window_start = now
            self._requests = 0
            self._tokens = 0
            self.output = 0

    def admit(self, tokens: int) -> Budget:
        """Count one request of ``tokens`` estimated tokens."""
        now = time.monotonic()
        self._roll(now)
        self._requests += 1
        self._tokens += tokens
        return Budget(
            self._limits[0] - self._requests,
            self._limits[1] - self._tokens,
            self._window - (now - self._window_start),
            self.limit_output is not None and self.output >= self.limit_output,
        )

    def headers(self, budget: Budget) -> dict[str, str]:
        """The six ``x-ratelimit-*`` headers for a budget (remaining never below 0)."""
        reset = format_duration(budget.reset_s)
        return {
            **self._fixed,
            "x-ratelimit-remaining-requests": str(max(0, budget.remaining_requests)),
            "x-ratelimit-remaining-tokens": str(max(0, budget.remaining_tokens)),
            "x-ratelimit-reset-requests": reset,
            "x-ratelimit-reset-tokens": reset,
        }


def format_duration(seconds: float) -> str:
    """Groq's duration notation: ``7.66s``, ``2m59.56s``."""
    seconds = max(0.0, seconds)
    minutes, rest = divmod(seconds, 60.0)
    if minutes:
        return f"{int(minutes)}m{rest:.2f}s"
    return f"{rest:.2f}s"
