"""Tool calls a caller makes itself, with no model in between (an MCP host's ``tools/call``).

The call goes through the same dispatch as a model's: the profile must allow the tool, its
arguments are checked against its schema, a tool that requires approval asks the caller,
and then it runs behind its server's breaker, under the deadline, retried only when
idempotent, carrying who it serves (the principal, and a call of its own as the run) and
recorded in the audit record. What a front adds is how the caller is asked and told:
:class:`CallerChannel`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.agent.admission import Admission
from sidecar.agent.loop import AgentLoop
from sidecar.agent.snapshot import Snapshot
from sidecar.errors import PermissionDenied, ProfileNotFound
from sidecar.security.audit import AuditLog
from sidecar.security.identity import Principal
from sidecar.tools.catalog import CatalogTool
from sidecar.tools.dispatch import StepScope
from sidecar.tools.link import InputRelay
from sidecar.types import (
    BudgetOverrun,
    Clock,
    Decision,
    Stage,
    ToolCall,
    ToolOutcome,
    ToolQuestion,
)

__all__ = ["CallerChannel", "DirectCalls", "OfferedTool"]


@dataclass(frozen=True, slots=True)
class CallerChannel:
    """How a front reaches the caller of a direct call while it runs; each part optional."""

    approve: Callable[[CatalogTool, str], Awaitable[bool]] | None = None
    """Asks whether the call (the tool, its arguments) may run; None: calls that need
    approval are denied."""
    ask: Callable[[ToolQuestion], Awaitable[Decision]] | None = None
    """Asks the caller a running tool's question; None: declined."""
    progress: Callable[[float, float | None, str], None] | None = None
    """Told the call's progress reports (it must not block)."""
    relay: InputRelay | None = None
    """A 2026-07-28 MCP host's round for a bridged server of the same revision."""


@dataclass(frozen=True, slots=True)
class OfferedTool:
    """A tool a profile offers its callers now."""

    tool: CatalogTool
    definition: dict[str, Any]
    """As the model would see it: name, description, parameters."""


class _Events:
    """The sink of one direct call: progress goes to the caller; nothing else is told."""

    def __init__(self, progress: Callable[[float, float | None, str], None]) -> None:
        self._progress = progress

    def text_delta(self, step: int, text: str) -> None:
        pass

    def reasoning_delta(self, step: int, text: str) -> None:
        pass

    def tool_call_started(self, step: int, call_id: str, tool_name: str, arguments: str) -> None:
        pass

    def tool_call_finished(self, step: int, outcome: ToolOutcome) -> None:
        pass

    def approval_required(
        self,
        step: int,
        call_id: str,
        tool_name: str,
        arguments: str,
        destructive: bool,
        question: ToolQuestion | None = None,
    ) -> None:
        pass

    def tool_call_progress(
        self,
        step: int,
        call_id: str,
        tool_name: str,
        progress: float,
        total: float | None,
        message: str,
    ) -> None:
        self._progress(progress, total, message)

    def step_finished(self, step: int, stages: list[Stage], total: float) -> None:
        pass

    def budget_exceeded(self, overrun: BudgetOverrun) -> None:
        pass

    def backlog(self) -> None:
        return None


class DirectCalls:
    """Runs tool calls callers make themselves.

    Args:
        loop: Whose dispatcher and tool access run the calls.
        snapshot: The configuration applied now.
        admission: The drain.
        audit: The audit record.
    """

    def __init__(
        self,
        loop: AgentLoop,
        *,
        snapshot: Callable[[], Snapshot],
        admission: Admission,
        audit: AuditLog,
    ) -> None:
        self._loop = loop
        self._snapshot = snapshot
        self._admission = admission
        self._audit = audit

    def _allowed(self, principal: Principal, profile: str) -> frozenset[str] | None:
        if not principal.may_use(profile):
            raise PermissionDenied(principal.name, profile)
        profiles = self._snapshot().profiles
        found = profiles.get(profile)
        if found is None:
            raise ProfileNotFound(profile, list(profiles))
        return found.allowed

    def catalog_tool(self, name: str) -> CatalogTool | None:
        """The tool the model would know by ``name``, if any."""
        return self._loop.tools.catalog.get(name)

    def tools(self, principal: Principal, profile: str) -> list[OfferedTool]:
        """The tools ``profile`` allows that can be called now.

        Raises:
            PermissionDenied: the principal may not use the profile.
            ProfileNotFound: no such profile.
        """
        allowed = self._allowed(principal, profile)
        catalog = self._loop.tools.catalog
        offered = []
        for definition in self._loop.tools.definitions(profile, allowed):
            tool = catalog.get(definition["function"]["name"])
            if tool is not None:
                offered.append(OfferedTool(tool, definition["function"]))
        return offered

    async def call(
        self,
        principal: Principal,
        profile: str,
        name: str,
        arguments: str,
        *,
        timeout: float,
        channel: CallerChannel,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> ToolOutcome:
        """Run one call of tool ``name`` with ``arguments`` (JSON text) for ``principal``.

        Returns:
            How it ended: a tool that does not exist or is not allowed, invalid arguments,
            a denied approval, a failure, all are outcomes, as the model would see them.

        Raises:
            Draining: the sidecar is shutting down.
            PermissionDenied: the principal may not use the profile.
            ProfileNotFound: no such profile.
        """
        self._admission.refuse_if_draining()
        allowed = self._allowed(principal, profile)
        snapshot = self._snapshot()
        run_id = uuid.uuid4().hex
        call = ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", name=name, arguments=arguments)
        approver = None
        if channel.approve is not None:
            approve, audit = channel.approve, self._audit

            async def approver(step: int, call: ToolCall, tool: CatalogTool) -> tuple[bool, str]:
                approved = await approve(tool, call.arguments)
                if audit.enabled:
                    audit.record(
                        "approval_decided",
                        principal.name,
                        run_id=run_id,
                        call_id=call.id,
                        decision="approve" if approved else "deny",
                    )
                return (True, "") if approved else (False, "the caller did not approve it")

        asker = None
        if channel.ask is not None:
            ask = channel.ask

            async def asker(step: int, call: ToolCall, question: ToolQuestion) -> Decision:
                return await ask(question)

        scope = StepScope(
            step=1,
            clock=Clock(),
            deadline=time.monotonic() + timeout,
            allowed=allowed,
            sink=_Events(channel.progress) if channel.progress is not None else None,
            approver=approver,
            asker=asker,
            metadata=list(metadata),
            identity=snapshot.tool_identity.for_run(principal, "", run_id, {}),
            on_finished=self._audited(principal, run_id) if self._audit.enabled else None,
            relay=channel.relay,
        )
        [outcome] = await self._loop.call_tools(scope, [call])
        return outcome

    def _audited(self, principal: Principal, run_id: str) -> Callable[..., None]:
        audit = self._audit

        def finished(call: ToolCall, server: str | None, outcome: ToolOutcome) -> None:
            audit.record(
                "tool_call",
                principal.name,
                session_id=None,
                run_id=run_id,
                call_id=call.id,
                tool=call.name,
                server=server,
                **audit.arguments(call.arguments),
                status=outcome.status.name,
                duration_ms=round(outcome.duration * 1000, 3),
                attempts=outcome.attempts,
            )

        return finished
