"""Session memory: turns the window drops, summarised by the model into a short text.

Off by default (``profiles.NAME.context.memory``). When the window of a run would drop
turns the memory does not cover yet, those turns are still sent that once, and after the
turn is stored one model call folds them into the memory: the old memory and the dropped
turns in, the new memory out. It runs in the background, off the hot path: the answer is
already delivered, and the next turn finds the memory ready (if it comes sooner, the
turns are sent once more; nothing is lost). The store only accepts a memory that covers
more turns than the one it holds, so replicas racing to summarise never go backwards.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from sidecar.context.trim import cap
from sidecar.errors import ModelError
from sidecar.llm.model import Model, ModelRequest
from sidecar.types import Session, StopReason, Turn, Usage

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "You maintain the long-term memory of a conversation between a user and an assistant "
    "that uses tools. Rewrite the memory so that it keeps every fact, decision, identifier, "
    "number and user preference from the current memory and from the new turns that later "
    "turns may need. Drop small talk. Write plain sentences, at most {limit} characters. "
    "Reply with the new memory only."
)
_RESULT_CHARS = 600  # of each tool result shown to the summariser
_TRANSCRIPT_CHARS = 24_000


def transcript(turns: Sequence[Turn]) -> str:
    """The turns as plain text for the summariser; long tool results are cut."""
    lines: list[str] = []
    for turn in turns:
        lines.append(f"User: {turn.input}")
        if turn.stop_reason is StopReason.INTERRUPTED:
            lines.append("(the turn was cut off before an answer)")
        for message in turn.messages:
            lines.extend(_describe(message))
    return cap("\n".join(lines), _TRANSCRIPT_CHARS)


def _describe(message: dict[str, Any]) -> list[str]:
    role = message.get("role")
    content = message.get("content")
    if role == "assistant":
        out = [f"Assistant: {content}"] if content else []
        for call in message.get("tool_calls") or ():
            function = call.get("function", {})
            out.append(f"Assistant called {function.get('name')}({function.get('arguments')})")
        return out
    if role == "tool":
        return [f"Tool result: {cap(str(content), _RESULT_CHARS)}"]
    return []  # the user message is the turn's input, already written


class MemoryStore(Protocol):
    """Where memories are kept: a session store (``sidecar.sessions``) is one."""

    async def set_memory(self, session_id: str, memory: str, memory_turns: int) -> bool:
        """Store a memory covering the oldest ``memory_turns`` turns, unless the stored
        one already covers as many; True when it was stored."""
        ...


class MemoryKeeper:
    """Summarises dropped turns into sessions' memories, one background call at a time
    per session. Counts what it did, for metrics.

    Args:
        model: the model that writes summaries.
        store: where memories are kept.
        timeout: seconds one summary call may take.
    """

    def __init__(self, model: Model, store: MemoryStore, *, timeout: float = 60.0) -> None:
        self._model = model
        self._store = store
        self._timeout = timeout
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.summaries = 0
        self.failures = 0
        self.usage = Usage()

    def schedule(
        self,
        session: Session,
        turns: tuple[int, int],
        max_chars: int,
        *,
        model: Model | None = None,
    ) -> None:
        """Fold ``session.turns[start:end]`` into its memory, in the background, with
        ``model`` (unset: the keeper's own)."""
        if session.session_id in self._tasks:
            return  # one at a time; the next turn asks again if still needed
        task = asyncio.get_running_loop().create_task(
            self._summarise(session, turns, max_chars, model or self._model),
            name=f"memory:{session.session_id}",
        )
        self._tasks[session.session_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(session.session_id, None))

    async def _summarise(
        self, session: Session, turns: tuple[int, int], max_chars: int, model: Model
    ) -> None:
        start, end = turns
        prompt = (
            f"Current memory:\n{session.memory or '(empty)'}\n\n"
            f"New turns:\n{transcript(session.turns[start:end])}"
        )
        request = ModelRequest(
            [
                {"role": "system", "content": INSTRUCTIONS.format(limit=max_chars)},
                {"role": "user", "content": prompt},
            ],
            [],
            False,
            self._timeout,
        )
        try:
            async with asyncio.timeout(self._timeout):
                response = await model.complete(request)
        except (ModelError, TimeoutError) as exc:
            self.failures += 1
            log.warning("memory of session %s not updated: %s", session.session_id, exc)
            return
        self.usage.add(response.usage)
        memory = cap(response.text.strip(), max_chars)
        if memory and await self._store.set_memory(session.session_id, memory, end):
            self.summaries += 1

    async def wait(self) -> None:
        """Wait for the summaries in flight (tests, orderly shutdown)."""
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def close(self) -> None:
        """Cancel summaries in flight; their turns are summarised on a later turn."""
        for task in list(self._tasks.values()):
            task.cancel()
        await self.wait()
