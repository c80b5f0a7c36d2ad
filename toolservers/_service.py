"""The ``agentsidecar.v1.ToolService`` servicer: routes calls to tools, maps failures to statuses.

Protocol failures become gRPC statuses here (NOT_FOUND, INVALID_ARGUMENT,
DEADLINE_EXCEEDED, UNAVAILABLE, UNAUTHENTICATED); tool failures never do, they are
results. A call runs the same way whichever RPC carries it: ``CallTool`` (one call per
RPC), ``StreamTool`` (with progress) or ``CallTools`` (many calls on one stream, each
failing with a ``CallStatus`` where the others fail with a status).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, NoReturn

import grpc

from agentsidecar.v1 import tool_pb2, tool_pb2_grpc
from toolservers._context import ProgressWriter, ToolContext
from toolservers._runner import MalformedArguments, ToolRunner

if TYPE_CHECKING:
    from toolservers._identity import CallerIdentity, IdentityVerifier
    from toolservers._tracing import HandlerTracing

logger = logging.getLogger("toolservers")

SERVICE_NAME: str = tool_pb2.DESCRIPTOR.services_by_name["ToolService"].full_name
MAX_RESULT_KEY = "x-agent-max-result-bytes"
"""Metadata of a ``CallTools`` stream: the largest response its caller accepts. A larger
result would end the whole stream (gRPC refuses the message), so the server answers that
call RESOURCE_EXHAUSTED instead of sending it."""

_Metadata = Sequence[tuple[str, str | bytes]]


class _CallFailed(Exception):
    """A call failed as a protocol failure: a status for CallTool, a CallStatus on a stream."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _StreamedCallContext:
    """What a handler reads of a call that came on a ``CallTools`` stream: its deadline
    and its metadata, as a ``ServicerContext`` offers them for one RPC."""

    __slots__ = ("_deadline", "_metadata")

    def __init__(self, deadline: float | None, metadata: _Metadata) -> None:
        self._deadline = deadline
        self._metadata = metadata

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    def invocation_metadata(self) -> _Metadata:
        return self._metadata


def _streamed_metadata(entries: Mapping[str, bytes]) -> _Metadata:
    """A StreamedCall's metadata as gRPC metadata: text values decoded, ``-bin`` kept."""
    return tuple(
        (key, value if key.endswith("-bin") else value.decode("ascii", errors="replace"))
        for key, value in entries.items()
    )


class ToolService(tool_pb2_grpc.ToolServiceServicer):
    """Serves one set of tools over the tool-server protocol.

    Args:
        runners: Tool name to its runner.
        tools: The ``ListTools`` answer, built once and returned as is.
        tracing: Continues the caller's trace in a span per call; None when tracing is off.
        identity: Verifies who each call serves before its tool runs (UNAUTHENTICATED when
            it does not verify); None: handlers read the plain, unverified metadata.
    """

    def __init__(
        self,
        runners: Mapping[str, ToolRunner],
        tools: tool_pb2.ListToolsResponse,
        tracing: HandlerTracing | None = None,
        identity: IdentityVerifier | None = None,
    ):
        self._runners = dict(runners)
        self._tracing = tracing
        self._identity = identity
        self._tools = tools
        self._available = ", ".join(runners) or "(none)"
        self._draining = False
        self._in_flight = 0
        self._idle: asyncio.Event | None = None

    @property
    def in_flight(self) -> int:
        """How many tool calls are running now, whichever RPC carries them."""
        return self._in_flight

    def begin_drain(self) -> None:
        """Refuse new tool calls with UNAVAILABLE from now on; running calls go on."""
        self._draining = True
        self._idle = asyncio.Event()
        if not self._in_flight:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Wait until no tool call runs. Only meaningful after ``begin_drain``."""
        if self._idle is not None:
            await self._idle.wait()

    async def ListTools(
        self, request: tool_pb2.ListToolsRequest, context: grpc.aio.ServicerContext
    ) -> tool_pb2.ListToolsResponse:
        return self._tools

    async def CallTool(
        self, request: tool_pb2.CallToolRequest, context: grpc.aio.ServicerContext
    ) -> tool_pb2.CallToolResponse:
        try:
            result = await self._call(request, context, context.invocation_metadata() or (), None)
        except _CallFailed as exc:
            await _abort(context, exc.code, exc.message)
        return tool_pb2.CallToolResponse(result=result)

    async def StreamTool(
        self, request: tool_pb2.StreamToolRequest, context: grpc.aio.ServicerContext
    ) -> None:
        try:
            metadata = context.invocation_metadata() or ()
            result = await self._call(request.call, context, metadata, context.write)
        except _CallFailed as exc:
            await _abort(context, exc.code, exc.message)
        await context.write(tool_pb2.StreamToolResponse(result=result))

    async def CallTools(
        self,
        requests: AsyncIterator[tool_pb2.CallToolsRequest],
        context: grpc.aio.ServicerContext,
    ) -> None:
        """Many calls on one stream: each runs in a task of its own and is answered when it
        ends (answers ready together share a message); a cancel stops its call; the
        caller's half-close ends the stream once the calls it sent are answered."""
        answers = _Answers(context, _max_result(context.invocation_metadata() or ()))
        running: dict[int, asyncio.Task[None]] = {}
        loop = asyncio.get_running_loop()

        async def run(streamed: tool_pb2.StreamedCall) -> None:
            deadline = None
            if streamed.HasField("timeout"):
                deadline = time.monotonic() + streamed.timeout.ToNanoseconds() / 1e9
            call_context = _StreamedCallContext(deadline, _streamed_metadata(streamed.metadata))
            try:
                result = await self._call(
                    streamed.call, call_context, call_context.invocation_metadata(), None
                )
                answer = tool_pb2.CallAnswer(id=streamed.id, result=result)
            except _CallFailed as exc:
                answer = _failed(streamed.id, exc.code, exc.message)
            except asyncio.CancelledError:
                answer = _failed(streamed.id, grpc.StatusCode.CANCELLED, "the caller cancelled")
            finally:
                running.pop(streamed.id, None)
            answers.send(answer)

        try:
            async for request in requests:
                for streamed in request.calls:
                    running[streamed.id] = loop.create_task(run(streamed))
                for call_id in request.cancels:
                    cancelled = running.get(call_id)
                    if cancelled is not None:
                        cancelled.cancel()
            # The caller closed its side: answer what it sent, then end the stream.
            await asyncio.gather(*running.values(), return_exceptions=True)
            await answers.flushed()
        finally:
            for task in running.values():  # the stream broke: nobody reads the answers
                task.cancel()
            answers.close()

    async def _call(
        self,
        call: tool_pb2.CallToolRequest,
        context: grpc.aio.ServicerContext | _StreamedCallContext,
        metadata: _Metadata,
        write: ProgressWriter | None,
    ) -> tool_pb2.ToolResult:
        """Run one call, whichever RPC carried it.

        Raises:
            _CallFailed: the protocol failure the call ends with.
        """
        runner = self._runners.get(call.tool_name)
        if runner is None or self._draining:
            raise self._rejected(call)
        self._in_flight += 1
        try:
            return await self._execute(runner, call, context, metadata, write)
        finally:
            self._call_done()

    async def _execute(
        self,
        runner: ToolRunner,
        call: tool_pb2.CallToolRequest,
        context: grpc.aio.ServicerContext | _StreamedCallContext,
        metadata: _Metadata,
        write: ProgressWriter | None,
    ) -> tool_pb2.ToolResult:
        identity = None
        if self._identity is not None:
            identity = self._verify(runner, call, metadata)
        tracing = self._tracing
        if tracing is None:
            return await self._run(runner, call, context, write, identity)
        method = "CallTool" if write is None else "StreamTool"
        with tracing.span(method, runner.name, call.call_id, metadata) as span:
            result = await self._run(runner, call, context, write, identity)
            tracing.record(span, result)
            return result

    def _verify(
        self, runner: ToolRunner, call: tool_pb2.CallToolRequest, metadata: _Metadata
    ) -> CallerIdentity:
        """The call's verified identity; the call fails UNAUTHENTICATED when it has none."""
        from toolservers._identity import IdentityRefused

        assert self._identity is not None
        try:
            return self._identity.verify(metadata, call.call_id)
        except IdentityRefused as exc:
            logger.warning("%s: call %s refused: %s", runner.name, call.call_id[:64], exc)
            raise _CallFailed(grpc.StatusCode.UNAUTHENTICATED, str(exc)) from None

    async def _run(
        self,
        runner: ToolRunner,
        call: tool_pb2.CallToolRequest,
        context: grpc.aio.ServicerContext | _StreamedCallContext,
        write: ProgressWriter | None,
        identity: CallerIdentity | None = None,
    ) -> tool_pb2.ToolResult:
        ctx = (
            ToolContext(call.call_id, runner.name, context, write, runner.latency, identity)
            if runner.wants_context
            else None
        )
        # grpc.aio already cancels the handler's task when the deadline passes;
        # the local timeout makes that independent of transport timing (and is the only
        # one for a call on a stream).
        remaining = context.time_remaining()
        try:
            if remaining is None:
                return await runner.run(call.call_id, call.arguments, ctx)
            async with asyncio.timeout(remaining):
                return await runner.run(call.call_id, call.arguments, ctx)
        except MalformedArguments as exc:
            raise _CallFailed(grpc.StatusCode.INVALID_ARGUMENT, f"{runner.name}: {exc}") from None
        except TimeoutError:
            # The runner turns the tool's own exceptions into results, so a
            # TimeoutError here can only be the deadline.
            raise _CallFailed(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"{runner.name} did not finish before the call's deadline; it was cancelled",
            ) from None

    def _rejected(self, call: tool_pb2.CallToolRequest) -> _CallFailed:
        """Why no tool will run a call: draining, unnamed or unknown tool."""
        if self._draining:
            return _CallFailed(
                grpc.StatusCode.UNAVAILABLE,
                "the tool server is shutting down; retry on another instance",
            )
        if not call.tool_name:
            return _CallFailed(grpc.StatusCode.INVALID_ARGUMENT, "tool_name is empty")
        return _CallFailed(
            grpc.StatusCode.NOT_FOUND,
            f"unknown tool {call.tool_name!r}; this server offers: {self._available}",
        )

    def _call_done(self) -> None:
        self._in_flight -= 1
        if not self._in_flight and self._idle is not None:
            self._idle.set()


def _max_result(metadata: _Metadata) -> int | None:
    for key, value in metadata:
        if key == MAX_RESULT_KEY:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _failed(call_id: int, code: grpc.StatusCode, message: str) -> tool_pb2.CallAnswer:
    return tool_pb2.CallAnswer(
        id=call_id, status=tool_pb2.CallStatus(code=code.value[0], message=message)
    )


class _Answers:
    """The answers of one ``CallTools`` stream, written in batches: those ready together
    (a step's calls that finish in the same turn of the event loop) share one message, and
    those ready while a write is under way leave together after it. A message stays
    within the size the caller accepts; an answer alone larger than that is that call's
    RESOURCE_EXHAUSTED, never sent (it would end the whole stream)."""

    def __init__(self, context: grpc.aio.ServicerContext, limit: int | None) -> None:
        self._context = context
        # The caller's limit, less what the response and the answer's field take.
        self._limit = limit - 16 if limit is not None else None
        self._ready: list[tool_pb2.CallAnswer] = []
        self._writer: asyncio.Task[None] | None = None
        self._broken = False

    def send(self, answer: tool_pb2.CallAnswer) -> None:
        if self._broken:
            logger.debug("call %d on a closed stream not answered", answer.id)
            return
        if self._limit is not None and answer.ByteSize() > self._limit:
            size = answer.ByteSize()
            answer = _failed(
                answer.id,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the result is {size} bytes; the caller accepts {self._limit + 16}",
            )
        self._ready.append(answer)
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        try:
            while self._ready:
                await self._context.write(self._batch())
        except Exception:  # the stream ended first: nobody is left to answer
            self._broken = True
            logger.debug("%d answers on a closed stream not sent", len(self._ready))
            self._ready.clear()
        finally:
            self._writer = None

    def _batch(self) -> tool_pb2.CallToolsResponse:
        """The next message: ready answers up to the caller's limit (at least one)."""
        if self._limit is None:
            batch, self._ready = self._ready, []
            return tool_pb2.CallToolsResponse(answers=batch)
        taken, size = 0, 0
        for answer in self._ready:
            size += answer.ByteSize() + 8  # the field's tag and length
            if size > self._limit and taken:
                break
            taken += 1
        batch, self._ready = self._ready[:taken], self._ready[taken:]
        return tool_pb2.CallToolsResponse(answers=batch)

    async def flushed(self) -> None:
        """Wait until every answer sent so far is written (or cannot be)."""
        while self._writer is not None:
            await asyncio.shield(self._writer)

    def close(self) -> None:
        """The stream has ended: answers from now on go nowhere."""
        self._broken = True
        if self._writer is not None:
            self._writer.cancel()


async def _abort(
    context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str
) -> NoReturn:
    await context.abort(code, message)
    raise AssertionError("unreachable: abort() raises")
