"""Many tool calls on one long-lived ``CallTools`` stream per tool server.

A unary ``CallTool`` sets up and tears down an HTTP/2 stream per call, on both sides;
measured on this machine, a message on an open bidirectional stream costs the server a
quarter to a third of a unary call's CPU, and the caller about half
(``docs/benchmarks.md``). A server that says so (``ListToolsResponse.call_stream``) gets
its calls on one stream the sidecar keeps open: each call carries its own id, timeout and
metadata (the caller's identity, the trace context); the server answers each, in the order
they finish; a cancelled or timed-out call is cancelled on the server too.

Calls that leave together (a step's, dispatched in the same turn of the event loop) go in
one message, and answers that are ready together come back in one: a step of three calls
costs each side one write and one read instead of three.

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


_BATCH_BYTES = 1024 * 1024
"""Calls written together go in one message up to this size (a server's receive limit is
4 MiB unless it says otherwise); a larger call goes alone."""


_UNTOLD = frozenset({grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL})
"""What a failed write says when the stream's own status has not arrived yet."""
_CORE_FAILURE = "Internal error from Core"
"""The details of a status grpc's core made up itself when an operation on a call failed
(the connection died under a write): no status of the server's."""


def _transport_lost(code: grpc.StatusCode, details: str | None) -> bool:
    """Whether a status says only that the connection failed, not what the server said."""
    return code in _UNTOLD and (details or "").strip() in ("", _CORE_FAILURE)


_STATUS_WAIT = 1.0
"""Seconds a failed write waits for the stream's status."""


class CallStream:
    """The ``CallTools`` stream of one tool server's channel.

    Calls made in the same turn of the event loop (a step's calls, dispatched together)
    leave in one message, and calls made while a write is under way leave together
    after it: one write per batch, not per call.

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
        # A response wraps its answers in a few bytes of its own.
        self._metadata = (*metadata, (MAX_RESULT_KEY, str(max_result_bytes - 64)))
        self._stream: Any = None  # grpc.aio.StreamStreamCall while open
        self._reader: asyncio.Task[None] | None = None
        # By call id: the stream it went on, and where its answer goes.
        self._pending: dict[int, tuple[Any, asyncio.Future[tool_pb2.CallAnswer]]] = {}
        self._next_id = 0
        # What the writer sends next, and the writer while it runs.
        self._outbox: dict[int, tool_pb2.StreamedCall] = {}
        self._cancels: list[int] = []
        self._writer: asyncio.Task[None] | None = None

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
                for answer in response.answers:
                    entry = self._pending.get(answer.id)
                    if entry is not None and entry[0] is stream and not entry[1].done():
                        entry[1].set_result(answer)
        except grpc.aio.AioRpcError as exc:
            # The calls fail as the stream did: UNAVAILABLE when the connection broke,
            # UNAUTHENTICATED when the server refused the sidecar's token, UNIMPLEMENTED
            # when it serves no stream after all.
            code = exc.code()
            if _transport_lost(code, exc.details()):
                code = grpc.StatusCode.UNAVAILABLE  # the connection broke: retried as such
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
        """Fail the calls in flight on ``stream`` (None: on any); those not yet written
        never will be (a call its caller saw fail must not run)."""
        for call_id, (on, future) in self._pending.items():
            if stream is None or on is stream:
                self._outbox.pop(call_id, None)
                if not future.done():
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
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tool_pb2.CallAnswer] = loop.create_future()
        whole = int(timeout)
        self._outbox[call_id] = tool_pb2.StreamedCall(
            id=call_id,
            call=request,
            timeout=Duration(seconds=whole, nanos=int((timeout - whole) * 1e9)),
            metadata={
                key: value if isinstance(value, bytes) else value.encode()
                for key, value in metadata
            },
        )
        # Registered before the write: the answer may be read before the write returns.
        self._pending[call_id] = (self._open(), future)
        if self._writer is None:
            self._writer = loop.create_task(self._write(), name="tool-call-stream-writer")
        try:
            async with asyncio.timeout(timeout):
                answer = await future
        except TimeoutError:
            self._give_up(call_id)
            raise StreamedCallError(
                grpc.StatusCode.DEADLINE_EXCEEDED, "the call's deadline passed"
            ) from None
        except asyncio.CancelledError:
            self._give_up(call_id)
            raise
        finally:
            self._pending.pop(call_id, None)
        if answer.HasField("status"):
            status = answer.status
            code = _CODES.get(status.code, grpc.StatusCode.UNKNOWN)
            raise StreamedCallError(
                code,
                status.message,
                too_large=code is grpc.StatusCode.RESOURCE_EXHAUSTED
                and "the caller accepts" in status.message,
            )
        return answer.result

    def _give_up(self, call_id: int) -> None:
        """A call no longer wanted: never sent, or cancelled on the server."""
        if self._outbox.pop(call_id, None) is None and self._stream is not None:
            self._cancels.append(call_id)
            if self._writer is None:
                self._writer = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        """Send what the outbox holds, a batch per write, until it is empty. Started by
        the first call of a turn of the loop, it runs after that turn's other calls have
        joined the outbox."""
        try:
            while self._outbox or self._cancels:
                stream = self._open()
                message = self._batch()
                try:
                    await stream.write(message)
                except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
                    # The stream broke before or as the calls were written: they fail with
                    # the status it ended with (UNAVAILABLE, retried as such, when it tells
                    # none) and the next call opens a new one.
                    if self._stream is stream:
                        self._stream = None
                    code, details = await _ended_with(stream, exc)
                    self._fail_pending(f"the call stream failed: {details}", stream, code)
        finally:
            self._writer = None

    def _batch(self) -> tool_pb2.CallToolsRequest:
        """The next message: the cancels, and calls up to :data:`_BATCH_BYTES` (at least
        one)."""
        message = tool_pb2.CallToolsRequest(cancels=self._cancels)
        self._cancels.clear()
        size = 0
        for call_id, call in list(self._outbox.items()):
            size += call.ByteSize()
            if size > _BATCH_BYTES and message.calls:
                break
            message.calls.append(call)
            del self._outbox[call_id]
        return message

    async def close(self) -> None:
        """End the stream: calls still in flight fail UNAVAILABLE."""
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.cancel()
        tasks = [t for t in (self._reader, self._writer) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._outbox.clear()
        self._fail_pending("the tool server's connection closed")


async def _ended_with(
    stream: Any, exc: grpc.aio.AioRpcError | asyncio.InvalidStateError
) -> tuple[grpc.StatusCode, str]:
    """The status a stream ended with when a write to it failed. The write may fail first
    (a core error) while the server's status is still on its way: a server that serves no
    stream says UNIMPLEMENTED, and its calls must learn that, not UNAVAILABLE."""
    if isinstance(exc, grpc.aio.AioRpcError) and exc.code() not in _UNTOLD:
        return exc.code(), exc.details() or ""
    # A write that failed under a dying connection says INTERNAL ("Internal error from
    # Core"), and so may the stream's status: either is the connection's loss, UNAVAILABLE.
    try:
        async with asyncio.timeout(_STATUS_WAIT):
            code = await stream.code()
            details = await stream.details()
    except (TimeoutError, grpc.aio.AioRpcError, asyncio.InvalidStateError):
        return grpc.StatusCode.UNAVAILABLE, str(exc)
    if code is None or code is grpc.StatusCode.OK or _transport_lost(code, details):
        return grpc.StatusCode.UNAVAILABLE, details or str(exc)
    return code, details or str(exc)
