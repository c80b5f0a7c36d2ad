"""The circuit breaker in front of each tool server: pybreaker's state, an asyncio admission gate.

Every tool server has one :class:`CircuitBreaker`. The dispatcher runs each call to the server
inside :meth:`CircuitBreaker.guard`, or pairs :meth:`CircuitBreaker.admit` with exactly one of
``record_success`` / ``record_failure`` / ``release`` (a trial permit that is never ended keeps
the breaker half-open and refusing for good, so prefer ``guard``).

Why a gate around pybreaker: its async path is built on tornado, and its ``calling()`` context
manager, used from concurrent asyncio tasks, gets four things wrong (``tests/test_breaker.py``
shows each one against pybreaker itself):

1. A call is judged by the state object that admitted it, so calls still in flight when the
   breaker trips re-open it when they fail later, each one pushing the open window out.
2. Half-open lets through every caller that arrives while the trial call is in flight.
3. Those late failures keep raising the failure counter while the breaker is open.
4. ``asyncio.CancelledError`` (a cancelled run, a hedge that lost) counts as a failure.

The gate: every state change starts a new *generation*; a :class:`Permit` remembers the
generation that admitted it, and its outcome is ignored once the generation has moved on
(1, 3). Half-open hands out one trial permit and refuses everyone else at once (2).
:meth:`CircuitBreaker.release` ends a call with no verdict and frees the trial slot (4).

How pybreaker is used: a ``pybreaker.CircuitBreaker`` over a ``CircuitMemoryStorage`` holds the
state name and the failure counter, and its ``open`` / ``half_open`` / ``close`` methods make
every transition (closing resets the counter, as in pybreaker). A ``CircuitBreakerListener``
mirrors each transition here: it starts the new generation and calls ``on_state_change``.
pybreaker's ``call`` / ``calling`` are never used; they are where the defects live. One part
could not be delegated: pybreaker decides open -> half-open inside ``call``, against a
wall-clock ``opened_at`` datetime, so the reset timeout is measured here, lazily on the next
admission, with an injectable monotonic clock (wall time jumps; tests need a fake clock).
pybreaker's own ``opened_at`` is still set, in UTC wall time, for anyone inspecting it.

Counting follows pybreaker by default: the breaker opens after ``failure_threshold``
*consecutive* failures, in the order calls finish; a success of any call admitted since the
breaker last closed resets the count. Under heavy traffic that rule trips on chance: at
700 calls a second, a server failing one call in four fails five in a row about once a
second. With ``failure_rate`` set, the breaker instead opens when at least that share of
the last ``window`` finished calls failed, and at least ``failure_threshold`` of them did.
The share is always of a whole window, also while it fills after a start or a close: a
dead server is cut off after ``failure_rate * window`` failed calls (50 at a rate of one
half and the default window), and five failures among the first ten calls, which a server
failing one call in four shows about once in ten starts, do not open it.

A breaker belongs to one event loop and is not thread-safe. It needs no lock: ``admit`` and
the ``record_*`` methods never await, so no other task runs in the middle of one.

Exceptions::

    BreakerOpenError    a call was refused without being sent (open, or a trial in flight)
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable

import pybreaker

from sidecar.config import BreakerPolicy
from sidecar.errors import BreakerOpenError
from sidecar.types import BreakerState

__all__ = ["CircuitBreaker", "Permit"]

_log = logging.getLogger(__name__)
_DEFAULT_POLICY = BreakerPolicy()


_FROM_PYBREAKER = {
    pybreaker.STATE_CLOSED: BreakerState.CLOSED,
    pybreaker.STATE_OPEN: BreakerState.OPEN,
    pybreaker.STATE_HALF_OPEN: BreakerState.HALF_OPEN,
}


class Permit:
    """Admission to one call, handed out by :meth:`CircuitBreaker.admit`.

    Attributes:
        generation: The breaker's generation when the call was admitted; once the breaker has
            changed state since, the call's outcome is ignored.
        is_trial: Whether this is the half-open trial call.
    """

    __slots__ = ("_ended", "generation", "is_trial")

    def __init__(self, generation: int, is_trial: bool) -> None:
        self.generation = generation
        self.is_trial = is_trial
        self._ended = False

    def __repr__(self) -> str:
        return (
            f"Permit(generation={self.generation}, is_trial={self.is_trial}, ended={self._ended})"
        )


def _every_exception_is_a_failure(exc: BaseException) -> bool:
    return True


class CircuitBreaker:
    """One tool server's circuit breaker, for concurrent calls from one event loop.

    Args:
        name: The breaker's name, normally the tool server's; shown in errors and callbacks.
        policy: When to open and how long to stay open.
        clock: Monotonic seconds; the reset timeout is measured with it.
        on_state_change: Called as ``(name, old, new)`` once per transition, synchronously.
            An exception it raises is logged and otherwise ignored, so that telemetry can never
            wedge the breaker or fail a tool call.
    """

    def __init__(
        self,
        name: str,
        policy: BreakerPolicy = _DEFAULT_POLICY,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_state_change: Callable[[str, BreakerState, BreakerState], None] | None = None,
    ) -> None:
        self.name = name
        self.policy = policy
        self._clock = clock
        self._on_state_change = on_state_change
        # Mirrors of pybreaker's state kept as plain attributes, so the closed-state hot path
        # is an identity check rather than storage property reads and string comparisons.
        self._state = BreakerState.CLOSED
        self._generation = 0
        self._trial_in_flight = False
        self._opened_at: float | None = None
        # With a failure rate: the latest finished calls (True: failed) and their failures.
        self._recent: deque[bool] | None = (
            deque(maxlen=policy.window) if policy.failure_rate is not None else None
        )
        self._recent_failures = 0
        self._storage = pybreaker.CircuitMemoryStorage(pybreaker.STATE_CLOSED)
        self._breaker = pybreaker.CircuitBreaker(
            fail_max=self.policy.failure_threshold,
            reset_timeout=self.policy.reset_timeout,
            state_storage=self._storage,
            listeners=[_StateMirror(self)],
            name=name,
        )

    @property
    def state(self) -> BreakerState:
        """The effective state right now.

        An open breaker whose reset timeout has elapsed reports ``HALF_OPEN``: the next caller
        would be admitted as the trial, so a tool hidden while ``OPEN`` comes back into the
        model's tool list on its own. The transition itself (and its ``on_state_change``)
        happens on that next admission; reading the state never changes it.
        """
        if self._state is BreakerState.OPEN and self._open_time_left() <= 0:
            return BreakerState.HALF_OPEN
        return self._state

    def allows_calls(self) -> bool:
        """Whether :meth:`admit` would admit a call right now."""
        if self._state is BreakerState.CLOSED:
            return True
        if self._state is BreakerState.OPEN:
            return self._open_time_left() <= 0
        return not self._trial_in_flight

    @property
    def failure_count(self) -> int:
        """Consecutive failures counted while closed (pybreaker's counter).

        It holds the value that opened the breaker while open or half-open, and is reset on
        close.
        """
        return self._storage.counter

    def failure_summary(self) -> str:
        """What the breaker counts now, for a log line: the failures among the latest
        calls with a failure rate, else the consecutive failures."""
        if self._recent is None:
            return f"{self.failure_count} consecutive failures"
        return f"{self._recent_failures} of the last {len(self._recent)} calls failed"

    @property
    def opened_at(self) -> float | None:
        """The clock reading when the breaker last opened; None if it never has."""
        return self._opened_at

    def admit(self) -> Permit:
        """Admit one call, or refuse it at once.

        Returns:
            The permit to end with ``record_success``, ``record_failure`` or ``release``.

        Raises:
            BreakerOpenError: The breaker is open, or half-open with its trial in flight.
        """
        if self._state is BreakerState.CLOSED:
            return Permit(self._generation, False)
        if self._state is BreakerState.OPEN:
            time_left = self._open_time_left()
            if time_left > 0:
                raise BreakerOpenError(self.name, BreakerState.OPEN, time_left)
            self._breaker.half_open()
        if self._trial_in_flight:
            raise BreakerOpenError(self.name, BreakerState.HALF_OPEN, 0.0)
        self._trial_in_flight = True
        return Permit(self._generation, True)

    def record_success(self, permit: Permit) -> None:
        """End a call that shows the server healthy. A trial success closes the breaker."""
        if permit._ended:
            return
        permit._ended = True
        if permit.generation != self._generation:
            return
        if permit.is_trial:
            self._breaker.close()
        else:
            self._storage.reset_counter()
            if self._recent is not None:
                self._remember(failed=False)

    def record_failure(self, permit: Permit) -> None:
        """End a call that shows the server unhealthy.

        The failure that reaches ``failure_threshold`` opens the breaker; a trial failure
        re-opens it for a fresh ``reset_timeout``.
        """
        if permit._ended:
            return
        permit._ended = True
        if permit.generation != self._generation:
            return
        if permit.is_trial:
            self._open()
            return
        self._storage.increment_counter()
        if self._recent is None:
            if self._storage.counter >= self.policy.failure_threshold:
                self._open()
            return
        self._remember(failed=True)
        rate = self.policy.failure_rate
        assert rate is not None
        failures = self._recent_failures
        # The share is of a whole window even while it fills (after a start or a close):
        # judged over the few calls seen so far, chance alone would often reach it.
        if failures >= self.policy.failure_threshold and failures >= rate * self.policy.window:
            self._open()

    def _remember(self, failed: bool) -> None:
        recent = self._recent
        assert recent is not None
        if len(recent) == recent.maxlen and recent[0]:
            self._recent_failures -= 1  # the oldest, about to drop out, was a failure
        recent.append(failed)
        self._recent_failures += failed

    def release(self, permit: Permit) -> None:
        """End a call without a verdict on the server's health (cancelled, or not its fault).

        Counts as neither success nor failure. A released trial frees the trial slot; the
        breaker stays half-open and the next caller becomes the trial.
        """
        if permit._ended:
            return
        permit._ended = True
        if permit.is_trial and permit.generation == self._generation:
            self._trial_in_flight = False

    @contextlib.asynccontextmanager
    async def guard(
        self, is_failure: Callable[[BaseException], bool] = _every_exception_is_a_failure
    ) -> AsyncIterator[None]:
        """Run the body as one call through the breaker.

        A normal exit is a success. ``asyncio.CancelledError``, and any other exception that is
        not an ``Exception`` (``KeyboardInterrupt``...), releases the call with no verdict. An
        ``Exception`` is a failure when ``is_failure(exc)`` is true; otherwise it is a success,
        as for pybreaker's ``exclude``: the server answered, with an error that is not a sign
        of ill health (bad arguments, a tool-level error). Exceptions are always re-raised.

        Args:
            is_failure: Whether an exception from the body says the server is unhealthy.

        Raises:
            BreakerOpenError: On entry, when the call is refused; the body does not run.
        """
        permit = self.admit()
        try:
            yield
        except Exception as exc:
            if is_failure(exc):
                self.record_failure(permit)
            else:
                self.record_success(permit)
            raise
        except BaseException:
            # asyncio.CancelledError (a cancelled run, a lost hedge), KeyboardInterrupt...:
            # the call was abandoned, which says nothing about the server.
            self.release(permit)
            raise
        self.record_success(permit)

    def _open_time_left(self) -> float:
        assert self._opened_at is not None  # the breaker has opened before it is OPEN
        return self._opened_at + self.policy.reset_timeout - self._clock()

    def _open(self) -> None:
        # Set before the transition so on_state_change already sees the new open window.
        self._opened_at = self._clock()
        self._breaker.open()

    def _changed_state(self, new: BreakerState) -> None:
        old = self._state
        self._state = new
        self._generation += 1
        if new is BreakerState.CLOSED and self._recent is not None:
            self._recent.clear()  # a closed breaker starts over
            self._recent_failures = 0
        # The slot belongs to the half-open generation that handed it out.
        self._trial_in_flight = False
        if self._on_state_change is None or old is new:
            return
        try:
            self._on_state_change(self.name, old, new)
        except Exception:
            _log.exception("on_state_change of circuit breaker %r failed", self.name)


class _StateMirror(pybreaker.CircuitBreakerListener):
    """Carries each pybreaker transition into the owning :class:`CircuitBreaker`."""

    def __init__(self, owner: CircuitBreaker) -> None:
        self._owner = owner

    def state_change(
        self,
        cb: pybreaker.CircuitBreaker,
        old_state: pybreaker.CircuitBreakerState | None,
        new_state: pybreaker.CircuitBreakerState,
    ) -> None:
        self._owner._changed_state(_FROM_PYBREAKER[new_state.name])
