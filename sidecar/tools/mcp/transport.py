"""How the bridge reaches an MCP server: a child process on stdio, or Streamable HTTP.

Both are bounded, because the server is not trusted. The SDK's own stdio transport keeps
whatever the server writes until a newline arrives; :class:`StdioTransport` refuses a
line longer than ``max_result_bytes`` and ends the connection (the server is restarted),
drops lines that are no JSON-RPC (counted, logged a few times), passes the server only
the environment its configuration names, and reads its stderr into the log at a bounded
rate. Over HTTP the client's responses are cut off past the same bound
(:func:`http_client`), and its headers and TLS come from the configuration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp.shared.message import SessionMessage

from sidecar.config import McpServerConfig
from sidecar.errors import StartupError

__all__ = [
    "ANSWER_UNREADABLE",
    "RESULT_TOO_LARGE",
    "ServerExited",
    "StdioTransport",
    "child_environment",
    "http_client",
]

log = logging.getLogger(__name__)

_INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")
"""The sidecar's variables a started server sees, besides those its configuration gives."""
_STDERR_LINE = 2048  # characters of one stderr line logged
_STDERR_RATE = 20  # stderr lines logged per second at most; the rest are counted
_BAD_LINES_LOGGED = 3  # lines that are no JSON-RPC, logged per connection
_STOP_GRACE = 2.0  # seconds a server gets after its stdin closes, then after SIGTERM
_READ_CHUNK = 65_536


_ENDS = 512  # bytes kept of each end of an overlong line, to find the request it answers
_ID = rb'"id"\s*:\s*(-?\d{1,18}|"[^"\\]{0,200}")'
_HEAD_ID = re.compile(rb'^\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?' + _ID + rb"\s*,")
_TAIL_ID = re.compile(rb",\s*" + _ID + rb"\s*\}\s*$")
_RESPONSE_HEAD = re.compile(
    rb'^\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?(?:' + _ID + rb'\s*,\s*)?"(?:result|error)"\s*:'
)
RESULT_TOO_LARGE = -31001
"""The error the bridge answers in a server's stead when its answer is too large: outside
JSON-RPC's and MCP's ranges, so no server's own error is mistaken for it."""
ANSWER_UNREADABLE = -31002
"""The error the bridge answers in a server's stead when its answer cannot be read."""


def _answered_id(head: bytes, tail: bytes) -> int | str | None:
    """The id of the request an (overlong) response answers, from the top-level ``id``
    at its start (``{"jsonrpc":"2.0","id":…``) or its end (``…,"id":…}``)."""
    match = _HEAD_ID.match(head) or _TAIL_ID.search(tail)
    if match is None:
        return None
    value = match.group(1).decode()
    return value[1:-1] if value.startswith('"') else int(value)


def _unreadable_id(line: bytes) -> int | str | None:
    """The id of the request an unreadable line answers, when the line begins as a
    response does (``result`` or ``error`` before any ``method``: never a request or a
    notification of the server's, whose ids are the server's own)."""
    head = line[:_ENDS]
    if _RESPONSE_HEAD.match(head) is None:
        return None
    return _answered_id(head, line[-_ENDS:])


def _unreadable(request_id: int | str) -> types.JSONRPCMessage:
    return types.JSONRPCError(
        jsonrpc="2.0",
        id=request_id,
        error=types.ErrorData(
            code=ANSWER_UNREADABLE,
            message="the server's answer is no MCP message the bridge can read (malformed "
            "JSON, a shape MCP does not have, or nested too deep)",
        ),
    )


def _too_large(request_id: int | str, limit: int) -> types.JSONRPCMessage:
    return types.JSONRPCError(
        jsonrpc="2.0",
        id=request_id,
        error=types.ErrorData(
            code=RESULT_TOO_LARGE,
            message=f"the answer is larger than {limit} bytes (max_result_bytes)",
        ),
    )


class ServerExited(Exception):
    """The server's process ended, or broke the transport's rules and was stopped."""


def child_environment(config: McpServerConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a started server gets: a few of the sidecar's variables, the
    configured ones, and the configured secrets.

    Raises:
        StartupError: a secret's variable is unset or empty (named, never its value).
    """
    env = {k: v for k in _INHERITED if (v := os.environ.get(k)) is not None}
    env.update(config.env)
    for name, source in config.env_from.items():
        value = environ.get(source, "")
        if not value:
            raise StartupError(
                f"MCP server {config.name}: env_from.{name}: the environment variable "
                f"{source} is unset or empty"
            )
        env[name] = value
    return env


class StdioTransport:
    """An MCP server as a child process speaking newline-delimited JSON-RPC on stdio:
    an SDK ``Transport`` (an async context manager of the session's two streams).

    Args:
        config: The server's configuration (command, args, cwd, limits).
        env: Its whole environment (:func:`child_environment`).
    """

    def __init__(self, config: McpServerConfig, env: Mapping[str, str]) -> None:
        assert config.command is not None
        self._config = config
        self._env = dict(env)
        self._limit = config.max_result_bytes
        self.process: asyncio.subprocess.Process | None = None
        self.exited = asyncio.Event()
        """Set when the process has ended (or was stopped)."""
        self.why: str | None = None
        """Why the connection ended, when the transport ended it (a rule broken)."""
        self.hung = False
        """The server stopped answering: it is killed at once, not asked to exit."""
        self._tasks: list[asyncio.Task[None]] = []
        self._streams: tuple[Any, ...] = ()

    async def __aenter__(self) -> tuple[Any, Any]:
        config = self._config
        assert config.command is not None
        try:
            self.process = await asyncio.create_subprocess_exec(
                config.command,
                *config.args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env,
                cwd=config.cwd,
                # Its own process group: stopping it stops what it started too.
                start_new_session=True,
                limit=_READ_CHUNK,
            )
        except OSError as exc:
            raise ServerExited(f"cannot start {config.command}: {exc.strerror or exc}") from None
        to_session, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](16)
        to_server, from_session = anyio.create_memory_object_stream[SessionMessage](16)
        self._streams = (to_session, from_server, to_server, from_session)
        loop = asyncio.get_running_loop()
        process = self.process
        self._tasks = [
            loop.create_task(self._read(process, to_session), name=f"mcp-stdout:{config.name}"),
            loop.create_task(self._write(process, from_session), name=f"mcp-stdin:{config.name}"),
            loop.create_task(self._stderr(process), name=f"mcp-stderr:{config.name}"),
        ]
        return from_server, to_server

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Close stdin, give the server a moment, then SIGTERM and SIGKILL its group (a
        hung server: SIGKILL at once)."""
        process = self.process
        if process is not None and process.returncode is None:
            if process.stdin is not None:
                with contextlib.suppress(OSError, RuntimeError):
                    process.stdin.close()
            # A server that answers nothing would not exit either: no grace for it.
            steps = (signal.SIGKILL,) if self.hung else (None, signal.SIGTERM, signal.SIGKILL)
            for sig in steps:
                if sig is not None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(process.pid, sig)
                try:
                    async with asyncio.timeout(_STOP_GRACE):
                        await process.wait()
                    break
                except TimeoutError:
                    continue
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for stream in self._streams:
            stream.close()
        if process is not None and process.returncode is not None:
            self.exited.set()

    async def _read(self, process: asyncio.subprocess.Process, out: Any) -> None:
        """Hand each complete line to the session. A line over the limit is skipped, never
        held: the request it answers fails as too large when its id can be read at either
        end of the line, else the connection ends (and the server is restarted)."""
        assert process.stdout is not None
        name, limit = self._config.name, self._limit
        buffer = bytearray()
        bad = 0
        try:
            while True:
                chunk = await process.stdout.read(_READ_CHUNK)
                if not chunk:
                    break
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    if not line.strip():
                        continue
                    try:
                        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except ValueError:
                        answered = _unreadable_id(line)
                        if answered is not None:
                            # Its request fails now rather than waiting out its timeout.
                            log.warning(
                                "MCP server %s answered a request with a message that cannot "
                                "be read (%d bytes); the call fails",
                                name,
                                len(line),
                            )
                            await out.send(SessionMessage(_unreadable(answered)))
                            continue
                        bad += 1
                        if bad <= _BAD_LINES_LOGGED:
                            log.warning(
                                "MCP server %s wrote a line that is no JSON-RPC message "
                                "(%d bytes); dropped",
                                name,
                                len(line),
                            )
                        continue
                    await out.send(SessionMessage(message))
                if len(buffer) > limit:
                    head = bytes(buffer[:_ENDS])
                    rest = await self._skip_line(process.stdout, buffer)
                    if rest is None:
                        break
                    request_id = _answered_id(head, rest[0])
                    buffer = rest[1]
                    if request_id is None:
                        self.why = (
                            f"it wrote a message longer than {limit} bytes that answers no "
                            "request it can be matched to"
                        )
                        log.warning("MCP server %s: %s; stopping it", name, self.why)
                        break
                    log.warning(
                        "MCP server %s answered a request with more than %d bytes; the call "
                        "fails as too large",
                        name,
                        limit,
                    )
                    await out.send(SessionMessage(_too_large(request_id, limit)))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            out.close()
            if self.why is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            self.exited.set()

    @staticmethod
    async def _skip_line(
        stdout: asyncio.StreamReader, start: bytearray
    ) -> tuple[bytes, bytearray] | None:
        """Read past the rest of an overlong line, keeping only its last bytes; its tail
        and what follows it, or None when the stream ended first."""
        tail = bytes(start[-_ENDS:])
        while True:
            chunk = await stdout.read(_READ_CHUNK)
            if not chunk:
                return None
            end = chunk.find(b"\n")
            if end >= 0:
                return (tail + chunk[:end])[-_ENDS:], bytearray(chunk[end + 1 :])
            tail = (tail + chunk)[-_ENDS:]

    async def _write(self, process: asyncio.subprocess.Process, source: Any) -> None:
        assert process.stdin is not None
        try:
            async for message in source:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                process.stdin.write(data.encode() + b"\n")
                await process.stdin.drain()
        except (OSError, RuntimeError, anyio.ClosedResourceError):
            pass  # the process is gone; the reader ends the connection

    async def _stderr(self, process: asyncio.subprocess.Process) -> None:
        """The server's stderr into the log, a line at a time, at most a few a second."""
        assert process.stderr is not None
        name = self._config.name
        window, shown, dropped = time.monotonic(), 0, 0
        while True:
            try:
                line = await process.stderr.readline()
            except ValueError:  # a line beyond the reader's limit: skip what is buffered
                line = await process.stderr.read(_READ_CHUNK)
            except (OSError, RuntimeError):
                return
            if not line:
                return
            now = time.monotonic()
            if now - window >= 1.0:
                if dropped:
                    log.info("MCP server %s: %d more stderr lines not logged", name, dropped)
                window, shown, dropped = now, 0, 0
            if shown >= _STDERR_RATE:
                dropped += 1
                continue
            shown += 1
            text = line.decode(errors="replace").rstrip()[:_STDERR_LINE]
            log.info("MCP server %s: %s", name, text)


class _CappedStream(httpx2.AsyncByteStream):
    """A response body that fails once it passes ``limit`` bytes."""

    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, name: str) -> None:
        self._inner = inner
        self._limit = limit
        self._name = name

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise httpx2.ReadError(
                    f"MCP server {self._name} sent a response larger than {self._limit} bytes "
                    "(max_result_bytes)"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedTransport(httpx2.AsyncHTTPTransport):
    """Every response body bounded, and no proxy from the environment (an MCP server is
    dialled directly, as a tool server is)."""

    def __init__(self, limit: int, name: str, **kwargs: Any) -> None:
        super().__init__(trust_env=False, **kwargs)
        self._limit = limit
        self._name = name

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await super().handle_async_request(request)
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        response.stream = _CappedStream(stream, self._limit, self._name)
        return response


def _tls_context(config: McpServerConfig) -> ssl.SSLContext | bool:
    tls = config.tls
    if tls is None:
        return True
    try:
        context = ssl.create_default_context(cafile=tls.ca_file)
        if tls.cert_file is not None:
            context.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise StartupError(
            f"MCP server {config.name}: the TLS files cannot be used: {exc}"
        ) from None
    return context


def http_client(config: McpServerConfig, environ: Mapping[str, str]) -> httpx2.AsyncClient:
    """The HTTP client of one Streamable HTTP server: its headers (secrets from the
    environment), its TLS, bounded responses.

    Raises:
        StartupError: a secret header's variable is unset, or a TLS file is unusable.
    """
    headers = dict(config.headers)
    for header, source in config.headers_from_env.items():
        value = environ.get(source, "")
        if not value:
            raise StartupError(
                f"MCP server {config.name}: headers_from_env.{header}: the environment "
                f"variable {source} is unset or empty"
            )
        headers[header] = value
    transport = _CappedTransport(
        config.max_result_bytes, config.name, verify=_tls_context(config), retries=0
    )
    return httpx2.AsyncClient(
        headers=headers,
        transport=transport,
        timeout=httpx2.Timeout(config.discovery_timeout, read=None),
        follow_redirects=False,
    )
