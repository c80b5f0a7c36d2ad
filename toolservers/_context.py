"""The per-call context a tool may ask for by declaring a ``ToolContext`` parameter."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from agentsidecar.v1 import tool_pb2
from toolservers._identity import CallerIdentity, plain_identity

ProgressWriter = Callable[[tool_pb2.StreamToolResponse], Awaitable[None]]


class ToolContext:
    """Facts about the running call, and a way to report progress.

    Declare a parameter annotated ``ToolContext`` (any name) and the server
    passes one in; it is not part of the tool's input schema::

        @server.tool(read_only=True)
        async def export(rows: int, ctx: ToolContext) -> str:
            \"\"\"Export rows.\"\"\"
            for done in range(rows):
                await ctx.report_progress(done, rows)
            return "exported"

    The server builds one per call. To unit-test a tool directly, build one
    yourself: ``ToolContext("call-1", "export")`` has no deadline, no metadata,
    and drops progress reports.

    Args:
        call_id: The caller's id for this call (the model's tool-call id when the
            sidecar calls); may be empty.
        tool_name: The name of the tool being called.
        grpc_context: The call's ``grpc.aio.ServicerContext``; None outside a server.
        write: Where progress reports go (the stream's ``write``); None drops them.
        latency: Simulated latency in seconds for ``simulate_latency``.
        identity: Who the call serves, verified by the server; None: read from the
            call's metadata when asked for (unverified).
    """

    __slots__ = (
        "_grpc_context",
        "_identity",
        "_latency",
        "_latency_spent",
        "_loop",
        "_write",
        "call_id",
        "tool_name",
    )

    def __init__(
        self,
        call_id: str,
        tool_name: str,
        grpc_context: Any = None,
        write: ProgressWriter | None = None,
        latency: float = 0.0,
        identity: CallerIdentity | None = None,
    ) -> None:
        self.call_id = call_id
        self._identity = identity
        self.tool_name = tool_name
        self._grpc_context = grpc_context
        self._write = write
        # Only needed by report_progress_threadsafe, which runs in a worker thread.
        self._loop = asyncio.get_running_loop() if write is not None else None
        self._latency = latency
        self._latency_spent = False

    def time_remaining(self) -> float | None:
        """Seconds left before the call's deadline, or None when the caller set none."""
        if self._grpc_context is None:
            return None
        remaining: float | None = self._grpc_context.time_remaining()
        return remaining

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        """The gRPC metadata the caller sent (trace context, auth...), as key-value pairs."""
        if self._grpc_context is None:
            return ()
        return tuple((key, value) for key, value in self._grpc_context.invocation_metadata() or ())

    @property
    def identity(self) -> CallerIdentity:
        """Who the call serves: the principal, session, run, call and the session's labels,
        as the sidecar sent them (``docs/tool-servers.md``, "Who the call serves").

        ``identity.verified`` is True when the server verified the sidecar's signed
        assertion (``--identity-keys``); only then does the identity prove anything.

        Raises:
            ValueError: the call's identity metadata is malformed (not from a sidecar).
        """
        if self._identity is None:
            self._identity = plain_identity(self.invocation_metadata(), self.call_id)
        return self._identity

    async def report_progress(self, progress: float, total: float = 0.0, message: str = "") -> None:
        """Send a progress report to the caller.

        On ``StreamTool`` this writes a ``ToolProgress`` message and waits until
        the transport accepts it; on ``CallTool`` there is nowhere to send it and
        it returns at once.

        Args:
            progress: Work done so far, in the tool's own units.
            total: Total work in the same units; zero when unknown.
            message: A short human-readable note.
        """
        if self._write is None:
            return
        await self._write(
            tool_pb2.StreamToolResponse(
                progress=tool_pb2.ToolProgress(progress=progress, total=total, message=message)
            )
        )

    def report_progress_threadsafe(
        self, progress: float, total: float = 0.0, message: str = ""
    ) -> None:
        """Send a progress report from a sync tool, which runs in a worker thread.

        Blocks the worker thread until the report is written, so reports keep
        their order and arrive before the result. A no-op on ``CallTool``.

        Raises:
            RuntimeError: called from the event loop's thread; async tools use
                ``await ctx.report_progress(...)``.
        """
        if self._write is None or self._loop is None:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "report_progress_threadsafe() is for sync tools running in a worker thread; "
                "an async tool uses 'await ctx.report_progress(...)'"
            )
        future = asyncio.run_coroutine_threadsafe(
            self.report_progress(progress, total, message), self._loop
        )
        future.result(timeout=self.time_remaining())

    async def simulate_latency(self) -> None:
        """Spend this call's simulated latency (``--latency-ms``) now.

        Example servers use it to place the delay inside the handler, e.g.
        between reading and writing stock. A tool that never calls it gets the
        delay after it returns; either way it is spent once per call, and it is
        zero unless the server was started with a latency flag.
        """
        if self._latency and not self._latency_spent:
            self._latency_spent = True
            await asyncio.sleep(self._latency)
