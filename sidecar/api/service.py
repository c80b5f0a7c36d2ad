"""``AgentService`` over gRPC: requests in, the loop, events and results out.

The proto layer stops here: requests are checked and turned into plain values, the loop
runs on plain types, and events become messages only when a caller streams them.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc

from agentsidecar.v1 import agent_pb2, agent_pb2_grpc
from sidecar.agent.loop import AgentLoop, Profile, RunResultWithMessages
from sidecar.api import convert
from sidecar.config import SidecarConfig
from sidecar.context.assembler import ContextAssembler
from sidecar.errors import SessionBusy, SessionExists, SessionNotFound
from sidecar.sessions.store import SessionStore
from sidecar.telemetry import Telemetry
from sidecar.tools.catalog import CatalogTool
from sidecar.types import (
    BudgetOverrun,
    Clock,
    RunError,
    RunOutcome,
    Session,
    Stage,
    StopReason,
    ToolCall,
    ToolOutcome,
    Turn,
    Usage,
)

log = logging.getLogger(__name__)

# A run with no caller deadline still ends: a wedged run must never hold a session forever.
DEFAULT_RUN_TIMEOUT = 600.0
_RESULT_MARGIN = 0.25
_TRACE_HEADERS = frozenset({"traceparent", "tracestate", "baggage"})


class _StreamSink:
    """Turns loop events into ``StreamRunResponse`` messages on a queue."""

    __slots__ = ("_queue", "_run_id", "_sequence")

    def __init__(self, queue: asyncio.Queue[agent_pb2.StreamRunResponse | None], run_id: str):
        self._queue = queue
        self._run_id = run_id
        self._sequence = 0

    def put(self, **event: Any) -> None:
        self._sequence += 1
        self._queue.put_nowait(
            agent_pb2.StreamRunResponse(run_id=self._run_id, sequence=self._sequence, **event)
        )

    def text_delta(self, step: int, text: str) -> None:
        self.put(text_delta=agent_pb2.TextDelta(step=step, text=text))

    def tool_call_started(self, step: int, call_id: str, tool_name: str, arguments: str) -> None:
        self.put(
            tool_call_started=agent_pb2.ToolCallStarted(
                step=step, call_id=call_id, tool_name=tool_name, arguments=arguments
            )
        )

    def tool_call_finished(self, step: int, outcome: ToolOutcome) -> None:
        self.put(tool_call_finished=convert.tool_call_finished(step, outcome))

    def approval_required(
        self, step: int, call_id: str, tool_name: str, arguments: str, destructive: bool
    ) -> None:
        self.put(
            approval_required=agent_pb2.ApprovalRequired(
                step=step,
                call_id=call_id,
                tool_name=tool_name,
                arguments=arguments,
                destructive=destructive,
            )
        )

    def step_finished(self, step: int, stages: list[Stage], total: float) -> None:
        self.put(
            step_finished=agent_pb2.StepFinished(
                step=step, timeline=convert.timeline(stages, total)
            )
        )

    def budget_exceeded(self, overrun: BudgetOverrun) -> None:
        self.put(budget_exceeded=convert.budget_exceeded(overrun))


class AgentServicer(agent_pb2_grpc.AgentServiceServicer):
    """Implements ``agentsidecar.v1.AgentService``."""

    def __init__(
        self,
        loop: AgentLoop,
        store: SessionStore,
        context: ContextAssembler | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._loop = loop
        self._store = store
        self._context = context or ContextAssembler(
            {name: p.config for name, p in loop.profiles.items()}, None
        )
        self._telemetry = telemetry or Telemetry.from_config(SidecarConfig())
        self._approvals: dict[tuple[str, str], asyncio.Future[tuple[bool, str]]] = {}
        self._runs: set[asyncio.Task[Any]] = set()
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.draining = False
        self._last_refusal = 0.0

    def start_draining(self) -> None:
        """Refuse new sessions and runs from now on; runs in flight go on."""
        self.draining = True
        self._last_refusal = time.monotonic()

    async def wait_idle(self) -> None:
        """Wait until no run is in flight."""
        await self._idle.wait()

    async def wait_refusals_settled(self, quiet: float) -> None:
        """Wait until no call has been refused for ``quiet`` seconds (since draining began).

        Under load, grpc holds calls it has accepted but not yet handed to a handler;
        stopping the server cancels those with CANCELLED, which callers neither expect
        for a call sent before the drain nor retry. While refusals keep coming, some
        may still be waiting: let the handlers refuse them with UNAVAILABLE first.
        """
        # A timer whose end moves with each refusal, not a poll for a condition.
        while (left := self._last_refusal + quiet - time.monotonic()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(left)

    async def _refuse_if_draining(self, context: grpc.aio.ServicerContext) -> None:
        if self.draining:
            self._last_refusal = time.monotonic()
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                "the sidecar is shutting down; retry on another replica or after restart",
            )

    # -- sessions ---------------------------------------------------------------------

    async def CreateSession(
        self, request: agent_pb2.CreateSessionRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.CreateSessionResponse:
        await self._refuse_if_draining(context)
        profile = request.profile or "default"
        if profile not in self._loop.profiles:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"unknown profile {profile!r}; configured: {sorted(self._loop.profiles)}",
            )
        try:
            session = await self._store.create(profile, request.session_id, request.labels)
        except SessionExists:
            await context.abort(
                grpc.StatusCode.ALREADY_EXISTS, f"session {request.session_id!r} already exists"
            )
        return agent_pb2.CreateSessionResponse(session=convert.session(session))

    async def GetSession(
        self, request: agent_pb2.GetSessionRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.GetSessionResponse:
        session = await self._session(request.session_id, context)
        return agent_pb2.GetSessionResponse(session=convert.session(session))

    async def DeleteSession(
        self, request: agent_pb2.DeleteSessionRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.DeleteSessionResponse:
        if not request.session_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "session_id is required")
        return agent_pb2.DeleteSessionResponse(deleted=await self._store.delete(request.session_id))

    async def ListSessionTools(
        self, request: agent_pb2.ListSessionToolsRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.ListSessionToolsResponse:
        session = await self._session(request.session_id, context)
        profile = self._loop.profiles[session.profile]
        tools = []
        for tool, availability in self._loop.session_tools(profile):
            entry = agent_pb2.SessionTool(
                tool=tool.descriptor,
                server=tool.server,
                availability=int(availability),  # type: ignore[arg-type]
            )
            entry.tool.name = tool.name
            tools.append(entry)
        return agent_pb2.ListSessionToolsResponse(tools=tools)

    async def _session(self, session_id: str, context: grpc.aio.ServicerContext) -> Session:
        if not session_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "session_id is required")
        session = await self._store.get(session_id)
        if session is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no session {session_id!r}")
        assert session is not None
        return session

    # -- runs -------------------------------------------------------------------------

    async def _begin(
        self, session_id: str, user_input: str, context: grpc.aio.ServicerContext, run_id: str
    ) -> tuple[Session, Profile, float]:
        """Check the request, load the session and take its lock (the turn's start record).

        Returns the session, its profile and the turn's wall-clock start.
        """
        await self._refuse_if_draining(context)
        if not user_input:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "input must not be empty")
        session = await self._session(session_id, context)
        profile = self._loop.profiles.get(session.profile)
        if profile is None:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"session {session_id!r} uses profile {session.profile!r}, "
                "which is no longer configured",
            )
        assert profile is not None
        started = time.time()
        claim = asyncio.ensure_future(
            self._store.begin_turn(session_id, run_id, user_input, started)
        )
        try:
            await asyncio.shield(claim)
        except asyncio.CancelledError:
            # The caller left while the session was being claimed: never leave it claimed.
            claimed = (await asyncio.gather(claim, return_exceptions=True))[0] is None
            if claimed:
                await self._cancelled_turn(session_id, run_id, user_input, started)
            raise
        except SessionBusy:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"session {session_id!r} is already running a turn; wait for it to finish",
            )
        except SessionNotFound:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no session {session_id!r}")
        return session, profile, started

    async def _cancelled_turn(
        self, session_id: str, run_id: str, user_input: str, started: float
    ) -> None:
        turn = Turn(run_id, user_input, "", StopReason.CANCELLED, started, time.time())
        await asyncio.shield(self._store.finish_turn(session_id, turn))

    async def _execute(
        self,
        session: Session,
        profile: Profile,
        run_id: str,
        user_input: str,
        context: grpc.aio.ServicerContext,
        structured: bool,
        sink: _StreamSink | None,
        clock: Clock,
        started: float,
    ) -> RunOutcome:
        remaining = context.time_remaining()
        if remaining is None:
            budget = DEFAULT_RUN_TIMEOUT
        else:
            # Keep a little of the caller's deadline back to deliver the result in.
            budget = min(remaining - min(_RESULT_MARGIN, remaining * 0.1), DEFAULT_RUN_TIMEOUT)
        deadline = time.monotonic() + budget
        invocation = context.invocation_metadata() or ()
        telemetry = self._telemetry
        trace = telemetry.run_started(
            profile=profile.name,
            session_id=session.session_id,
            run_id=run_id,
            metadata=invocation,
            clock=clock,
            streamed=sink is not None,
        )
        # Traced, each tool call carries its own span's context; otherwise the caller's
        # trace context passes through to the tool servers as it came.
        metadata = [] if trace else [(k, v) for k, v in invocation if k in _TRACE_HEADERS]
        self._active += 1
        self._idle.clear()
        result: RunResultWithMessages | None = None
        window = None
        try:
            window = self._context.window(
                session,
                profile.name,
                profile.system_message,
                self._loop.tool_definitions(profile),
                user_input,
            )
            result = await self._loop.run(
                profile,
                window.messages,
                user_input,
                deadline=deadline,
                structured=structured,
                sink=sink,
                # Approval needs a caller who sees approval_required events: a unary
                # run has none, so its calls that need approval are denied at once.
                approver=self._approver(session, profile, deadline) if sink else None,
                metadata=metadata,
                clock=clock,
                trace=trace,
            )
            return result.outcome
        finally:
            outcome = result.outcome if result is not None else None
            turn = Turn(
                run_id=run_id,
                input=user_input,
                answer=outcome.answer if outcome else "",
                stop_reason=outcome.stop_reason if outcome else StopReason.CANCELLED,
                start_time=started,
                end_time=time.time(),
            )
            if outcome is not None:
                turn.usage = outcome.usage
            if result is not None:
                turn.messages = result.messages
            persisting = clock.now()
            try:
                # The turn must be stored even when the run was cancelled.
                await asyncio.shield(self._store.finish_turn(session.session_id, turn))
                if window is not None:
                    self._context.turn_finished(session, profile.name, window)
            finally:
                self._active -= 1
                if self._active == 0:
                    self._idle.set()
                end = clock.now()
                if outcome is not None:
                    outcome.add_persistence(persisting, end)
                telemetry.run_finished(
                    profile=profile.name,
                    model=self._loop.model.name,
                    session_id=session.session_id,
                    run_id=run_id,
                    outcome=outcome,
                    trace=trace,
                    end=end,
                )

    def _approver(self, session: Session, profile: Profile, deadline: float) -> Any:
        async def approve(step: int, call: ToolCall, tool: CatalogTool) -> tuple[bool, str]:
            key = (session.session_id, call.id)
            future: asyncio.Future[tuple[bool, str]] = asyncio.get_running_loop().create_future()
            self._approvals[key] = future
            timeout = min(profile.config.approval_timeout, deadline - time.monotonic())
            try:
                async with asyncio.timeout(max(0.0, timeout)):
                    return await future
            except TimeoutError:
                return False, "no decision arrived in time"
            finally:
                self._approvals.pop(key, None)

        return approve

    async def Run(
        self, request: agent_pb2.RunRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.RunResponse:
        clock = Clock()
        run_id = uuid.uuid4().hex
        session, profile, started = await self._begin(
            request.session_id, request.input, context, run_id
        )
        outcome = await self._execute(
            session, profile, run_id, request.input, context, True, None, clock, started
        )
        return agent_pb2.RunResponse(run_id=run_id, result=convert.run_result(outcome))

    async def StreamRun(
        self, request: agent_pb2.StreamRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[agent_pb2.StreamRunResponse]:
        clock = Clock()
        run_id = uuid.uuid4().hex
        session, profile, started = await self._begin(
            request.session_id, request.input, context, run_id
        )
        structured = request.output_mode == agent_pb2.OUTPUT_MODE_STRUCTURED
        queue: asyncio.Queue[agent_pb2.StreamRunResponse | None] = asyncio.Queue()
        sink = _StreamSink(queue, run_id)
        sink.put(
            run_started=agent_pb2.RunStarted(
                session_id=session.session_id, profile=profile.name, model=self._loop.model.name
            )
        )

        began = asyncio.Event()

        async def drive() -> None:
            began.set()
            try:
                outcome = await self._execute(
                    session,
                    profile,
                    run_id,
                    request.input,
                    context,
                    structured,
                    sink,
                    clock,
                    started,
                )
                sink.put(run_finished=convert.run_result(outcome))
            except Exception as exc:  # a bug, not a run failure: report it, don't hang
                log.exception("run %s failed", run_id)
                failed = RunOutcome("", StopReason.MODEL_ERROR, Usage(), [], 0.0, 0, 0)
                failed.error = RunError("internal", f"internal error: {exc}", False)
                sink.put(run_finished=convert.run_result(failed))
            finally:
                queue.put_nowait(None)

        task = asyncio.get_running_loop().create_task(drive(), name=f"run:{run_id}")
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)
        try:
            while (event := await queue.get()) is not None:
                yield event
        finally:
            if not task.done():
                task.cancel()
            # Wait for the cancelled run to record its turn before the handler ends.
            await asyncio.gather(task, return_exceptions=True)
            if not began.is_set():
                # Cancelled before it began, so it recorded nothing: release the session.
                await self._cancelled_turn(session.session_id, run_id, request.input, started)

    async def ApproveToolCall(
        self, request: agent_pb2.ApproveToolCallRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.ApproveToolCallResponse:
        if request.decision == agent_pb2.APPROVAL_DECISION_UNSPECIFIED:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "decision must be APPROVE or DENY"
            )
        future = self._approvals.get((request.session_id, request.call_id))
        if future is None or future.done():
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"no call {request.call_id!r} is waiting for approval in session "
                f"{request.session_id!r}",
            )
        assert future is not None
        future.set_result((request.decision == agent_pb2.APPROVAL_DECISION_APPROVE, request.reason))
        return agent_pb2.ApproveToolCallResponse()
