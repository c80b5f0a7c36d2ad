"""Pacing by the endpoint's rate limits: the header parser (property-based), and bursts
against the LLM simulator enforcing a limit, through both transports and a real sidecar.

The simulator answers 429 past ``--ratelimit-requests`` per ``--ratelimit-window-s``; each
burst here is made so that sending it unpaced gets 429s (a test shows it does), and paced
gets none.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar import testing
from sidecar.config import RetryPolicy
from sidecar.errors import ModelError, ModelUnavailable
from sidecar.llm.model import ModelRequest
from sidecar.llm.openai_model import OpenAICompatibleModel
from sidecar.llm.pacing import (
    MAX_RESET_S,
    PACING_WAIT,
    PROBE_EVERY,
    Pacer,
    Pacers,
    RateLimits,
    parse_duration,
    rate_limits,
)
from sidecar.llm.transport import retry_after
from sidecar.testing import ServerProcess
from tests.support.stack import scrape

TRANSPORTS = ["direct", "sdk"]
HELLO = ModelRequest([{"role": "user", "content": "hello"}], [], False, 20)
LIMIT = 4  # requests per window of the burst simulator
BURST = 10  # calls in a burst: more than two windows' worth


# -- the header parser -----------------------------------------------------------------


def groq(seconds: float) -> str:
    """Groq's notation (``2m59.56s``, ``7.66s``), as its headers show it."""
    minutes, rest = divmod(seconds, 60.0)
    return f"{int(minutes)}m{rest:.2f}s" if minutes else f"{rest:.2f}s"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2m59.56s", 179.56),
        ("7.66s", 7.66),
        ("120ms", 0.12),
        ("1h2m3s", 3723.0),
        ("6m0s", 360.0),
        ("0s", 0.0),
        ("30", 30.0),
        ("1.5", 1.5),
        (" 7.66s ", 7.66),
    ],
)
def test_reset_durations_in_the_notations_providers_send_are_read(
    text: str, seconds: float
) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["", "s", "-1s", "1x", "1m 2s", "ms", "nan", "inf", "1e400", "1741305600000"]
)
def test_anything_else_is_no_duration(text: str) -> None:
    assert parse_duration(text) is None


@pytest.mark.property
@given(st.floats(min_value=0, max_value=86_400, allow_nan=False))
def test_groqs_notation_reads_back_as_the_seconds_it_shows(seconds: float) -> None:
    shown = groq(seconds)
    parsed = parse_duration(shown)
    assert parsed is not None
    minutes, rest = shown.split("m") if "m" in shown else ("0", shown)
    assert parsed == pytest.approx(int(minutes) * 60 + float(rest.rstrip("s")))
    assert abs(parsed - seconds) <= 0.005 + 1e-9 * seconds


@pytest.mark.property
@given(st.integers(min_value=0, max_value=10**7))
def test_milliseconds_read_as_seconds(ms: int) -> None:
    parsed = parse_duration(f"{ms}ms")
    assert parsed == pytest.approx(ms / 1000)


@pytest.mark.property
@given(st.text(max_size=80))
def test_any_text_is_a_finite_duration_in_range_or_none(text: str) -> None:
    parsed = parse_duration(text)
    assert parsed is None or (math.isfinite(parsed) and 0 <= parsed <= MAX_RESET_S)


HEADER_NAMES = [
    f"x-ratelimit-{kind}-{what}"
    for kind in ("limit", "remaining", "reset")
    for what in ("requests", "tokens")
]


@pytest.mark.property
@given(
    st.dictionaries(
        st.sampled_from(HEADER_NAMES),
        st.one_of(st.text(max_size=30), st.integers(-(10**20), 10**20).map(str)),
    )
)
def test_any_rate_limit_headers_are_read_as_counts_and_durations_or_ignored(
    headers: dict[str, str],
) -> None:
    limits = rate_limits(headers)
    for count in (
        limits.limit_requests,
        limits.remaining_requests,
        limits.limit_tokens,
        limits.remaining_tokens,
    ):
        assert count is None or (isinstance(count, int) and count >= 0)
    for reset in (limits.reset_requests, limits.reset_tokens):
        assert reset is None or 0 <= reset <= MAX_RESET_S


async def test_a_pacer_that_knows_no_limits_never_holds_a_request_back() -> None:
    pacer = Pacer()
    tickets = [await pacer.acquire(10, deadline=math.inf) for _ in range(100)]
    assert all(t.waited == 0 for t in tickets)
    for ticket in tickets:
        ticket.report(rate_limits({}))
    assert pacer.delay(10) == 0


async def test_requests_in_flight_count_against_the_reported_room() -> None:
    pacer = Pacer()
    first = await pacer.acquire(1, deadline=math.inf)
    first.report(
        rate_limits(
            {
                "x-ratelimit-limit-requests": "3",
                "x-ratelimit-remaining-requests": "2",
                "x-ratelimit-reset-requests": "30s",
            }
        )
    )
    held = [await pacer.acquire(1, deadline=math.inf) for _ in range(2)]
    assert 29 < pacer.delay(1) <= 30.1  # two in flight take the room that was left
    with pytest.raises(ModelUnavailable) as info:
        await pacer.acquire(1, deadline=time.monotonic() + 1)
    assert info.value.code == PACING_WAIT and info.value.retry_after is not None
    for ticket in held:
        ticket.release()
    assert pacer.delay(1) == 0


# -- bursts against the simulator --------------------------------------------------------


@pytest.fixture(scope="module")
def limited() -> Iterator[ServerProcess]:
    flags = ["--ratelimit-requests", str(LIMIT), "--ratelimit-window-s", "1"]
    with testing.simulator(*flags, "--enforce-ratelimits") as process:
        yield process


@pytest.fixture(scope="module")
def slow_window() -> Iterator[ServerProcess]:
    flags = ["--ratelimit-requests", "1", "--ratelimit-window-s", "600"]
    with testing.simulator(*flags, "--enforce-ratelimits") as process:
        yield process


async def sim(address: str, method: str, path: str) -> Any:
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, f"http://{address}/sim{path}") as response,
    ):
        response.raise_for_status()
        return await response.json()


@pytest.fixture
async def fresh(limited: ServerProcess) -> AsyncIterator[str]:
    await sim(limited.address, "POST", "/reset")
    yield limited.address


def model(
    address: str, transport: str, *, pacing: bool = True, **limits: Any
) -> OpenAICompatibleModel:
    """A model client of its own pacer; ``limits``: its input and output token limits."""
    return OpenAICompatibleModel(
        base_url=f"http://{address}/openai/v1",
        api_key="test",
        model="llm-simulator",
        retry=RetryPolicy(max_attempts=1),  # a 429 fails the call: none may happen
        timeout=20,
        transport=transport,
        pacing=pacing,
        pacers=Pacers(),
        **limits,
        environ={},
    )


async def burst(client: OpenAICompatibleModel) -> list[Any]:
    await client.complete(HELLO)  # one call shows the limits
    return await asyncio.gather(
        *(client.complete(HELLO) for _ in range(BURST)), return_exceptions=True
    )


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_paced_burst_gets_no_429(fresh: str, transport: str) -> None:
    client = model(fresh, transport)
    try:
        results = await burst(client)
    finally:
        await client.close()
    assert not [r for r in results if isinstance(r, BaseException)]
    stats = await sim(fresh, "GET", "/stats")
    assert stats["by_status"] == {"200": BURST + 1}
    assert sum(1 for r in results if r.paced > 0) >= BURST - LIMIT


async def test_the_same_burst_unpaced_gets_429s(fresh: str) -> None:
    client = model(fresh, "direct", pacing=False)
    try:
        results = await burst(client)
    finally:
        await client.close()
    failed = [r for r in results if isinstance(r, ModelError)]
    assert failed and all(r.code == "model_rate_limited" for r in failed)
    assert (await sim(fresh, "GET", "/stats"))["by_status"]["429"] == len(failed)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_call_whose_deadline_cannot_absorb_the_wait_fails_at_once_unsent(
    slow_window: ServerProcess, transport: str
) -> None:
    await sim(slow_window.address, "POST", "/reset")
    client = model(slow_window.address, transport)
    try:
        await client.complete(HELLO)  # the window's one request: nothing is left for 600 s
        with pytest.raises(ModelUnavailable) as info:
            await client.complete(ModelRequest(HELLO.messages, [], False, 5))
    finally:
        await client.close()
    assert info.value.code == PACING_WAIT and "not sent" in info.value.message
    assert (await sim(slow_window.address, "GET", "/stats"))["requests"] == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_after_a_429_every_call_waits_out_its_retry_after(fresh: str, transport: str) -> None:
    body = '{"error": {"message": "Rate limit reached", "type": "requests"}}'
    fault = {"kind": "raw", "status": 429, "body": body, "headers": {"retry-after": "600"}}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://{fresh}/sim/faults", json={"faults": [fault]}) as response,
    ):
        response.raise_for_status()
    client = model(fresh, transport)
    try:
        with pytest.raises(ModelUnavailable) as first:
            await client.complete(HELLO)
        with pytest.raises(ModelUnavailable) as second:
            await client.complete(HELLO)
    finally:
        await client.close()
    assert first.value.code == "model_rate_limited" and first.value.retry_after == 600
    assert second.value.code == PACING_WAIT
    assert (await sim(fresh, "GET", "/stats"))["requests"] == 1


# -- through a sidecar -----------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_burst_of_runs_is_paced_with_the_wait_in_their_timelines(
    fresh: str, tmp_path: Path, transport: str
) -> None:
    config = testing.sidecar_config(fresh, {})
    config["model"].update(transport=transport, retry={"max_attempts": 1})
    config["telemetry"] = {"metrics": {"enabled": True, "port": 0}}
    with testing.sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:

            async def run(session_id: str) -> agent_pb2.RunResult:
                return (await client.run(session_id, "hello", timeout=30)).result

            sessions = [(await client.create_session()).session_id for _ in range(BURST + 1)]
            await run(sessions[0])
            results = await asyncio.gather(*(run(s) for s in sessions[1:]))
        metrics = await scrape(side)
    assert [r.stop_reason for r in results] == [agent_pb2.STOP_REASON_ANSWERED] * BURST
    assert "429" not in (await sim(fresh, "GET", "/stats"))["by_status"]
    pacing = [
        stage
        for r in results
        for stage in r.timeline.stages
        if stage.name == "model_pacing" and stage.kind == agent_pb2.STAGE_KIND_QUEUE
    ]
    # The burst leaves at once, but may straddle a window's end: at most two windows'
    # worth go unpaced.
    assert len(pacing) >= BURST - 2 * LIMIT
    waits = [stage.duration.ToTimedelta().total_seconds() for stage in pacing]
    assert all(wait > 0 for wait in waits)
    # The provider's wait has a metric of its own, apart from the sidecar's queue stage.
    profile = {"profile": "default"}
    assert metrics.get("agent_sidecar_model_pacing_seconds_count", **profile) == len(pacing)
    assert metrics.get("agent_sidecar_model_pacing_seconds_sum", **profile) == pytest.approx(
        sum(waits), rel=1e-3, abs=1e-3
    )
    queue = metrics.get("agent_sidecar_stage_duration_seconds_sum", stage="queue", **profile)
    assert queue < sum(waits)


async def test_a_run_that_cannot_wait_for_the_rate_limit_fails_with_that_reason(
    slow_window: ServerProcess, tmp_path: Path
) -> None:
    await sim(slow_window.address, "POST", "/reset")
    config = testing.sidecar_config(slow_window.address, {})
    with testing.sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            first = (await client.run(session.session_id, "hello", timeout=10)).result
            second = (await client.run(session.session_id, "hello again", timeout=5)).result
    assert first.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    assert second.stop_reason == agent_pb2.STOP_REASON_MODEL_ERROR
    assert second.error.code == PACING_WAIT and second.error.retryable
    assert (await sim(slow_window.address, "GET", "/stats"))["requests"] == 1


def report(pacer: Pacer, remaining: int, reset: str) -> None:
    ticket = pacer._admit(1, 0.0, time.monotonic())
    ticket.report(
        rate_limits(
            {
                "x-ratelimit-limit-requests": "10",
                "x-ratelimit-remaining-requests": str(remaining),
                "x-ratelimit-reset-requests": reset,
            }
        )
    )


async def test_within_a_window_the_lowest_count_reported_holds() -> None:
    pacer = Pacer()
    report(pacer, 0, "30s")
    report(pacer, 3, "30s")  # an earlier request's answer, arriving late
    assert pacer.delay(1) > 29


async def test_a_sooner_reset_replaces_the_one_known() -> None:
    pacer = Pacer()
    report(pacer, 0, "10m")
    report(pacer, 3, "1s")
    assert pacer.delay(1) == 0


def test_each_api_key_has_a_pacer_of_its_own() -> None:
    # Rate limits are per account: another organisation's key has its own.
    pacers = Pacers()
    first = pacers.get("https://api.groq.com/openai/v1/", "m", "key-a")
    assert pacers.get("https://api.groq.com/openai/v1", "m", "key-a") is first
    assert pacers.get("https://api.groq.com/openai/v1", "m", "key-b") is not first
    assert pacers.get("https://api.groq.com/openai/v1", "other", "key-a") is not first
    assert pacers.get("https://api.groq.com/openai/v1", "m", None) is not first


# -- what a response says about waiting is a bounded hint ------------------------------


class FakeClock:
    """The pacer's clock, stepped by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


CEILING = 60.0
_SLACK = 0.05  # the pacer's own slack past a reported reset, and rounding
_HUGE = st.one_of(
    st.sampled_from(["99999999", "1e12", "172799", "inf", "-5", "nan", "", "1" * 30]),
    st.floats(min_value=0, max_value=1e15, allow_nan=False).map(repr),
    st.integers(0, 10**15).map(str),
)
_RESET = st.one_of(
    st.sampled_from(["47h59m", "47h59m59s", "23h", "2m59.56s", "0s", "6m0s"]),
    st.floats(min_value=0, max_value=MAX_RESET_S, allow_nan=False).map(lambda s: f"{s}s"),
)


@st.composite
def hostile_answers(draw: st.DrawFn) -> tuple[dict[str, str], bool]:
    """A response's headers (any of the header families, values from tiny to absurd)
    and whether its status was a success."""
    headers: dict[str, str] = {}
    if draw(st.booleans()):
        headers[draw(st.sampled_from(["retry-after", "retry-after-ms"]))] = draw(_HUGE)
    for what in ("requests", "tokens"):
        if draw(st.booleans()):
            headers[f"x-ratelimit-remaining-{what}"] = str(draw(st.integers(0, 5)))
            headers[f"x-ratelimit-reset-{what}"] = draw(_RESET)
            if draw(st.booleans()):
                headers[f"x-ratelimit-limit-{what}"] = str(draw(st.integers(0, 10**6)))
    return headers, draw(st.booleans())


def _answer(pacer: Pacer, clock: FakeClock, headers: dict[str, str], ok: bool) -> None:
    ticket = pacer._admit(1, 0.0, clock())
    ticket.report(rate_limits(headers, None if ok else retry_after(headers)), ok=ok)


@pytest.mark.property
@given(st.lists(hostile_answers(), min_size=1, max_size=4))
def test_no_answer_holds_requests_back_longer_than_the_ceiling(
    answers: list[tuple[dict[str, str], bool]],
) -> None:
    clock = FakeClock()
    pacer = Pacer(max_wait=CEILING, clock=clock)
    for headers, ok in answers:
        _answer(pacer, clock, headers, ok)
        assert pacer.delay(100) <= CEILING + _SLACK
    clock.now += CEILING + _SLACK
    assert pacer.delay(100) == 0


@pytest.mark.property
@given(st.lists(hostile_answers(), min_size=1, max_size=4))
async def test_a_long_hold_lets_a_probe_through_and_its_success_lifts_the_hold(
    answers: list[tuple[dict[str, str], bool]],
) -> None:
    clock = FakeClock()
    pacer = Pacer(max_wait=CEILING, clock=clock)
    for headers, ok in answers:
        _answer(pacer, clock, headers, ok)
    clock.now += PROBE_EVERY
    # Whatever was said, a request may go now: at once, or as the probe.
    ticket = await pacer.acquire(100, deadline=clock.now + 1)
    assert ticket.waited == 0
    ticket.report(rate_limits({}), ok=True)
    assert pacer.delay(100) == 0


async def test_a_probe_goes_only_when_nothing_is_in_flight_and_once_per_interval() -> None:
    clock = FakeClock()
    pacer = Pacer(max_wait=CEILING, clock=clock)
    _answer(pacer, clock, {"retry-after": "99999999"}, ok=False)
    assert pacer.delay(1) == pytest.approx(CEILING)
    with pytest.raises(ModelUnavailable) as early:  # before the interval: held, not probed
        await pacer.acquire(1, deadline=clock.now + 5)
    assert early.value.code == PACING_WAIT
    clock.now += PROBE_EVERY
    probe = await pacer.acquire(1, deadline=clock.now + 5)
    assert probe.probe and pacer.probes == 1
    with pytest.raises(ModelUnavailable):  # the probe is in flight: nobody else goes
        await pacer.acquire(1, deadline=clock.now + 5)
    probe.report(rate_limits({"retry-after": "99999999"}, 99999999.0), ok=False)
    clock.now += PROBE_EVERY / 2
    with pytest.raises(ModelUnavailable):  # renewed: the next probe is an interval away
        await pacer.acquire(1, deadline=clock.now + 1)
    clock.now += PROBE_EVERY / 2
    second = await pacer.acquire(1, deadline=clock.now + 1)
    assert second.probe and pacer.probes == 2
    second.report(rate_limits({}), ok=True)
    assert pacer.delay(1) == 0
    third = await pacer.acquire(1, deadline=clock.now + 1)
    assert not third.probe


async def test_a_success_sent_before_the_429_does_not_lift_its_hold() -> None:
    clock = FakeClock()
    pacer = Pacer(max_wait=CEILING, clock=clock)
    earlier = pacer._admit(1, 0.0, clock())
    clock.now += 0.1
    _answer(pacer, clock, {"retry-after": "20"}, ok=False)
    earlier.report(rate_limits({}), ok=True)  # answered after the 429 arrived
    assert pacer.delay(1) == pytest.approx(20)


async def test_the_token_budget_is_whole_again_at_its_reset() -> None:
    clock = FakeClock()
    pacer = Pacer(clock=clock)
    _answer(
        pacer,
        clock,
        {
            "x-ratelimit-limit-tokens": "1000",
            "x-ratelimit-remaining-tokens": "10",
            "x-ratelimit-reset-tokens": "2s",
        },
        ok=True,
    )
    assert pacer.delay(500) == pytest.approx(2.02, abs=0.01)  # 500 tokens do not fit
    assert pacer.delay(5) == 0  # 5 do
    clock.now += 2.05
    assert pacer.delay(500) == 0  # whole again: 1000 tokens


HOSTILE = {
    "retry-after": (429, {"retry-after": "99999999"}),
    "retry-after-ms": (503, {"retry-after-ms": "1e12"}),
    "reset": (
        200,
        {
            "x-ratelimit-limit-requests": "14400",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "47h59m",
        },
    ),
}
_COMPLETION = (
    '{"id": "chatcmpl-1", "object": "chat.completion", "model": "llm-simulator", '
    '"choices": [{"index": 0, "finish_reason": "stop", '
    '"message": {"role": "assistant", "content": "[simulated] ok"}}], '
    '"usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}'
)


@pytest.mark.parametrize("answer", sorted(HOSTILE))
async def test_one_hostile_answer_holds_later_runs_back_only_up_to_the_ceiling(
    fresh: str, tmp_path: Path, answer: str
) -> None:
    # The answer a hostile forward proxy (or a broken gateway) could inject: a later run
    # waits out the ceiling at most, then its request goes and is answered.
    status, headers = HOSTILE[answer]
    body = _COMPLETION if status == 200 else '{"error": {"message": "slow down"}}'
    fault = {"kind": "raw", "status": status, "body": body, "headers": headers}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://{fresh}/sim/faults", json={"faults": [fault]}) as response,
    ):
        response.raise_for_status()
    config = testing.sidecar_config(fresh, {})
    config["model"].update(max_rate_limit_wait=1.0, retry={"max_attempts": 1})
    with testing.sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            await client.run(session.session_id, "hello", timeout=30)  # meets the answer
            later = (await client.run(session.session_id, "hello again", timeout=30)).result
    assert later.stop_reason == agent_pb2.STOP_REASON_ANSWERED, later.error
    paced = [s for s in later.timeline.stages if s.name == "model_pacing"]
    assert paced and all(s.duration.ToTimedelta().total_seconds() <= 1.2 for s in paced)
    assert (await sim(fresh, "GET", "/stats"))["requests"] == 2


@pytest.mark.parametrize(
    "headers", [{"retry-after": "3600"}, {"retry-after-ms": "3600000"}], ids=["s", "ms"]
)
async def test_a_retry_waits_the_ceiling_at_most_whatever_the_answer_asks(
    fresh: str, tmp_path: Path, headers: dict[str, str]
) -> None:
    # Without pacing nothing holds the retry in a queue: the ceiling alone keeps an hour's
    # retry-after from outliving the run.
    body = '{"error": {"message": "slow down"}}'
    fault = {"kind": "raw", "status": 429, "body": body, "headers": headers}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://{fresh}/sim/faults", json={"faults": [fault]}) as response,
    ):
        response.raise_for_status()
    config = testing.sidecar_config(fresh, {})
    config["model"].update(
        max_rate_limit_wait=0.2, pacing=False, retry={"max_attempts": 2, "initial_backoff": 0.01}
    )
    with testing.sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            result = (await client.run(session.session_id, "hello", timeout=30)).result
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED, result.error
    [call] = [s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_MODEL_CALL]
    assert call.model_call.attempts == 2
    assert call.duration.ToTimedelta().total_seconds() < 20  # not the hour it asked for


def test_a_late_answer_from_an_older_window_does_not_make_the_new_one_look_whole() -> None:
    # Under load answers overtake each other: the answer to a request sent in the old
    # window (0 left, resetting at once) arrives after one sent in the new window told
    # of it (3 left, 1 s to go). Taken as news, the pacer would think the new window
    # whole again at the old reset, and send into a 429.
    clock = FakeClock()
    pacer = Pacer(clock=clock)
    limits = {"x-ratelimit-limit-requests": "4"}
    old = pacer._admit(1, 0.0, clock())
    clock.now += 0.5
    new = pacer._admit(1, 0.0, clock())
    clock.now += 0.6
    new.report(
        rate_limits(
            {**limits, "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1s"}
        ),
        ok=True,
    )
    old.report(
        rate_limits(
            {**limits, "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "0.05s"}
        ),
        ok=True,
    )
    clock.now += 0.2  # past the old window's reset, within the new one's
    assert pacer.delay(1) == pytest.approx(0.82, abs=0.01)


# -- input and output token limits the pacer counts itself ---------------------------------


async def test_output_held_for_a_request_in_flight_and_generated_output_fill_the_limit() -> None:
    clock = FakeClock()
    pacer = Pacer(clock=clock, output_limit=100, window=60.0)
    first = await pacer.acquire(10, deadline=math.inf, output=60)
    # 60 held for the first: a second expecting 60 more must wait for it.
    assert math.isinf(pacer.delay(10, output=60))
    first.report(RateLimits(), ok=True)  # its headers: the output is still being generated
    assert math.isinf(pacer.delay(10, output=60))
    first.settle(90)  # it generated 90: 10 are left in this window
    assert 59.9 < pacer.delay(10, output=60) <= 60.0
    assert pacer.delay(10, output=10) == 0
    clock.now += 60.0
    assert pacer.delay(10, output=60) == 0  # the 90 left the window


async def test_prompt_tokens_count_against_the_input_limit_as_they_are_sent() -> None:
    clock = FakeClock()
    pacer = Pacer(clock=clock, input_limit=1_000, window=60.0)
    ticket = await pacer.acquire(700, deadline=math.inf)
    ticket.release()
    clock.now += 20.0
    assert 39.9 < pacer.delay(400) <= 40.0  # the 700 leave the window 60 s after they went
    assert pacer.delay(300) == 0
    assert pacer.delay(5_000) == 0  # more than the whole limit: sent, the endpoint judges


@pytest.fixture(scope="module")
def output_limited() -> Iterator[ServerProcess]:
    flags = ["--ratelimit-output-tokens", "60", "--ratelimit-window-s", "2"]
    with testing.simulator(*flags, "--enforce-ratelimits") as process:
        yield process


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_burst_paced_by_the_output_limit_gets_no_429(
    output_limited: ServerProcess, transport: str
) -> None:
    await sim(output_limited.address, "POST", "/reset")
    client = model(output_limited.address, transport, output_tokens_per_minute=60, token_window=2.0)
    try:
        results = await burst(client)
    finally:
        await client.close()
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert sum(1 for r in results if r.paced > 0) >= 1
    assert (await sim(output_limited.address, "GET", "/stats"))["by_status"] == {"200": BURST + 1}


async def test_the_same_burst_without_the_output_limit_gets_otpm_429s(
    output_limited: ServerProcess,
) -> None:
    await sim(output_limited.address, "POST", "/reset")
    client = model(output_limited.address, "direct")
    try:
        results = await burst(client)
    finally:
        await client.close()
    failed = [r for r in results if isinstance(r, ModelError)]
    assert failed and all("output tokens per minute" in r.message for r in failed)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_call_that_got_a_long_429_is_woken_by_the_probe_not_the_ceiling(
    fresh: str, transport: str
) -> None:
    body = '{"error": {"message": "Rate limit reached", "type": "tokens"}}'
    fault = {"kind": "raw", "status": 429, "body": body, "headers": {"retry-after": "3600"}}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://{fresh}/sim/faults", json={"faults": [fault]}) as response,
    ):
        response.raise_for_status()
    client = OpenAICompatibleModel(
        base_url=f"http://{fresh}/openai/v1",
        api_key="test",
        model="llm-simulator",
        retry=RetryPolicy(max_attempts=2, initial_backoff=0.01, max_backoff=0.02),
        timeout=90,
        transport=transport,
        pacers=Pacers(),
        environ={},
    )
    started = time.monotonic()
    try:
        answered = await client.complete(ModelRequest(HELLO.messages, [], False, 90))
    finally:
        await client.close()
    took = time.monotonic() - started
    # The hold is cut to the 60 s ceiling; the retry goes as the probe, PROBE_EVERY after
    # the 429, and its success lifts the hold: it waits the probe interval, not the ceiling.
    assert answered.attempts == 2
    assert PROBE_EVERY - 0.5 <= answered.paced and took < PROBE_EVERY + 15
    assert (await sim(fresh, "GET", "/stats"))["requests"] == 2
