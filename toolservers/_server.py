"""``ToolServer``: register tools with a decorator, then serve them until SIGTERM."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, overload

from agentsidecar.logs import configure_logging
from toolservers._definition import Seconds, define_tool
from toolservers._exceptions import ToolDefinitionError, ToolServerError
from toolservers._options import ServeOptions, parse_serve_args
from toolservers._serving import run_event_loop, serve_tools
from toolservers._tool import Tool

F = TypeVar("F", bound=Callable[..., Any])


class ToolServer:
    """A set of tools served over the tool-server protocol.

    Example::

        server = ToolServer("orders")

        @server.tool(read_only=True, idempotent=True)
        async def get_order_status(order_id: str) -> dict[str, str]:
            \"\"\"Look up an order's status by its id.\"\"\"
            return {"order_id": order_id, "status": "shipped"}

        if __name__ == "__main__":
            server.run()

    Args:
        name: The server's name, used in logs and the command line's help.
        version: Default version of every tool that does not set its own.
    """

    def __init__(self, name: str, *, version: str = "") -> None:
        self.name = name
        self.version = version
        self._tools: dict[str, Tool] = {}

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The registered tools, in registration order."""
        return tuple(self._tools.values())

    @overload
    def tool(self, fn: F, /) -> F: ...

    @overload
    def tool(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        read_only: bool = False,
        idempotent: bool = False,
        destructive: bool = False,
        requires_approval: bool = False,
        read_keys: Iterable[str] = (),
        write_keys: Iterable[str] = (),
        timeout: Seconds | None = None,
        cache_ttl: Seconds | None = None,
        version: str | None = None,
        result_fields: Iterable[str] = (),
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        fn: F | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        read_only: bool = False,
        idempotent: bool = False,
        destructive: bool = False,
        requires_approval: bool = False,
        read_keys: Iterable[str] = (),
        write_keys: Iterable[str] = (),
        timeout: Seconds | None = None,
        cache_ttl: Seconds | None = None,
        version: str | None = None,
        result_fields: Iterable[str] = (),
    ) -> F | Callable[[F], F]:
        """Register a function as a tool; usable bare (``@server.tool``) or with arguments.

        The function is returned unchanged, so it stays directly callable. Every
        flag defaults to the safe choice: a tool is assumed to write, to be unsafe
        to retry and to need no approval unless it says otherwise.

        Args:
            fn: The function, when used bare.
            name: The name the model calls it by. Default: the function's name.
            description: What it does and when to use it. Default: the docstring's
                prose (everything before its ``Args:`` section).
            read_only: It changes nothing, so it may run concurrently and early.
            idempotent: Calling it twice equals calling it once, so a failed call
                may be retried, and a slow one sent again (hedged).
            destructive: Its effect cannot be undone.
            requires_approval: A person approves each call before it runs.
            read_keys: Resource keys it reads, e.g. ``["sku:{sku}"]``; each
                ``{field}`` names a top-level argument.
            write_keys: Resource keys it writes, same form.
            timeout: Seconds (or a timedelta) one call may take when the caller sets
                nothing shorter. Default: the caller decides.
            cache_ttl: Seconds (or a timedelta) a result may be cached; needs
                ``read_only=True``. Default: never cached.
            version: Free-form version, part of every cache key. Default: the
                server's version.
            result_fields: The fields of the (JSON) output the model needs, e.g.
                ``["status", "parcel.eta"]``; a path through a list applies to each
                item. The sidecar drops the rest before the result enters the
                model's context. Default: all of it.

        Raises:
            ToolDefinitionError: the function or the arguments cannot make a valid
                tool, or the name is taken; the message says how to fix it.
        """

        def register(func: F) -> F:
            self.add_tool(
                func,
                name=name,
                description=description,
                read_only=read_only,
                idempotent=idempotent,
                destructive=destructive,
                requires_approval=requires_approval,
                read_keys=read_keys,
                write_keys=write_keys,
                timeout=timeout,
                cache_ttl=cache_ttl,
                version=version,
                result_fields=result_fields,
            )
            return func

        return register if fn is None else register(fn)

    def add_tool(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        read_only: bool = False,
        idempotent: bool = False,
        destructive: bool = False,
        requires_approval: bool = False,
        read_keys: Iterable[str] = (),
        write_keys: Iterable[str] = (),
        timeout: Seconds | None = None,
        cache_ttl: Seconds | None = None,
        version: str | None = None,
        result_fields: Iterable[str] = (),
    ) -> Tool:
        """Register a function as a tool without decorating it; see ``tool``.

        Raises:
            ToolDefinitionError: as for ``tool``.
        """
        tool = define_tool(
            fn,
            name=name,
            description=description,
            read_only=read_only,
            idempotent=idempotent,
            destructive=destructive,
            requires_approval=requires_approval,
            read_keys=read_keys,
            write_keys=write_keys,
            timeout=timeout,
            cache_ttl=cache_ttl,
            version=self.version if version is None else version,
            result_fields=result_fields,
        )
        if tool.name in self._tools:
            raise ToolDefinitionError(
                f"tool {tool.name!r} is already registered on server {self.name!r}; "
                "tool names must be unique, pass name='...' to rename one"
            )
        self._tools[tool.name] = tool
        return tool

    def run(self, argv: Sequence[str] | None = None) -> None:
        """Serve from the command line until SIGTERM or SIGINT, then drain and return.

        Flags: ``--host`` (default 127.0.0.1), ``--port`` (default 0, any free
        port), ``--grace`` seconds, ``--latency-ms N`` for every tool,
        ``--latency TOOL=MS`` (repeatable), ``--sync-workers``, ``--log-level``,
        ``--log-format text|json``, TLS and token flags, and the identity flags
        (``--identity-keys``, ``--identity-audience``, ``--require-identity`` ...).
        Logs go to stderr; stdout carries one line, ``listening on HOST:PORT``.
        Uses uvloop when it is installed.
        """
        options, log_level, log_format = parse_serve_args(self.name, argv, list(self._tools))
        configure_logging(log_level, log_format)
        try:
            run_event_loop(self.serve(options))
        except ToolServerError as exc:
            sys.exit(f"{self.name}: {exc}")

    async def serve(self, options: ServeOptions | None = None) -> None:
        """Serve until SIGTERM or SIGINT (or until cancelled), then drain.

        Once listening, prints ``listening on HOST:PORT`` on stdout. On the first
        signal: new tool calls are refused with UNAVAILABLE, health turns
        NOT_SERVING, running calls get ``options.grace`` seconds to finish, then
        the server stops. A second signal skips the wait. Cancelling this
        coroutine stops the server at once.

        Raises:
            ToolServerError: the address cannot be bound.
        """
        await serve_tools(self.name, self.tools, options or ServeOptions())
