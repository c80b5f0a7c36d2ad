"""Pacing by the provider's rate limits: wait briefly before a 429, not after it.

Every response of Groq (and OpenAI, and most gateways) says how much of its rate limits is
left and when each resets::

    x-ratelimit-limit-requests: 14400        x-ratelimit-limit-tokens: 6000
    x-ratelimit-remaining-requests: 14370    x-ratelimit-remaining-tokens: 5997
    x-ratelimit-reset-requests: 2m59.56s     x-ratelimit-reset-tokens: 7.66s

and a 429 says ``retry-after``. A :class:`Pacer` per endpoint and model, shared by every
run of the process, keeps the latest of these and lets a request go when the budget it
knows of has room for it, counting the requests still in flight (their headers are not
back yet). Near the limit, requests wait in a queue until a response reports room or the
window resets; after a 429, every request waits out its ``retry-after``. A request that
would have to wait past its deadline is not sent: :meth:`Pacer.acquire` raises
:class:`~sidecar.errors.ModelUnavailable` with the code ``model_rate_limit_wait`` at
once, so the run fails fast with that reason instead of spending its time queueing.

What a response says about waiting is a hint from outside the process (a forward proxy
can forge one), never an order, so two rules bound it:

- **A ceiling.** No wait is taken longer than ``max_wait`` (``model.max_rate_limit_wait``,
  60 s by default: the per-minute windows of Groq and OpenAI fit in it). A longer
  ``retry-after`` or reset (``99999999``, ``47h59m``: a daily quota, or a forgery) holds
  requests back for the ceiling at most.
- **A probe.** While requests are held back for longer than :data:`PROBE_EVERY`, one
  request is let through every :data:`PROBE_EVERY` seconds, when nothing else is in
  flight, to learn whether the limit is gone: a successful answer to a request sent
  after the block was learned lifts it, a 429 renews it. So no answer can lock the model
  out: the next request after a probe interval asks again.

An endpoint that sends none of these headers is never paced.

**Input and output tokens apart.** Some organisations have, beside the combined token
limit the headers report, separate limits on input tokens and on output tokens per
minute (Groq's ITPM and OTPM, shown on its Limits page as "X in / Y out"; its documented
headers report only the combined one). Configured (``model.input_tokens_per_minute``,
``model.output_tokens_per_minute``), each is a window the pacer counts itself: a request
waits until the prompt tokens it sends fit under the input limit and the output the
recent answers suggest it will generate (reasoning included) fits under the output
limit; the output an answer did generate is counted when it is in.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sidecar.errors import ModelUnavailable

__all__ = [
    "DEFAULT_MAX_WAIT",
    "PACING_WAIT",
    "PROBE_EVERY",
    "Pacer",
    "Pacers",
    "RateLimits",
    "parse_duration",
    "rate_limits",
]

PACING_WAIT = "model_rate_limit_wait"
"""The code of a request that was not sent: its wait would outlast its deadline."""
MAX_RESET_S = 2 * 86_400.0
"""A reset further away than this is not a duration (an epoch timestamp, say): ignored."""
DEFAULT_MAX_WAIT = 60.0
"""Seconds: the longest wait taken from what a response says, unless configured
(``model.max_rate_limit_wait``). Groq's and OpenAI's windows are per minute."""
PROBE_EVERY = 10.0
"""Seconds between probes while requests are held back for longer than this."""
_SLACK_S = 0.02  # waits end this much after the reported reset: clocks and rounding differ
_SAME_WINDOW_S = 0.25  # resets this close together belong to one window

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|us|µs|ns|h|m|s)")


def parse_duration(text: str) -> float | None:
    """Seconds in a rate-limit reset: ``2m59.56s``, ``7.66s``, ``120ms``, ``1h2m``, ``30``.

    Returns None for anything else (empty, negative, malformed, not finite, or further
    away than :data:`MAX_RESET_S`).
    """
    text = text.strip()
    if not text or len(text) > 64:
        return None
    try:
        seconds = float(text)  # a plain number is seconds
    except ValueError:
        seconds = 0.0
        end = 0
        for match in _PART.finditer(text):
            if match.start() != end:
                return None
            end = match.end()
            value = float(match.group(1))
            unit = match.group(2)
            seconds += value * _UNITS[unit]
        if end != len(text) or end == 0:
            return None
    if not math.isfinite(seconds) or seconds < 0 or seconds > MAX_RESET_S:
        return None
    return seconds


_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def _count(value: str | None) -> int | None:
    if value is None:
        return None
    value = value.strip()
    if not value.isdigit() or len(value) > 18:
        return None
    return int(value)


@dataclass(frozen=True, slots=True)
class RateLimits:
    """What one response said of the rate limits; None where it said nothing usable."""

    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests: float | None = None
    """Seconds from the response until the request budget is whole again."""
    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    reset_tokens: float | None = None
    """Seconds from the response until the token budget is whole again."""
    retry_after: float | None = None
    """Seconds a 429 (or 503) asked to wait."""

    @property
    def empty(self) -> bool:
        return self == _EMPTY


_EMPTY = RateLimits()


def rate_limits(headers: Mapping[str, str], retry_after: float | None = None) -> RateLimits:
    """The ``x-ratelimit-*`` headers of a response (and its ``retry-after``, parsed)."""
    get = headers.get
    reset_requests = get("x-ratelimit-reset-requests")
    reset_tokens = get("x-ratelimit-reset-tokens")
    return RateLimits(
        limit_requests=_count(get("x-ratelimit-limit-requests")),
        remaining_requests=_count(get("x-ratelimit-remaining-requests")),
        reset_requests=parse_duration(reset_requests) if reset_requests is not None else None,
        limit_tokens=_count(get("x-ratelimit-limit-tokens")),
        remaining_tokens=_count(get("x-ratelimit-remaining-tokens")),
        reset_tokens=parse_duration(reset_tokens) if reset_tokens is not None else None,
        retry_after=retry_after,
    )


class _Budget:
    """One budget (requests or tokens): what the server last said, and when it refills."""

    __slots__ = ("limit", "remaining", "reset_at", "since")

    def __init__(self) -> None:
        self.limit: int | None = None
        self.remaining: int | None = None  # None: unknown, never holds a request back
        self.reset_at = 0.0
        self.since = -math.inf
        """When the request whose answer set the current window was let through."""

    def update(
        self,
        limit: int | None,
        remaining: int | None,
        reset: float | None,
        *,
        now: float,
        max_wait: float,
        admitted: float,
    ) -> None:
        if limit is not None:
            self.limit = limit
        if remaining is None:
            return
        # Without a reset time, the budget is trusted for one second, then forgotten; a
        # reset further away than the ceiling is cut to it.
        reset_at = now + min(reset if reset is not None else 1.0, max_wait) + _SLACK_S
        known = self.remaining is not None and now < self.reset_at < math.inf
        if known and abs(reset_at - self.reset_at) <= _SAME_WINDOW_S:
            # The same window: responses to concurrent requests arrive in any order, and
            # the lowest count is the latest one.
            assert self.remaining is not None
            self.remaining = min(self.remaining, remaining)
            return
        if known and admitted < self.since:
            # A late answer to a request sent before the one that told of the current
            # window: it tells of an older window (under load, answers overtake each
            # other), and would make a window that has begun look whole at its old reset.
            return
        self.remaining = remaining
        self.reset_at = reset_at
        self.since = admitted

    def forget(self) -> None:
        """Nothing known holds a request back any more."""
        self.remaining = None
        self.reset_at = 0.0
        self.since = -math.inf

    def room(self, now: float, in_flight: int, need: int) -> float:
        """0 when ``need`` fits beside what is in flight; else seconds until it may (until
        the reset; infinite when only a response in flight can tell)."""
        if self.remaining is None:
            return 0.0
        if now >= self.reset_at:
            # Whole again: the full limit when known (counted down by the requests in
            # flight until a response reports the real budget), unknown otherwise.
            self.remaining = self.limit
            self.reset_at = math.inf
            if self.remaining is None:
                return 0.0
        if self.remaining - in_flight >= need:
            return 0.0
        if in_flight == 0:
            if math.isinf(self.reset_at):
                self.remaining = None  # nothing in flight will report: forget the count
                return 0.0
            if self.limit is not None and need > self.limit:
                return 0.0  # never fits: send it and let the endpoint judge
        return self.reset_at - now


class _Window:
    """A per-window token limit the pacer counts itself (a configured ITPM or OTPM)."""

    __slots__ = ("_spent", "_used", "length", "limit")

    def __init__(self, limit: int, length: float) -> None:
        self.limit = limit
        self.length = length
        self._spent: collections.deque[tuple[float, int]] = collections.deque()
        self._used = 0

    def _expire(self, now: float) -> None:
        spent = self._spent
        while spent and spent[0][0] <= now - self.length:
            self._used -= spent.popleft()[1]

    def room(self, now: float, reserved: int, need: int) -> float:
        """0 when ``need`` more (beside ``reserved``, in flight) fits; else seconds until
        enough of what was counted leaves the window."""
        self._expire(now)
        if need <= 0 or need > self.limit or self._used + reserved + need <= self.limit:
            return 0.0  # more than the whole limit never fits: the endpoint judges it
        excess = self._used + reserved + need - self.limit
        for at, tokens in self._spent:
            excess -= tokens
            if excess <= 0:
                return at + self.length - now
        return math.inf  # only what is in flight can free room

    def spend(self, now: float, tokens: int) -> None:
        if tokens > 0:
            self._expire(now)
            self._spent.append((now, tokens))
            self._used += tokens


class Ticket:
    """A request let through; :meth:`report` or :meth:`release` ends it."""

    __slots__ = ("_pacer", "_unsettled", "admitted", "output", "probe", "tokens", "waited")

    def __init__(
        self,
        pacer: Pacer,
        tokens: int,
        waited: float,
        admitted: float,
        probe: bool = False,
        output: int = 0,
    ) -> None:
        self._pacer: Pacer | None = pacer
        self._unsettled: Pacer | None = pacer
        self.tokens = tokens
        self.output = output
        """The output tokens it is expected to generate, held against the output limit."""
        self.waited = waited
        """Seconds the request waited in the queue."""
        self.admitted = admitted
        """When it was let through (the pacer's clock)."""
        self.probe = probe
        """It went while requests were held back, to learn whether the hold is over."""

    def settle(self, generated: int) -> None:
        """The answer is in (or never came: 0): its ``generated`` output tokens replace
        the output held for it. Its headers arrive before its body, so the output it held
        stays held until then. Only the first call counts."""
        pacer, self._unsettled = self._unsettled, None
        if pacer is not None:
            pacer._settle(self, generated)

    def release(self) -> None:
        """The request ended without its headers (failed or cancelled): free its place."""
        pacer, self._pacer = self._pacer, None
        if pacer is not None:
            pacer._finish(self)

    def report(self, limits: RateLimits, *, ok: bool = False) -> None:
        """The request's response headers are in; ``ok``: its status was a success."""
        pacer, self._pacer = self._pacer, None
        if pacer is not None:
            pacer._finish(self, limits, ok)


class Pacer:
    """The rate limits of one endpoint and model, shared by every request to it.

    Args:
        max_wait: The ceiling on any wait a response asks for, in seconds.
        clock: The monotonic clock (a test's own, to step through windows).
        input_limit: Input tokens per ``window`` (a configured ITPM); None: no such limit.
        output_limit: Output tokens per ``window`` (a configured OTPM); None: none.
        window: Seconds those two limits count over (Groq's: a minute).
    """

    def __init__(
        self,
        max_wait: float = DEFAULT_MAX_WAIT,
        clock: Callable[[], float] = time.monotonic,
        *,
        input_limit: int | None = None,
        output_limit: int | None = None,
        window: float = 60.0,
    ) -> None:
        self.max_wait = max_wait
        self._clock = clock
        self._input = _Window(input_limit, window) if input_limit is not None else None
        self._output = _Window(output_limit, window) if output_limit is not None else None
        self._in_flight_output = 0
        self._requests = _Budget()
        self._tokens = _Budget()
        self._blocked_until = 0.0
        self._blocked_since = -math.inf  # when the latest retry-after was learned
        self._probe_at = 0.0  # the earliest moment a long hold lets one request probe
        self._in_flight = 0
        self._in_flight_tokens = 0
        self._waiters: list[asyncio.Future[None]] = []
        self.waiting = 0
        """Requests waiting in the queue now."""
        self.probes = 0
        """Requests let through to learn whether a long hold is over."""

    def delay(self, tokens: int, now: float | None = None, output: int = 0) -> float:
        """Seconds a request of ``tokens`` (and ``output`` expected output tokens) would
        wait now (0: it could go at once); an infinite delay means it waits for a
        response in flight to report room."""
        now = self._clock() if now is None else now
        wait = max(self._blocked_until - now, 0.0)
        if wait > 0:
            return wait
        wait = max(
            self._requests.room(now, self._in_flight, 1),
            self._tokens.room(now, self._in_flight_tokens, tokens + output),
        )
        if self._input is not None:
            wait = max(wait, self._input.room(now, 0, tokens))
        if self._output is not None:
            wait = max(wait, self._output.room(now, self._in_flight_output, output))
        return wait

    def generated(self, tokens: int) -> None:
        """An answer's output tokens (its reasoning included), counted against the
        output limit."""
        if self._output is not None:
            self._output.spend(self._clock(), tokens)

    def _settle(self, ticket: Ticket, generated: int) -> None:
        self.generated(generated)
        if not ticket.output:
            return
        self._in_flight_output -= ticket.output
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _may_probe(self, wait: float, now: float) -> bool:
        """Whether a request held back ``wait`` seconds may go now as a probe."""
        return (
            wait > PROBE_EVERY
            and not math.isinf(wait)
            and self._in_flight == 0
            and now >= self._probe_at
        )

    async def acquire(self, tokens: int, deadline: float, output: int = 0) -> Ticket:
        """Wait until a request of about ``tokens`` prompt tokens may go.

        Args:
            tokens: The request's estimated prompt tokens.
            output: The output tokens it is expected to generate.
            deadline: The pacer's clock (``time.monotonic()``) by which the request must
                have been answered.

        Raises:
            ModelUnavailable: ``model_rate_limit_wait``: the wait would outlast ``deadline``
                (raised at once when the wait is known to be that long).
        """
        start = self._clock()
        wait = self.delay(tokens, start, output)
        if wait <= 0:
            return self._admit(tokens, 0.0, start, output=output)
        if self._may_probe(wait, start):
            return self._probe(tokens, 0.0, start, output)
        self.waiting += 1
        try:
            while True:
                now = self._clock()
                wait = self.delay(tokens, now, output)
                if wait <= 0:
                    return self._admit(tokens, now - start, now, output=output)
                if self._may_probe(wait, now):
                    return self._probe(tokens, now - start, now, output)
                if not math.isinf(wait) and now + wait >= deadline:
                    raise _too_late(wait, deadline - now)
                if now >= deadline:
                    raise _too_late(wait, 0.0)
                # Woken by a response that reports room, by the reset, by the next probe's
                # turn, or by the deadline.
                nap = min(wait, deadline - now)
                if wait > PROBE_EVERY and self._probe_at > now:
                    nap = min(nap, self._probe_at - now)
                waiter = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
                try:
                    async with asyncio.timeout(max(nap, 0.0)):
                        await waiter
                except TimeoutError:
                    pass
                finally:
                    self._waiters.remove(waiter)
        finally:
            self.waiting -= 1

    def _probe(self, tokens: int, waited: float, now: float, output: int = 0) -> Ticket:
        self.probes += 1
        self._probe_at = now + PROBE_EVERY
        return self._admit(tokens, waited, now, probe=True, output=output)

    def _admit(
        self, tokens: int, waited: float, now: float, probe: bool = False, output: int = 0
    ) -> Ticket:
        self._in_flight += 1
        self._in_flight_tokens += tokens + output
        if self._input is not None:
            self._input.spend(now, tokens)
        self._in_flight_output += output
        return Ticket(self, tokens + output, waited, now, probe, output)

    def _finish(self, ticket: Ticket, limits: RateLimits | None = None, ok: bool = False) -> None:
        self._in_flight -= 1
        self._in_flight_tokens -= ticket.tokens
        now = self._clock()
        if ok and ticket.admitted > self._blocked_since:
            # A request sent after the latest retry-after was answered: the hold is over.
            self._blocked_until = 0.0
        if limits is not None and not limits.empty:
            ceiling = self.max_wait
            admitted = ticket.admitted
            self._requests.update(
                limits.limit_requests,
                limits.remaining_requests,
                limits.reset_requests,
                now=now,
                max_wait=ceiling,
                admitted=admitted,
            )
            self._tokens.update(
                limits.limit_tokens,
                limits.remaining_tokens,
                limits.reset_tokens,
                now=now,
                max_wait=ceiling,
                admitted=admitted,
            )
            if limits.retry_after is not None:
                until = now + min(limits.retry_after, ceiling)
                if until > self._blocked_until:
                    self._blocked_until = until
                self._blocked_since = now
            # What was just learned holds until a probe interval has passed.
            self._probe_at = max(self._probe_at, now + PROBE_EVERY)
        if ok and ticket.probe:
            # The probe got through: a budget it did not report on is not known to hold.
            if limits is None or limits.remaining_requests is None:
                self._requests.forget()
            if limits is None or limits.remaining_tokens is None:
                self._tokens.forget()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)


def _too_late(wait: float, left: float) -> ModelUnavailable:
    when = "until a response in flight frees room" if math.isinf(wait) else f"{wait:.2f} s"
    return ModelUnavailable(
        PACING_WAIT,
        f"the model endpoint's rate limit holds requests back for {when}, longer than the "
        f"{max(left, 0.0):.2f} s the run has left: not sent",
        retryable=True,
        retry_after=None if math.isinf(wait) else wait,
    )


class Pacers:
    """One :class:`Pacer` per (endpoint, model, key), for every model client of the process."""

    def __init__(self) -> None:
        self._pacers: dict[tuple[str, str, str], Pacer] = {}

    def get(
        self,
        endpoint: str,
        model: str,
        api_key: str | None = None,
        max_wait: float = DEFAULT_MAX_WAIT,
        *,
        input_limit: int | None = None,
        output_limit: int | None = None,
        window: float = 60.0,
    ) -> Pacer:
        """The pacer of ``model`` at ``endpoint`` for ``api_key``: limits are per account
        (a key of another organisation or project has limits of its own). Clients that
        share one and name different ceilings get the lowest; the configured input and
        output limits are the first client's."""
        account = hashlib.sha256((api_key or "").encode()).hexdigest()
        key = (endpoint.rstrip("/"), model, account)
        pacer = self._pacers.get(key)
        if pacer is None:
            pacer = self._pacers[key] = Pacer(
                max_wait, input_limit=input_limit, output_limit=output_limit, window=window
            )
        elif max_wait < pacer.max_wait:
            pacer.max_wait = max_wait
        return pacer


PROCESS_PACERS = Pacers()
"""The process's pacers: every run of the process shares them."""
