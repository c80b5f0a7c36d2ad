"""``AgentService`` over gRPC: requests in, the agent, events, results and errors out.

This module only converts. Requests become calls of :class:`~sidecar.agent.agent.Agent`;
its answers and the loop's events become messages; its errors become statuses through
the one table in :mod:`sidecar.api.status`. Every handler answers through
:func:`answers`, so nothing here picks a status code and no exception text leaks.

Every call is authenticated before its bytes are decoded (:func:`add_to_server`): a
caller without credentials learns nothing of what a request would have done, and the
handler receives the call's :class:`~sidecar.security.identity.Principal`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from types import ModuleType
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError

from agentsidecar.v1 import agent_pb2
from sidecar.agent.agent import Agent, ClaimedTurn
from sidecar.agent.approvals import Decision
from sidecar.agent.limits import parse_answer
from sidecar.api import convert
from sidecar.api.run_codec import watch_response
from sidecar.api.status import internal_status, to_status
from sidecar.api.stream import StreamSink
from sidecar.errors import (
    FieldViolation,
    MalformedRequest,
    RequestError,
    SidecarError,
    StreamBacklog,
    Unauthenticated,
)
from sidecar.security.audit import AuditLog
from sidecar.security.callers import CallerCheck
from sidecar.security.identity import Authenticator, Principal
from sidecar.types import RunOutcome, StopReason

log = logging.getLogger(__name__)

_Request = TypeVar("_Request")
_Response = TypeVar("_Response")


async def _abort(context: grpc.aio.ServicerContext, exc: BaseException) -> None:
    status = to_status(exc) if isinstance(exc, SidecarError) else internal_status(exc)
    await context.abort(status.code, status.details, status.trailing_metadata)


_Handler = Callable[[Any, _Request, grpc.aio.ServicerContext, Principal], Awaitable[_Response]]


def answers(handler: _Handler[_Request, _Response]) -> _Handler[_Request, _Response]:
    """A unary handler whose errors become statuses with details."""

    @functools.wraps(handler)
    async def wrapped(
        self: Any, request: _Request, context: grpc.aio.ServicerContext, principal: Principal
    ) -> _Response:
        try:
            return await handler(self, request, context, principal)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            if isinstance(exc, RequestError):
                self.callers.refused(principal, handler.__name__, exc)
            await _abort(context, exc)
            raise AssertionError("unreachable: abort raises") from None

    return wrapped


_OUTPUT_MODES = frozenset(agent_pb2.OutputMode.values())


def _failed_run(exc: BaseException) -> RunOutcome:
    """The outcome of a run that failed on a bug: its error names the log line, nothing more."""
    status = internal_status(exc)
    return RunOutcome.failed(
        StopReason.MODEL_ERROR, "internal", status.details, retryable=False, total=0.0
    )


class AuthenticatedServicer:
    """A servicer whose calls :func:`add_to_server` authenticates: each handler takes the
    call's principal after the usual request and context.

    Args:
        audit: Where refusals and failed authentications are recorded.
        authenticator: The principals of the configuration applied now, read per call;
            None: every caller is anonymous.
    """

    def __init__(self, audit: AuditLog, authenticator: Callable[[], Authenticator] | None) -> None:
        self.callers = CallerCheck(authenticator, audit)


class AgentServicer(AuthenticatedServicer):
    """Implements ``agentsidecar.v1.AgentService`` over an :class:`Agent`."""

    def __init__(
        self,
        agent: Agent,
        *,
        stream_buffer_bytes: int = 8 * 1024 * 1024,
        authenticator: Callable[[], Authenticator] | None = None,
    ) -> None:
        super().__init__(agent.audit, authenticator)
        self._agent = agent
        self._runs: set[asyncio.Task[Any]] = set()
        self._stream_buffer = stream_buffer_bytes

    # -- sessions -----------------------------------------------------------------------

    @answers
    async def CreateSession(
        self,
        request: agent_pb2.CreateSessionRequest,
        context: grpc.aio.ServicerContext,
        principal: Principal,
    ) -> agent_pb2.CreateSessionResponse:
        session = await self._agent.create_session(
            principal, request.profile or "default", request.session_id, request.labels
        )
        return agent_pb2.CreateSessionResponse(session=convert.session(session))

    @answers
    async def GetSession(
        self,
        request: agent_pb2.GetSessionRequest,
        context: grpc.aio.ServicerContext,
        principal: Principal,
    ) -> agent_pb2.GetSessionResponse:
        page = await self._agent.session_page(
            principal, request.session_id, size=request.page_size, token=request.page_token
        )
        return agent_pb2.GetSessionResponse(
            session=convert.session(page.session),
            next_page_token=page.next_page_token,
            total_turns=page.total_turns,
        )

    @answers
    async def DeleteSession(
        self,
        request: agent_pb2.DeleteSessionRequest,
        context: grpc.aio.ServicerContext,
        principal: Principal,
    ) -> agent_pb2.DeleteSessionResponse:
        deleted = await self._agent.delete_session(principal, request.session_id)
        return agent_pb2.DeleteSessionResponse(deleted=deleted)

    @answers
    async def ListSessionTools(
        self,
        request: agent_pb2.ListSessionToolsRequest,
        context: grpc.aio.ServicerContext,
        principal: Principal,
    ) -> agent_pb2.ListSessionToolsResponse:
        tools = await self._agent.session_tools(principal, request.session_id)
        return agent_pb2.ListSessionToolsResponse(
            tools=[convert.session_tool(tool, availability) for tool, availability in tools]
        )

    @answers
    async def ApproveToolCall(
        self,
        request: agent_pb2.ApproveToolCallRequest,
        context: grpc.aio.ServicerContext,
        principal: Principal,
    ) -> agent_pb2.ApproveToolCallResponse:
        problems = []
        if request.decision not in (
            agent_pb2.APPROVAL_DECISION_APPROVE,
            agent_pb2.APPROVAL_DECISION_DENY,
        ):
            problems.append(FieldViolation("decision", "must be APPROVE or DENY"))
        approved = request.decision == agent_pb2.APPROVAL_DECISION_APPROVE
        answer, answer_problems = parse_answer(request.answer)
        await self._agent.decide(
            principal,
            request.session_id,
            request.call_id,
            Decision(approved, request.reason, answer),
            [*problems, *answer_problems],
        )
        return agent_pb2.ApproveToolCallResponse()

    # -- runs ---------------------------------------------------------------------------

    @answers
    async def Run(
        self, request: agent_pb2.RunRequest, context: grpc.aio.ServicerContext, principal: Principal
    ) -> agent_pb2.RunResponse:
        turn = await self._agent.begin_turn(principal, request.session_id, request.input)
        outcome = await self._agent.run_turn(
            turn,
            structured=True,
            sink=None,
            time_remaining=context.time_remaining(),
            method="Run",
            metadata=context.invocation_metadata() or (),
        )
        return agent_pb2.RunResponse(run_id=turn.run_id, result=convert.run_result(outcome))

    async def StreamRun(
        self,
        request: agent_pb2.StreamRunRequest,
        context: grpc.aio.ServicerContext,
        principal: Principal,
    ) -> AsyncIterator[agent_pb2.StreamRunResponse]:
        try:
            problems = []
            if request.output_mode not in _OUTPUT_MODES:
                problems.append(FieldViolation("output_mode", "must be a value of OutputMode"))
            turn = await self._agent.begin_turn(
                principal, request.session_id, request.input, problems
            )
        except Exception as exc:
            if isinstance(exc, RequestError):
                self.callers.refused(principal, "StreamRun", exc)
            await _abort(context, exc)
            return
        structured = request.output_mode == agent_pb2.OUTPUT_MODE_STRUCTURED
        tasks: list[asyncio.Task[None]] = []
        sink = StreamSink(turn.run_id, self._stream_buffer, on_backlog=lambda: tasks[0].cancel())
        sink.put(run_started=convert.run_started(turn.start(self._agent.model_name)))
        began = asyncio.Event()
        task = asyncio.get_running_loop().create_task(
            self._drive(turn, sink, structured=structured, context=context, began=began),
            name=f"run:{turn.run_id}",
        )
        tasks.append(task)
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)
        try:
            async for event in sink.events():
                if event is None:  # the caller read too slowly: the run was cancelled
                    await asyncio.gather(task, return_exceptions=True)  # stored as cancelled
                    await _abort(context, StreamBacklog(self._stream_buffer))
                    return
                yield event
        finally:
            if not task.done():
                task.cancel()
            # Wait for the cancelled run to record its turn before the handler ends.
            await asyncio.gather(task, return_exceptions=True)
            if not began.is_set():
                # Cancelled before it began, so it recorded nothing: release the session.
                await self._agent.abandon_turn(turn)

    async def _drive(
        self,
        turn: ClaimedTurn,
        sink: StreamSink,
        *,
        structured: bool,
        context: grpc.aio.ServicerContext,
        began: asyncio.Event,
    ) -> None:
        began.set()
        try:
            try:
                outcome = await self._agent.run_turn(
                    turn,
                    structured=structured,
                    sink=sink,
                    time_remaining=context.time_remaining(),
                    method="StreamRun",
                    metadata=context.invocation_metadata() or (),
                )
            except Exception as exc:  # a bug, not a run failure: report it, don't hang
                outcome = _failed_run(exc)
            sink.put(final=True, run_finished=convert.run_result(outcome))
        finally:
            sink.close()

    # -- background runs ----------------------------------------------------------------

    @answers
    async def StartRun(
        self,
        request: agent_pb2.StartRunRequest,
        context: grpc.aio.ServicerContext,
        principal: Principal,
    ) -> agent_pb2.StartRunResponse:
        problems = []
        if request.output_mode not in _OUTPUT_MODES:
            problems.append(FieldViolation("output_mode", "must be a value of OutputMode"))
        run = await self._agent.runs.start(
            principal,
            request.session_id,
            request.input,
            structured=request.output_mode == agent_pb2.OUTPUT_MODE_STRUCTURED,
            callback_url=request.callback.url,
            request_id=request.request_id,
            problems=problems,
        )
        return agent_pb2.StartRunResponse(run=convert.run(run, request.session_id))

    @answers
    async def GetRun(
        self,
        request: agent_pb2.GetRunRequest,
        context: grpc.aio.ServicerContext,
        principal: Principal,
    ) -> agent_pb2.GetRunResponse:
        run = await self._agent.runs.get(principal, request.run_id)
        shown = principal.shown(run.session_key)
        return agent_pb2.GetRunResponse(run=convert.run(run, shown, with_result=True))

    @answers
    async def ListRuns(
        self,
        request: agent_pb2.ListRunsRequest,
        context: grpc.aio.ServicerContext,
        principal: Principal,
    ) -> agent_pb2.ListRunsResponse:
        runs = self._agent.runs
        if request.session_id:
            page = await runs.page(
                principal, request.session_id, size=request.page_size, token=request.page_token
            )
        else:  # every session of the caller's
            page = await runs.page_all(principal, size=request.page_size, token=request.page_token)
        return agent_pb2.ListRunsResponse(
            runs=[
                convert.run(r, request.session_id or principal.shown(r.session_key))
                for r in page.runs
            ],
            next_page_token=page.next_page_token,
        )

    @answers
    async def CancelRun(
        self,
        request: agent_pb2.CancelRunRequest,
        context: grpc.aio.ServicerContext,
        principal: Principal,
    ) -> agent_pb2.CancelRunResponse:
        run = await self._agent.runs.cancel(principal, request.run_id)
        shown = principal.shown(run.session_key)
        return agent_pb2.CancelRunResponse(run=convert.run(run, shown, with_result=True))

    async def WatchRun(
        self,
        request: agent_pb2.WatchRunRequest,
        context: grpc.aio.ServicerContext,
        principal: Principal,
    ) -> AsyncIterator[bytes]:
        """Each stored event goes out as it was stored (see :data:`RAW_RESPONSES`)."""
        try:
            async for event in self._agent.runs.watch(
                principal, request.run_id, request.after_sequence
            ):
                yield watch_response(event)
        except Exception as exc:
            await _abort(context, exc)


RAW_RESPONSES = frozenset({"WatchRun"})
"""Methods whose handlers yield their responses serialised already."""


def _raw(data: bytes) -> bytes:
    return data


def add_to_server(
    servicer: AuthenticatedServicer,
    server: grpc.aio.Server,
    module: ModuleType = agent_pb2,
    service_name: str = "AgentService",
) -> None:
    """Serve ``servicer`` (the service ``service_name`` of the generated ``module``) on
    ``server``, authenticating each call and decoding its request.

    The principal is named first, from the call's metadata and TLS peer (a call without
    credentials is UNAUTHENTICATED before its bytes are looked at). Then the raw bytes
    reach a wrapper that decodes them: left to grpc, a request whose bytes are not a
    valid message fails inside grpc's deserializer, and the caller gets UNKNOWN with
    nothing to act on; here undecodable bytes are INVALID_ARGUMENT with the reason
    MALFORMED_REQUEST, like any other bad request.
    """
    service = module.DESCRIPTOR.services_by_name[service_name]
    handlers = {}
    for method in service.methods:
        request_type = getattr(module, method.input_type.name)
        response_type = getattr(module, method.output_type.name)
        implementation = getattr(servicer, method.name)
        if method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _decoding_stream(servicer, method.name, implementation, request_type),
                response_serializer=_raw
                if method.name in RAW_RESPONSES
                else response_type.SerializeToString,
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _decoding(servicer, method.name, implementation, request_type),
                response_serializer=response_type.SerializeToString,
            )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    server.add_registered_method_handlers(service.full_name, handlers)


def _principal(
    servicer: AuthenticatedServicer, method: str, context: grpc.aio.ServicerContext
) -> Principal:
    """The call's principal.

    Raises:
        Unauthenticated: the sidecar authenticates callers and this one proved nothing.
    """
    return servicer.callers.principal(
        context.invocation_metadata() or (),
        context.auth_context(),
        method=method,
        peer=context.peer(),
    )


def _decode(request_type: Any, raw: bytes) -> Any:
    try:
        return request_type.FromString(raw)
    except DecodeError:
        raise MalformedRequest(request_type.DESCRIPTOR.full_name) from None


def _decoding(
    servicer: AuthenticatedServicer, method: str, implementation: Any, request_type: Any
) -> Any:
    async def handler(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            principal = _principal(servicer, method, context)
            request = _decode(request_type, raw)
        except (Unauthenticated, MalformedRequest) as exc:
            await _abort(context, exc)
        return await implementation(request, context, principal)

    return handler


def _decoding_stream(
    servicer: AuthenticatedServicer, method: str, implementation: Any, request_type: Any
) -> Any:
    async def handler(raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            principal = _principal(servicer, method, context)
            request = _decode(request_type, raw)
        except (Unauthenticated, MalformedRequest) as exc:
            await _abort(context, exc)
        async for response in implementation(request, context, principal):
            yield response

    return handler
