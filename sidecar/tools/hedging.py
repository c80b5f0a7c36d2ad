"""Hedged calls: a slow call to an idempotent tool gets a second copy; the first answer wins.

A tool's latency has a tail the caller cannot see coming (a garbage collection, a cold
cache, a busy replica). Waiting it out costs the whole run; sending the same call again
once it is late, and taking whichever copy answers first, turns the tail of one call into
the odds of two slow calls in a row. "The Tail at Scale" (Dean and Barroso) names the rule
kept here: send the second copy only once the first has outlived most calls of its kind,
so hedging costs a few percent of extra calls, not double.

Per tool server with ``tool_servers[].hedge`` set, :class:`Hedging` keeps:

- each tool's :class:`LatencyWindow`: its latest answered calls, and the percentile after
  which a call is late (never before ``min_delay``, and not before ``min_samples``);
- the server's :class:`HedgeBudget`: a token bucket that bounds second copies to a share
  of the calls sent, so a server that slows down as a whole is not sent twice its load.

A sample is what the caller observed: from the first copy's send to the first answer
(the first copy's latency, cut short where the second won). A first copy the second
beat is thus counted as late, never as its own, unknown, full time.

:func:`race` runs one call this way. Each copy goes through the server's breaker on its
own (a cancelled copy is released without a verdict); the second is sent only while the
breaker is closed. Only idempotent tools are hedged: the dispatcher never asks otherwise.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from sidecar.config import HedgePolicy
from sidecar.types import BreakerState

__all__ = ["HedgeBudget", "Hedging", "LatencyWindow", "race"]

T = TypeVar("T")

_SAVED_UP = 10.0
"""Second copies a server's budget can save up: a burst of late calls after a quiet spell
is hedged, a slow server is not sent a flood."""


class LatencyWindow:
    """One tool's latest answered calls and the delay after which a call is late."""

    __slots__ = ("_added", "_at", "_delay", "_min_delay", "_min_samples", "_percentile", "_samples")

    def __init__(self, policy: HedgePolicy) -> None:
        self._samples: list[float] = []
        self._at = 0  # where the next sample goes once the window is full
        self._added = 0
        self._percentile = policy.percentile / 100
        self._min_delay = policy.min_delay
        self._min_samples = policy.min_samples
        self._delay: float | None = None

    def add(self, seconds: float, size: int) -> None:
        """Record one answered call that took ``seconds``; keep the latest ``size``."""
        samples = self._samples
        if len(samples) < size:
            samples.append(seconds)
        else:
            samples[self._at] = seconds
            self._at = (self._at + 1) % size
        self._added += 1
        # Sorting a window costs microseconds: done once there are enough samples, then
        # after every tenth call, not after each.
        if len(samples) >= self._min_samples and (self._delay is None or self._added % 10 == 0):
            ordered = sorted(samples)
            # The smallest latency at least this share of the calls did not exceed.
            rank = max(0, math.ceil(self._percentile * len(ordered)) - 1)
            self._delay = max(self._min_delay, ordered[rank])

    @property
    def delay(self) -> float | None:
        """Seconds after which a call is late; None until enough calls were seen."""
        return self._delay


class HedgeBudget:
    """Second copies as a share of calls sent: each call earns ``share`` of a copy."""

    __slots__ = ("_share", "tokens")

    def __init__(self, share: float) -> None:
        self._share = share
        self.tokens = 0.0

    def earn(self) -> None:
        """One call was sent."""
        self.tokens = min(_SAVED_UP, self.tokens + self._share)

    def spend(self) -> bool:
        """Take one second copy; False when the budget has none."""
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


class Hedging:
    """One tool server's hedging: its tools' latencies and its budget.

    Args:
        policy: The server's ``hedge`` settings.
    """

    __slots__ = ("_windows", "budget", "policy")

    def __init__(self, policy: HedgePolicy) -> None:
        self.policy = policy
        self.budget = HedgeBudget(policy.budget)
        self._windows: dict[str, LatencyWindow] = {}

    def window(self, tool: str) -> LatencyWindow:
        """The latency window of ``tool`` (its name on the server)."""
        found = self._windows.get(tool)
        if found is None:
            found = self._windows[tool] = LatencyWindow(self.policy)
        return found

    def record(self, window: LatencyWindow, seconds: float) -> None:
        window.add(seconds, self.policy.window)

    def may_hedge(self, breaker_state: BreakerState) -> bool:
        """Whether a late call gets its second copy now (and the budget pays for it)."""
        return breaker_state is BreakerState.CLOSED and self.budget.spend()


async def race(
    send: Callable[[float], Coroutine[Any, Any, T]],
    *,
    deadline: float,
    delay: float,
    may_hedge: Callable[[], bool],
    on_second: Callable[[float], None],
) -> tuple[T, bool]:
    """Run a call, sending a second copy when the first is not answered within ``delay``.

    Args:
        send: Sends one copy with this timeout (seconds); raises when the copy fails.
        deadline: ``time.monotonic()`` value by which either copy must be answered.
        delay: Seconds after which the second copy is sent.
        may_hedge: Asked once the first copy is late; False sends no second copy.
        on_second: Told when the second copy is sent, with the seconds since the first.

    Returns:
        The first answer, and whether the second copy gave it.

    Raises:
        Exception: what the first copy raised, when no copy answered.
    """
    loop = asyncio.get_running_loop()
    sent = time.monotonic()
    first: asyncio.Task[T] = loop.create_task(send(deadline - sent))
    tasks = [first]
    try:
        done, _ = await asyncio.wait(tasks, timeout=delay)
        now = time.monotonic()
        if done or now >= deadline or not may_hedge():
            return await first, False
        tasks.append(loop.create_task(send(deadline - now)))
        on_second(now - sent)
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            # Both may end in the same turn of the loop: the first copy wins a tie.
            for task in tasks:
                if task in done and task.exception() is None:
                    return task.result(), task is not first
        # Neither answered: the first copy's failure is the call's, as without a hedge.
        return await first, False
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()  # the loser, or both when the caller was cancelled
            task.add_done_callback(_retrieved)


def _retrieved(task: asyncio.Task[object]) -> None:
    """Mark a finished copy's exception as seen: a loser's failure is no one's concern."""
    if not task.cancelled():
        task.exception()
