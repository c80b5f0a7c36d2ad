"""A recorded turn run again: on another configuration (a replay) or another variant (a
shadow), from the same conversation, with its tool calls answered from the recording.

The new run sees what the recorded one saw before its input (the conversation as it was
sent, under the new run's own system message) and the same input. Its tool calls are
validated against the tool catalog and the profile as any call is, then answered with the
recorded results (:class:`~sidecar.recording.answers.RecordedAnswers`), except those a
``live`` rule lets run (a replay's read-only tools, when asked). It streams to nobody,
asks nobody for approval, and is stored in no session: its only trace is the recording it
returns, built as a live turn's is.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sidecar.agent.loop import AgentLoop
from sidecar.agent.prices import PriceTable
from sidecar.agent.profiles import Profile
from sidecar.agent.replay.capture import RunCapture
from sidecar.agent.scope import RunScope
from sidecar.agent.variants import RunModels
from sidecar.recording.answers import RecordedAnswers
from sidecar.recording.format import RecordedTurn
from sidecar.tools.catalog import CatalogTool
from sidecar.tools.dispatch import ToolAnswerer
from sidecar.types import Clock, ToolCall, ToolOutcome

__all__ = ["RerunPlan", "answered_from", "rerun"]


@dataclass(frozen=True, slots=True)
class RerunPlan:
    """What a recorded turn runs again on."""

    profile: Profile
    models: RunModels
    system_message: dict[str, Any]
    variant: str
    """The variant's name ("" for a profile without variants)."""
    prices: PriceTable
    tool_versions: Mapping[str, Sequence[tuple[str, float]]] = field(default_factory=dict)


def answered_from(
    recorded: RecordedTurn, live: Callable[[CatalogTool], bool] | None = None
) -> tuple[ToolAnswerer, RecordedAnswers]:
    """The tool answerer of a new run of ``recorded``: the recorded results, except for
    the tools ``live`` lets run; and the answers (which count the calls they missed)."""
    answers = RecordedAnswers(recorded)

    def answer(call: ToolCall, tool: CatalogTool, now: float) -> ToolOutcome | None:
        if live is not None and live(tool):
            return None
        return answers.answer(call, now)

    return answer, answers


async def rerun(
    loop: AgentLoop,
    plan: RerunPlan,
    recorded: RecordedTurn,
    *,
    answer: ToolAnswerer,
    timeout: float,
    shadow_of: str | None = None,
) -> dict[str, Any]:
    """Run ``recorded`` again on ``plan``; return the new run's recording (not redacted).

    Args:
        loop: The decision loop (and its tool catalog).
        plan: The profile, models, system message and prices to run on.
        recorded: The turn.
        answer: Answers its tool calls (:func:`answered_from`).
        timeout: Seconds the run may take.
        shadow_of: The live run a shadow run copies.
    """
    clock = Clock()
    capture = RunCapture(clock, loop.tools.catalog.get)
    history = recorded.history
    capture.history = 1 + len(history)
    run_id = uuid.uuid4().hex
    scope = RunScope(
        run_id=run_id,
        profile=plan.profile,
        models=capture.models(plan.models),
        system_message=plan.system_message,
        deadline=time.monotonic() + timeout,
        clock=clock,
        structured=True,
        on_tool_call=capture.tool_finished,
        tool_versions=plan.tool_versions,
        answer=answer,
        service_tier=plan.profile.config.service_tiers.shadow if shadow_of else None,
    )
    started = time.time()
    result = await loop.run(scope, history, recorded.input)
    outcome = result.outcome
    outcome.variant = plan.variant
    outcome.cost = plan.prices.run_cost(plan.models.answer.name, outcome.usage, outcome.stages)
    return capture.document(
        run_id=run_id,
        session_id=recorded.session_id,
        profile=plan.profile.name,
        variant=plan.variant,
        principal=str(recorded.document.get("principal", "")),
        started_at=started,
        user_input=recorded.input,
        outcome=outcome,
        shadow_of=shadow_of,
    )
