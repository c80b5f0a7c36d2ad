"""Many tool calls on one long-lived ``CallTools`` stream per tool server.

A unary ``CallTool`` sets up and tears down an HTTP/2 stream per call, on both sides;
measured on this machine, a message on an open bidirectional stream costs the server a
quarter to a third of a unary call's CPU, and the caller about half
(``docs/benchmarks.md``). A server that says so (``ListToolsResponse.call_stream``) gets
its calls on one stream the sidecar keeps open: each call carries its own id, timeout and
metadata (the caller's identity, the trace context); the server answers each, in the order
they finish; a cancelled or timed-out call is cancelled on the server too.

To dispatch it is the same call: a call that fails here raises the ``AioRpcError`` a
unary call would (the status the server gave the call, or UNAVAILABLE when the stream
broke), so breakers, retries and outcomes treat both alike. A broken stream fails the
calls it carried and the next call opens a new one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration

from agentsidecar.v1 import tool_pb2, tool_pb2_grpc

__all__ = ["MAX_RESULT_KEY", "CallStream", "StreamedCallError"]

log = logging.getLogger(__name__)

MAX_RESULT_KEY = "x-agent-max-result-bytes"
"""The stream's metadata that tells the server the largest response the sidecar takes."""
_EMPTY = grpc.aio.Metadata()


class StreamedCallError(grpc.aio.AioRpcError):  # type: ignore[misc]
    """A call on the stream failed with this status; ``too_large``: the server withheld
    a result larger than the sidecar accepts (the call's error, not the server's)."""

    def __init__(self, code: grpc.StatusCode, details: str, *, too_large: bool = False) -> None:
        super().__init__(code, _EMPTY, _EMPTY, details)
        self.too_large = too_large


_CODES = {code.value[0]: code for code in grpc.StatusCode}


class CallStream:
    """The ``CallTools`` stream of one tool server's channel.

    Args:
        stub: The server's stub (a new channel gets a new stream).
        metadata: The stream's metadata: the sidecar's token, if any.
        max_result_bytes: The largest response accepted (the channel's receive limit).
    """

    def __init__(
        self,
        stub: tool_pb2_grpc.ToolServiceStub,
        metadata: Sequence[tuple[str, str]],
        max_result_bytes: int,
    ) -> None:
        self._stub = stub
        # The response wraps the result in a few bytes of its own.
        self._metadata = (*metadata, (MAX_RESULT_KEY, str(max_result_bytes - 64)))
        self._stream: Any = None  # grpc.aio.StreamStreamCall while open
        self._reader: asyncio.Task[None] | None = None
        # By call id: the stream it went on, and where its answer goes.
        self._pending: dict[int, tuple[Any, asyncio.Future[tool_pb2.CallToolsResponse]]] = {}
        self._next_id = 0
        self._writing = asyncio.Lock()
        self._cancels: set[asyncio.Task[None]] = set()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def _open(self) -> Any:
        if self._stream is None:
            stream = self._stub.CallTools(metadata=self._metadata)
            self._stream = stream
            self._reader = asyncio.get_running_loop().create_task(
                self._read(stream), name="tool-call-stream"
            )
        return self._stream

    async def _read(self, stream: Any) -> None:
        """Hand each answer to its call; when the stream ends, fail what is left."""
        why, code = "the tool server ended the call stream", grpc.StatusCode.UNAVAILABLE
        try:
            async for response in stream:
                entry = self._pending.get(response.id)
                if entry is not None and entry[0] is stream and not entry[1].done():
                    entry[1].set_result(response)
        except grpc.aio.AioRpcError as exc:
            # The calls fail as the stream did: UNAVAILABLE when the connection broke,
            # UNAUTHENTICATED when the server refused the sidecar's token, UNIMPLEMENTED
            # when it serves no stream after all.
            code = exc.code()
            why = f"the call stream failed ({code.name}: {exc.details() or ''})"
        except asyncio.CancelledError:
            why = "the call stream was closed"
            raise
        finally:
            if self._stream is stream:
                self._stream = None
            self._fail_pending(why, stream, code)

    def _fail_pending(
        self, why: str, stream: Any = None, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
    ) -> None:
        """Fail the calls in flight on ``stream`` (None: on any)."""
        for on, future in self._pending.values():
            if (stream is None or on is stream) and not future.done():
                future.set_exception(StreamedCallError(code, why))

    async def call(
        self,
        request: tool_pb2.CallToolRequest,
        timeout: float,
        metadata: Sequence[tuple[str, str | bytes]],
    ) -> tool_pb2.ToolResult:
        """Run one call on the stream within ``timeout`` seconds.

        Raises:
            grpc.aio.AioRpcError: the call failed (DEADLINE_EXCEEDED when its time ran
                out, UNAVAILABLE when the stream broke, or the status the server gave it).
        """
        self._next_id += 1
        call_id = self._next_id
        future: asyncio.Future[tool_pb2.CallToolsResponse] = (
            asyncio.get_running_loop().create_future()
        )
        whole = int(timeout)
        message = tool_pb2.CallToolsRequest(
            call=tool_pb2.StreamedCall(
                id=call_id,
                call=request,
                timeout=Duration(seconds=whole, nanos=int((timeout - whole) * 1e9)),
                metadata={
                    key: value if isinstance(value, bytes) else value.encode()
                    for key, value in metadata
                },
            )
        )
        sent = False
        try:
            async with asyncio.timeout(timeout):
                await self._write(call_id, message, future)
                sent = True
                response = await future
        except TimeoutError:
            if sent:
                self._cancel(call_id)
            raise StreamedCallError(
                grpc.StatusCode.DEADLINE_EXCEEDED, "the call's deadline passed"
            ) from None
        except asyncio.CancelledError:
            if sent:
                self._cancel(call_id)
            raise
        finally:
            self._pending.pop(call_id, None)
        if response.HasField("status"):
            status = response.status
            code = _CODES.get(status.code, grpc.StatusCode.UNKNOWN)
            raise StreamedCallError(
                code,
                status.message,
                too_large=code is grpc.StatusCode.RESOURCE_EXHAUSTED
                and "the caller accepts" in status.message,
            )
        return response.result

    async def _write(
        self,
        call_id: int,
        message: tool_pb2.CallToolsRequest,
        future: asyncio.Future[tool_pb2.CallToolsResponse],
    ) -> None:
        async with self._writing:
            stream = self._open()
            # Registered before the write: the answer may be read before the write returns.
            self._pending[call_id] = (stream, future)
            try:
                await stream.write(message)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
                # The stream broke before or as the call was written: the next call opens
                # a new one.
                if self._stream is stream:
                    self._stream = None
                details = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
                raise StreamedCallError(
                    grpc.StatusCode.UNAVAILABLE, f"the call stream failed: {details}"
                ) from None

    def _cancel(self, call_id: int) -> None:
        """Tell the server a call is no longer wanted (in the background: the caller may
        be cancelled itself)."""
        message = tool_pb2.CallToolsRequest(cancel=tool_pb2.CancelCall(id=call_id))

        async def send() -> None:
            try:
                async with self._writing:
                    if self._stream is not None:
                        await self._stream.write(message)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                pass  # the stream is gone, and the call with it

        task = asyncio.get_running_loop().create_task(send())
        self._cancels.add(task)
        task.add_done_callback(self._cancels.discard)

    async def close(self) -> None:
        """End the stream: calls still in flight fail UNAVAILABLE."""
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.cancel()
        for task in (self._reader, *self._cancels):
            if task is not None:
                task.cancel()
        await asyncio.gather(
            *(t for t in (self._reader, *self._cancels) if t is not None), return_exceptions=True
        )
        self._fail_pending("the tool server's connection closed")
