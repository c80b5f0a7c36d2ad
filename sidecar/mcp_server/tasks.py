"""The endpoint's tasks: MCP's tasks extension (``io.modelcontextprotocol/tasks``, on
2026-07-28) over the sidecar's direct calls.

A host that declares the extension on a ``tools/call`` of a tool configured for tasks
(``mcp.tasks.tools``) gets a task handle at once; the call runs here, in the background,
through the same dispatch as any other. The host polls ``tasks/get`` (the task's state,
then its result inlined), answers the call's questions with ``tasks/update`` (an approval
or a running tool's question becomes ``input_required`` with the question under a key of
its own, never reused), and stops it with ``tasks/cancel``.

Tasks live in this process, as the extension expects of a server without shared state
(``Mcp-Name`` carries the task id so a balancer can route on it). Each belongs to the
principal that started it: another principal's id is unknown to the caller (``-32602``,
nothing said of whether it exists). A task is kept for ``ttl`` seconds from its creation
and then forgotten, finished or not (a running one is cancelled); a principal holds at most
``max_per_principal`` of them at once, and the process ``max_tasks``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

__all__ = ["EXTENSION", "TaskBoard", "TaskLimit", "missing_extension"]

log = logging.getLogger(__name__)

EXTENSION = "io.modelcontextprotocol/tasks"
_TERMINAL = frozenset({"completed", "failed", "cancelled"})


def missing_extension() -> MCPError:
    """The error for a host that did not declare the extension (``-32021``)."""
    return MCPError(
        types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        "Missing required client capability",
        {"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
    )


class TaskLimit(Exception):
    """A principal (or the process) holds as many tasks as it may."""


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


@dataclass(slots=True, eq=False)
class _Question:
    request: dict[str, Any]
    answer: asyncio.Future[dict[str, Any]]


@dataclass(slots=True, eq=False)
class EndpointTask:
    """One task: its state as ``tasks/get`` shows it, and the call behind it."""

    id: str
    owner: str
    created: float
    updated: float
    status: str = "working"
    message: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    questions: dict[str, _Question] = field(default_factory=dict)
    asked: int = 0
    runner: asyncio.Task[None] | None = None

    def _set(self, status: str, message: str | None = None) -> None:
        self.status = status
        self.message = message
        self.updated = time.time()

    async def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """Put a question (an ``elicitation/create`` request) to the host; its answer."""
        self.asked += 1
        key = f"q{self.asked}"
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.questions[key] = _Question(request, answer)
        self._set("input_required", "waiting for the host's answer")
        try:
            return await answer
        finally:
            self.questions.pop(key, None)
            if not self.questions and self.status == "input_required":
                self._set("working")


class TaskBoard:
    """The tasks of one endpoint.

    Args:
        ttl: Seconds a task is kept from its creation.
        poll_interval: Seconds between polls suggested to hosts.
        max_per_principal: Tasks one principal may hold at once.
        max_tasks: Tasks the process holds at once.
    """

    def __init__(
        self, *, ttl: float, poll_interval: float, max_per_principal: int, max_tasks: int
    ) -> None:
        self._ttl = ttl
        self._poll_ms = max(1, round(poll_interval * 1000))
        self._per_principal = max_per_principal
        self._max = max_tasks
        self._tasks: dict[str, EndpointTask] = {}

    def start(
        self, owner: str, work: Callable[[EndpointTask], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        """Create a task running ``work`` (which returns the call's result); its handle.

        The task can be read before this returns (the extension's durable creation).

        Raises:
            TaskLimit: the owner, or the process, holds as many tasks as it may.
        """
        self._sweep()
        if len(self._tasks) >= self._max:
            raise TaskLimit(f"the endpoint holds {self._max} tasks, its most")
        if sum(1 for t in self._tasks.values() if t.owner == owner) >= self._per_principal:
            raise TaskLimit(f"the caller holds {self._per_principal} tasks, its most")
        now = time.time()
        task = EndpointTask(id=secrets.token_urlsafe(24), owner=owner, created=now, updated=now)
        self._tasks[task.id] = task
        task.runner = asyncio.get_running_loop().create_task(
            self._run(task, work), name=f"mcp-task-{task.id[:8]}"
        )
        return {"resultType": "task", **self._view(task, inline=False)}

    def get(self, owner: str, task_id: str) -> dict[str, Any]:
        """``tasks/get``: the task as it is now, its result or error inlined.

        Raises:
            MCPError: no such task for this owner (``-32602``).
        """
        return self._view(self._find(owner, task_id), inline=True)

    def update(self, owner: str, task_id: str, responses: dict[str, Any]) -> None:
        """``tasks/update``: answers to the task's open questions; others are ignored."""
        task = self._find(owner, task_id)
        for key, response in responses.items():
            question = task.questions.get(key)
            if question is not None and not question.answer.done():
                question.answer.set_result(response if isinstance(response, dict) else {})
                del task.questions[key]

    def cancel(self, owner: str, task_id: str) -> None:
        """``tasks/cancel``: stop the call if it runs; a finished task stays as it ended."""
        task = self._find(owner, task_id)
        if task.status not in _TERMINAL and task.runner is not None:
            task.runner.cancel()

    async def close(self) -> None:
        """Cancel every running task (the endpoint stops)."""
        runners = [t.runner for t in self._tasks.values() if t.runner is not None]
        for runner in runners:
            runner.cancel()
        for runner in runners:
            with contextlib.suppress(BaseException):
                await runner
        self._tasks.clear()

    def _find(self, owner: str, task_id: str) -> EndpointTask:
        task = self._tasks.get(task_id)
        if task is not None and time.time() > task.created + self._ttl:
            self._forget(task)
            task = None
        if task is None or not secrets.compare_digest(task.owner, owner):
            raise MCPError(types.INVALID_PARAMS, "Failed to retrieve task: Task not found")
        return task

    def _sweep(self) -> None:
        expired = time.time() - self._ttl
        for task in [t for t in self._tasks.values() if t.created < expired]:
            self._forget(task)

    def _forget(self, task: EndpointTask) -> None:
        self._tasks.pop(task.id, None)
        if task.runner is not None and not task.runner.done():
            task.runner.cancel()

    async def _run(
        self, task: EndpointTask, work: Callable[[EndpointTask], Awaitable[dict[str, Any]]]
    ) -> None:
        try:
            task.result = await work(task)
            task._set("completed")
        except asyncio.CancelledError:
            task._set("cancelled", "cancelled by the host")
        except MCPError as exc:
            task.error = {"code": exc.code, "message": exc.message}
            task._set("failed", exc.message)
        except Exception as exc:  # the call's failure is the task's, never the endpoint's
            log.exception("MCP task %s failed", task.id[:8])
            task.error = {"code": types.INTERNAL_ERROR, "message": f"{type(exc).__name__}"}
            task._set("failed", "the call failed inside the sidecar")
        finally:
            for question in task.questions.values():  # withdrawn: the call has ended
                if not question.answer.done():
                    question.answer.set_result({"action": "cancel"})
            task.questions.clear()

    def _view(self, task: EndpointTask, *, inline: bool) -> dict[str, Any]:
        view: dict[str, Any] = {
            "taskId": task.id,
            "status": task.status,
            "createdAt": _stamp(task.created),
            "lastUpdatedAt": _stamp(task.updated),
            "ttlMs": round(self._ttl * 1000),
            "pollIntervalMs": self._poll_ms,
        }
        if task.message:
            view["statusMessage"] = task.message
        if inline:
            if task.status == "input_required":
                view["inputRequests"] = {k: q.request for k, q in task.questions.items()}
            elif task.status == "completed":
                view["result"] = task.result
            elif task.status == "failed":
                view["error"] = task.error
        return view
