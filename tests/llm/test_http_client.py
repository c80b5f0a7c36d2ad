"""The model transport's HTTP/1.1 client against real TCP servers on 127.0.0.1.

Each server here answers with scripted bytes, so every framing the client must handle —
Content-Length, chunked, closed-delimited, malformed, cut off — is on the wire for real.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from sidecar.errors import HttpError
from sidecar.llm import http
from sidecar.llm.http import HttpClient

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """A TCP server whose ``handler`` writes whatever bytes the test wants."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.closed = asyncio.Event()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1/chat/completions"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        finally:
            writer.close()
            self.closed.set()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes | None:
        """One request's body, or None when the client closed the connection."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        body = await reader.readexactly(length)
        self.requests.append(body)
        return body


def _response(body: bytes, *extra: str) -> bytes:
    head = ["HTTP/1.1 200 OK", "Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join([*head, *extra]) + "\r\n\r\n").encode() + body


def _chunked(*pieces: bytes) -> bytes:
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    return head + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


async def _echo_forever(server: RawServer) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (body := await server.read_request(reader)) is not None:
            writer.write(_response(body))
            await writer.drain()

    return handler


@pytest.fixture
async def echo() -> AsyncIterator[RawServer]:
    server = RawServer(lambda r, w: asyncio.sleep(0))
    server.handler = await _echo_forever(server)
    async with server:
        yield server


async def test_requests_share_one_kept_alive_connection(echo: RawServer) -> None:
    client = HttpClient(echo.url, {"Authorization": "Bearer k"})
    for i in range(20):
        async with client.post(b'{"n": %d}' % i, timeout=5) as response:
            assert response.status == 200
            assert response.headers["content-type"] == "application/json"
            assert await response.read() == b'{"n": %d}' % i
    await client.close()
    assert echo.connections == 1
    assert len(echo.requests) == 20


async def test_a_connection_the_server_closed_while_idle_is_replaced_without_an_error() -> None:
    async def answer_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await server.read_request(reader)
        assert body is not None
        writer.write(_response(body))  # keep-alive by default in HTTP/1.1, but ...
        await writer.drain()
        await asyncio.sleep(0.05)  # ... the server's idle timeout is short

    server = RawServer(answer_then_close)
    async with server:
        client = HttpClient(server.url, {})
        for text in (b"first", b"second"):
            async with client.post(text, timeout=5) as response:
                assert await response.read() == text
            await asyncio.sleep(0.2)
        await client.close()
    assert server.connections == 2
    assert server.requests == [b"first", b"second"]


async def test_a_request_the_server_dropped_on_a_kept_alive_connection_is_sent_again() -> None:
    # The race every keep-alive client meets: the server closes an idle connection just
    # as a request goes out on it. Nothing of the response came back, so it is resent.
    async def drop_the_second(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await server.read_request(reader)
        assert body is not None
        writer.write(_response(body))
        await writer.drain()
        if server.connections == 1:
            await server.read_request(reader)  # closed unanswered

    server = RawServer(drop_the_second)
    async with server:
        client = HttpClient(server.url, {})
        for text in (b"first", b"second"):
            async with client.post(text, timeout=5) as response:
                assert await response.read() == text
        await client.close()
    assert server.requests == [b"first", b"second", b"second"]
    assert server.connections == 2


async def test_connection_close_in_the_response_is_honoured() -> None:
    async def answer_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await server.read_request(reader)
        assert body is not None
        writer.write(_response(body, "Connection: close"))
        await writer.drain()
        await server.read_request(reader)  # a client that ignored it would hang here

    server = RawServer(answer_once)
    async with server:
        client = HttpClient(server.url, {})
        for text in (b"a", b"b"):
            async with client.post(text, timeout=5) as response:
                assert await response.read() == text
        await client.close()
    assert server.connections == 2


async def test_streamed_lines_come_out_whole_whatever_the_chunking() -> None:
    async def stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(
            _chunked(b'data: {"a"', b": 1}\n\ndata: {", b'"b": 2}\n', b"\ndata: [DONE]\n\n")
        )
        await writer.drain()
        await server.read_request(reader)

    server = RawServer(stream)
    async with server:
        client = HttpClient(server.url, {})
        async with client.post(b"{}", timeout=5) as response:
            lines = [line async for line in response.lines()]
        await client.close()
    assert lines == [
        b'data: {"a": 1}\n',
        b"\n",
        b'data: {"b": 2}\n',
        b"\n",
        b"data: [DONE]\n",
        b"\n",
    ]


async def test_a_stream_left_at_its_last_event_returns_its_connection_once_complete() -> None:
    async def slow_terminator(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await server.read_request(reader) is not None:
            writer.write(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\ne\r\ndata: [DONE]\n\n\r\n"
            )
            await writer.drain()
            await asyncio.sleep(0.05)  # the reader stops at [DONE], before the body ends
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    server = RawServer(slow_terminator)
    async with server:
        client = HttpClient(server.url, {})
        for _ in range(2):
            async with client.post(b"{}", timeout=5) as response:
                async for line in response.lines():
                    if line.startswith(b"data: [DONE]"):
                        break
            await asyncio.sleep(0.2)
        await client.close()
    assert server.connections == 1


async def test_a_body_without_length_is_read_until_the_connection_closes() -> None:
    async def unframed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b"x" * 100_000)
        await writer.drain()

    server = RawServer(unframed)
    async with server:
        client = HttpClient(server.url, {})
        async with client.post(b"{}", timeout=5) as response:
            assert await response.read() == b"x" * 100_000
        await client.close()


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
            "closed before the response was complete",
        ),
        (b"SMTP ready\r\n\r\n", "malformed HTTP response"),
        (b"", "closed before the response began"),
    ],
    ids=["cut-off", "malformed", "closed"],
)
async def test_a_broken_response_is_a_clear_error(reply: bytes, message: str) -> None:
    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(reply)
        await writer.drain()

    server = RawServer(broken)
    async with server:
        client = HttpClient(server.url, {})
        with pytest.raises(HttpError, match=message):
            async with client.post(b"{}", timeout=5) as response:
                await response.read()
        await client.close()


async def test_an_oversized_body_is_refused(
    monkeypatch: pytest.MonkeyPatch, echo: RawServer
) -> None:
    monkeypatch.setattr(http, "MAX_BODY_BYTES", 1000)
    client = HttpClient(echo.url, {})
    with pytest.raises(HttpError, match="larger than 1000 bytes"):
        async with client.post(b"y" * 5000, timeout=5) as response:
            await response.read()
    # The client is still good for the next request.
    async with client.post(b"small", timeout=5) as response:
        assert await response.read() == b"small"
    await client.close()


async def test_a_hanging_server_times_out_and_its_connection_is_dropped() -> None:
    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        await reader.read()  # until the client gives up and closes

    server = RawServer(hang)
    async with server:
        client = HttpClient(server.url, {})
        with pytest.raises(TimeoutError):
            async with client.post(b"{}", timeout=0.2) as response:
                await response.read()
        await asyncio.wait_for(server.closed.wait(), 5)
        await client.close()


async def test_a_refused_connection_is_a_clear_error() -> None:
    async with RawServer(lambda r, w: asyncio.sleep(0)) as server:
        url = server.url
    client = HttpClient(url, {})
    with pytest.raises(HttpError, match=re.escape("cannot connect to http://127.0.0.1")):
        async with client.post(b"{}", timeout=5):
            pass


def test_only_http_urls_are_accepted() -> None:
    with pytest.raises(ValueError, match="not an http"):
        HttpClient("ftp://example.com/x", {})


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for localhost, and its key."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_https_verifies_the_server_against_the_trusted_certificates(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def echo_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await reader.readuntil(b"\r\n\r\n") and await reader.readexactly(2)
        writer.write(_response(body))
        await writer.drain()

    tls = await asyncio.start_server(echo_once, "127.0.0.1", 0, ssl=context)
    url = f"https://localhost:{tls.sockets[0].getsockname()[1]}/v1/chat/completions"
    try:
        untrusted = HttpClient(url, {})
        with pytest.raises(HttpError, match="CERTIFICATE_VERIFY_FAILED"):
            async with untrusted.post(b"{}", timeout=5):
                pass
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # how a private CA is trusted
        trusted = HttpClient(url, {})
        async with trusted.post(b"{}", timeout=5) as response:
            assert await response.read() == b"{}"
        await trusted.close()
    finally:
        tls.close()
