"""The cost guard: what a run may spend, and what a principal may spend in a day.

Money is counted in the price table's currency (``prices``, US dollars per million
tokens), for the calls to models the table prices; tokens of models it has no price for
cannot be priced, so they count against token limits instead. The limits:

- a profile's ``cost.per_run`` and ``cost.tokens_per_run``: one run. :class:`RunSpend`
  keeps the run's account. Before each model call the loop asks whether the call fits:
  its prompt (estimated from the request's size, calibrated per model and session) plus
  as many completion tokens as the run's largest answer so far, priced at the call's
  model. A call that does not fit is not made: the run stops with STOP_REASON_COST_LIMIT,
  between model calls, never during a tool call. The estimate is an estimate: a run ends
  above its limit by at most one call's unforeseen completion.
- a principal's ``quota.daily_cost`` and ``quota.daily_tokens``: its runs of one day (UTC),
  counted in the session store (``SessionStore.add_spend``, atomic), so replicas sharing
  a store count one total. :class:`DailySpend` refuses a principal past either new runs
  until midnight UTC (QUOTA_EXCEEDED with a QuotaFailure). Runs already in flight when the
  day passes its quota finish (each within its profile's ``cost.per_run``), so a day ends
  above its quota by at most what those runs spend.
"""

from __future__ import annotations

import time

from sidecar.agent.prices import PriceTable
from sidecar.errors import QuotaExceeded
from sidecar.security.identity import Principal
from sidecar.sessions.store import SessionStore
from sidecar.types import Usage

__all__ = ["DailySpend", "RunSpend", "utc_day"]

_DAY = 86_400.0


def utc_day(now: float | None = None) -> str:
    """The UTC date of ``now`` (seconds since the epoch; default: now), ``YYYY-MM-DD``."""
    return time.strftime("%Y-%m-%d", time.gmtime(time.time() if now is None else now))


def _until_midnight(now: float) -> float:
    return _DAY - now % _DAY


class DailySpend:
    """Each principal's spend per day, in the session store.

    Args:
        store: Where the days' totals are kept.
    """

    def __init__(self, store: SessionStore) -> None:
        self._store = store

    async def check(self, principal: Principal) -> bool:
        """Whether the principal's runs count against a daily quota (it has one, and has
        not used it up).

        Raises:
            QuotaExceeded: it has used up a daily quota (retry after midnight UTC).
        """
        quota = principal.quota
        if not quota.daily:
            return False
        now = time.time()
        cost, tokens = await self._store.spent(principal.name, utc_day(now))
        wait = round(_until_midnight(now), 3)
        if quota.daily_cost is not None and cost >= quota.daily_cost:
            raise QuotaExceeded(principal.name, "daily_cost", quota.daily_cost, retry_after=wait)
        if quota.daily_tokens is not None and tokens >= quota.daily_tokens:
            raise QuotaExceeded(
                principal.name, "daily_tokens", quota.daily_tokens, retry_after=wait
            )
        return True

    async def add(self, principal: Principal, spend: RunSpend) -> tuple[float, int]:
        """Add a finished run's spend to its principal's day; the day's totals after it."""
        return await self._store.add_spend(principal.name, utc_day(), spend.cost, spend.tokens)


class RunSpend:
    """One run's spend against its limits.

    Args:
        prices: The run's price table.
        cost_limit: The most the run may cost (``cost.per_run``); None: no limit.
        tokens_limit: The most tokens it may use on unpriced models
            (``cost.tokens_per_run``); None: no limit.
    """

    __slots__ = ("_cost_limit", "_largest_answer", "_prices", "_tokens_limit", "cost", "tokens")

    def __init__(
        self, prices: PriceTable, *, cost_limit: float | None, tokens_limit: int | None
    ) -> None:
        self._prices = prices
        self._cost_limit = cost_limit
        self._tokens_limit = tokens_limit
        self._largest_answer = 0
        self.cost = 0.0
        """Spent so far on priced models, in the price table's currency."""
        self.tokens = 0
        """Tokens used so far on models the price table has no price for."""

    @classmethod
    def of(
        cls,
        prices: PriceTable,
        *,
        per_run: float | None,
        tokens_per_run: int | None,
        counted: bool,
    ) -> RunSpend | None:
        """The account of a run under its profile's limits; ``counted``: its principal's
        day counts it (a daily quota). None when nothing limits or counts it."""
        if per_run is None and tokens_per_run is None and not counted:
            return None
        return cls(prices, cost_limit=per_run, tokens_limit=tokens_per_run)

    def charge(self, model: str, usage: Usage) -> None:
        """Count one model call's usage."""
        self._largest_answer = max(self._largest_answer, usage.completion_tokens)
        priced = self._prices.cost(model, usage)
        if priced is None:
            self.tokens += usage.prompt_tokens + usage.completion_tokens
        else:
            self.cost += priced.total_usd

    def refusal(self, model: str, prompt_tokens: int) -> str | None:
        """Why a call of ``model`` with about ``prompt_tokens`` of prompt would take the
        run past a limit; None when it fits."""
        expected = Usage(prompt_tokens=prompt_tokens, completion_tokens=self._largest_answer)
        priced = self._prices.cost(model, expected)
        if priced is None:
            limit = self._tokens_limit
            if limit is not None:
                more = expected.prompt_tokens + expected.completion_tokens
                if self.tokens + more > limit:
                    return (
                        f"the next model call (about {more} tokens of {model}, which the "
                        f"price table does not price) would take the run's {self.tokens} "
                        f"tokens past the profile's cost.tokens_per_run of {limit}"
                    )
            return None
        limit_cost = self._cost_limit
        if limit_cost is not None and self.cost + priced.total_usd > limit_cost:
            return (
                f"the next model call (about {priced.total_usd:.6f} at {model}'s prices) "
                f"would take the run's cost of {self.cost:.6f} past the profile's "
                f"cost.per_run of {limit_cost:g}"
            )
        return None

    def spent_past(self) -> str | None:
        """Why the run is already at or past a limit; None when it is within them."""
        if self._cost_limit is not None and self.cost >= self._cost_limit:
            return (
                f"the run has cost {self.cost:.6f}, the profile's cost.per_run is "
                f"{self._cost_limit:g}"
            )
        if self._tokens_limit is not None and self.tokens >= self._tokens_limit:
            return (
                f"the run has used {self.tokens} unpriced tokens, the profile's "
                f"cost.tokens_per_run is {self._tokens_limit}"
            )
        return None
