"""Tools that run as MCP tasks, in both of MCP's forms.

2025-11-25 (``execution.taskSupport: required``): the
call creates the task, the bridge polls it within the call's deadline, and fetches its
result when it is done; a call that ends first (its deadline, its run cancelled) cancels
the task on the server.

Polling follows the server's ``pollInterval`` within bounds (a server cannot make the
bridge poll in a tight loop, nor wait longer than a few seconds between looks). A task
that needs input (``input_required``) is asked for its result at once: the server then
sends its questions as requests of its own, which reach the caller as any elicitation
does. Status messages become progress reports.

2026-07-28, the tasks extension (``io.modelcontextprotocol/tasks``): the bridge declares it
on every request, and a server that answers a call with a task handle is followed the same
way (``tasks/get`` within the deadline, ``tasks/cancel`` when the call ends first); a
task's questions (``input_required``) are put to the caller through the approval flow and
answered with ``tasks/update``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import mcp_types as types
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.shared.exceptions import MCPError

from sidecar.schemas import compile_schema_safely
from sidecar.types import Decision, ToolQuestion

__all__ = [
    "ASK",
    "PROGRESS",
    "CreatedTask",
    "TaskCancelled",
    "TasksExtension",
    "call_as_task",
    "follow_task",
]

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


# -- the tasks extension of 2026-07-28 (io.modelcontextprotocol/tasks) -----------------------

EXTENSION = "io.modelcontextprotocol/tasks"
ASK: contextvars.ContextVar[Callable[[ToolQuestion], Awaitable[Decision]] | None] = (
    contextvars.ContextVar("mcp_task_ask", default=None)
)
"""The running call's way to ask its caller a task's question."""
PROGRESS: contextvars.ContextVar[
    Callable[[float, float | None, str | None], Awaitable[None]] | None
] = contextvars.ContextVar("mcp_task_progress", default=None)
"""The running call's progress reports (a task's status messages)."""
_MAX_QUESTIONS = 32  # questions one task may put, in all: a server cannot ask forever


class CreatedTask(types.Result):
    """A server's answer to ``tools/call`` that made it a task (``resultType: task``)."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None


class TasksExtension(ClientExtension):
    """The bridge's side of the extension: declared on each request to a 2026-07-28
    server, so a tool the server runs as a task comes back as a handle, which
    :func:`follow_task` polls to its end within the call's deadline."""

    identifier = EXTENSION

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [
            ResultClaim(
                result_type="task",
                model=CreatedTask,
                resolve=follow_task,
                protocol_versions=frozenset({"2026-07-28"}),
            )
        ]


async def follow_task(created: CreatedTask, context: ClaimContext) -> types.CallToolResult:
    """Poll a task to its end; put its questions to the caller; cancel it if the call ends
    first.

    Raises:
        TaskCancelled: the server cancelled it.
        MCPError: it failed with a protocol error, or asked what cannot be answered.
    """
    session, task_id = context.session, created.task_id
    view: dict[str, Any] = created.model_dump(by_alias=True, exclude_none=True)
    answered: set[str] = set()
    polls = 0
    done = False
    try:
        while True:
            status = view.get("status")
            if status == "completed":
                done = True
                return types.CallToolResult.model_validate(view.get("result") or {})
            if status == "failed":
                done = True
                error = view.get("error")
                if not isinstance(error, dict):
                    error = {}
                raise MCPError(
                    int(error.get("code", types.INTERNAL_ERROR)),
                    str(error.get("message", "the task failed"))[:1000],
                )
            if status == "cancelled":
                done = True
                raise TaskCancelled(str(view.get("statusMessage") or "the server cancelled it"))
            if status == "input_required":
                requests = view.get("inputRequests")
                fresh = {
                    k: v
                    for k, v in (requests.items() if isinstance(requests, dict) else ())
                    if k not in answered
                }
                if fresh:
                    if len(answered) + len(fresh) > _MAX_QUESTIONS:
                        raise MCPError(types.INVALID_REQUEST, "the task asked too many questions")
                    responses = {key: await _answer(request) for key, request in fresh.items()}
                    answered.update(responses)
                    await _send(
                        session,
                        "tasks/update",
                        {"taskId": task_id, "inputResponses": responses},
                        task_id,
                    )
            wait = view.get("pollIntervalMs")
            wait = wait / 1000 if isinstance(wait, int | float) else 0.5
            await asyncio.sleep(min(max(wait, _MIN_POLL), _MAX_POLL))
            view = await _send(session, "tasks/get", {"taskId": task_id}, task_id)
            polls += 1
            progress = PROGRESS.get()
            if progress is not None and isinstance(view.get("statusMessage"), str):
                await progress(polls, None, view["statusMessage"][:1000])
    finally:
        if not done:
            _cancel_modern(session, task_id)


async def _answer(request: Any) -> dict[str, Any]:
    """The caller's answer to one of a task's questions (an elicitation; a roots listing
    gets none; anything else cannot be answered here)."""
    method = request.get("method") if isinstance(request, dict) else None
    params = request.get("params") if isinstance(request, dict) else None
    if method == "roots/list":
        return {"roots": []}
    if method != "elicitation/create" or not isinstance(params, dict):
        raise MCPError(types.INVALID_REQUEST, f"the task asked for {str(method)[:60]}, not offered")
    ask = ASK.get()
    schema = params.get("requestedSchema")
    if ask is None or params.get("mode", "form") != "form" or not isinstance(schema, dict):
        return {"action": "decline"}
    try:
        compile_schema_safely(schema)
    except ValueError:
        return {"action": "decline"}
    decision = await ask(ToolQuestion(str(params.get("message", ""))[:4000], schema))
    if not decision.approved:
        return {"action": "decline"}
    return {"action": "accept", "content": decision.answer or {}}


async def _send(session: Any, method: str, params: dict[str, Any], task_id: str) -> dict[str, Any]:
    """One request of the extension (the SDK has no types for them); ``Mcp-Name`` carries
    the task id, as the extension asks."""
    data: dict[str, Any] = {"method": method, "params": params}
    options: dict[str, Any] = {"headers": {"Mcp-Name": task_id}}
    session._stamp(data, options)
    answer: dict[str, Any] = await session._dispatcher.send_raw_request(
        data["method"], data.get("params"), options
    )
    return answer


def _cancel_modern(session: Any, task_id: str) -> None:
    async def cancel() -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(_CANCEL_TIMEOUT):
                await _send(session, "tasks/cancel", {"taskId": task_id}, task_id)
        log.info("MCP task %s cancelled", task_id[:64])

    task = asyncio.get_running_loop().create_task(cancel())
    _cancelling.add(task)
    task.add_done_callback(_cancelling.discard)
