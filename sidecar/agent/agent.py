"""The agent as every front calls it: sessions, turns, approvals and the drain.

A front (the gRPC service, an HTTP gateway) turns its requests into calls of
:class:`Agent` and its answers back; everything between is here, in one small object per
job: :class:`~sidecar.agent.conversations.Conversations` (sessions),
:class:`~sidecar.agent.turns.Turns` (a turn's life), :class:`~sidecar.agent.approvals.Approvals`
(decisions), :class:`~sidecar.agent.admission.Admission` (capacity and the drain) and
:class:`~sidecar.agent.runs.BackgroundRuns` (turns that outlive their caller).
Errors are :class:`~sidecar.errors.RequestError` subclasses; the front maps them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from sidecar.agent.admission import Admission
from sidecar.agent.approvals import Approvals, Decision
from sidecar.agent.conversations import Conversations, SessionPage
from sidecar.agent.direct import DirectCalls
from sidecar.agent.limits import id_problems, reason_problems, refuse
from sidecar.agent.loop import AgentLoop
from sidecar.agent.replay.recorder import Recorder
from sidecar.agent.runs import BackgroundRuns
from sidecar.agent.snapshot import Snapshot
from sidecar.agent.speculation.prefetch import Speculation
from sidecar.agent.turns import DEFAULT_RUN_TIMEOUT, ClaimedTurn, Turns
from sidecar.config import BackgroundConfig, LightPathConfig
from sidecar.errors import CallNotPending, FieldViolation
from sidecar.llm.model import Model
from sidecar.security.audit import AuditLog
from sidecar.security.identity import Principal
from sidecar.sessions.store import SessionStore
from sidecar.telemetry import Telemetry
from sidecar.tools.catalog import CatalogTool, ListedTool
from sidecar.types import EventSink, RunOutcome, Session, ToolAvailability

__all__ = ["DEFAULT_RUN_TIMEOUT", "Agent", "ClaimedTurn", "SessionPage"]


class Agent:
    """Sessions and turns over one loop, one session store and one telemetry.

    Args:
        loop: The decision loop (tools).
        store: Where sessions live.
        model: The model of a profile with no variants.
        snapshot: The configuration applied now (a run takes it at admission).
        telemetry: Metrics, tracing and the timeline log; unset: all off.
        audit: The audit record; unset: none.
        max_response_bytes: The largest response the front can send; a session's page of
            turns stays under half of it.
        max_runs: Turns in flight at once; one more is refused (Overloaded).
        light_path: When new turns take their profile's light path (near ``max_runs``).
        max_sessions: Sessions the store may hold; None: no limit.
        background: ``background`` of the configuration; unset: its defaults.
        recorder: Records and shadows turns; None: no recording is configured.

    Every call names its :class:`~sidecar.security.identity.Principal`: a session exists
    only for the principal that created it, and the principal's profiles and quotas
    bound what it may do.
    """

    def __init__(
        self,
        loop: AgentLoop,
        store: SessionStore,
        *,
        model: Model,
        snapshot: Callable[[], Snapshot],
        telemetry: Telemetry | None = None,
        audit: AuditLog | None = None,
        max_response_bytes: int = 4 * 1024 * 1024,
        max_runs: int = 1024,
        light_path: LightPathConfig | None = None,
        max_sessions: int | None = None,
        background: BackgroundConfig | None = None,
        recorder: Recorder | None = None,
    ) -> None:
        self.loop = loop
        self.store = store
        self.model_name = model.name
        self.audit = audit or AuditLog(None)
        telemetry = telemetry or Telemetry(label="agent-sidecar")
        self.admission = Admission(max_runs, light_path, on_overload=telemetry.overloaded)
        self.approvals = Approvals()
        self.speculation = Speculation(
            store, lambda: snapshot().config, on_learned=telemetry.speculation_learned
        )
        self.conversations = Conversations(
            store,
            snapshot=snapshot,
            admission=self.admission,
            approvals=self.approvals,
            tools=loop.tools,
            audit=self.audit,
            max_response_bytes=max_response_bytes,
            max_sessions=max_sessions,
        )
        self.direct = DirectCalls(
            loop, snapshot=snapshot, admission=self.admission, audit=self.audit
        )
        """Tool calls callers make themselves (an MCP host's), with no model between."""
        self.turns = Turns(
            loop,
            store,
            model=model,
            snapshot=snapshot,
            conversations=self.conversations,
            admission=self.admission,
            approvals=self.approvals,
            telemetry=telemetry,
            audit=self.audit,
            speculation=self.speculation,
            recorder=recorder,
        )
        self.runs = BackgroundRuns(
            sessions=store,
            conversations=self.conversations,
            turns=self.turns,
            admission=self.admission,
            approvals=self.approvals,
            snapshot=snapshot,
            settings=background or BackgroundConfig(),
            audit=self.audit,
            model_name=model.name,
        )

    # -- the drain -------------------------------------------------------------------------

    @property
    def draining(self) -> bool:
        return self.admission.draining

    def start_draining(self) -> None:
        """Refuse new sessions and turns from now on; turns in flight go on."""
        self.admission.start_draining()

    async def wait_idle(self) -> None:
        """Wait until no turn is in flight."""
        await self.admission.wait_idle()

    async def wait_refusals_settled(self, quiet: float) -> None:
        """Wait until nothing has been refused for ``quiet`` seconds (see
        :meth:`Admission.wait_refusals_settled`)."""
        await self.admission.wait_refusals_settled(quiet)

    async def interrupt_all(self, why: str) -> None:
        """Stop every turn in flight, each ending INTERRUPTED with ``why``; background
        runs are given up as they are instead, for another replica (or the next start)
        to take up."""
        self.runs.hand_over()
        await self.admission.interrupt_all(why)

    # -- sessions --------------------------------------------------------------------------

    async def create_session(
        self, principal: Principal, profile: str, session_id: str, labels: Mapping[str, str]
    ) -> Session:
        """See :meth:`Conversations.create`."""
        return await self.conversations.create(principal, profile, session_id, labels)

    async def session_page(
        self, principal: Principal, session_id: str, *, size: int = 0, token: str = ""
    ) -> SessionPage:
        """See :meth:`Conversations.page`."""
        return await self.conversations.page(principal, session_id, size=size, token=token)

    async def delete_session(self, principal: Principal, session_id: str) -> bool:
        """See :meth:`Conversations.delete`."""
        return await self.conversations.delete(principal, session_id)

    async def session_tools(
        self, principal: Principal, session_id: str
    ) -> list[tuple[CatalogTool | ListedTool, ToolAvailability]]:
        """See :meth:`Conversations.tools`."""
        return await self.conversations.tools(principal, session_id)

    # -- approvals -------------------------------------------------------------------------

    async def decide(
        self,
        principal: Principal,
        session_id: str,
        call_id: str,
        decision: Decision,
        problems: Sequence[FieldViolation] = (),
    ) -> None:
        """Approve or deny a call waiting for approval in the principal's session: here,
        or in a background run waiting on another replica.

        Args:
            problems: What the front found wrong with the request's own fields (an
                unset decision), reported with every other invalid field.

        Raises:
            InvalidRequest: naming every invalid field.
            CallNotPending: no such call is waiting.
        """
        refuse(
            problems,
            id_problems(session_id, "session_id"),
            id_problems(call_id, "call_id"),
            reason_problems(decision.reason),
        )
        key = principal.key(session_id)
        try:
            self.approvals.decide(key, call_id, decision)
        except CallNotPending:
            elsewhere = await self.runs.decide(key, call_id, decision)
            if elsewhere is None:
                raise CallNotPending(session_id, call_id) from None
            self._audit_decision(principal, session_id, call_id, decision, elsewhere)
            return
        running = self.admission.running(key)
        self._audit_decision(
            principal,
            session_id,
            call_id,
            decision,
            running.run_id if running is not None else None,
        )

    def _audit_decision(
        self,
        principal: Principal,
        session_id: str,
        call_id: str,
        decision: Decision,
        run_id: str | None,
    ) -> None:
        self.audit.record(
            "approval_decided",
            principal.name,
            session_id=session_id,
            run_id=run_id,
            call_id=call_id,
            decision="approve" if decision.approved else "deny",
            reason=decision.reason or None,
        )

    # -- turns -----------------------------------------------------------------------------

    async def begin_turn(
        self,
        principal: Principal,
        session_id: str,
        user_input: str,
        problems: Sequence[FieldViolation] = (),
    ) -> ClaimedTurn:
        """See :meth:`Turns.begin`."""
        return await self.turns.begin(principal, session_id, user_input, problems)

    async def run_turn(
        self,
        turn: ClaimedTurn,
        *,
        structured: bool,
        sink: EventSink | None,
        time_remaining: float | None,
        method: str,
        metadata: Sequence[tuple[str, str | bytes]] = (),
    ) -> RunOutcome:
        """See :meth:`Turns.run`."""
        return await self.turns.run(
            turn,
            structured=structured,
            sink=sink,
            time_remaining=time_remaining,
            method=method,
            metadata=metadata,
        )

    async def abandon_turn(self, turn: ClaimedTurn) -> None:
        """See :meth:`Turns.abandon`."""
        await self.turns.abandon(turn)
