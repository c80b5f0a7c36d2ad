"""What one run reads and never changes while it runs, gathered once at its start.

The loop, the dispatcher and every tool call read the run's :class:`RunScope` instead of
receiving its parts one by one: its profile and models (as admitted, whatever a reload
does meanwhile), its deadline and clock, where its events go, who approves its calls,
what its tool calls carry (trace context, the caller's identity), who is told of each
call's end, what it may spend, and (a background run) who records each completed step
and each call that is not safe to repeat before it is sent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sidecar.agent.cost_guard import RunSpend
from sidecar.agent.profiles import Profile
from sidecar.agent.variants import RunModels
from sidecar.tools.dispatch import (
    Approver,
    Asker,
    DispatchGuard,
    StepScope,
    ToolAnswerer,
    ToolCallListener,
)
from sidecar.types import Clock, EventSink, ToolCall, Usage

if TYPE_CHECKING:
    from sidecar.llm.model import Model
    from sidecar.security.tool_identity import RunIdentity
    from sidecar.telemetry.tracing import RunTrace

__all__ = ["Progress", "RunScope", "StepListener"]


@dataclass(slots=True, kw_only=True)
class Progress:
    """How far a run has come at the end of a step: enough to go on from there."""

    messages: list[dict[str, Any]]
    """What the run has added to the conversation so far, its user message first."""
    steps: int
    tool_calls: int
    usage: Usage


StepListener = Callable[[int, Progress], Awaitable[None]]
"""Awaited after each step whose tool calls all finished, before the next model call."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunScope:
    """Everything one run reads that does not change while it runs."""

    run_id: str
    profile: Profile
    """The session's profile, as the configuration the run was admitted on has it."""
    models: RunModels
    """The models it calls (its variant's, tiered or not)."""
    system_message: dict[str, Any]
    """Its system message (its variant's, or the profile's)."""
    deadline: float
    """``time.monotonic()`` value when its time is up."""
    clock: Clock
    """Its clock, started when the request arrived."""
    structured: bool
    """OUTPUT_MODE_STRUCTURED: no text deltas."""
    sink: EventSink | None = None
    """Receives its events as they happen; None when nobody streams them."""
    approver: Approver | None = None
    """Decides its calls that need approval; None denies them."""
    asker: Asker | None = None
    """Answers its running calls' questions; None declines them."""
    metadata: Sequence[tuple[str, str]] = ()
    """What its tool calls carry when not traced: the caller's trace context."""
    identity: RunIdentity | None = None
    """Who it serves, for its tool calls' metadata and assertions."""
    trace: RunTrace | None = None
    """Its spans, when tracing is on."""
    on_tool_call: ToolCallListener | None = None
    """Told of every tool call's end (the audit record)."""
    tool_versions: Mapping[str, Sequence[tuple[str, float]]] = field(default_factory=dict)
    """How each tool server's calls are shared among its versions."""
    on_step: StepListener | None = None
    """Told of each completed step (a background run's checkpoint)."""
    before_dispatch: DispatchGuard | None = None
    """Awaited before each tool call is sent (a background run's record of it)."""
    spend: RunSpend | None = None
    """Its cost guard: what it may still spend; None when nothing limits it."""
    token_scale: float = 1.0
    """Provider tokens per estimated token for its session (the calibration)."""
    speculate: Sequence[ToolCall] = ()
    """The first step's calls its input predicts (speculative prefetch): started while the
    model thinks."""
    answer: ToolAnswerer | None = None
    """Answers its tool calls in place of the servers (a replay, a shadow run)."""
    service_tier: str | None = None
    """The provider's service tier its model calls ask for (its run class's, from the
    profile's ``service_tiers``); None: the model's own."""
    light_model: Model | None = None
    """Where a model call goes once when its flex tier stays full (``FlexTierFull``): the
    profile's light path model; None on the light path itself, or without one."""

    def step(self, step: int, deadline: float, *, approvals: bool = True) -> StepScope:
        """What every tool call of step ``step`` shares; ``deadline`` is the tools'.
        Without ``approvals`` (calls started early) no call can ask for one."""
        return StepScope(
            step=step,
            clock=self.clock,
            deadline=deadline,
            allowed=self.profile.allowed,
            sink=self.sink,
            approver=self.approver if approvals else None,
            asker=self.asker if approvals else None,
            metadata=self.metadata,
            identity=self.identity,
            trace=self.trace,
            trim=self.profile.trim,
            on_finished=self.on_tool_call,
            versions=self.tool_versions,
            before_dispatch=self.before_dispatch,
            answer=self.answer,
        )
