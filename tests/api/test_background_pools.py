"""A run slot is for a run that is running: on a real sidecar with two slots, runs waiting
for approval and callbacks hanging on a receiver that never answers each take a place in a
pool of their own, bounded in all and per principal, and no principal's waits or
deliveries keep another principal's run from starting (property-tested under many
principals)."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar.testing import ServerProcess
from tests.support.runs import CALLBACK_SECRET, events_of, receiver, state_becomes
from tests.support.stack import eventually, scripted_toolserver, sidecar, sidecar_config, simulator

COMPLETED = agent_pb2.RUN_STATE_COMPLETED
INPUT_REQUIRED = agent_pb2.RUN_STATE_INPUT_REQUIRED
DELIVERED = agent_pb2.CALLBACK_STATUS_DELIVERED
NAMES = [f"p{i}" for i in range(6)]
TOKENS = {name: f"{name}-token-0123456789" for name in NAMES}
WAITING, WAITING_EACH = 6, 2
DELIVERING, DELIVERING_EACH = 4, 2
REFUND = "Please refund order 20250101"  # waits for approval
QUICK = "hello there"  # answers in one step, no tool
BACKGROUND = {
    "flush_interval": 0.02,
    "poll_interval": 0.2,
    "max_running": 2,
    "max_waiting": WAITING,
    "max_waiting_per_principal": WAITING_EACH,
    "callbacks": {
        "allowed_hosts": ["127.0.0.1"],
        "allow_private_networks": True,
        "allow_http": True,
        "timeout": 120,  # a receiver that never answers holds each attempt this long
        "retry": {"max_attempts": 2, "initial_backoff": 0.05, "max_backoff": 0.1},
        "max_deliveries": DELIVERING,
        "max_deliveries_per_principal": DELIVERING_EACH,
    },
}


@pytest.fixture(scope="module")
def side(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with simulator() as sim, scripted_toolserver() as tools:
        principals = [
            {
                "name": name,
                "token_sha256": hashlib.sha256(token.encode()).hexdigest(),
                "callback_secret_env": "CALLBACK_SECRET",
            }
            for name, token in TOKENS.items()
        ]
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            background=BACKGROUND,
            auth={"principals": principals},
        )
        env = {"CALLBACK_SECRET": CALLBACK_SECRET}
        with sidecar(config, Path(tmp_path_factory.mktemp("pools")), env=env) as process:
            yield process


@pytest.fixture
async def clients(side: ServerProcess) -> AsyncIterator[dict[str, AgentClient]]:
    async with AsyncExitStack() as stack:
        found = {
            name: await stack.enter_async_context(AgentClient(side.address, token=token))
            for name, token in TOKENS.items()
        }
        await found["p0"].wait_ready(20)
        yield found


async def _start(client: AgentClient, text: str, url: str = "") -> agent_pb2.Run:
    session = (await client.create_session()).session_id
    return await client.start_run(session, text, callback_url=url)


async def _states(client: AgentClient, runs: list[agent_pb2.Run]) -> list[agent_pb2.Run]:
    return [await client.get_run(r.run_id) for r in runs]


async def _all_delivered(client: AgentClient, runs: list[agent_pb2.Run]) -> None:
    async def delivered() -> bool:
        return all(r.callback_status == DELIVERED for r in await _states(client, runs))

    await eventually(delivered, timeout=30, interval=0.1)


async def test_callbacks_to_a_receiver_that_never_answers_hold_no_run_slot(
    clients: dict[str, AgentClient],
) -> None:
    ann, bob = clients["p0"], clients["p1"]
    async with receiver() as dead, receiver() as alive:
        dead.hold()
        hung = [await _start(ann, QUICK, dead.url) for _ in range(4)]
        await dead.wait(DELIVERING_EACH)
        # Two slots, four finished runs whose callbacks hang: another run still starts,
        # and another principal's callback is delivered.
        other = await _start(bob, "two reads")
        assert (await state_becomes(bob, other.run_id, COMPLETED)).result.tool_calls == 2
        called = await _start(bob, QUICK, alive.url)
        (delivery,) = await alive.wait(1)
        assert delivery.headers["webhook-id"] == called.run_id
        # Ann's deliveries wait within her share: no more than two hang at once.
        assert len(dead.deliveries) == DELIVERING_EACH
        assert all(r.callback_status != DELIVERED for r in await _states(ann, hung))
        dead.released.set()
        await _all_delivered(ann, hung)
        assert {d.headers["webhook-id"] for d in dead.deliveries} == {r.run_id for r in hung}


async def test_runs_waiting_for_approval_hold_no_run_slot_and_wait_within_their_share(
    clients: dict[str, AgentClient],
) -> None:
    cat, dan = clients["p2"], clients["p3"]
    runs = [await _start(cat, REFUND) for _ in range(3)]

    async def settled() -> bool:
        states = Counter(r.state for r in await _states(cat, runs))
        return states == Counter({INPUT_REQUIRED: WAITING_EACH, COMPLETED: 1})

    # All three started on two slots; the third call found Cat's share of waits taken
    # and was denied at once, so its run went on.
    await eventually(settled, timeout=20, interval=0.05)
    found = await _states(cat, runs)
    (denied,) = [r for r in found if r.state == COMPLETED]
    events = await events_of(cat, denied.run_id)
    (finished,) = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
    assert finished.status == agent_pb2.TOOL_CALL_STATUS_DENIED
    assert "max_waiting_per_principal" in finished.content
    other = await _start(dan, "two reads")
    assert (await state_becomes(dan, other.run_id, COMPLETED)).result.tool_calls == 2
    # A decided run takes a slot again and finishes.
    waiting = [r for r in found if r.state == INPUT_REQUIRED]
    first = waiting[0]
    await cat.approve(first.session_id, first.pending_approvals[0].call_id, approved=True)
    assert (await state_becomes(cat, first.run_id, COMPLETED)).state == COMPLETED
    await cat.cancel_run(waiting[1].run_id)


_LOADS = st.dictionaries(
    st.sampled_from(NAMES[:5]),
    st.tuples(st.integers(0, 3), st.integers(0, 3)),  # (waits, deliveries)
    min_size=2,
    max_size=5,
)


@settings(max_examples=6)
@given(loads=_LOADS)
async def test_no_principals_waits_or_deliveries_keep_another_principals_run_from_starting(
    clients: dict[str, AgentClient], loads: dict[str, tuple[int, int]]
) -> None:
    outsider = clients[NAMES[5]]
    async with receiver() as dead:
        dead.hold()
        waits: dict[str, list[agent_pb2.Run]] = {}
        calls: dict[str, list[agent_pb2.Run]] = {}
        for name, (wait_count, call_count) in loads.items():
            client = clients[name]
            waits[name] = [await _start(client, REFUND) for _ in range(wait_count)]
            calls[name] = [await _start(client, QUICK, dead.url) for _ in range(call_count)]
        try:
            run = await _start(outsider, "two reads")
            assert (await state_becomes(outsider, run.run_id, COMPLETED)).state == COMPLETED
            # The pools held within their bounds, in all and per principal.
            waiting = {
                name: sum(r.state == INPUT_REQUIRED for r in await _states(clients[name], runs))
                for name, runs in waits.items()
            }
            assert all(n <= WAITING_EACH for n in waiting.values())
            assert sum(waiting.values()) <= WAITING
            owner = {r.run_id: name for name, runs in calls.items() for r in runs}
            hanging = Counter(owner[d.headers["webhook-id"]] for d in dead.deliveries)
            assert all(n <= DELIVERING_EACH for n in hanging.values())
            assert sum(hanging.values()) <= DELIVERING
        finally:
            dead.released.set()
            for name, runs in waits.items():
                for r in runs:
                    await clients[name].cancel_run(r.run_id)
            for name, runs in calls.items():
                await _all_delivered(clients[name], runs)
