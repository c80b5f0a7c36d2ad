"""Per-principal quotas on runs: how many at once, and how many a minute.

The session quota is counted in the store (it outlives the process); these two are the
process's own. Each admission is all-or-nothing: a refused run takes no slot and leaves
no mark in the minute's count, and a run admitted but then not started (its session could
not be claimed) gives both back with :meth:`RunQuotas.refund`. Only runs that start spend
a quota: a caller retrying a busy session, or asking for one that does not exist, does not
use up its minute.
"""

from __future__ import annotations

import time
from collections import deque

from sidecar.errors import QuotaExceeded
from sidecar.security.identity import Principal

__all__ = ["RunQuotas"]

_MINUTE = 60.0
_BUSY_RETRY = 1.0  # seconds a caller at its concurrent-run quota is told to wait


class RunQuotas:
    """Counts each principal's runs in flight and its run starts of the last minute."""

    def __init__(self) -> None:
        self._running: dict[str, int] = {}
        self._started: dict[str, deque[float]] = {}

    def admit(self, principal: Principal) -> float | None:
        """Count a run starting for ``principal``; pair with :meth:`release`, or with
        :meth:`refund` when it does not start after all.

        Returns:
            Its mark in the minute's count (for :meth:`refund`); None when not counted.

        Raises:
            QuotaExceeded: the principal is at one of its run quotas.
        """
        quota = principal.quota
        name = principal.name
        running = self._running.get(name, 0)
        if quota.concurrent_runs is not None and running >= quota.concurrent_runs:
            raise QuotaExceeded(
                name, "concurrent_runs", quota.concurrent_runs, retry_after=_BUSY_RETRY
            )
        if quota.runs_per_minute is not None:
            now = time.monotonic()
            started = self._started.setdefault(name, deque())
            while started and now - started[0] >= _MINUTE:
                started.popleft()
            if len(started) >= quota.runs_per_minute:
                # The oldest start of the window leaves it first: then one more fits.
                wait = max(0.001, started[0] + _MINUTE - now)
                raise QuotaExceeded(
                    name, "runs_per_minute", quota.runs_per_minute, retry_after=round(wait, 3)
                )
            started.append(now)
            mark: float | None = now
        else:
            mark = None
        self._running[name] = running + 1
        return mark

    def refund(self, principal: Principal, mark: float | None) -> None:
        """A run admitted for ``principal`` did not start: its slot and its mark in the
        minute's count are given back."""
        self.release(principal)
        started = self._started.get(principal.name)
        if mark is not None and started is not None:
            try:
                started.remove(mark)
            except ValueError:
                pass  # already out of the window

    def release(self, principal: Principal) -> None:
        """A run admitted for ``principal`` ended."""
        name = principal.name
        left = self._running.get(name, 0) - 1
        if left > 0:
            self._running[name] = left
        else:
            self._running.pop(name, None)

    def running(self, principal: Principal) -> int:
        return self._running.get(principal.name, 0)
