"""A tool that runs as an MCP task (2025-11-25, ``execution.taskSupport: required``): the
call creates the task, the bridge polls it within the call's deadline, and fetches its
result when it is done; a call that ends first (its deadline, its run cancelled) cancels
the task on the server.

Polling follows the server's ``pollInterval`` within bounds (a server cannot make the
bridge poll in a tight loop, nor wait longer than a few seconds between looks). A task
that needs input (``input_required``) is asked for its result at once: the server then
sends its questions as requests of its own, which reach the caller as any elicitation
does. Status messages become progress reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp import Client

__all__ = ["TaskCancelled", "call_as_task"]

log = logging.getLogger(__name__)

_MIN_POLL = 0.05  # seconds between polls at least ...
_MAX_POLL = 2.0  # ... and at most
_CANCEL_TIMEOUT = 5.0  # seconds a cancellation may take, in the background
_TERMINAL = frozenset({"completed", "failed", "cancelled"})

_cancelling: set[asyncio.Task[None]] = set()


class TaskCancelled(Exception):
    """The server cancelled the task itself."""


async def call_as_task(
    client: Client,
    name: str,
    arguments: dict[str, Any],
    *,
    ttl: float,
    meta: Any,
    progress: Callable[[float, float | None, str | None], Awaitable[None]] | None,
) -> types.CallToolResult:
    """Run one call as a task and return its result.

    Raises:
        TaskCancelled: the server cancelled it.
        MCPError: the server refused a request of the exchange.
    """
    session = client.session
    params = types.CallToolRequestParams(
        name=name,
        arguments=arguments,
        task=types.TaskMetadata(ttl=max(1000, int(ttl * 1000))),
        _meta=meta,
    )
    created = types.CreateTaskResult.model_validate(
        await _send_raw(session, types.CallToolRequest(params=params)), by_name=False
    )
    task_id = created.task.task_id
    done = False
    try:
        task: types.Task = created.task
        polls = 0
        while task.status not in _TERMINAL and task.status != "input_required":
            wait = (task.poll_interval or 500) / 1000
            await asyncio.sleep(min(max(wait, _MIN_POLL), _MAX_POLL))
            task = await session.send_request(
                types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)),
                types.GetTaskResult,
            )
            polls += 1
            if progress is not None and task.status_message:
                await progress(polls, None, task.status_message)
        if task.status == "cancelled":
            raise TaskCancelled(task.status_message or "the server cancelled the task")
        result = await session.send_request(
            types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id)),
            types.CallToolResult,
        )
        done = True
        return result
    finally:
        if not done:
            _cancel(session, task_id)


async def _send_raw(session: Any, request: types.CallToolRequest) -> dict[str, Any]:
    """Send ``tools/call`` and return its result unparsed: the SDK's client checks a
    ``tools/call`` result against ``CallToolResult`` alone, and a task's first answer is a
    ``CreateTaskResult``. The session's own stamping (revision, capabilities) is kept."""
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    options: dict[str, Any] = {"headers": {"Mcp-Name": request.params.name}}
    session._stamp(data, options)
    raw: dict[str, Any] = await session._dispatcher.send_raw_request(
        data["method"], data.get("params"), options
    )
    return raw


def _cancel(session: Any, task_id: str) -> None:
    """Cancel the task on the server, in the background: the caller is gone or cancelled."""

    async def cancel() -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(_CANCEL_TIMEOUT):
                await session.send_request(
                    types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id)),
                    types.CancelTaskResult,
                )
        log.info("MCP task %s cancelled", task_id[:64])

    task = asyncio.get_running_loop().create_task(cancel())
    _cancelling.add(task)
    task.add_done_callback(_cancelling.discard)
