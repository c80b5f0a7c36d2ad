"""The agent, transport-free: sessions, a turn's whole lifecycle, approvals, the drain.

A front (the gRPC service, a background runner, an HTTP gateway) turns its requests into
calls of :class:`Agent` and its answers back; everything between is here. A turn:

1. :meth:`Agent.begin_turn` checks the request, loads the session and claims it (the
   store's turn-start record, which is also the session's lock).
2. :meth:`Agent.run_turn` builds the window over the session's history, runs the loop,
   stores the turn (also when the run is cancelled), prices it, schedules the memory
   summary the window asked for, and reports it to telemetry.
3. A claimed turn that never runs (the caller left first) is released with
   :meth:`Agent.abandon_turn`.

Errors are :class:`~sidecar.errors.RequestError` subclasses; the front maps them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import logging
import time
import uuid
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sidecar.agent.approvals import Approvals, Decision
from sidecar.agent.cost import PriceTable
from sidecar.agent.limits import (
    capped,
    check_id,
    check_input,
    id_problems,
    input_problems,
    label_problems,
    page_size,
    page_size_problems,
    reason_problems,
    refuse,
)
from sidecar.agent.loop import AgentLoop, Profile, RunResultWithMessages
from sidecar.agent.variants import Variant, VariantRouter, judged
from sidecar.context.assembler import ContextAssembler
from sidecar.context.calibration import TokenCalibration
from sidecar.errors import (
    CallNotPending,
    Draining,
    FieldViolation,
    InvalidRequest,
    Overloaded,
    PermissionDenied,
    ProfileNotFound,
    ProfileRemoved,
    QuotaExceeded,
    SessionBusy,
    SessionExists,
    SessionNotFound,
    TooManySessions,
)
from sidecar.security.audit import AuditLog
from sidecar.security.identity import Principal
from sidecar.security.quotas import RunQuotas
from sidecar.security.tool_identity import ToolIdentity
from sidecar.sessions.store import SessionStore
from sidecar.telemetry import Telemetry
from sidecar.tools.catalog import CatalogTool, ListedTool
from sidecar.tools.dispatch import Approver, ToolCallListener
from sidecar.types import (
    Clock,
    EventSink,
    ModelCallDetail,
    RunError,
    RunOutcome,
    Session,
    StopReason,
    ToolAvailability,
    ToolCall,
    ToolOutcome,
    Turn,
    Usage,
)

__all__ = ["DEFAULT_RUN_TIMEOUT", "Agent", "ClaimedTurn", "SessionPage"]

log = logging.getLogger(__name__)

DEFAULT_RUN_TIMEOUT = 600.0
"""Seconds a run may take when its caller set no deadline: a wedged run must never hold
a session forever."""
_RESULT_MARGIN = 0.25  # of the caller's deadline kept back to deliver the result in
_DRAIN_RETRY_AFTER = 1.0  # seconds a refused caller is told to wait (another replica)
_TRACE_HEADERS = frozenset({"traceparent", "tracestate", "baggage"})
_COUNT_EVERY = 1.0  # seconds a session count is reused before the store counts again
_STOP_WAIT = 10.0  # seconds a delete or a drain waits for a stopped turn to unwind


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionPage:
    """A session and one page of its turns."""

    session: Session
    """The session; its ``turns`` are this page's."""
    next_page_token: str
    """Where the next page starts; empty after the last."""
    total_turns: int


def _page_token(offset: int, session_id: str) -> str:
    raw = f"{offset}:{zlib.crc32(session_id.encode()):08x}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _page_start(token: str, session_id: str, turns: int) -> int:
    if not token:
        return 0
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        offset_text, check = raw.split(":")
        offset = int(offset_text)
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequest.field("page_token", "is not a token this sidecar made") from None
    if check != f"{zlib.crc32(session_id.encode()):08x}" or not 0 <= offset <= turns:
        raise InvalidRequest.field("page_token", "belongs to another session or read")
    return offset


@dataclass(slots=True)
class _Running:
    """A turn in flight in this process, so it can be stopped (delete, drain)."""

    task: asyncio.Task[Any]
    run_id: str
    stopped: StopReason | None = None
    """Why the sidecar stopped the turn, once it did."""
    why: str = ""
    in_loop: bool = False
    done: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)


@dataclass(slots=True, kw_only=True)
class ClaimedTurn:
    """A turn whose session is claimed: it runs, or it is abandoned."""

    session: Session
    """As stored: its ``session_id`` is the store's key (see :class:`Principal`)."""
    principal: Principal
    profile: Profile
    run_id: str
    input: str
    started: float
    """Wall-clock start, seconds since the epoch."""
    clock: Clock = field(default_factory=Clock)
    """The run's clock, started when the request arrived."""
    variant: Variant | None = None
    """The profile's variant the turn runs on; None: the profile has no variants."""
    router: VariantRouter | None = None
    """The router that chose it (the turn's outcome is recorded there, also when a
    reload has replaced it since)."""

    @property
    def model_name(self) -> str:
        """The model that answers this turn."""
        return self.variant.models.answer.name if self.variant is not None else ""

    @property
    def session_id(self) -> str:
        """The id the caller knows the session by."""
        return self.principal.shown(self.session.session_id)


class Agent:
    """Sessions and turns over one loop, one session store and one telemetry.

    Args:
        loop: The decision loop (model, tools, profiles).
        store: Where sessions live.
        context: Builds each run's window; unset: windows with no memory.
        telemetry: Metrics, tracing and the timeline log; unset: all off.
        prices: Prices each run's tokens; unset: no run has a cost.
        max_response_bytes: The largest response the front can send; a session's page of
            turns stays under half of it.
        max_runs: Turns in flight at once; one more is refused (Overloaded).
        max_sessions: Sessions the store may hold; None: no limit.
        audit: The audit record; unset: none.
        routers: Each profile's variants (with tiering); a profile without one runs on
            the loop's model.
        tool_identity: What tool calls carry of who they serve; unset: the plain
            metadata, no signed assertion.

    Every call names its :class:`~sidecar.security.identity.Principal`: a session exists
    only for the principal that created it, and the principal's profiles and quotas
    bound what it may do.
    """

    def __init__(
        self,
        loop: AgentLoop,
        store: SessionStore,
        *,
        context: ContextAssembler | None = None,
        telemetry: Telemetry | None = None,
        prices: PriceTable | None = None,
        max_response_bytes: int = 4 * 1024 * 1024,
        max_runs: int = 1024,
        max_sessions: int | None = None,
        audit: AuditLog | None = None,
        routers: Mapping[str, VariantRouter] | None = None,
        tool_identity: ToolIdentity | None = None,
    ) -> None:
        self.loop = loop
        self.tool_identity = tool_identity or ToolIdentity()
        self.routers = dict(routers or {})
        self.store = store
        self.context = context or ContextAssembler(
            {name: p.config for name, p in loop.profiles.items()}, None
        )
        self.telemetry = telemetry or Telemetry(label="agent-sidecar")
        self.calibration = TokenCalibration()
        self.prices = prices or PriceTable({})
        self.approvals = Approvals()
        self.max_response_bytes = max_response_bytes
        self._running: dict[str, _Running] = {}  # by session id
        self.max_runs = max_runs
        self._admitted = 0  # turns claimed or claiming, not yet finished
        self.max_sessions = max_sessions
        self._sessions_counted = (0, -1.0)  # (count, when: monotonic)
        self._principal_sessions: dict[str, tuple[int, float]] = {}  # the same, by principal
        self.quotas = RunQuotas()
        self.audit = audit or AuditLog(None)
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.draining = False
        self._last_refusal = 0.0

    @property
    def model_name(self) -> str:
        return self.loop.model.name

    # -- the drain ----------------------------------------------------------------------

    def start_draining(self) -> None:
        """Refuse new sessions and turns from now on; turns in flight go on."""
        self.draining = True
        self._last_refusal = time.monotonic()

    async def wait_idle(self) -> None:
        """Wait until no turn is in flight."""
        await self._idle.wait()

    async def wait_refusals_settled(self, quiet: float) -> None:
        """Wait until nothing has been refused for ``quiet`` seconds (since the drain began).

        A front may hold requests it has accepted but not yet handed over (grpc does,
        under load); stopping it would cancel those, which callers neither expect for a
        request sent before the drain nor retry. While refusals keep coming, some may
        still be waiting: let them be refused with a retryable error first.
        """
        # A timer whose end moves with each refusal, not a poll for a condition.
        while (left := self._last_refusal + quiet - time.monotonic()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(left)

    async def interrupt_all(self, why: str) -> None:
        """Stop every turn in flight, each ending INTERRUPTED with ``why`` (its caller
        gets a result, and the turn is stored); wait until they have unwound."""
        running = list(self._running.values())
        for entry in running:
            self._stop(entry, StopReason.INTERRUPTED, why)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_STOP_WAIT):
                await asyncio.gather(*(entry.done.wait() for entry in running))

    def _stop(self, running: _Running, reason: StopReason, why: str) -> None:
        if running.stopped is None and running.in_loop:
            running.stopped, running.why = reason, why
            running.task.cancel()

    def _refuse_if_draining(self) -> None:
        if self.draining:
            self._last_refusal = time.monotonic()
            raise Draining(_DRAIN_RETRY_AFTER)

    # -- sessions -----------------------------------------------------------------------

    def profile(self, name: str) -> Profile:
        """The configured profile ``name``.

        Raises:
            ProfileNotFound: no such profile.
        """
        profile = self.loop.profiles.get(name)
        if profile is None:
            raise ProfileNotFound(name, list(self.loop.profiles))
        return profile

    async def create_session(
        self, principal: Principal, profile: str, session_id: str, labels: Mapping[str, str]
    ) -> Session:
        """Start a session under ``profile``; an empty ``session_id`` gets a generated one.

        Raises:
            Draining: the sidecar is shutting down.
            PermissionDenied: the principal may not use the profile.
            ProfileNotFound: no such profile.
            QuotaExceeded: the principal holds as many sessions as its quota allows.
            SessionExists: the id is taken.
        """
        self._refuse_if_draining()
        refuse(
            id_problems(profile, "profile"),
            id_problems(session_id, "session_id", required=False),
            label_problems(labels),
        )
        if not principal.may_use(profile):
            raise PermissionDenied(principal.name, profile)
        self.profile(profile)
        if self.max_sessions is not None:
            await self._check_session_count(self.max_sessions)
        if principal.quota.sessions is not None:
            await self._check_principal_sessions(principal, principal.quota.sessions)
        shown = session_id or uuid.uuid4().hex
        try:
            session = await self.store.create(profile, principal.key(shown), labels)
        except SessionExists:
            raise SessionExists(shown) from None
        count, when = self._sessions_counted
        self._sessions_counted = (count + 1, when)
        if principal.name in self._principal_sessions:
            count, when = self._principal_sessions[principal.name]
            self._principal_sessions[principal.name] = (count + 1, when)
        self.audit.record("session_created", principal.name, session_id=shown, profile=profile)
        return dataclasses.replace(session, session_id=shown)

    async def _check_session_count(self, limit: int) -> None:
        count, when = self._sessions_counted
        if time.monotonic() - when > _COUNT_EVERY:
            count = await self.store.count()
            self._sessions_counted = (count, time.monotonic())
        if count >= limit:
            raise TooManySessions(limit)

    async def _check_principal_sessions(self, principal: Principal, limit: int) -> None:
        count, when = self._principal_sessions.get(principal.name, (0, -1.0))
        if time.monotonic() - when > _COUNT_EVERY:
            count = await self.store.count(principal.prefix)
            self._principal_sessions[principal.name] = (count, time.monotonic())
        if count >= limit:
            raise QuotaExceeded(principal.name, "sessions", limit, retry_after=None)

    async def _stored(self, principal: Principal, session_id: str) -> Session:
        """The principal's session as stored (its ``session_id`` is the store's key)."""
        check_id(session_id, "session_id")
        session = await self.store.get(principal.key(session_id))
        if session is None:
            raise SessionNotFound(session_id)
        return session

    async def get_session(self, principal: Principal, session_id: str) -> Session:
        """The session with its turns.

        Raises:
            InvalidRequest: the id is empty.
            SessionNotFound: no such session (for this principal).
        """
        session = await self._stored(principal, session_id)
        return dataclasses.replace(session, session_id=session_id)

    async def session_page(
        self, principal: Principal, session_id: str, *, size: int = 0, token: str = ""
    ) -> SessionPage:
        """The session with one page of its turns (oldest first), each turn's input and
        answer capped, the page kept under half the largest response.

        Raises:
            InvalidRequest: a bad id, page size or page token.
            SessionNotFound: no such session.
        """
        refuse(id_problems(session_id, "session_id"), page_size_problems(size))
        size = page_size(size)
        session = await self.get_session(principal, session_id)
        key = principal.key(session_id)
        turns = session.turns
        start = _page_start(token, key, len(turns))
        page: list[Turn] = []
        spent = 0
        for turn in turns[start : start + size]:
            shown = dataclasses.replace(turn, input=capped(turn.input), answer=capped(turn.answer))
            spent += len(shown.input.encode()) + len(shown.answer.encode()) + 256
            if page and spent > self.max_response_bytes // 2:
                break
            page.append(shown)
        end = start + len(page)
        following = _page_token(end, key) if end < len(turns) else ""
        shown_session = dataclasses.replace(session, turns=page)
        return SessionPage(session=shown_session, next_page_token=following, total_turns=len(turns))

    async def delete_session(self, principal: Principal, session_id: str) -> bool:
        """Delete a session and its turns; False when there was none.

        Raises:
            InvalidRequest: the id is empty.
        """
        check_id(session_id, "session_id")
        key = principal.key(session_id)
        running = self._running.get(key)
        if running is not None:
            # Nothing of a deleted session's turn may run afterwards: its pending approvals
            # are denied, its run cancelled, and the delete waits until it has unwound.
            self.approvals.deny_session(key, "the session was deleted")
            self._stop(running, StopReason.CANCELLED, "the session was deleted")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_STOP_WAIT):
                    await running.done.wait()
        deleted = await self.store.delete(key)
        if deleted:
            count, when = self._sessions_counted
            self._sessions_counted = (max(0, count - 1), when)
            if principal.name in self._principal_sessions:
                count, when = self._principal_sessions[principal.name]
                self._principal_sessions[principal.name] = (max(0, count - 1), when)
            self.audit.record("session_deleted", principal.name, session_id=session_id)
        return deleted

    async def session_tools(
        self, principal: Principal, session_id: str
    ) -> list[tuple[CatalogTool | ListedTool, ToolAvailability]]:
        """The tools the session's profile allows, each with whether it can be called now.

        Raises:
            InvalidRequest: the id is empty.
            SessionNotFound: no such session.
        """
        session = await self._stored(principal, session_id)
        return self.loop.session_tools(self.loop.profiles[session.profile])

    def decide(
        self,
        principal: Principal,
        session_id: str,
        call_id: str,
        decision: Decision,
        problems: Sequence[FieldViolation] = (),
    ) -> None:
        """Approve or deny a call waiting for approval in the principal's session.

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
        try:
            self.approvals.decide(principal.key(session_id), call_id, decision)
        except CallNotPending:
            raise CallNotPending(session_id, call_id) from None
        running = self._running.get(principal.key(session_id))
        self.audit.record(
            "approval_decided",
            principal.name,
            session_id=session_id,
            run_id=running.run_id if running is not None else None,
            call_id=call_id,
            decision="approve" if decision.approved else "deny",
            reason=decision.reason or None,
        )

    # -- turns ---------------------------------------------------------------------------

    async def begin_turn(
        self,
        principal: Principal,
        session_id: str,
        user_input: str,
        problems: Sequence[FieldViolation] = (),
    ) -> ClaimedTurn:
        """Check the request, load the principal's session and claim it for a new turn.

        ``problems``: what the front found wrong with the request's own fields (an output
        mode it does not know), reported with every other invalid field.

        Raises:
            Draining: the sidecar is shutting down.
            InvalidRequest: the input or the session id is empty.
            Overloaded: as many turns are in flight as the sidecar takes.
            QuotaExceeded: the principal is at its concurrent-run or per-minute quota.
            SessionNotFound: no such session.
            PermissionDenied: the principal may no longer use the session's profile.
            ProfileRemoved: the session's profile is no longer configured.
            SessionBusy: another turn holds the session.
        """
        clock = Clock()
        self._refuse_if_draining()
        # Every invalid field is named before any lookup.
        refuse(problems, id_problems(session_id, "session_id"), input_problems(user_input))
        if self._admitted >= self.max_runs:
            raise Overloaded(self.max_runs)
        self._admitted += 1
        try:
            return await self._claim(principal, session_id, user_input, clock)
        except BaseException:
            self._admitted -= 1
            raise

    async def _claim(
        self, principal: Principal, session_id: str, user_input: str, clock: Clock
    ) -> ClaimedTurn:
        session = await self._stored(principal, session_id)
        if not principal.may_use(session.profile):
            raise PermissionDenied(principal.name, session.profile)
        profile = self.loop.profiles.get(session.profile)
        if profile is None:
            raise ProfileRemoved(session_id, session.profile)
        check_input(user_input, profile.config.max_input_chars)
        # Only a run that starts spends a quota: admitted now, given back if the claim
        # fails (a busy session, one deleted meanwhile, the caller gone).
        mark = self.quotas.admit(principal)
        try:
            return await self._claim_session(
                principal, session, profile, session_id, user_input, clock
            )
        except BaseException:
            self.quotas.refund(principal, mark)
            raise

    async def _claim_session(
        self,
        principal: Principal,
        session: Session,
        profile: Profile,
        session_id: str,
        user_input: str,
        clock: Clock,
    ) -> ClaimedTurn:
        router = self.routers.get(profile.name)
        variant = None
        if router is not None:
            # Sticky: the session's variant is the one its latest turn ran on.
            pinned = next((t.variant for t in reversed(session.turns) if t.variant), None)
            variant = router.choose(pinned)
        turn = ClaimedTurn(
            session=session,
            principal=principal,
            variant=variant,
            router=router,
            profile=profile,
            run_id=uuid.uuid4().hex,
            input=user_input,
            started=time.time(),
            clock=clock,
        )
        claim = asyncio.ensure_future(
            self.store.begin_turn(session.session_id, turn.run_id, user_input, turn.started)
        )
        try:
            await asyncio.shield(claim)
        except SessionBusy:
            raise SessionBusy(session_id) from None
        except SessionNotFound:  # deleted since it was read
            raise SessionNotFound(session_id) from None
        except asyncio.CancelledError:
            # The caller left while the session was being claimed: never leave it claimed.
            claimed = (await asyncio.gather(claim, return_exceptions=True))[0] is None
            if claimed:
                await self._store_cancelled(turn)
            raise
        return turn

    async def abandon_turn(self, turn: ClaimedTurn) -> None:
        """Release a claimed turn that never ran; it is stored as cancelled."""
        self._admitted -= 1
        self.quotas.release(turn.principal)
        await self._store_cancelled(turn)

    async def _store_cancelled(self, turn: ClaimedTurn) -> None:
        record = Turn(turn.run_id, turn.input, "", StopReason.CANCELLED, turn.started, time.time())
        await asyncio.shield(self.store.finish_turn(turn.session.session_id, record))

    async def run_turn(
        self,
        turn: ClaimedTurn,
        *,
        structured: bool,
        sink: EventSink | None,
        time_remaining: float | None,
        metadata: Sequence[tuple[str, str | bytes]] = (),
    ) -> RunOutcome:
        """Run a claimed turn to its end and store it, also when it is cancelled.

        Args:
            turn: From :meth:`begin_turn`.
            structured: OUTPUT_MODE_STRUCTURED: no text deltas, the profile's answer schema.
            sink: Receives the run's events; None when nobody streams them (and then no
                call can be approved: calls that need approval are denied at once).
            time_remaining: Seconds left of the caller's deadline; None: no deadline.
            metadata: The caller's request metadata (trace context is passed on).
        """
        if time_remaining is None:
            budget = DEFAULT_RUN_TIMEOUT
        else:
            # Keep a little of the caller's deadline back to deliver the result in.
            margin = min(_RESULT_MARGIN, time_remaining * 0.1)
            budget = min(time_remaining - margin, DEFAULT_RUN_TIMEOUT)
        deadline = time.monotonic() + budget
        session, profile, clock = turn.session, turn.profile, turn.clock
        variant = turn.variant
        # What a reload may replace is taken once: the run finishes on what it started with.
        context, prices = self.context, self.prices
        system_message = variant.system_message if variant is not None else profile.system_message
        model_name = turn.model_name or self.model_name
        telemetry = self.telemetry
        trace = telemetry.run_started(
            profile=profile.name,
            session_id=session.session_id,
            run_id=turn.run_id,
            metadata=metadata,
            clock=clock,
            streamed=sink is not None,
        )
        # Traced, each tool call carries its own span's context; otherwise the caller's
        # trace context passes through to the tool servers as it came.
        passed = (
            []
            if trace
            else [(k, v) for k, v in metadata if k in _TRACE_HEADERS and isinstance(v, str)]
        )
        identity = self.tool_identity.for_run(
            turn.principal, turn.session_id, turn.run_id, session.labels
        )
        self._active += 1
        self._idle.clear()
        result: RunResultWithMessages | None = None
        window = None
        task = asyncio.current_task()
        assert task is not None
        running = self._running[session.session_id] = _Running(task, turn.run_id)
        audit = self.audit
        on_tool_call = None
        if audit.enabled:
            audit.record(
                "run_started",
                turn.principal.name,
                session_id=turn.session_id,
                run_id=turn.run_id,
                profile=profile.name,
            )
            on_tool_call = self._audit_tool_calls(turn)
        try:
            try:
                running.in_loop = True
                window = context.window(
                    session,
                    profile.name,
                    system_message,
                    self.loop.tool_definitions(profile),
                    turn.input,
                    scale=self.calibration.ratio(model_name, session.session_id),
                )
                result = await self.loop.run(
                    profile,
                    window.messages,
                    turn.input,
                    deadline=deadline,
                    structured=structured,
                    sink=sink,
                    approver=self._approver(session, profile, deadline) if sink else None,
                    metadata=passed,
                    identity=identity,
                    clock=clock,
                    trace=trace,
                    on_tool_call=on_tool_call,
                    models=variant.models if variant is not None else None,
                    system_message=system_message,
                )
            except asyncio.CancelledError:
                if running.stopped is None:
                    raise  # the caller left
                task.uncancel()  # the sidecar stopped the run: it ends with a result
                result = _stopped(running.stopped, running.why, clock)
            except Exception:
                # A bug, not a run failure: the turn is stored as failed, never as
                # cancelled, and the caller learns an error id, not the exception.
                result = _internal_failure(turn.run_id, clock)
            finally:
                running.in_loop = False
            return result.outcome
        finally:
            outcome = result.outcome if result is not None else None
            record = Turn(
                run_id=turn.run_id,
                input=turn.input,
                answer=outcome.answer if outcome else "",
                stop_reason=outcome.stop_reason if outcome else StopReason.CANCELLED,
                start_time=turn.started,
                end_time=time.time(),
                variant=variant.name if variant is not None else "",
            )
            if outcome is not None:
                record.usage = outcome.usage
                outcome.variant = record.variant
                outcome.cost = prices.run_cost(model_name, outcome.usage, outcome.stages)
                self._calibrate(session.session_id, outcome)
            if result is not None:
                record.messages = result.messages
            persisting = clock.now()
            try:
                # The turn must be stored even when the run was cancelled.
                await asyncio.shield(self.store.finish_turn(session.session_id, record))
                if window is not None:
                    context.turn_finished(session, profile.name, window)
            finally:
                self._active -= 1
                self._admitted -= 1
                self.quotas.release(turn.principal)
                if self._active == 0:
                    self._idle.set()
                if self._running.get(session.session_id) is running:
                    del self._running[session.session_id]
                running.done.set()
                end = clock.now()
                if outcome is not None:
                    outcome.add_persistence(persisting, end)
                if audit.enabled:
                    audit.record(
                        "run_finished",
                        turn.principal.name,
                        session_id=turn.session_id,
                        run_id=turn.run_id,
                        stop_reason=record.stop_reason.name,
                        error=outcome.error.code if outcome and outcome.error else None,
                        duration_ms=round(end * 1000, 3),
                        tool_calls=outcome.tool_calls if outcome else 0,
                        prompt_tokens=record.usage.prompt_tokens,
                        completion_tokens=record.usage.completion_tokens,
                    )
                if outcome is not None and variant is not None and variant.name:
                    assert turn.router is not None
                    failed = judged(outcome.stop_reason)
                    if failed is not None:
                        turn.router.record(variant.name, end, failed)
                        telemetry.variant_run(profile.name, variant.name, outcome, failed)
                telemetry.run_finished(
                    profile=profile.name,
                    model=model_name,
                    session_id=session.session_id,
                    run_id=turn.run_id,
                    outcome=outcome,
                    trace=trace,
                    end=end,
                )

    def _audit_tool_calls(self, turn: ClaimedTurn) -> ToolCallListener:
        audit, principal, session_id, run_id = (
            self.audit,
            turn.principal.name,
            turn.session_id,
            turn.run_id,
        )

        def finished(call: ToolCall, server: str | None, outcome: ToolOutcome) -> None:
            audit.record(
                "tool_call",
                principal,
                session_id=session_id,
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

    def _calibrate(self, session_id: str, outcome: RunOutcome) -> None:
        """Learn how the provider counts tokens from each model call of the run."""
        for stage in outcome.stages:
            detail = stage.detail
            if isinstance(detail, ModelCallDetail) and detail.request_bytes:
                self.calibration.observe(
                    stage.name, session_id, detail.request_bytes, detail.usage.prompt_tokens
                )

    def _approver(self, session: Session, profile: Profile, deadline: float) -> Approver:
        approvals = self.approvals

        async def approve(step: int, call: ToolCall, tool: CatalogTool) -> tuple[bool, str]:
            timeout = min(profile.config.approval_timeout, deadline - time.monotonic())
            decision = await approvals.wait(session.session_id, call.id, timeout)
            return decision.approved, decision.reason

        return approve


def _internal_failure(run_id: str, clock: Clock) -> RunResultWithMessages:
    error_id = uuid.uuid4().hex[:16]
    log.exception("run %s failed: internal error %s", run_id, error_id)
    outcome = RunOutcome(
        answer="",
        stop_reason=StopReason.MODEL_ERROR,
        usage=Usage(),
        stages=[],
        total=clock.now(),
        steps=0,
        tool_calls=0,
        error=RunError(
            "internal", f"internal error {error_id}; the sidecar's log has the details", False
        ),
    )
    return RunResultWithMessages(outcome, [])


def _stopped(reason: StopReason, why: str, clock: Clock) -> RunResultWithMessages:
    """The outcome of a run the sidecar stopped (the session deleted, the drain over)."""
    code = "session_deleted" if reason is StopReason.CANCELLED else "interrupted"
    outcome = RunOutcome(
        answer="",
        stop_reason=reason,
        usage=Usage(),
        stages=[],
        total=clock.now(),
        steps=0,
        tool_calls=0,
        error=RunError(code, why, reason is StopReason.INTERRUPTED),
    )
    return RunResultWithMessages(outcome, [])
