"""The run-store contract, against every store: memory, SQLite and PostgreSQL.

What only a shared store does (leases that lapse, replicas claiming at once, decisions and
notifications between replicas) runs against PostgreSQL alone, with two stores over one
database standing for two replicas.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from sidecar.errors import QuotaExceeded, RunQueueFull, SessionBusy, SessionNotFound
from sidecar.sessions.postgres import PostgresSessionStore
from sidecar.sessions.runs import RunBounds, RunChange
from sidecar.sessions.sqlite import SqliteSessionStore
from sidecar.sessions.store import MemorySessionStore, SessionStore
from sidecar.testing import PostgresServer, create_database, drop_database
from sidecar.types import CallbackStatus, PendingApproval, RunRecord, RunState, StopReason, Turn
from tests.support.stack import eventually

ALL = ["memory", "sqlite", "postgres"]
BOUNDS = RunBounds(total=100)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


OpenStore = Callable[..., Awaitable[SessionStore]]


@pytest.fixture
async def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[OpenStore]:
    kind = request.param
    opened: list[SessionStore] = []
    server: PostgresServer | None = None
    dsn = ""
    if kind == "postgres":
        server = request.getfixturevalue("postgres_server")
        dsn = await create_database(server)

    async def open_(**options: Any) -> SessionStore:
        store: SessionStore
        if kind == "memory":
            options.pop("lease", None)
            options.pop("replica_id", None)
            options.pop("sweep_interval", None)
            store = MemorySessionStore(**options)
        elif kind == "sqlite":
            options.pop("lease", None)
            options.pop("replica_id", None)
            store = SqliteSessionStore(tmp_path / "sessions.db", **options)
        else:
            store = PostgresSessionStore(dsn, **options)
        await store.open()
        opened.append(store)
        return store

    yield open_
    for store in opened:
        await store.close()
    if server is not None:
        await drop_database(server, dsn)


def _run(session: str, *, principal: str = "", callback: str = "", when: float = 0.0) -> RunRecord:
    return RunRecord(
        run_id=uuid.uuid4().hex,
        session_key=session,
        principal=principal,
        input="do the thing",
        structured=False,
        state=RunState.SUBMITTED,
        create_time=when,
        update_time=when,
        callback_url=callback,
        callback_status=CallbackStatus.PENDING if callback else CallbackStatus.NONE,
    )


def _turn(run_id: str, answer: str = "done") -> Turn:
    return Turn(
        run_id=run_id,
        input="do the thing",
        answer=answer,
        stop_reason=StopReason.ANSWERED,
        start_time=1.0,
        end_time=2.0,
        messages=[{"role": "user", "content": "do the thing"}],
    )


async def _session(store: SessionStore, name: str = "") -> str:
    return (await store.create("default", name or uuid.uuid4().hex, {})).session_id


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_a_submitted_run_reads_back_and_pages_newest_first(open_store: OpenStore) -> None:
    store = await open_store()
    session = await _session(store)
    runs = []
    for i in range(5):
        run = _run(session, when=float(i))
        await store.runs.submit(run, owner=None, bounds=BOUNDS)
        # One active run per session: finish each before the next.
        (claimed,) = await store.runs.claim("me", 10)
        assert claimed.run_id == run.run_id and claimed.attempts == 1
        assert await store.runs.finish(
            run.run_id, "me", 1, state=RunState.COMPLETED, result=b"r", events=[], turn=None
        )
        runs.append(run.run_id)
    got = await store.runs.get(runs[0])
    assert got is not None
    assert (got.state, got.result, got.input, got.session_key) == (
        RunState.COMPLETED,
        b"r",
        "do the thing",
        session,
    )
    first = await store.runs.page(session, before=None, limit=2)
    assert [r.run_id for r in first] == runs[::-1][:2]
    assert all(r.result == b"" for r in first)  # listings leave results out
    rest = await store.runs.page(session, before=first[-1].ordinal, limit=10)
    assert [r.run_id for r in rest] == runs[::-1][2:]
    assert await store.runs.page(await _session(store), before=None, limit=10) == []


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_a_principals_runs_page_across_its_sessions_and_keep_their_callback_shape(
    open_store: OpenStore,
) -> None:
    store = await open_store()
    mine = [await _session(store, f"ann/{uuid.uuid4().hex}") for _ in range(3)]
    theirs = await _session(store, f"bo/{uuid.uuid4().hex}")
    started = []
    for i, session in enumerate([*mine, theirs]):
        run = _run(session, principal="bo" if session == theirs else "ann", when=float(i))
        run.callback_url, run.callback_shape, run.callback_token = "https://h/x", "a2a", f"t{i}"
        await store.runs.submit(run, owner=None, bounds=BOUNDS)
        started.append(run)
    first = await store.runs.page_of("ann", before=None, limit=2)
    rest = await store.runs.page_of("ann", before=first[-1].ordinal, limit=10)
    assert [r.run_id for r in first + rest] == [r.run_id for r in started[:3]][::-1]
    assert [r.run_id for r in await store.runs.page_of("bo", before=None, limit=10)] == [
        started[3].run_id
    ]
    assert await store.runs.page_of("cy", before=None, limit=10) == []
    got = await store.runs.get(started[1].run_id)
    assert got is not None and (got.callback_shape, got.callback_token) == ("a2a", "t1")
    assert (first[0].callback_shape, first[0].callback_token) == ("a2a", "t2")


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_a_callback_is_named_or_dropped_only_while_the_run_is_unfinished(
    open_store: OpenStore,
) -> None:
    store = await open_store()
    run = _run(await _session(store))
    await store.runs.submit(run, owner=None, bounds=BOUNDS)
    runs = store.runs
    assert await runs.set_callback(run.run_id, "https://h/a", "a2a", "t")
    assert await runs.set_callback(run.run_id, "https://h/a", "a2a", "t2")  # the same URL
    assert not await runs.set_callback(run.run_id, "https://h/b", "", "")  # another
    named = await runs.get(run.run_id)
    assert named is not None
    assert (named.callback_url, named.callback_token) == ("https://h/a", "t2")
    assert named.callback_status is CallbackStatus.PENDING
    assert await runs.set_callback(run.run_id, "", "", "")  # dropped
    dropped = await runs.get(run.run_id)
    assert dropped is not None and (dropped.callback_url, dropped.callback_status) == (
        "",
        CallbackStatus.NONE,
    )
    assert await runs.set_callback(run.run_id, "https://h/b", "", "")
    assert [r.run_id for r in await runs.claim("me", 10)] == [run.run_id]
    assert await runs.finish(
        run.run_id, "me", 1, state=RunState.COMPLETED, result=b"r", events=[], turn=None
    )
    assert not await runs.set_callback(run.run_id, "https://h/c", "", "")
    assert not await runs.set_callback(run.run_id, "", "", "")
    assert not await runs.set_callback("no-such-run", "https://h/c", "", "")
    finished = await runs.get(run.run_id)
    assert finished is not None and finished.callback_url == "https://h/b"
    assert finished.callback_status is CallbackStatus.PENDING  # its owner delivers it
    # After the end (A2A's push configs): not while the delivery is under way ...
    assert not await runs.set_callback(run.run_id, "", "", "", after_end=True)
    await runs.callback_done(run.run_id, "me", status=CallbackStatus.DELIVERED, attempts=1)
    # ... then dropped and named again, the delivery's outcome kept and nothing due.
    assert await runs.set_callback(run.run_id, "", "", "", after_end=True)
    assert await runs.set_callback(
        run.run_id, "https://h/c", "a2a", "t3", callback_id="cfg-1", after_end=True
    )
    assert not await runs.set_callback(run.run_id, "https://h/d", "", "", after_end=True)
    late = await runs.get(run.run_id)
    assert late is not None
    assert (late.callback_url, late.callback_token, late.callback_id) == (
        "https://h/c",
        "t3",
        "cfg-1",
    )
    assert late.callback_status is CallbackStatus.DELIVERED
    assert await runs.claim("me", 10) == []  # nothing to deliver


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_a_callback_named_after_a_run_ended_without_one_is_kept_and_never_due(
    open_store: OpenStore,
) -> None:
    store = await open_store()
    run = _run(await _session(store))
    await store.runs.submit(run, owner="me", bounds=BOUNDS)
    runs = store.runs
    assert await runs.finish(
        run.run_id, "me", 1, state=RunState.COMPLETED, result=b"r", events=[], turn=None
    )
    assert await runs.set_callback(
        run.run_id, "https://h/a", "a2a", "t", callback_id="mine", after_end=True
    )
    kept = await runs.get(run.run_id)
    assert kept is not None and (kept.callback_url, kept.callback_id) == ("https://h/a", "mine")
    assert kept.callback_status is CallbackStatus.NONE
    assert await runs.claim("other", 10) == []
    assert await runs.set_callback(run.run_id, "", "", "", after_end=True)
    gone = await runs.get(run.run_id)
    assert gone is not None and gone.callback_url == "" and gone.callback_id == ""


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_submissions_are_bounded_in_all_by_principal_and_by_session(
    open_store: OpenStore,
) -> None:
    store = await open_store()
    sessions = [await _session(store) for _ in range(4)]
    bounds = RunBounds(total=3, principal=2)
    await store.runs.submit(_run(sessions[0], principal="ann"), owner=None, bounds=bounds)
    with pytest.raises(SessionBusy):
        await store.runs.submit(_run(sessions[0], principal="ann"), owner=None, bounds=bounds)
    await store.runs.submit(_run(sessions[1], principal="ann"), owner=None, bounds=bounds)
    with pytest.raises(QuotaExceeded) as quota:
        await store.runs.submit(_run(sessions[2], principal="ann"), owner=None, bounds=bounds)
    assert quota.value.metadata["quota"] == "background_runs"
    await store.runs.submit(_run(sessions[2], principal="bob"), owner=None, bounds=bounds)
    with pytest.raises(RunQueueFull):
        await store.runs.submit(_run(sessions[3], principal="bob"), owner=None, bounds=bounds)
    with pytest.raises(SessionNotFound):
        await store.runs.submit(_run("no-such-session"), owner=None, bounds=BOUNDS)


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_only_the_owner_of_the_latest_attempt_writes(open_store: OpenStore) -> None:
    store = await open_store()
    run = _run(await _session(store))
    await store.runs.submit(run, owner="me", bounds=BOUNDS)
    assert await store.runs.claim("other", 10) == []  # owned already
    change = RunChange(events=[(1, b"one"), (2, b"two")], state=RunState.WORKING)
    assert not await store.runs.write(run.run_id, "other", 1, change)
    assert not await store.runs.write(run.run_id, "me", 2, change)
    assert await store.runs.events(run.run_id, 0, 10) == []
    assert await store.runs.write(run.run_id, "me", 1, change)
    pending = [
        PendingApproval(step=1, call_id="c1", tool_name="t", arguments="{}", destructive=True)
    ]
    waiting = RunChange(events=[(3, b"three")], state=RunState.INPUT_REQUIRED, pending=pending)
    assert await store.runs.write(run.run_id, "me", 1, waiting)
    assert await store.runs.write(
        run.run_id, "me", 1, RunChange(checkpoint=(1, b"cp"), unsafe_step=2)
    )
    got = await store.runs.get(run.run_id)
    assert got is not None
    assert (got.state, got.last_sequence, got.pending) == (RunState.INPUT_REQUIRED, 3, pending)
    assert (got.checkpoint_step, got.checkpoint, got.unsafe_step) == (1, b"cp", 2)
    assert await store.runs.events(run.run_id, 1, 10) == [(2, b"two"), (3, b"three")]
    assert await store.runs.events(run.run_id, 0, 1) == [(1, b"one")]


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_finishing_stores_the_turn_in_its_session_and_frees_it(open_store: OpenStore) -> None:
    store = await open_store()
    session = await _session(store)
    run = _run(session)
    await store.runs.submit(run, owner="me", bounds=BOUNDS)
    await store.begin_turn(session, run.run_id, run.input, 1.0)
    done = await store.runs.finish(
        run.run_id,
        "me",
        1,
        state=RunState.COMPLETED,
        result=b"result",
        events=[(1, b"last")],
        turn=_turn(run.run_id),
    )
    assert done
    stored = await store.get(session)
    assert stored is not None
    assert [(t.run_id, t.answer) for t in stored.turns] == [(run.run_id, "done")]
    await store.begin_turn(session, "next", "again", 3.0)  # the session is free
    got = await store.runs.get(run.run_id)
    assert got is not None and got.end_time > 0 and got.pending == []
    # Finished, it is nobody's, and the session may start another.
    assert await store.runs.claim("me", 10) == []
    await store.runs.submit(_run(session), owner=None, bounds=BOUNDS)


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_a_released_run_waits_until_it_is_due(open_store: OpenStore) -> None:
    clock = FakeClock()
    store = await open_store(clock=clock)
    run = _run(await _session(store))
    await store.runs.submit(run, owner="me", bounds=BOUNDS)
    await store.runs.release(run.run_id, "me", 1, not_before=clock.now + 5)
    assert await store.runs.claim("other", 10) == []
    clock.now += 6
    (claimed,) = await store.runs.claim("other", 10)
    assert claimed.attempts == 2
    assert not await store.runs.write(run.run_id, "me", 1, RunChange(state=RunState.WORKING))


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_a_callback_keeps_a_finished_run_owned_until_it_is_delivered(
    open_store: OpenStore,
) -> None:
    clock = FakeClock()
    store = await open_store(clock=clock)
    run = _run(await _session(store), callback="https://hooks.example.com/x")
    await store.runs.submit(run, owner="me", bounds=BOUNDS)
    await store.runs.finish(
        run.run_id, "me", 1, state=RunState.FAILED, result=b"r", events=[], turn=None
    )
    assert await store.runs.claim("other", 10) == []  # the finisher delivers it
    await store.runs.callback_done(
        run.run_id, "me", status=CallbackStatus.PENDING, attempts=1, not_before=clock.now + 10
    )
    assert await store.runs.claim("other", 10) == []
    clock.now += 11
    (claimed,) = await store.runs.claim("other", 10)
    assert (claimed.callback_status, claimed.callback_attempts) == (CallbackStatus.PENDING, 1)
    assert claimed.attempts == 1  # a finished run's attempts stay as they were
    await store.runs.callback_done(run.run_id, "other", status=CallbackStatus.DELIVERED, attempts=2)
    got = await store.runs.get(run.run_id)
    assert got is not None and got.callback_status is CallbackStatus.DELIVERED
    assert await store.runs.claim("other", 10) == []


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_cancellation_of_a_queued_run_and_a_request_to_an_owned_one(
    open_store: OpenStore,
) -> None:
    store = await open_store()
    queued, owned = _run(await _session(store)), _run(await _session(store))
    await store.runs.submit(queued, owner=None, bounds=BOUNDS)
    await store.runs.submit(owned, owner="me", bounds=BOUNDS)
    assert not await store.runs.cancel_submitted(owned.run_id, result=b"c", event=b"e")
    assert await store.runs.cancel_submitted(queued.run_id, result=b"c", event=b"e")
    got = await store.runs.get(queued.run_id)
    assert got is not None
    assert (got.state, got.result, got.last_sequence) == (RunState.CANCELED, b"c", 1)
    assert await store.runs.events(queued.run_id, 0, 10) == [(1, b"e")]
    await store.runs.request_cancel(owned.run_id)
    signals = await store.runs.renew("me", [owned.run_id, "gone"])
    assert signals.cancel == {owned.run_id}
    assert signals.lost == {"gone"}


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_runs_go_with_their_session_and_expire_after_their_retention(
    open_store: OpenStore,
) -> None:
    clock = FakeClock()
    store = await open_store(clock=clock, retention=60, idle_ttl=10, sweep_interval=3600)
    kept, deleted = await _session(store), await _session(store)
    old, active, gone = _run(kept), _run(await _session(store)), _run(deleted)
    for run in (old, active, gone):
        await store.runs.submit(run, owner="me", bounds=BOUNDS)
    await store.runs.finish(
        old.run_id, "me", 1, state=RunState.COMPLETED, result=b"", events=[(1, b"x")], turn=None
    )
    assert await store.delete(deleted)
    assert await store.runs.get(gone.run_id) is None
    assert (await store.runs.renew("me", [gone.run_id])).lost == {gone.run_id}
    clock.now += 61
    assert await store.runs.get(old.run_id) is None
    assert await store.runs.events(old.run_id, 0, 10) in ([], [(1, b"x")])  # until swept
    # A session with an active run does not expire while it waits.
    assert await store.get(active.session_key) is not None
    await store.runs.sweep()
    assert await store.runs.events(old.run_id, 0, 10) == []
    assert await store.runs.get(active.run_id) is not None


@pytest.mark.parametrize("open_store", ["sqlite"], indirect=True)
async def test_a_dead_processs_runs_are_anyones_when_the_file_is_opened_again(
    open_store: OpenStore,
) -> None:
    store = await open_store()
    session = await _session(store)
    run = _run(session)
    await store.runs.submit(run, owner="dead", bounds=BOUNDS)
    await store.runs.write(run.run_id, "dead", 1, RunChange(state=RunState.WORKING))
    await store.begin_turn(session, run.run_id, run.input, 1.0)
    await store.close()
    again = await open_store()
    (claimed,) = await again.runs.claim("alive", 10)
    assert (claimed.run_id, claimed.state, claimed.attempts) == (run.run_id, RunState.WORKING, 2)
    # Its turn was reported as interrupted; taking it up again claims the session anew.
    await again.resume_turn(session, run.run_id, run.input, 1.0)
    with pytest.raises(SessionBusy):
        await again.begin_turn(session, "other", "x", 2.0)


# -- what only a shared store does -----------------------------------------------------


@pytest.fixture
async def shared(postgres_server: PostgresServer) -> AsyncIterator[Callable[..., Any]]:
    dsn = await create_database(postgres_server)
    opened: list[PostgresSessionStore] = []

    async def open_(**options: Any) -> PostgresSessionStore:
        store = PostgresSessionStore(dsn, **options)
        await store.open()
        opened.append(store)
        return store

    open_.dsn = dsn  # type: ignore[attr-defined]
    yield open_
    for store in opened:
        await store.close()
    await drop_database(postgres_server, dsn)


async def test_replicas_claiming_at_once_never_take_the_same_run(
    shared: Callable[..., Any],
) -> None:
    a, b = await shared(), await shared()
    runs = []
    for _ in range(20):
        run = _run(await _session(a))
        await a.runs.submit(run, owner=None, bounds=BOUNDS)
        runs.append(run.run_id)
    got_a, got_b = await asyncio.gather(a.runs.claim(a.owner, 15), b.runs.claim(b.owner, 15))
    taken = [r.run_id for r in got_a] + [r.run_id for r in got_b]
    assert sorted(taken) == sorted(runs)


async def test_a_lapsed_lease_hands_the_run_over_and_fences_the_old_owner(
    shared: Callable[..., Any],
) -> None:
    a, b = await shared(lease=0.3), await shared(lease=0.3)
    session = await _session(a)
    run = _run(session)
    await a.runs.submit(run, owner=a.owner, bounds=BOUNDS)
    await a.begin_turn(session, run.run_id, run.input, 1.0)
    assert await a.runs.write(run.run_id, a.owner, 1, RunChange(state=RunState.WORKING))
    assert await b.runs.claim(b.owner, 10) == []  # A's lease holds
    await a.close()  # A stops renewing (its heartbeat ends with it)
    claimed: list[RunRecord] = []

    async def taken() -> bool:
        claimed.extend(await b.runs.claim(b.owner, 10))
        return bool(claimed)

    await eventually(taken)
    assert (claimed[0].run_id, claimed[0].attempts) == (run.run_id, 2)
    # The turn's start record goes over to B with the run.
    await b.resume_turn(session, run.run_id, run.input, 1.0)
    stale = await shared(lease=0.3, replica_id=a.owner)  # A again, still thinking it owns it
    assert not await stale.runs.write(run.run_id, a.owner, 1, RunChange(events=[(1, b"late")]))
    assert await b.runs.write(run.run_id, b.owner, 2, RunChange(events=[(1, b"mine")]))
    assert await b.runs.events(run.run_id, 0, 10) == [(1, b"mine")]
    # Nor does the stale owner finish it: no end, no event, no turn in the session.
    assert not await stale.runs.finish(
        run.run_id,
        a.owner,
        1,
        state=RunState.COMPLETED,
        result=b"stale",
        events=[(2, b"stale end")],
        turn=_turn(run.run_id),
    )
    got = await b.runs.get(run.run_id)
    assert got is not None and got.state is RunState.WORKING and got.end_time == 0
    assert await b.runs.events(run.run_id, 0, 10) == [(1, b"mine")]
    stored = await b.get(session)
    assert stored is not None and stored.turns == []


async def test_a_decision_on_another_replica_reaches_the_owner_once(
    shared: Callable[..., Any],
) -> None:
    a, b = await shared(), await shared()
    run = _run(await _session(a))
    await a.runs.submit(run, owner=a.owner, bounds=BOUNDS)
    notices: list[str] = []
    await a.runs.listen(notices.append)
    pending = [
        PendingApproval(step=1, call_id="c1", tool_name="t", arguments="{}", destructive=False)
    ]
    await a.runs.write(
        run.run_id, a.owner, 1, RunChange(state=RunState.INPUT_REQUIRED, pending=pending)
    )
    assert not await b.runs.decide(run.run_id, "other-call", True, "")
    assert await b.runs.decide(run.run_id, "c1", False, "not today")

    async def told() -> bool:
        return f"c:{run.run_id}" in notices

    await eventually(told)
    signals = await a.runs.renew(a.owner, [run.run_id])
    assert [(d.call_id, d.approved, d.reason) for d in signals.decisions] == [
        ("c1", False, "not today")
    ]
    assert (await a.runs.renew(a.owner, [run.run_id])).decisions == ()


async def test_stored_events_notify_every_listening_replica(shared: Callable[..., Any]) -> None:
    a, b = await shared(), await shared()
    run = _run(await _session(a))
    await a.runs.submit(run, owner=a.owner, bounds=BOUNDS)
    notices: list[str] = []
    await b.runs.listen(notices.append)
    await a.runs.write(run.run_id, a.owner, 1, RunChange(events=[(1, b"x")]))

    async def told() -> bool:
        return f"e:{run.run_id}" in notices

    await eventually(told)
    db = await asyncpg.connect(shared.dsn)  # type: ignore[attr-defined]
    try:
        assert await db.fetchval("SELECT count(*) FROM agent_run_events") == 1
    finally:
        await db.close()


def _keyed(session: str, principal: str, key: str, text: str = "do the thing") -> RunRecord:
    run = _run(session, principal=principal)
    run.request_id, run.input = key, text
    return run


@pytest.mark.parametrize("open_store", ALL, indirect=True)
async def test_a_request_id_names_one_run_per_principal_until_the_run_expires(
    open_store: OpenStore,
) -> None:
    clock = FakeClock()
    store = await open_store(clock=clock, retention=60, sweep_interval=3600)
    session, theirs = await _session(store), await _session(store)
    first = _keyed(session, "ann", "k-1")
    assert await store.runs.submit(first, owner=None, bounds=BOUNDS) is None
    # Sent again while it is active (the session busy): the first run, nothing stored.
    again = await store.runs.submit(_keyed(session, "ann", "k-1"), owner=None, bounds=BOUNDS)
    assert again is not None and (again.run_id, again.request_id) == (first.run_id, "k-1")
    # Another principal's key of the same name is its own.
    assert await store.runs.submit(_keyed(theirs, "bob", "k-1"), owner=None, bounds=BOUNDS) is None
    # At once, many times over: one run.
    racing = await _session(store)
    answers = await asyncio.gather(
        *(
            store.runs.submit(_keyed(racing, "ann", "k-2"), owner=None, bounds=BOUNDS)
            for _ in range(8)
        )
    )
    assert sum(a is None for a in answers) == 1
    assert len({a.run_id for a in answers if a is not None}) == 1
    # Finished, it is still the key's run; expired, the key starts another.
    (claimed, *_) = [r for r in await store.runs.claim("me", 10) if r.run_id == first.run_id]
    assert await store.runs.finish(
        first.run_id, "me", claimed.attempts, state=RunState.COMPLETED, result=b"", events=[],
        turn=None,
    )  # fmt: skip
    done = await store.runs.submit(_keyed(session, "ann", "k-1"), owner=None, bounds=BOUNDS)
    assert done is not None and done.run_id == first.run_id and done.state is RunState.COMPLETED
    clock.now += 61
    later = _keyed(session, "ann", "k-1")
    assert await store.runs.submit(later, owner=None, bounds=BOUNDS) is None
    fresh = await store.runs.get(later.run_id)
    assert fresh is not None and fresh.request_id == "k-1"
