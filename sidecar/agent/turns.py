"""A turn's whole life, in the order it happens.

1. **Admission** (:meth:`Turns.begin`): the request's fields are checked, the sidecar
   must not be draining or full, and the configuration applied now is taken: the turn
   runs on it to its end, whatever a reload does meanwhile.
2. **Claim**: the principal's session is found, its profile allowed and its input sized;
   while the sidecar is overloaded, a turn of a profile with a light variant takes it;
   then (and only then) the principal's run quotas are spent (a principal past its daily
   spend is refused here), and the session is claimed in the store (the turn-start
   record, which is also the session's lock). A failed claim gives the quotas back.
3. **Window** and **loop** (:meth:`Turns.run`): the history is windowed, the loop runs.
   A turn the sidecar stops (a delete, the end of the drain) ends with a result; a bug
   ends it failed, with an error id.
4. **Store** (also when the caller left), **price**, **release** (admission, quotas, the
   running registry); then what only observes a finished turn is told of it: the audit
   record, the variant router, telemetry, and the recorder (a turn drawn for recording
   or a shadow variant, :mod:`~sidecar.agent.replay.recorder`).

A claimed turn that never runs (its caller left first) is released by :meth:`Turns.abandon`.

A background run's turn takes the same path with no caller: :meth:`Turns.begin_detached`
claims the session for the run's own id (or claims it again, for a run taken up after its
process stopped), and its :class:`Detached` receives its events, records each completed
step and each call that is not safe to repeat, and stores the turn together with the run.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from sidecar.agent.admission import Admission, Running
from sidecar.agent.approvals import Approvals
from sidecar.agent.conversations import Conversations
from sidecar.agent.cost_guard import DailySpend, RunSpend
from sidecar.agent.limits import check_input, id_problems, input_problems, refuse
from sidecar.agent.loop import AgentLoop, RunResultWithMessages
from sidecar.agent.profiles import LightPath, Profile
from sidecar.agent.replay.recorder import Recorder, TurnRecording
from sidecar.agent.scope import Progress, RunScope
from sidecar.agent.snapshot import Snapshot
from sidecar.agent.speculation.prefetch import Speculation
from sidecar.agent.variants import RunModels, Variant, VariantRouter, judged
from sidecar.context.calibration import TokenCalibration
from sidecar.context.window import Window
from sidecar.errors import (
    FieldViolation,
    PermissionDenied,
    ProfileRemoved,
    SessionBusy,
    SessionNotFound,
)
from sidecar.llm.model import Model
from sidecar.security.audit import AuditLog
from sidecar.security.identity import Principal
from sidecar.security.quotas import RunQuotas
from sidecar.sessions.store import SessionStore
from sidecar.telemetry import Telemetry
from sidecar.tools.catalog import CatalogTool
from sidecar.tools.dispatch import Approver, Asker, ToolCallListener
from sidecar.types import (
    Clock,
    Decision,
    EventSink,
    ModelCallDetail,
    RunOutcome,
    RunPath,
    RunStart,
    Session,
    StopReason,
    ToolCall,
    ToolOutcome,
    ToolQuestion,
    Turn,
)

if TYPE_CHECKING:
    from sidecar.telemetry.tracing import RunTrace

__all__ = ["DEFAULT_RUN_TIMEOUT", "ClaimedTurn", "Detached", "Turns"]

log = logging.getLogger(__name__)

DEFAULT_RUN_TIMEOUT = 600.0
"""Seconds a run may take when its caller set no deadline: a wedged run must never hold
a session forever."""
_NO_ROOM_TO_WAIT = (
    "too many calls of this principal's background runs wait for approval "
    "(background.max_waiting_per_principal, max_waiting); decide those first"
)
_RESULT_MARGIN = 0.25  # of the caller's deadline kept back to deliver the result in
_TRACE_HEADERS = frozenset({"traceparent", "tracestate", "baggage"})


@dataclass(slots=True, kw_only=True)
class ClaimedTurn:
    """A turn whose session is claimed: it runs, or it is abandoned."""

    session: Session
    """As stored: its ``session_id`` is the store's key (see :class:`Principal`)."""
    session_id: str
    """The id the caller knows the session by."""
    principal: Principal
    snapshot: Snapshot
    """The configuration the turn was admitted on; it runs on it to its end."""
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
    counted: bool = False
    """Its principal has a daily quota: its spend is added to the principal's day."""
    light: LightPath | None = None
    """The profile's light path, when the turn takes it (the sidecar was overloaded)."""

    @property
    def model_name(self) -> str:
        """The model that answers this turn ("" when the profile has no variants and the
        turn takes its full path)."""
        if self.light is not None:
            return self.light.models.answer.name
        return self.variant.models.answer.name if self.variant is not None else ""

    def start(self, default_model: str) -> RunStart:
        """The run's first event; ``default_model``: the model of a profile with no
        variants."""
        return RunStart(
            session_id=self.session_id,
            profile=self.profile.name,
            model=self.model_name or default_model,
            variant=self.variant.name if self.variant is not None else "",
            path=RunPath.LIGHT if self.light is not None else RunPath.FULL,
        )


class Detached(Protocol):
    """What a background run's turn does differently from a caller's: nobody waits for it."""

    sink: EventSink
    """Receives its events (and stores them)."""
    approval_timeout: float
    """Seconds a call of it waits for approval."""
    time_allowed: float
    """Seconds it may take."""
    resume: Progress | None
    """Where an earlier attempt at it got to; None: it starts from the beginning."""
    awaiting: Callable[[], AbstractAsyncContextManager[bool]]
    """Held while a call of it waits for a decision: whether the call may wait at all
    (False: the waits' pool is full, and the call is denied at once)."""

    async def step_done(self, step: int, progress: Progress) -> None:
        """Record a completed step (read ``progress`` now: the loop goes on changing it)."""
        ...

    async def before_dispatch(self, step: int, call: ToolCall, tool: CatalogTool) -> None:
        """Record a call about to be sent, when it is not safe to repeat."""
        ...

    async def store(self, turn: Turn, outcome: RunOutcome | None) -> None:
        """Store the turn with the run (``outcome`` None: the process is stopping)."""
        ...


class Turns:
    """Admits, claims, runs, stores and releases turns.

    Args:
        loop: The decision loop.
        store: Where sessions live.
        model: The model of a profile with no variants.
        snapshot: The configuration applied now.
        conversations: Finds a principal's session.
        admission: The drain, capacity, and the running turns.
        approvals: The calls waiting for a decision.
        telemetry: Metrics, tracing and the timeline log.
        audit: The audit record.
        speculation: Predicts the first calls of a speculating profile's runs.
        recorder: Records and shadows turns; None: no recording is configured.
    """

    def __init__(
        self,
        loop: AgentLoop,
        store: SessionStore,
        *,
        model: Model,
        snapshot: Callable[[], Snapshot],
        conversations: Conversations,
        admission: Admission,
        approvals: Approvals,
        telemetry: Telemetry,
        audit: AuditLog,
        speculation: Speculation | None = None,
        recorder: Recorder | None = None,
    ) -> None:
        self._loop = loop
        self._speculation = speculation
        self._recorder = recorder
        self._store = store
        self._model = model
        self._snapshot = snapshot
        self._conversations = conversations
        self._admission = admission
        self._approvals = approvals
        self._telemetry = telemetry
        self._audit = audit
        self.quotas = RunQuotas()
        self.daily = DailySpend(store)
        self.calibration = TokenCalibration()

    # -- admission and claim -------------------------------------------------------------

    async def begin(
        self,
        principal: Principal,
        session_id: str,
        user_input: str,
        problems: Sequence[FieldViolation] = (),
    ) -> ClaimedTurn:
        """Check the request, load the principal's session and claim it for a new turn.

        Raises:
            Draining: the sidecar is shutting down.
            InvalidRequest: naming every invalid field (with the front's ``problems``).
            InputTooLarge: the input is longer than the profile allows.
            Overloaded: as many turns are in flight as the sidecar takes.
            QuotaExceeded: the principal is at its concurrent-run or per-minute quota, or
                has used up today's cost or tokens.
            SessionNotFound: no such session.
            PermissionDenied: the principal may no longer use the session's profile.
            ProfileRemoved: the session's profile is no longer configured.
            SessionBusy: another turn holds the session.
        """
        clock = Clock()
        self._admission.refuse_if_draining()
        # Every invalid field is named before any lookup.
        refuse(problems, id_problems(session_id, "session_id"), input_problems(user_input))
        snapshot = self._snapshot()  # the turn runs on this configuration to its end
        with self._admission.claiming():
            return await self._claim(principal, session_id, user_input, clock, snapshot)

    async def begin_detached(
        self,
        principal: Principal,
        session_id: str,
        run_id: str,
        user_input: str,
        *,
        started: float,
        resumed: bool,
    ) -> ClaimedTurn:
        """Claim the session for a background run's turn, whose id is the run's; with
        ``resumed``, claim it again for a run taken up after its process stopped (its
        cut-off turn is left out of the history it sees).

        Raises:
            Draining, Overloaded, QuotaExceeded, SessionNotFound, PermissionDenied,
            ProfileRemoved, SessionBusy, InputTooLarge: as :meth:`begin`.
        """
        clock = Clock()
        self._admission.refuse_if_draining()
        snapshot = self._snapshot()
        with self._admission.claiming():
            return await self._claim(
                principal,
                session_id,
                user_input,
                clock,
                snapshot,
                run_id=run_id,
                started=started,
                resumed=resumed,
            )

    async def _claim(
        self,
        principal: Principal,
        session_id: str,
        user_input: str,
        clock: Clock,
        snapshot: Snapshot,
        *,
        run_id: str = "",
        started: float = 0.0,
        resumed: bool = False,
    ) -> ClaimedTurn:
        session = await self._conversations.stored(principal.key(session_id), session_id)
        if resumed:
            session = replace(session, turns=[t for t in session.turns if t.run_id != run_id])
        if not principal.may_use(session.profile):
            raise PermissionDenied(principal.name, session.profile)
        profile = snapshot.profiles.get(session.profile)
        if profile is None:
            raise ProfileRemoved(session_id, session.profile)
        check_input(user_input, profile.config.max_input_chars)
        router = snapshot.routers.get(profile.name)
        variant = None
        if router is not None:
            # Sticky: the session's variant is the one its latest turn ran on.
            pinned = next((t.variant for t in reversed(session.turns) if t.variant), None)
            variant = router.choose(pinned)
        # Overloaded (the turns in flight, this one included, are near capacity): a profile
        # with a light variant takes it instead of adding a full run to the load.
        light = snapshot.light.get(profile.name) if self._admission.overloaded else None
        turn = ClaimedTurn(
            session=session,
            session_id=session_id,
            principal=principal,
            snapshot=snapshot,
            profile=profile,
            variant=variant,
            router=router,
            light=light,
            run_id=run_id or uuid.uuid4().hex,
            input=user_input,
            started=started or time.time(),
            clock=clock,
        )
        if principal.quota.daily:  # one read of the store, only for a daily quota
            turn.counted = await self.daily.check(principal)
        # Only a run that starts spends a quota: taken now, given back if the claim fails
        # (a busy session, one deleted meanwhile, the caller gone).
        mark = self.quotas.admit(principal)
        try:
            await self._claim_session(turn, resumed=resumed)
        except BaseException:
            self.quotas.refund(principal, mark)
            raise
        return turn

    async def _claim_session(self, turn: ClaimedTurn, *, resumed: bool = False) -> None:
        claim_turn = self._store.resume_turn if resumed else self._store.begin_turn
        claim = asyncio.ensure_future(
            claim_turn(turn.session.session_id, turn.run_id, turn.input, turn.started)
        )
        try:
            await asyncio.shield(claim)
        except SessionBusy:
            raise SessionBusy(turn.session_id) from None
        except SessionNotFound:  # deleted since it was read
            raise SessionNotFound(turn.session_id) from None
        except asyncio.CancelledError:
            # The caller left while the session was being claimed: never leave it claimed.
            claimed = (await asyncio.gather(claim, return_exceptions=True))[0] is None
            if claimed:
                await self._store_cancelled(turn)
            raise

    async def abandon(self, turn: ClaimedTurn, *, stored: bool = True) -> None:
        """Release a claimed turn that never ran; it is stored as cancelled (unless
        ``stored`` is False: its owner settles its start record itself)."""
        self._admission.release()
        self.quotas.release(turn.principal)
        if stored:
            await self._store_cancelled(turn)

    async def _store_cancelled(self, turn: ClaimedTurn) -> None:
        record = Turn(
            run_id=turn.run_id,
            input=turn.input,
            answer="",
            stop_reason=StopReason.CANCELLED,
            start_time=turn.started,
            end_time=time.time(),
        )
        await asyncio.shield(self._store.finish_turn(turn.session.session_id, record))

    # -- the run ---------------------------------------------------------------------------

    async def run(
        self,
        turn: ClaimedTurn,
        *,
        structured: bool,
        sink: EventSink | None,
        time_remaining: float | None,
        method: str,
        metadata: Sequence[tuple[str, str | bytes]] = (),
        detached: Detached | None = None,
    ) -> RunOutcome:
        """Run a claimed turn to its end and store it, also when it is cancelled.

        Args:
            turn: From :meth:`begin` (or :meth:`begin_detached`).
            method: The operation that started the run, named by its front (``Run``,
                ``StreamRun``, ``tools/call``; a background run's own: ``StartRun``,
                ``SendMessage``), for its trace.
            structured: OUTPUT_MODE_STRUCTURED: no text deltas.
            sink: Receives the run's events; None when nobody streams them (and then no
                call can be approved: calls that need approval are denied at once).
            time_remaining: Seconds left of the caller's deadline; None: no deadline.
            metadata: The caller's request metadata (trace context is passed on).
            detached: A background run's turn: its sink, its time, where it resumes, and
                how it is stored (``sink`` and ``time_remaining`` are then its).
        """
        if detached is not None:
            sink, time_remaining = detached.sink, detached.time_allowed
        trace = self._telemetry.run_started(
            profile=turn.profile.name,
            session_id=turn.session.session_id,
            run_id=turn.run_id,
            metadata=metadata,
            clock=turn.clock,
            method=method,
        )
        recording = None
        if self._recorder is not None:
            recording = self._recorder.choose(turn.profile, turn.router, turn.clock)
        scope = self._scope(
            turn,
            structured=structured,
            sink=sink,
            time_remaining=time_remaining,
            metadata=metadata,
            trace=trace,
            detached=detached,
            recording=recording,
        )
        if self._audit.enabled:
            self._audit.record(
                "run_started",
                turn.principal.name,
                session_id=turn.session_id,
                run_id=turn.run_id,
                profile=turn.profile.name,
            )
        running = self._admission.enter(turn.session.session_id, turn.run_id)
        result: RunResultWithMessages | None = None
        window: Window | None = None
        running.in_loop = True
        try:
            try:
                window = turn.snapshot.context.window(
                    turn.session,
                    turn.profile.name,
                    scope.system_message,
                    self._loop.tool_definitions(turn.profile),
                    turn.input,
                    scale=scope.token_scale,
                    light=turn.light is not None,
                )
                resume = detached.resume if detached is not None else None
                if recording is not None:
                    recording.capture.history = 1 + len(window.messages)
                result = await self._loop.run(scope, window.messages, turn.input, resume)
            except asyncio.CancelledError:
                if running.stopped is None:
                    raise  # the caller left
                running.task.uncancel()  # the sidecar stopped the run: it ends with a result
                result = _stopped(running, turn.clock)
            except Exception:
                # A bug, not a run failure: the turn is stored as failed, never as
                # cancelled, and the caller learns an error id, not the exception.
                result = _internal_failure(turn.run_id, turn.clock)
            finally:
                running.in_loop = False
            return result.outcome
        finally:
            await self._end(
                turn,
                scope,
                running=running,
                result=result,
                window=window,
                trace=trace,
                detached=detached,
                recording=recording,
            )

    def _scope(
        self,
        turn: ClaimedTurn,
        *,
        structured: bool,
        sink: EventSink | None,
        time_remaining: float | None,
        metadata: Sequence[tuple[str, str | bytes]],
        trace: RunTrace | None,
        detached: Detached | None = None,
        recording: TurnRecording | None = None,
    ) -> RunScope:
        if detached is not None:
            budget = time_remaining or 0.0  # no caller waits: nothing to keep back
        elif time_remaining is None:
            budget = DEFAULT_RUN_TIMEOUT
        else:
            # Keep some of the caller's deadline back to deliver the result in: a busy
            # process takes as long to answer a short deadline as a long one.
            margin = min(_RESULT_MARGIN, time_remaining * 0.25)
            budget = min(time_remaining - margin, DEFAULT_RUN_TIMEOUT)
        deadline = time.monotonic() + budget
        variant, profile = turn.variant, turn.profile
        wait = (
            detached.approval_timeout if detached is not None else profile.config.approval_timeout
        )
        models = variant.models if variant is not None else RunModels(self._model)
        system_message = variant.system_message if variant is not None else profile.system_message
        if turn.light is not None:
            profile, models = turn.light.profile, turn.light.models
            system_message = profile.system_message
        cost = profile.config.cost
        # Traced, each tool call carries its own span's context; otherwise the caller's
        # trace context passes through to the tool servers as it came.
        passed = (
            []
            if trace
            else [(k, v) for k, v in metadata if k in _TRACE_HEADERS and isinstance(v, str)]
        )
        on_tool_call = self._audit_tool_calls(turn) if self._audit.enabled else None
        # A full path's call that finds its flex tier full may go to the light path's model.
        light = turn.snapshot.light.get(turn.profile.name) if turn.light is None else None
        light_model = light.models.answer if light is not None else None
        if recording is not None:
            models = recording.capture.models(models)
            if light_model is not None:
                light_model = recording.capture.models(RunModels(light_model)).answer
            on_tool_call = recording.capture.listener(on_tool_call)
        return RunScope(
            run_id=turn.run_id,
            profile=profile,
            models=models,
            system_message=system_message,
            deadline=deadline,
            clock=turn.clock,
            structured=structured,
            sink=sink,
            approver=self._approver(turn.session, wait, deadline, detached) if sink else None,
            asker=self._asker(turn.session, wait, deadline, detached) if sink else None,
            metadata=passed,
            identity=turn.snapshot.tool_identity.for_run(
                turn.principal, turn.session_id, turn.run_id, turn.session.labels
            ),
            trace=trace,
            on_tool_call=on_tool_call,
            tool_versions=turn.snapshot.tool_versions,
            on_step=detached.step_done if detached is not None else None,
            before_dispatch=detached.before_dispatch if detached is not None else None,
            spend=RunSpend.of(
                turn.snapshot.prices,
                per_run=cost.per_run,
                tokens_per_run=cost.tokens_per_run,
                counted=turn.counted,
            ),
            token_scale=self.calibration.ratio(models.answer.name, turn.session.session_id),
            speculate=self._speculation.predict(profile, turn.input)
            if self._speculation is not None
            else (),
            service_tier=profile.config.service_tiers.background
            if detached is not None
            else profile.config.service_tiers.caller,
            light_model=light_model,
        )

    async def _end(
        self,
        turn: ClaimedTurn,
        scope: RunScope,
        *,
        running: Running,
        result: RunResultWithMessages | None,
        window: Window | None,
        trace: RunTrace | None,
        detached: Detached | None = None,
        recording: TurnRecording | None = None,
    ) -> None:
        """Store, price, release, then tell the observers: in this order, whatever
        happened (a turn cancelled by its caller is stored as cancelled)."""
        outcome = result.outcome if result is not None else None
        model = scope.models.answer.name
        record = Turn(
            run_id=turn.run_id,
            input=turn.input,
            answer=outcome.answer if outcome else "",
            stop_reason=outcome.stop_reason if outcome else StopReason.CANCELLED,
            start_time=turn.started,
            end_time=time.time(),
            variant=turn.variant.name if turn.variant is not None else "",
        )
        if outcome is not None:
            record.usage = outcome.usage
            outcome.variant = record.variant
            if turn.light is not None:
                outcome.path = RunPath.LIGHT
            outcome.cost = turn.snapshot.prices.run_cost(model, outcome.usage, outcome.stages)
            if outcome.cost is None:
                outcome.unpriced = turn.snapshot.prices.unpriced(model, outcome.stages)
            self._calibrate(turn.session.session_id, outcome)
        if result is not None:
            record.messages = result.messages
        persisting = turn.clock.now()
        try:
            # The turn must be stored even when the run was cancelled.
            if detached is not None:
                await asyncio.shield(detached.store(record, outcome))
            else:
                await asyncio.shield(self._store.finish_turn(turn.session.session_id, record))
            if window is not None:
                turn.snapshot.context.turn_finished(turn.session, turn.profile.name, window)
            if turn.counted and scope.spend is not None:
                await self._add_spend(turn, scope.spend)
        finally:
            self._admission.leave(turn.session.session_id, running)
            self._admission.release()
            self.quotas.release(turn.principal)
            end = turn.clock.now()
            if outcome is not None:
                outcome.add_persistence(persisting, end)
            self._finished(
                turn,
                outcome,
                record=record,
                model=model,
                end=end,
                trace=trace,
                recording=recording,
            )

    async def _add_spend(self, turn: ClaimedTurn, spend: RunSpend) -> None:
        """Count the run against its principal's day (in the store, shared by replicas)."""
        try:
            cost, tokens = await asyncio.shield(self.daily.add(turn.principal, spend))
        except Exception:
            # The turn is stored; a store that failed here undercounts the day by one run.
            log.exception("run %s: its spend was not added to its principal's day", turn.run_id)
            return
        self._telemetry.principal_day(turn.principal.name, cost, tokens)

    def _finished(
        self,
        turn: ClaimedTurn,
        outcome: RunOutcome | None,
        *,
        record: Turn,
        model: str,
        end: float,
        trace: RunTrace | None,
        recording: TurnRecording | None,
    ) -> None:
        """What only observes a finished turn: the audit record, the variant router,
        telemetry, the recorder."""
        if self._audit.enabled:
            self._audit.record(
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
        variant = turn.variant
        # A light run says nothing of its session's variant: another model ran it.
        if outcome is not None and variant is not None and variant.name and turn.light is None:
            failed = judged(outcome.stop_reason)
            if failed is not None:
                assert turn.router is not None
                turn.router.record(variant.name, end, failed)
                self._telemetry.variant_run(turn.profile.name, variant.name, outcome, failed)
        if outcome is not None and outcome.cost is not None:
            self._telemetry.principal_cost(turn.principal.name, outcome.cost.total_usd)
        self._telemetry.run_finished(
            profile=turn.profile.name,
            model=model,
            session_id=turn.session.session_id,
            run_id=turn.run_id,
            outcome=outcome,
            trace=trace,
            end=end,
        )
        if recording is not None:
            assert self._recorder is not None
            self._recorder.finished(
                recording,
                snapshot=turn.snapshot,
                profile=turn.profile,
                outcome=outcome,
                run_id=turn.run_id,
                session_id=turn.session_id,
                variant=record.variant,
                principal=turn.principal.name,
                started_at=turn.started,
                user_input=turn.input,
            )

    def _audit_tool_calls(self, turn: ClaimedTurn) -> ToolCallListener:
        audit, principal, session_id, run_id = (
            self._audit,
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

    def _calibrate(self, session_key: str, outcome: RunOutcome) -> None:
        """Learn how the provider counts tokens from each model call of the run."""
        for stage in outcome.stages:
            detail = stage.detail
            if isinstance(detail, ModelCallDetail) and detail.request_bytes:
                self.calibration.observe(
                    stage.name, session_key, detail.request_bytes, detail.usage.prompt_tokens
                )

    def _approver(
        self, session: Session, wait: float, deadline: float, detached: Detached | None
    ) -> Approver:
        approvals = self._approvals

        async def approve(step: int, call: ToolCall, tool: CatalogTool) -> tuple[bool, str]:
            timeout = min(wait, deadline - time.monotonic())
            if detached is None:
                decision = await approvals.wait(session.session_id, call.id, timeout)
                return decision.approved, decision.reason
            async with detached.awaiting() as may_wait:
                if not may_wait:
                    return False, _NO_ROOM_TO_WAIT
                decision = await approvals.wait(session.session_id, call.id, timeout)
            return decision.approved, decision.reason

        return approve

    def _asker(
        self, session: Session, wait: float, deadline: float, detached: Detached | None
    ) -> Asker:
        approvals = self._approvals

        async def ask(step: int, call: ToolCall, question: ToolQuestion) -> Decision:
            timeout = min(wait, deadline - time.monotonic())
            if detached is None:
                return await approvals.wait(session.session_id, call.id, timeout, question)
            async with detached.awaiting() as may_wait:
                if not may_wait:
                    return Decision(False, _NO_ROOM_TO_WAIT)
                return await approvals.wait(session.session_id, call.id, timeout, question)

        return ask


def _internal_failure(run_id: str, clock: Clock) -> RunResultWithMessages:
    error_id = uuid.uuid4().hex[:16]
    log.exception("run %s failed: internal error %s", run_id, error_id)
    outcome = RunOutcome.failed(
        StopReason.MODEL_ERROR,
        "internal",
        f"internal error {error_id}; the sidecar's log has the details",
        retryable=False,
        total=clock.now(),
    )
    return RunResultWithMessages(outcome, [])


def _stopped(running: Running, clock: Clock) -> RunResultWithMessages:
    """The outcome of a run the sidecar stopped (the session deleted, the drain over)."""
    reason = running.stopped
    assert reason is not None
    code = running.code or ("session_deleted" if reason is StopReason.CANCELLED else "interrupted")
    outcome = RunOutcome.failed(
        reason,
        code,
        running.why,
        retryable=reason is StopReason.INTERRUPTED,
        total=clock.now(),
    )
    return RunResultWithMessages(outcome, [])
