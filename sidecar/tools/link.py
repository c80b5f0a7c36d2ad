"""What the dispatcher and the model's tool list need of a tool server, whatever it speaks.

A gRPC tool server (:class:`~sidecar.tools.connection.ToolServerConnection`) and an MCP
server behind the bridge (:class:`~sidecar.tools.mcp.McpServerConnection`) both offer
this surface: a name, a breaker, whether it serves, and ``call``, which takes a
``CallToolRequest`` and answers a ``ToolResult`` or raises the ``AioRpcError`` a gRPC call
would. Breakers, retries, deadlines, the audit record and health pruning therefore treat
both alike.

A link that can report progress or ask the caller something mid-call says so
(``interactive``); only then does the dispatcher build :class:`CallHooks` for a call, so
calls to gRPC tool servers pay nothing for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentsidecar.v1 import tool_pb2
from sidecar.config import RetryPolicy
from sidecar.tools.breaker import CircuitBreaker
from sidecar.tools.hedging import Hedging
from sidecar.types import Decision, ToolQuestion

__all__ = ["CallHooks", "InputRelay", "LinkPolicy", "ToolLink"]


class LinkPolicy(Protocol):
    """The settings of a link the dispatcher reads."""

    @property
    def timeout(self) -> float: ...

    @property
    def retry(self) -> RetryPolicy: ...

    @property
    def discovery_timeout(self) -> float: ...


@dataclass(slots=True, eq=False)
class InputRelay:
    """One round of a host's multi-round call (MCP 2026-07-28), relayed to a bridged MCP
    server that speaks the same revision: the host's answers and the server's state go in
    as they came, and the server's next questions come out, for the host to answer."""

    responses: dict[str, Any] | None = None
    """The host's ``inputResponses`` meant for the server."""
    state: str | None = None
    """The server's ``requestState`` of the round before."""
    required: Any = None
    """Set by the link: the server's ``InputRequiredResult`` when it asked again (the
    call's result is then empty)."""


@dataclass(frozen=True, slots=True)
class CallHooks:
    """What one call may tell its caller while it runs, and ask of it."""

    progress: Callable[[float, float | None, str], None] | None = None
    """Told each progress report: progress, total (None: unknown), message."""
    ask: Callable[[ToolQuestion], Awaitable[Decision]] | None = None
    """Asks the caller a question; None: nobody can answer (declined)."""
    relay: InputRelay | None = None
    """The host's round, when a 2026-07-28 MCP host called through the endpoint."""


class ToolLink(Protocol):
    """A tool server as the dispatcher and the availability checks see it."""

    name: str
    breaker: CircuitBreaker
    serving: bool
    discovered: asyncio.Event
    last_error: str | None
    interactive: bool
    """Its calls can report progress and ask questions (:class:`CallHooks`)."""
    hedging: Hedging | None
    """Second copies of slow idempotent calls (``tool_servers[].hedge``); None: never."""

    @property
    def config(self) -> LinkPolicy: ...

    @property
    def where(self) -> str:
        """Where it is, for log lines: an address, a URL or a command."""
        ...

    @property
    def available(self) -> bool:
        """A call would be attempted now: serving, and the breaker lets it through."""
        ...

    async def call(
        self,
        request: tool_pb2.CallToolRequest,
        timeout: float,
        metadata: Sequence[tuple[str, str | bytes]],
        hooks: CallHooks | None = None,
    ) -> tool_pb2.ToolResult:
        """Run one call.

        Raises:
            grpc.aio.AioRpcError: the call failed with this status.
        """
        ...

    def start(self) -> None: ...

    async def close(self) -> None: ...
