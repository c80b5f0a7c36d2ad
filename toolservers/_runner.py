"""Run one call of one tool: validate, call, serialize. The hot path.

Per call: one ``model_validate_json`` (parse and validate at once), the
function call, and at most one serialization. Everything else was prepared
when the decorator ran or when the server started.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from concurrent.futures import Executor
from typing import Any

import orjson
from pydantic import ValidationError

from agentsidecar.v1 import tool_pb2
from toolservers import _messages
from toolservers._context import ToolContext
from toolservers._exceptions import ToolFailure
from toolservers._tool import Tool

logger = logging.getLogger("toolservers")

_INVALID = tool_pb2.TOOL_ERROR_KIND_INVALID_ARGUMENTS
_FAILED = tool_pb2.TOOL_ERROR_KIND_EXECUTION_FAILED


class MalformedArguments(Exception):
    """The arguments text is not a JSON object: the request is malformed.

    Raised to the service, which answers with INVALID_ARGUMENT; never reaches
    a tool author.
    """


class ToolRunner:
    """Runs calls of one tool, with the server's settings for it applied.

    Args:
        tool: The tool to run.
        executor: Where sync tools run, so they never block the event loop.
        latency: Simulated latency in seconds added to every call (0 for none).
    """

    __slots__ = (
        "_context_param",
        "_dump",
        "_executor",
        "_expected",
        "_fn",
        "_is_async",
        "_renamed",
        "_validate_json",
        "latency",
        "name",
        "wants_context",
    )

    def __init__(self, tool: Tool, executor: Executor, latency: float = 0.0) -> None:
        signature = tool.signature
        assert signature is not None, "tools are built by define_tool"
        self.name = tool.name
        self._fn = tool.fn
        self._is_async = tool.is_async
        self._executor = executor
        self.latency = latency
        self._validate_json = signature.args_model.model_validate_json
        self._dump = signature.output_adapter.dump_json
        self._context_param = signature.context_param
        self._renamed = signature.renamed
        self._expected = signature.expectations
        #: The service builds a ToolContext only for runners that need one.
        self.wants_context = signature.context_param is not None or latency > 0

    async def run(
        self, call_id: str, arguments: str, ctx: ToolContext | None
    ) -> tool_pb2.ToolResult:
        """Run one call and return its result; a failing tool is a result, not an exception.

        Raises:
            MalformedArguments: ``arguments`` is not a JSON object.
            asyncio.CancelledError: the call was cancelled (deadline or caller).
        """
        started = time.perf_counter_ns()
        try:
            args = self._validate_json(arguments or "{}")
        except ValidationError as exc:
            malformed = _messages.not_a_json_object(exc)
            if malformed is not None:
                raise MalformedArguments(malformed) from None
            message = _messages.invalid_arguments(self.name, exc, self._expected)
            return _error(call_id, _INVALID, message, started)
        kwargs: dict[str, Any] = args.__dict__
        if self._renamed or self._context_param is not None:
            kwargs = self._adapt(kwargs, ctx)
        try:
            if self._is_async:
                value = await self._fn(**kwargs)
            else:
                # A thread cannot be interrupted: when the call is cancelled the
                # await ends, but the function runs to completion and its
                # result is dropped.
                loop = asyncio.get_running_loop()
                value = await loop.run_in_executor(
                    self._executor, functools.partial(self._fn, **kwargs)
                )
            if ctx is not None and self.latency:
                await ctx.simulate_latency()  # a no-op when the tool already spent it
            output = value if type(value) is str else self._encode(value)
        except ToolFailure as exc:
            return _error(call_id, _FAILED, exc.message, started)
        except Exception as exc:
            logger.warning("tool %s raised", self.name, exc_info=True)
            text = str(exc)
            message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
            return _error(call_id, _FAILED, message, started)
        result = tool_pb2.ToolResult(call_id=call_id, output=output)
        result.handler_duration.FromNanoseconds(time.perf_counter_ns() - started)
        return result

    def _adapt(self, values: dict[str, Any], ctx: ToolContext | None) -> dict[str, Any]:
        kwargs = dict(values)
        for field_name, param in self._renamed:
            kwargs[param] = kwargs.pop(field_name)
        if self._context_param is not None:
            kwargs[self._context_param] = ctx
        return kwargs

    def _encode(self, value: Any) -> str:
        try:
            # orjson covers the common shapes (dicts, lists, numbers, dataclasses)
            # several times faster than pydantic; pydantic handles the rest
            # (models, integers beyond 64 bits, non-string keys).
            return orjson.dumps(value).decode()
        except TypeError:
            return self._dump(value, warnings=False).decode()


def _error(
    call_id: str, kind: tool_pb2.ToolErrorKind, message: str, started: int
) -> tool_pb2.ToolResult:
    result = tool_pb2.ToolResult(
        call_id=call_id, error=tool_pb2.ToolError(kind=kind, message=message)
    )
    result.handler_duration.FromNanoseconds(time.perf_counter_ns() - started)
    return result
