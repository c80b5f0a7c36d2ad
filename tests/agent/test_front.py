"""A front without gRPC: a page of code that gets a runtime and calls it.

The runtime is built from a configuration in this process, against a real LLM simulator
and a real tool server (each its own process); no gRPC server is started. What a front
sees of a turn (its events, its result, its stored record) comes from the runtime alone,
and a reload never changes a turn that was admitted before it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.agent import Runtime
from sidecar.config import parse_config
from sidecar.security.identity import ANONYMOUS
from sidecar.testing import ServerProcess
from sidecar.types import (
    BudgetOverrun,
    Stage,
    StopReason,
    ToolCallStatus,
    ToolOutcome,
    ToolQuestion,
)
from tests.support.stack import SimControl, scripted_toolserver, sidecar_config, simulator


class Events:
    """A front's event sink: it keeps what the loop sends."""

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.text: list[str] = []
        self.finished: list[ToolOutcome] = []

    def text_delta(self, step: int, text: str) -> None:
        self.kinds.append("text_delta")
        self.text.append(text)

    def reasoning_delta(self, step: int, text: str) -> None:
        self.kinds.append("reasoning_delta")

    def tool_call_started(self, step: int, call_id: str, tool_name: str, arguments: str) -> None:
        self.kinds.append("tool_call_started")

    def tool_call_finished(self, step: int, outcome: ToolOutcome) -> None:
        self.kinds.append("tool_call_finished")
        self.finished.append(outcome)

    def approval_required(
        self,
        step: int,
        call_id: str,
        tool_name: str,
        arguments: str,
        destructive: bool,
        question: ToolQuestion | None = None,
    ) -> None:
        self.kinds.append("approval_required")

    def tool_call_progress(
        self,
        step: int,
        call_id: str,
        tool_name: str,
        progress: float,
        total: float | None,
        message: str,
    ) -> None:
        self.kinds.append("tool_call_progress")

    def step_finished(self, step: int, stages: list[Stage], total: float) -> None:
        self.kinds.append("step_finished")

    def budget_exceeded(self, overrun: BudgetOverrun) -> None:
        self.kinds.append("budget_exceeded")

    def backlog(self) -> None:
        return None


@pytest.fixture(scope="module")
def processes() -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with simulator() as sim, scripted_toolserver() as tools:
        yield sim, tools


def _config(processes: tuple[ServerProcess, ServerProcess], **profiles: Any) -> dict[str, Any]:
    sim, tools = processes
    config = sidecar_config(
        sim,
        [{"name": "scripted", "address": tools.address}],
        profiles=profiles or {"default": {"system_prompt": "Prompt one."}},
        sessions={"store": "memory"},
    )
    return config


@pytest.fixture
async def runtime(processes: tuple[ServerProcess, ServerProcess]) -> AsyncIterator[Runtime]:
    runtime = Runtime(parse_config(_config(processes)), api_key=None)
    await runtime.start()
    await runtime.ready()
    try:
        yield runtime
    finally:
        await runtime.close()


async def test_a_front_drives_a_streamed_turn_without_grpc(runtime: Runtime) -> None:
    agent = runtime.agent
    session = await agent.create_session(ANONYMOUS, "default", "front-1", {"team": "a"})
    turn = await agent.begin_turn(ANONYMOUS, session.session_id, "two reads")
    events = Events()
    outcome = await agent.run_turn(
        turn, structured=False, sink=events, time_remaining=30, method="StreamRun"
    )
    assert outcome.stop_reason is StopReason.ANSWERED and outcome.tool_calls == 2
    assert [o.status for o in events.finished] == [ToolCallStatus.OK, ToolCallStatus.OK]
    assert "".join(events.text) == outcome.answer
    assert events.kinds.count("tool_call_started") == 2 and "step_finished" in events.kinds
    page = await agent.session_page(ANONYMOUS, "front-1")
    assert [t.stop_reason for t in page.session.turns] == [StopReason.ANSWERED]
    assert page.session.turns[0].answer == outcome.answer


async def test_a_turn_admitted_before_a_reload_finishes_on_what_it_was_admitted_with(
    runtime: Runtime, processes: tuple[ServerProcess, ServerProcess]
) -> None:
    sim, _ = processes
    control = SimControl(sim.address)
    agent = runtime.agent
    session = await agent.create_session(ANONYMOUS, "default", "", {})
    turn = await agent.begin_turn(ANONYMOUS, session.session_id, "hello")
    # The reload removes the turn's profile and adds another: the turn runs on.
    runtime.apply(parse_config(_config(processes, other={"system_prompt": "Prompt two."})))
    await control.reset()
    outcome = await agent.run_turn(
        turn, structured=True, sink=None, time_remaining=30, method="Run"
    )
    assert outcome.stop_reason is StopReason.ANSWERED, outcome.error
    sent = (await control.stats())["last_request"]["messages"][0]["content"]
    assert sent == "Prompt one."


_PROFILE_CHANGES = st.fixed_dictionaries(
    {},
    optional={
        "system_prompt": st.sampled_from(["Prompt two.", "Prompt three."]),
        "tools": st.sampled_from([[], ["slow_read"], ["scripted.slow_read", "stock"]]),
        "max_steps": st.integers(1, 4),
        "context": st.fixed_dictionaries({"max_tokens": st.sampled_from([None, 2000])}),
    },
)


@pytest.mark.property
@given(
    keep=st.booleans(),
    change=_PROFILE_CHANGES,
    others=st.lists(st.sampled_from(["a", "b", "c"]), unique=True, max_size=2),
)
def test_whatever_a_reload_holds_a_turn_admitted_before_it_never_fails_internally(
    processes: tuple[ServerProcess, ServerProcess],
    keep: bool,
    change: dict[str, Any],
    others: list[str],
) -> None:
    async def scenario() -> None:
        runtime = Runtime(parse_config(_config(processes)), api_key=None)
        await runtime.start()
        try:
            agent = runtime.agent
            session = await agent.create_session(ANONYMOUS, "default", "", {})
            turn = await agent.begin_turn(ANONYMOUS, session.session_id, "two reads")
            profiles: dict[str, Any] = {name: {} for name in others}
            if keep:
                profiles["default"] = change
            if not profiles:
                profiles["x"] = {}
            runtime.apply(parse_config(_config(processes, **profiles)))
            outcome = await agent.run_turn(
                turn, structured=True, sink=None, time_remaining=30, method="Run"
            )
            assert outcome.error is None or outcome.error.code != "internal", outcome.error
            assert outcome.stop_reason is StopReason.ANSWERED
        finally:
            await runtime.close()

    asyncio.run(scenario())


@pytest.fixture(autouse=True)
def _workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the default SQLite file, should a store fall back to it
