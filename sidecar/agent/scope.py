"""What one run reads and never changes while it runs, gathered once at its start.

The loop, the dispatcher and every tool call read the run's :class:`RunScope` instead of
receiving its parts one by one: its profile and models (as admitted, whatever a reload
does meanwhile), its deadline and clock, where its events go, who approves its calls,
what its tool calls carry (trace context, the caller's identity), and who is told of
each call's end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sidecar.agent.profiles import Profile
from sidecar.agent.variants import RunModels
from sidecar.tools.dispatch import Approver, StepScope, ToolAnswerer, ToolCallListener
from sidecar.types import Clock, EventSink

if TYPE_CHECKING:
    from sidecar.security.tool_identity import RunIdentity
    from sidecar.telemetry.tracing import RunTrace

__all__ = ["RunScope"]


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
    answer: ToolAnswerer | None = None
    """Answers its tool calls in place of the servers (a replay, a shadow run)."""

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
            metadata=self.metadata,
            identity=self.identity,
            trace=self.trace,
            trim=self.profile.trim,
            on_finished=self.on_tool_call,
            versions=self.tool_versions,
            answer=self.answer,
        )
