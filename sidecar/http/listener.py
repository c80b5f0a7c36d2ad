"""An HTTP listener for an ASGI application: uvicorn in the sidecar's event loop, on a
socket bound before it starts (so the port is known at once), with the sidecar's TLS
(``server.tls``; a client certificate required with ``client_ca_file``), and bounded:

- a request must arrive whole within ``read_timeout`` of its connection opening or of
  the previous response (a client that sends half a request and waits is closed: each
  open connection holds one of the process's descriptors);
- at most ``max_connections`` connections are open; one beyond is closed as accepted.

uvicorn itself closes keep-alive connections idle after a response (5 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import h11
import uvicorn

from agentsidecar.listening import cannot_listen
from sidecar.config import HttpLimits, ServerTlsConfig
from sidecar.errors import StartupError
from sidecar.security.peers import PeerCertificates

__all__ = ["HttpListener"]


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The sidecar handles its signals itself (commands/serve.py): a drain stops this.
        yield


def _bounded(base: type[Any], limits: HttpLimits) -> type[Any]:
    """uvicorn's h11 connection class, with the read timeout and the connection cap."""

    class Bounded(base):  # type: ignore[misc]
        _read_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                transport.close()
                return
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def _arm(self) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
            self._read_timer = self.loop.call_later(limits.read_timeout, self._expire)

        def _expire(self) -> None:
            self._read_timer = None
            # DONE: the request is whole and being served (or streamed); anything else is
            # a request still arriving, or none at all.
            if not self.transport.is_closing() and self.conn.their_state is not h11.DONE:
                self.transport.close()

    return Bounded


class HttpListener:
    """Serves one ASGI application on one address until stopped.

    Args:
        name: The configuration section it serves (``a2a.http``), for errors.
        host: Interface to bind.
        port: Port to bind; 0 picks a free one.
        tls: ``server.tls``, or None for plain HTTP.
        limits: Read timeout and connection cap.
        peers: Notes each connection's client certificate for the application.
        grace: Seconds requests in flight get when it stops.
        lifespan: Run the application's ASGI lifespan (its startup and shutdown).
    """

    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        *,
        tls: ServerTlsConfig | None,
        limits: HttpLimits,
        peers: PeerCertificates,
        grace: float = 1.0,
        lifespan: bool = False,
    ) -> None:
        self._name = name
        self._host = host
        self._port = port
        self._tls = tls
        self._limits = limits
        self._peers = peers
        self._grace = grace
        self._lifespan = lifespan
        self._socket: socket.socket | None = None
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None

    def bind(self) -> int:
        """Bind the socket; return its port.

        Raises:
            StartupError: the address cannot be bound.
        """
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self._host, self._port))
        except OSError as exc:
            sock.close()
            reason = cannot_listen(self._host, self._port) or exc.strerror
            raise StartupError(
                f"{self._name}.port: cannot listen on {self._host}:{self._port}: {reason}"
            ) from None
        sock.listen(128)
        sock.setblocking(False)
        self._socket = sock
        port: int = sock.getsockname()[1]
        return port

    async def start(self, app: Any) -> None:
        """Serve ``app`` on the bound socket.

        Raises:
            StartupError: a TLS file cannot be read.
        """
        tls: dict[str, Any] = {}
        if self._tls is not None:
            tls = {"ssl_certfile": self._tls.cert_file, "ssl_keyfile": self._tls.key_file}
            if self._tls.client_ca_file is not None:
                tls |= {
                    "ssl_ca_certs": self._tls.client_ca_file,
                    "ssl_cert_reqs": ssl.CERT_REQUIRED,
                }
        config = uvicorn.Config(
            app,
            http="h11",
            lifespan="on" if self._lifespan else "off",
            log_level="warning",
            access_log=False,
            server_header=False,
            timeout_graceful_shutdown=max(1, round(self._grace)),
            **tls,
        )
        try:
            config.load()
        except (OSError, ssl.SSLError) as exc:
            raise StartupError(f"{self._name}: TLS files cannot be read ({exc})") from None
        config.http_protocol_class = self._peers.protocol(
            _bounded(config.http_protocol_class, self._limits)
        )
        server = _Server(config)
        server.lifespan = config.lifespan_class(config)
        assert self._socket is not None
        await server.startup(sockets=[self._socket])
        self._server = server
        self._task = asyncio.get_running_loop().create_task(
            server.main_loop(), name=f"{self._name}-listener"
        )

    async def stop(self) -> None:
        """Stop taking connections; requests in flight get the grace period."""
        server, task = self._server, self._task
        if server is None or task is None:
            return
        server.should_exit = True
        await task
        await server.shutdown(sockets=[self._socket] if self._socket is not None else None)
        self._server = None
