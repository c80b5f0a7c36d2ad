"""The ``Tool`` record: one registered tool's facts and the function behind them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from toolservers._signature import CallSignature


@dataclass(frozen=True, slots=True)
class Tool:
    """One tool as a server offers it. Built by ``ToolServer.tool``; read-only.

    Attributes:
        name: The name the model calls it by.
        description: What it does and when to use it, for the model.
        fn: The decorated function, unchanged.
        is_async: True for ``async def`` functions, which run on the event loop;
            others run in a worker thread.
        input_schema: JSON Schema of the arguments; the root is an object schema.
        output_schema: JSON Schema of the output, or None when undeclared.
        read_only: The tool changes nothing.
        idempotent: Calling it twice equals calling it once.
        destructive: Its effect cannot be undone.
        requires_approval: A person approves each call.
        read_keys: Resource-key templates it reads, e.g. ``"sku:{sku}"``.
        write_keys: Resource-key templates it writes.
        timeout: How long one call may take when the caller sets nothing shorter.
        cache_ttl: How long a result may be served from a cache.
        version: Free-form version, part of every cache key.
        result_fields: Output fields the model needs (names or dotted paths); empty
            keeps the whole output.
    """

    name: str
    description: str
    fn: Callable[..., Any]
    is_async: bool
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any] | None
    read_only: bool = False
    idempotent: bool = False
    destructive: bool = False
    requires_approval: bool = False
    read_keys: tuple[str, ...] = ()
    write_keys: tuple[str, ...] = ()
    timeout: timedelta | None = None
    cache_ttl: timedelta | None = None
    version: str = ""
    result_fields: tuple[str, ...] = ()
    #: How calls are validated and results encoded; internal.
    signature: CallSignature | None = field(default=None, repr=False, compare=False)
