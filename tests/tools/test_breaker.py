"""The tool-server circuit breaker under real asyncio concurrency.

Calls are held in flight with futures the test resolves, so every interleaving is chosen by the
test; time is a fake clock, so no test sleeps. The last tests show the four defects of
pybreaker's own ``calling()`` under asyncio that ``sidecar.tools.breaker`` exists to avoid.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from datetime import UTC, datetime

import pybreaker
import pytest

from sidecar.config import BreakerPolicy
from sidecar.errors import BreakerOpenError
from sidecar.tools.breaker import CircuitBreaker, Permit
from sidecar.types import BreakerState

# A bound on every wait, so a broken breaker fails the test instead of hanging it.
WAIT = 5.0
POLICY = BreakerPolicy(failure_threshold=5, reset_timeout=30.0)
T0 = 1000.0

CLOSED, OPEN, HALF_OPEN = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN


class ServerDown(Exception):
    """The tool server failed: a sign of ill health."""


class ToolRejected(Exception):
    """The tool answered with an error that is not the server's fault."""


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Transitions:
    """Records ``on_state_change`` calls."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, BreakerState, BreakerState]] = []

    def __call__(self, name: str, old: BreakerState, new: BreakerState) -> None:
        self.seen.append((name, old, new))

    def pairs(self) -> list[tuple[BreakerState, BreakerState]]:
        return [(old, new) for _, old, new in self.seen]


class HeldCall:
    """One call through ``breaker.guard()`` that stays in flight until the test ends it.

    Its task returns how the call ended: "ok", "failed", "rejected" or "refused".
    """

    def __init__(
        self,
        tg: asyncio.TaskGroup,
        breaker: CircuitBreaker,
        is_failure: Callable[[BaseException], bool] | None = None,
    ) -> None:
        self.entered = asyncio.Event()
        self.refusal: BreakerOpenError | None = None
        self._outcome: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.task = tg.create_task(self._run(breaker, is_failure))

    async def _run(
        self, breaker: CircuitBreaker, is_failure: Callable[[BaseException], bool] | None
    ) -> str:
        guard = breaker.guard() if is_failure is None else breaker.guard(is_failure)
        try:
            async with guard:
                self.entered.set()
                await self._outcome
        except BreakerOpenError as exc:
            self.refusal = exc
            return "refused"
        except ServerDown:
            return "failed"
        except ToolRejected:
            return "rejected"
        return "ok"

    def succeed(self) -> None:
        self._outcome.set_result(None)

    def fail(self, exc: Exception | None = None) -> None:
        self._outcome.set_exception(exc if exc is not None else ServerDown())

    async def result(self) -> str:
        async with asyncio.timeout(WAIT):
            return await self.task


async def all_entered(calls: list[HeldCall]) -> None:
    async with asyncio.timeout(WAIT):
        for call in calls:
            await call.entered.wait()


async def results(calls: list[HeldCall]) -> list[str]:
    return [await call.result() for call in calls]


def trip(breaker: CircuitBreaker) -> None:
    for _ in range(breaker.policy.failure_threshold):
        breaker.record_failure(breaker.admit())
    assert breaker.state is OPEN


async def test_calls_in_flight_at_the_trip_change_nothing_when_they_end_late() -> None:
    clock, transitions = FakeClock(), Transitions()
    breaker = CircuitBreaker("search", POLICY, clock=clock, on_state_change=transitions)
    async with asyncio.TaskGroup() as tg:
        calls = [HeldCall(tg, breaker) for _ in range(50)]
        await all_entered(calls)  # 50 calls are inside the breaker at once

        for call in calls[:5]:
            call.fail()
        assert await results(calls[:5]) == ["failed"] * 5
        assert breaker.state is OPEN
        assert breaker.opened_at == T0

        clock.now = T0 + 10
        for call in calls[5:30]:
            call.fail()
        for call in calls[30:49]:
            call.succeed()
        assert await results(calls[5:49]) == ["failed"] * 25 + ["ok"] * 19

        assert breaker.state is OPEN
        assert breaker.opened_at == T0
        assert breaker.failure_count == 5
        with pytest.raises(BreakerOpenError) as refused:
            breaker.admit()
        assert refused.value.retry_after == 20.0

        clock.now = T0 + 30
        trial = HeldCall(tg, breaker)
        await all_entered([trial])
        assert breaker.state is HALF_OPEN
        trial.succeed()
        assert await trial.result() == "ok"
        assert breaker.state is CLOSED
        assert breaker.failure_count == 0

        # The last call, admitted in the first closed period, fails only now.
        calls[49].fail()
        assert await calls[49].result() == "failed"
    assert breaker.state is CLOSED
    assert breaker.failure_count == 0
    assert transitions.pairs() == [(CLOSED, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, CLOSED)]


async def test_half_open_admits_one_trial_and_refuses_twenty_concurrent_callers_at_once() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker("search", POLICY, clock=clock)
    trip(breaker)
    clock.now = T0 + 30
    async with asyncio.TaskGroup() as tg:
        calls = [HeldCall(tg, breaker) for _ in range(21)]
        trial, others = calls[0], calls[1:]
        await all_entered([trial])
        # The refusals end while the trial is still held: nobody waits for it.
        assert await results(others) == ["refused"] * 20
        assert not trial.task.done()
        assert not any(call.entered.is_set() for call in others)
        for call in others:
            assert call.refusal is not None
            assert call.refusal.state is HALF_OPEN
            assert call.refusal.retry_after == 0.0
        assert breaker.state is HALF_OPEN
        assert not breaker.allows_calls()

        trial.succeed()
        assert await trial.result() == "ok"
    assert breaker.state is CLOSED
    assert breaker.allows_calls()


async def test_a_failed_trial_reopens_the_breaker_with_a_fresh_reset_timeout() -> None:
    clock, transitions = FakeClock(), Transitions()
    breaker = CircuitBreaker("search", POLICY, clock=clock, on_state_change=transitions)
    trip(breaker)
    clock.now = T0 + 30
    async with asyncio.TaskGroup() as tg:
        trial = HeldCall(tg, breaker)
        await all_entered([trial])
        clock.now = T0 + 31
        trial.fail()
        assert await trial.result() == "failed"

    assert breaker.state is OPEN
    assert breaker.opened_at == T0 + 31
    clock.now = T0 + 60.5
    with pytest.raises(BreakerOpenError) as refused:
        breaker.admit()
    assert refused.value.retry_after == pytest.approx(0.5)
    clock.now = T0 + 61
    assert breaker.admit().is_trial
    assert transitions.pairs() == [
        (CLOSED, OPEN),
        (OPEN, HALF_OPEN),
        (HALF_OPEN, OPEN),
        (OPEN, HALF_OPEN),
    ]


async def test_the_failure_counter_stays_put_while_open_and_resets_on_close() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker("search", POLICY, clock=clock)
    late = [breaker.admit() for _ in range(10)]
    trip(breaker)
    assert breaker.failure_count == 5

    for permit in late:
        breaker.record_failure(permit)
    for _ in range(10):
        with pytest.raises(BreakerOpenError):
            breaker.admit()
    assert breaker.failure_count == 5
    # The counter is pybreaker's own.
    assert breaker._storage.counter == 5

    clock.now = T0 + 30
    breaker.record_success(breaker.admit())
    assert breaker.state is CLOSED
    assert breaker.failure_count == 0


async def test_only_consecutive_failures_open_the_breaker() -> None:
    breaker = CircuitBreaker("search", POLICY, clock=FakeClock())
    for _ in range(4):
        breaker.record_failure(breaker.admit())
    breaker.record_success(breaker.admit())
    assert breaker.failure_count == 0
    for _ in range(4):
        breaker.record_failure(breaker.admit())
    assert breaker.state is CLOSED
    breaker.record_failure(breaker.admit())
    assert breaker.state is OPEN


RATE_POLICY = BreakerPolicy(failure_threshold=5, reset_timeout=30.0, failure_rate=0.5, window=20)


def play(breaker: CircuitBreaker, pattern: str) -> None:
    """Finish one call per letter: F fails, S succeeds (while the breaker admits calls)."""
    for outcome in pattern:
        permit = breaker.admit()
        if outcome == "F":
            breaker.record_failure(permit)
        else:
            breaker.record_success(permit)


async def test_a_failure_rate_ignores_a_chance_run_of_failures_among_many_successes() -> None:
    # One failure in four, with a run of five: consecutive counting opens, the rate does not.
    pattern = "SSSSSSSSSSSSSSS" + "FFFFF" + "SSSSSSSSSSSSSSS" + "SFSSSFSSSF"
    consecutive = CircuitBreaker("search", POLICY, clock=FakeClock())
    with pytest.raises(BreakerOpenError):
        play(consecutive, pattern)
    by_rate = CircuitBreaker("search", RATE_POLICY, clock=FakeClock())
    play(by_rate, pattern)
    assert by_rate.state is CLOSED


async def test_a_failure_rate_opens_on_a_server_failing_most_calls_without_a_run_of_five() -> None:
    breaker = CircuitBreaker("search", RATE_POLICY, clock=FakeClock())
    play(breaker, "SSSSSSSSSS" + "FFSFFS")  # 4 failures in 16: below both limits
    assert breaker.state is CLOSED
    play(breaker, "FFSF")  # 7 failures in the last 20 calls: 35%, still below half
    assert breaker.state is CLOSED
    play(breaker, "FFS")  # 9 in the last 20
    assert breaker.state is CLOSED
    play(breaker, "F")  # 10 in the last 20: half
    assert breaker.state is OPEN


async def test_a_failure_rate_cuts_a_dead_server_off_after_rate_times_window_calls() -> None:
    breaker = CircuitBreaker("search", RATE_POLICY, clock=FakeClock())
    play(breaker, "FFFFFFFFF")  # 100% of 9 calls, but the share is of a window of 20
    assert breaker.state is CLOSED
    assert breaker.failure_summary() == "9 of the last 9 calls failed"
    play(breaker, "F")  # 10: half of 20
    assert breaker.state is OPEN


async def test_a_failure_rate_is_not_judged_on_the_first_few_calls_alone() -> None:
    # Five failures in the first eight calls: 62% of what was seen, a quarter of a window.
    clock = FakeClock()
    breaker = CircuitBreaker("search", RATE_POLICY, clock=clock)
    play(breaker, "FSFFSFSF")
    assert breaker.state is CLOSED
    # Nor on the first few calls after the breaker closed again.
    play(breaker, "FFFFF")  # ten failures in thirteen calls
    assert breaker.state is OPEN
    clock.now += RATE_POLICY.reset_timeout
    breaker.record_success(breaker.admit())  # the trial
    assert breaker.state is CLOSED
    play(breaker, "FSFFSFSF")
    assert breaker.state is CLOSED


async def test_a_failure_rate_rarely_opens_on_a_server_failing_one_call_in_four() -> None:
    # 300 starts of 500 calls each; judging the share over the calls seen so far opened
    # about one start in ten here (five failures among the first ten calls).
    rng = random.Random(7)
    policy = BreakerPolicy(failure_threshold=5, reset_timeout=30.0, failure_rate=0.5)
    opened = 0
    for _ in range(300):
        breaker = CircuitBreaker("search", policy, clock=FakeClock())
        try:
            play(breaker, "".join("F" if rng.random() < 0.25 else "S" for _ in range(500)))
        except BreakerOpenError:
            opened += 1
    assert opened == 0


async def test_a_closed_breaker_forgets_the_failures_that_opened_it() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker("search", RATE_POLICY, clock=clock)
    play(breaker, "FFFFFFFFFF")
    assert breaker.state is OPEN
    clock.now += RATE_POLICY.reset_timeout
    breaker.record_success(breaker.admit())  # the trial
    assert breaker.state is CLOSED
    play(breaker, "SFFFFFFFFF")  # nine failures since it closed: the old ten are gone
    assert breaker.state is CLOSED


def test_a_failure_rate_policy_is_checked() -> None:
    with pytest.raises(ValueError, match="failure_rate"):
        BreakerPolicy(failure_rate=1.5)
    with pytest.raises(ValueError, match="window"):
        BreakerPolicy(failure_threshold=5, failure_rate=0.5, window=4)


async def test_cancelled_calls_count_as_neither_success_nor_failure() -> None:
    breaker = CircuitBreaker("search", POLICY, clock=FakeClock())
    for _ in range(4):
        breaker.record_failure(breaker.admit())
    async with asyncio.TaskGroup() as tg:
        calls = [HeldCall(tg, breaker) for _ in range(10)]
        await all_entered(calls)
        for call in calls:
            call.task.cancel()
        async with asyncio.timeout(WAIT):
            await asyncio.wait([call.task for call in calls])
    assert all(call.task.cancelled() for call in calls)
    # Not a success (the count of 4 survives) and not a failure (the breaker is still closed).
    assert breaker.failure_count == 4
    assert breaker.state is CLOSED
    breaker.record_failure(breaker.admit())
    assert breaker.state is OPEN


async def test_a_cancelled_trial_frees_the_slot_and_the_next_caller_becomes_the_trial() -> None:
    clock, transitions = FakeClock(), Transitions()
    breaker = CircuitBreaker("search", POLICY, clock=clock, on_state_change=transitions)
    trip(breaker)
    clock.now = T0 + 30
    async with asyncio.TaskGroup() as tg:
        first = HeldCall(tg, breaker)
        await all_entered([first])
        assert not breaker.allows_calls()
        first.task.cancel()
        async with asyncio.timeout(WAIT):
            await asyncio.wait([first.task])
        assert first.task.cancelled()
        assert breaker.state is HALF_OPEN
        assert breaker.allows_calls()

        second = HeldCall(tg, breaker)
        await all_entered([second])
        second.succeed()
        assert await second.result() == "ok"
    assert breaker.state is CLOSED
    assert transitions.pairs() == [(CLOSED, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, CLOSED)]


async def test_guard_counts_errors_that_are_not_the_servers_fault_as_successes() -> None:
    def is_failure(exc: BaseException) -> bool:
        return not isinstance(exc, ToolRejected)

    breaker = CircuitBreaker("search", POLICY, clock=FakeClock())
    async with asyncio.TaskGroup() as tg:
        down = [HeldCall(tg, breaker, is_failure) for _ in range(4)]
        rejected = HeldCall(tg, breaker, is_failure)
        await all_entered([*down, rejected])
        for call in down:
            call.fail()
        assert await results(down) == ["failed"] * 4
        assert breaker.failure_count == 4
        rejected.fail(ToolRejected())
        assert await rejected.result() == "rejected"
    assert breaker.failure_count == 0
    assert breaker.state is CLOSED


async def test_guard_treats_every_exception_as_a_failure_by_default() -> None:
    breaker = CircuitBreaker("search", POLICY, clock=FakeClock())
    for _ in range(5):
        with pytest.raises(ToolRejected):
            async with breaker.guard():
                raise ToolRejected()
    assert breaker.state is OPEN
    with pytest.raises(BreakerOpenError):
        async with breaker.guard():
            pytest.fail("a refused call's body must not run")


async def test_on_state_change_is_called_once_per_transition_with_the_old_and_new_state() -> None:
    clock, transitions = FakeClock(), Transitions()
    breaker = CircuitBreaker("search", POLICY, clock=clock, on_state_change=transitions)
    late = [breaker.admit() for _ in range(20)]
    trip(breaker)
    for permit in late:
        breaker.record_failure(permit)
    clock.now = T0 + 30
    assert breaker.state is HALF_OPEN
    # Reading the state is not a transition; the next admission is.
    assert transitions.seen == [("search", CLOSED, OPEN)]
    breaker.record_failure(breaker.admit())
    clock.now = T0 + 60
    breaker.record_success(breaker.admit())
    assert transitions.seen == [
        ("search", CLOSED, OPEN),
        ("search", OPEN, HALF_OPEN),
        ("search", HALF_OPEN, OPEN),
        ("search", OPEN, HALF_OPEN),
        ("search", HALF_OPEN, CLOSED),
    ]


async def test_a_failing_state_change_callback_is_logged_and_does_not_break_the_breaker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def explode(name: str, old: BreakerState, new: BreakerState) -> None:
        raise RuntimeError("metrics backend down")

    clock = FakeClock()
    breaker = CircuitBreaker("search", POLICY, clock=clock, on_state_change=explode)
    trip(breaker)
    clock.now = T0 + 30
    breaker.record_success(breaker.admit())
    assert breaker.state is CLOSED
    assert breaker._storage.state == pybreaker.STATE_CLOSED
    assert "on_state_change of circuit breaker 'search' failed" in caplog.text


async def test_retry_after_is_the_time_left_until_a_trial_may_be_admitted() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker("search", POLICY, clock=clock)
    trip(breaker)
    for elapsed, left in [(0.0, 30.0), (12.5, 17.5), (29.75, 0.25)]:
        clock.now = T0 + elapsed
        assert not breaker.allows_calls()
        with pytest.raises(BreakerOpenError) as refused:
            breaker.admit()
        assert refused.value.breaker_name == "search"
        assert refused.value.state is OPEN
        assert refused.value.retry_after == pytest.approx(left)

    clock.now = T0 + 30
    breaker.admit()
    with pytest.raises(BreakerOpenError) as refused:
        breaker.admit()
    assert refused.value.state is HALF_OPEN
    assert refused.value.retry_after == 0.0
    assert "trial call is still in flight" in str(refused.value)


async def test_state_reports_half_open_once_the_reset_timeout_has_elapsed() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker("search", POLICY, clock=clock)
    assert breaker.state is CLOSED
    trip(breaker)
    clock.now = T0 + 29.9
    assert breaker.state is OPEN
    assert not breaker.allows_calls()
    clock.now = T0 + 30
    assert breaker.state is HALF_OPEN
    assert breaker.allows_calls()


async def test_recording_a_permit_twice_changes_nothing() -> None:
    clock, transitions = FakeClock(), Transitions()
    breaker = CircuitBreaker("search", POLICY, clock=clock, on_state_change=transitions)
    failed = breaker.admit()
    breaker.record_failure(failed)
    breaker.record_failure(failed)
    breaker.record_success(failed)
    assert breaker.failure_count == 1

    succeeded = breaker.admit()
    breaker.record_success(succeeded)
    breaker.record_failure(succeeded)
    assert breaker.failure_count == 0

    trip(breaker)
    clock.now = T0 + 30
    trial = breaker.admit()
    breaker.release(trial)
    breaker.record_failure(trial)
    assert breaker.state is HALF_OPEN
    second_trial = breaker.admit()
    breaker.record_success(second_trial)
    breaker.record_success(second_trial)
    breaker.release(trial)
    assert breaker.state is CLOSED
    assert transitions.pairs() == [(CLOSED, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, CLOSED)]


async def test_a_permit_remembers_its_generation_and_whether_it_is_the_trial() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker("search", POLICY, clock=clock)
    before = breaker.admit()
    assert not before.is_trial
    trip(breaker)
    clock.now = T0 + 30
    trial = breaker.admit()
    assert isinstance(trial, Permit)
    assert trial.is_trial
    assert trial.generation > before.generation
    assert not hasattr(trial, "__dict__")


def test_policy_rejects_a_threshold_below_one_and_a_negative_timeout() -> None:
    with pytest.raises(ValueError, match="failure_threshold"):
        BreakerPolicy(failure_threshold=0)
    with pytest.raises(ValueError, match="reset_timeout"):
        BreakerPolicy(reset_timeout=-1.0)


# pybreaker's own calling() under asyncio: the defects the module exists to avoid. If one of
# these starts failing, pybreaker has fixed that defect and the gate may be simplified.


class PybreakerCall:
    """One call inside raw ``pybreaker.CircuitBreaker.calling()``, held until the test ends it.

    ``settled`` is set once the call is inside the block or was refused on entry.
    """

    def __init__(self, tg: asyncio.TaskGroup, cb: pybreaker.CircuitBreaker) -> None:
        self.settled = asyncio.Event()
        self.entered = False
        self._outcome: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.task = tg.create_task(self._run(cb))

    async def _run(self, cb: pybreaker.CircuitBreaker) -> str:
        try:
            with cb.calling():
                self.entered = True
                self.settled.set()
                await self._outcome
        except Exception as exc:
            self.settled.set()
            return type(exc).__name__
        return "ok"

    def succeed(self) -> None:
        self._outcome.set_result(None)

    def fail(self) -> None:
        self._outcome.set_exception(ServerDown())


async def all_settled(calls: list[PybreakerCall]) -> None:
    async with asyncio.timeout(WAIT):
        for call in calls:
            await call.settled.wait()


async def test_pybreaker_calling_lets_late_failures_reopen_it_and_raise_its_count() -> None:
    transitions: list[tuple[str | None, str]] = []

    class Listener(pybreaker.CircuitBreakerListener):
        def state_change(
            self,
            cb: pybreaker.CircuitBreaker,
            old_state: pybreaker.CircuitBreakerState | None,
            new_state: pybreaker.CircuitBreakerState,
        ) -> None:
            transitions.append((old_state.name if old_state else None, new_state.name))

    cb = pybreaker.CircuitBreaker(fail_max=2, reset_timeout=60, listeners=[Listener()])
    async with asyncio.TaskGroup() as tg:
        calls = [PybreakerCall(tg, cb) for _ in range(5)]
        await all_settled(calls)
        assert all(call.entered for call in calls)
        for call in calls[:2]:
            call.fail()
        async with asyncio.timeout(WAIT):
            await asyncio.wait([call.task for call in calls[:2]])
        assert cb.current_state == pybreaker.STATE_OPEN
        long_ago = datetime(2000, 1, 1, tzinfo=UTC)
        cb._state_storage.opened_at = long_ago
        for call in calls[2:]:
            call.fail()
    assert cb.fail_counter == 5  # defect 3: counted while open
    reopened_at = cb._state_storage.opened_at
    assert reopened_at is not None
    assert reopened_at > long_ago  # defect 1: the open window restarted
    assert transitions == [("closed", "open")] + [("open", "open")] * 3  # ... three times


async def test_pybreaker_calling_lets_every_waiting_caller_through_in_half_open() -> None:
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=0)
    with pytest.raises(pybreaker.CircuitBreakerError), cb.calling():
        raise ServerDown()
    assert cb.current_state == pybreaker.STATE_OPEN
    async with asyncio.TaskGroup() as tg:
        calls = [PybreakerCall(tg, cb) for _ in range(5)]
        await all_settled(calls)
        assert cb.current_state == pybreaker.STATE_HALF_OPEN
        assert all(call.entered for call in calls)  # defect 2: five trial calls at once
        for call in calls:
            call.succeed()


async def test_pybreaker_calling_counts_a_cancelled_call_as_a_failure() -> None:
    cb = pybreaker.CircuitBreaker(fail_max=5)
    async with asyncio.TaskGroup() as tg:
        call = PybreakerCall(tg, cb)
        await all_settled([call])
        call.task.cancel()
    assert call.task.cancelled()
    assert cb.fail_counter == 1  # defect 4
