"""The ``agentsidecar.v1.ToolService`` servicer: routes calls to tools, maps failures to statuses.

Protocol failures become gRPC statuses here (NOT_FOUND, INVALID_ARGUMENT,
DEADLINE_EXCEEDED, UNAVAILABLE); tool failures never do, they are results.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
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
        """How many CallTool and StreamTool calls are running now."""
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
        runner = self._runners.get(request.tool_name)
        if runner is None or self._draining:
            runner = await self._reject(request, context)
        self._in_flight += 1
        try:
            result = await self._execute(runner, request, context, None)
        finally:
            self._call_done()
        return tool_pb2.CallToolResponse(result=result)

    async def StreamTool(
        self, request: tool_pb2.StreamToolRequest, context: grpc.aio.ServicerContext
    ) -> None:
        call = request.call
        runner = self._runners.get(call.tool_name)
        if runner is None or self._draining:
            runner = await self._reject(call, context)
        self._in_flight += 1
        try:
            result = await self._execute(runner, call, context, context.write)
            await context.write(tool_pb2.StreamToolResponse(result=result))
        finally:
            self._call_done()

    async def _execute(
        self,
        runner: ToolRunner,
        call: tool_pb2.CallToolRequest,
        context: grpc.aio.ServicerContext,
        write: ProgressWriter | None,
    ) -> tool_pb2.ToolResult:
        identity = None
        if self._identity is not None:
            identity = await self._verify(runner, call, context)
        tracing = self._tracing
        if tracing is None:
            return await self._run(runner, call, context, write, identity)
        method = "CallTool" if write is None else "StreamTool"
        metadata = context.invocation_metadata()
        with tracing.span(method, runner.name, call.call_id, metadata) as span:
            result = await self._run(runner, call, context, write, identity)
            tracing.record(span, result)
            return result

    async def _verify(
        self, runner: ToolRunner, call: tool_pb2.CallToolRequest, context: grpc.aio.ServicerContext
    ) -> CallerIdentity:
        """The call's verified identity; the call ends UNAUTHENTICATED when it has none."""
        from toolservers._identity import IdentityRefused

        assert self._identity is not None
        try:
            return self._identity.verify(context.invocation_metadata() or (), call.call_id)
        except IdentityRefused as exc:
            logger.warning("%s: call %s refused: %s", runner.name, call.call_id[:64], exc)
            await _abort(context, grpc.StatusCode.UNAUTHENTICATED, str(exc))

    async def _run(
        self,
        runner: ToolRunner,
        call: tool_pb2.CallToolRequest,
        context: grpc.aio.ServicerContext,
        write: ProgressWriter | None,
        identity: CallerIdentity | None = None,
    ) -> tool_pb2.ToolResult:
        ctx = (
            ToolContext(call.call_id, runner.name, context, write, runner.latency, identity)
            if runner.wants_context
            else None
        )
        # grpc.aio already cancels the handler's task when the deadline passes;
        # the local timeout makes that independent of transport timing.
        remaining = context.time_remaining()
        try:
            if remaining is None:
                return await runner.run(call.call_id, call.arguments, ctx)
            async with asyncio.timeout(remaining):
                return await runner.run(call.call_id, call.arguments, ctx)
        except MalformedArguments as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"{runner.name}: {exc}")
        except TimeoutError:
            # The runner turns the tool's own exceptions into results, so a
            # TimeoutError here can only be the deadline.
            await _abort(
                context,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"{runner.name} did not finish before the call's deadline; it was cancelled",
            )

    async def _reject(
        self, call: tool_pb2.CallToolRequest, context: grpc.aio.ServicerContext
    ) -> NoReturn:
        """Answer a call no tool will run: draining, unnamed or unknown tool."""
        if self._draining:
            await _abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                "the tool server is shutting down; retry on another instance",
            )
        if not call.tool_name:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "tool_name is empty")
        await _abort(
            context,
            grpc.StatusCode.NOT_FOUND,
            f"unknown tool {call.tool_name!r}; this server offers: {self._available}",
        )

    def _call_done(self) -> None:
        self._in_flight -= 1
        if not self._in_flight and self._idle is not None:
            self._idle.set()


async def _abort(
    context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str
) -> NoReturn:
    await context.abort(code, message)
    raise AssertionError("unreachable: abort() raises")
