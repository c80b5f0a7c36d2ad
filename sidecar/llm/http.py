"""A lean HTTP/1.1 client for one origin: keep-alive connections, responses parsed by httptools.

The model endpoint is a single origin called over and over with one JSON POST. A general
client (aiohttp) spends most of its time per request on generality this path needs none
of — cookie jars, redirects, tracing hooks, URL objects, header multidicts: about 100 µs
of CPU per request on the benchmark machine, against about 45 µs through this client
(``python bench/model_transport.py``). The hard part, parsing responses (chunked bodies
included), is httptools: llhttp, the parser Node.js uses.

What it does not do, because the model endpoint never needs it: redirects, proxies,
compression, cookies, request bodies other than bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools

from sidecar.errors import HttpError

MAX_BODY_BYTES = 64 * 1024 * 1024
"""A response body larger than this is refused (an endpoint gone wrong, not a model)."""
_PAUSE_BYTES = 1024 * 1024  # unread bytes at which reading pauses until the reader catches up


class _StaleConnection(HttpError):
    """A kept-alive connection closed before any byte of the response came back."""


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection, carrying one exchange at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self.idle_since = 0.0
        self.closed = False
        self.exchanges = 0
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = False
        self.complete = False
        self.error: HttpError | None = None
        self._received = False
        self._headers_ready: asyncio.Future[None] | None = None
        self._body: deque[bytes] = deque()
        self._buffered = 0
        self._body_total = 0
        self._framed = False  # the body's end is known from Content-Length or chunking
        self._wake: asyncio.Future[None] | None = None
        self._when_complete: list[Callable[[_Connection], None]] = []

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        self._received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(HttpError(f"malformed HTTP response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.complete:
            return
        if self._headers_ready is not None and self._headers_ready.done() and not self._framed:
            self.on_message_complete()  # a body delimited by the connection closing
            return
        if not self._received:
            self._fail(_StaleConnection("the connection closed before the response began"))
        else:
            self._fail(HttpError("the connection closed before the response was complete"))

    # -- httptools callbacks ------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self.keep_alive = self._parser.should_keep_alive()
        chunked = "chunked" in self.headers.get("transfer-encoding", "")
        self._framed = chunked or "content-length" in self.headers
        if self._headers_ready is not None and not self._headers_ready.done():
            self._headers_ready.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._body_total += len(body)
        if self._body_total > MAX_BODY_BYTES:
            self._fail(HttpError(f"the response body is larger than {MAX_BODY_BYTES} bytes"))
            return
        self._body.append(body)
        self._buffered += len(body)
        if self._buffered > _PAUSE_BYTES and self.transport is not None:
            self.transport.pause_reading()
        self._wakeup()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wakeup()
        callbacks, self._when_complete = self._when_complete, []
        for callback in callbacks:
            callback(self)

    # -- the exchange, from the client's side --------------------------------------------

    def send(self, data: bytes, loop: asyncio.AbstractEventLoop) -> None:
        self._reset()
        self.exchanges += 1
        self._headers_ready = loop.create_future()
        assert self.transport is not None
        self.transport.write(data)

    async def response_began(self) -> None:
        assert self._headers_ready is not None
        await self._headers_ready

    async def next_chunk(self) -> bytes | None:
        """The body's next piece as it arrives; None at the message's end."""
        while not self._body:
            if self.error is not None:
                raise self.error
            if self.complete:
                return None
            self._wake = asyncio.get_running_loop().create_future()
            await self._wake
        chunk = self._body.popleft()
        self._buffered -= len(chunk)
        if self._buffered <= _PAUSE_BYTES // 2 and self.transport is not None:
            self.transport.resume_reading()
        return chunk

    def when_complete(self, callback: Callable[[_Connection], None]) -> None:
        self._when_complete.append(callback)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _wakeup(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _fail(self, error: HttpError) -> None:
        if self.error is None:
            self.error = error
        if self._headers_ready is not None and not self._headers_ready.done():
            self._headers_ready.set_exception(error)
            self._headers_ready.exception()  # retrieved here; the waiter re-raises it
        self._wakeup()
        self.close()


class Response:
    """A response whose status and headers have arrived; its body is read from it."""

    def __init__(self, connection: _Connection, deadline: float) -> None:
        self._connection = connection
        self._deadline = deadline
        self.status = connection.status
        self.headers: Mapping[str, str] = connection.headers
        """Header names lower-cased; repeated headers joined with ``, ``."""

    async def read(self) -> bytes:
        parts = []
        async with asyncio.timeout_at(self._deadline):
            while (chunk := await self._connection.next_chunk()) is not None:
                parts.append(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def lines(self) -> AsyncGenerator[bytes, None]:
        """The body's lines as they arrive, each with its line ending."""
        rest = b""
        while True:
            async with asyncio.timeout_at(self._deadline):
                chunk = await self._connection.next_chunk()
            if chunk is None:
                break
            data = rest + chunk if rest else chunk
            start = 0
            while (end := data.find(b"\n", start)) >= 0:
                yield data[start : end + 1]
                start = end + 1
            rest = data[start:]
        if rest:
            yield rest


class HttpClient:
    """POSTs to one URL over a pool of kept-alive HTTP/1.1 connections.

    Args:
        url: ``http://`` or ``https://`` URL every request goes to.
        headers: sent with every request (``Host`` and ``Content-Length`` are added).
        idle_timeout: seconds an unused connection is kept; servers close idle
            connections on their own clock, and a request on one they closed is sent again
            on a fresh connection once, when no byte of the response had come back.
    """

    def __init__(self, url: str, headers: Mapping[str, str], *, idle_timeout: float = 15.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self._origin = f"{parts.scheme}://{parts.netloc}"
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [f"POST {path} HTTP/1.1", f"Host: {parts.netloc}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        self._head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")
        self._idle_timeout = idle_timeout
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()

    @contextlib.asynccontextmanager
    async def post(self, body: bytes, timeout: float) -> AsyncIterator[Response]:
        """POST ``body``; yield the response once its headers are in.

        Raises:
            HttpError: the connection failed or the response was malformed.
            TimeoutError: the exchange (body included) took longer than ``timeout``.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        request = self._head + str(len(body)).encode() + b"\r\n\r\n" + body
        async with asyncio.timeout_at(deadline):
            connection, reused = await self._connection(loop)
            try:
                await self._send(connection, request, loop)
            except _StaleConnection:
                if not reused:
                    raise
                connection, _ = await self._connection(loop, fresh=True)
                await self._send(connection, request, loop)
        try:
            yield Response(connection, deadline)
        except BaseException:
            self._drop(connection)  # abandoned mid-body: the rest would arrive unread
            raise
        self._release(connection)

    async def _send(
        self, connection: _Connection, request: bytes, loop: asyncio.AbstractEventLoop
    ) -> None:
        try:
            connection.send(request, loop)
            await connection.response_began()
        except BaseException:
            self._drop(connection)
            raise

    async def close(self) -> None:
        for connection in list(self._all):
            connection.close()
        self._all.clear()
        self._idle.clear()

    async def _connection(
        self, loop: asyncio.AbstractEventLoop, fresh: bool = False
    ) -> tuple[_Connection, bool]:
        now = time.monotonic()
        while self._idle and not fresh:
            connection = self._idle.pop()
            if not connection.closed and now - connection.idle_since < self._idle_timeout:
                return connection, True
            connection.close()
            self._all.discard(connection)
        try:
            _, connection = await loop.create_connection(
                _Connection,
                self._host,
                self._port,
                ssl=self._ssl,
                server_hostname=self._host if self._ssl else None,
            )
        except (OSError, ssl.SSLError) as exc:
            raise HttpError(f"cannot connect to {self._origin}: {exc}") from None
        self._all.add(connection)
        return connection, False

    def _release(self, connection: _Connection) -> None:
        if connection.closed or connection.error is not None or not connection.keep_alive:
            self._drop(connection)
        elif connection.complete:
            self._keep(connection)
        else:
            # The reader stopped before the body's end (a stream read up to its [DONE]):
            # the connection goes back once the rest has arrived, or is dropped.
            connection.when_complete(self._keep)
            exchange = connection.exchanges

            def give_up() -> None:
                if connection.exchanges == exchange and not connection.complete:
                    self._drop(connection)

            asyncio.get_running_loop().call_later(self._idle_timeout, give_up)

    def _keep(self, connection: _Connection) -> None:
        if connection.closed or connection.error is not None or not connection.keep_alive:
            self._drop(connection)
            return
        connection.idle_since = time.monotonic()
        self._idle.append(connection)

    def _drop(self, connection: _Connection) -> None:
        connection.close()
        self._all.discard(connection)
