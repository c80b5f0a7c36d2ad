"""Tool calls waiting for a caller's decision, and the decisions that release them.

A call whose tool requires approval waits here (as its run streams an
``approval_required`` event) until a caller decides it, its time runs out, or its run
ends. So does a running call whose tool asks the caller something (an MCP server's
elicitation): approving it answers, with an answer checked against the question's schema
before it is delivered. Each decision reaches exactly the call waiting under its session
and call id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import fastjsonschema

from sidecar.errors import CallNotPending, InvalidRequest
from sidecar.schemas import compile_schema_safely
from sidecar.types import Decision, ToolQuestion

__all__ = ["Approvals", "Decision"]


class Approvals:
    """The calls waiting for a decision, by (session id, call id)."""

    def __init__(self) -> None:
        self._waiting: dict[
            tuple[str, str], tuple[asyncio.Future[Decision], Callable[[Any], Any] | None]
        ] = {}

    async def wait(
        self,
        session_id: str,
        call_id: str,
        timeout: float,
        question: ToolQuestion | None = None,
    ) -> Decision:
        """Wait up to ``timeout`` seconds for the call's decision; a call nobody decides
        in time is denied.

        Raises:
            ValueError: the question's schema cannot check answers.
        """
        key = (session_id, call_id)
        check = compile_schema_safely(question.requested_schema) if question else None
        future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        self._waiting[key] = (future, check)
        try:
            async with asyncio.timeout(max(0.0, timeout)):
                return await future
        except TimeoutError:
            return Decision(False, "no decision arrived in time")
        finally:
            self._waiting.pop(key, None)

    def decide(self, session_id: str, call_id: str, decision: Decision) -> None:
        """Deliver a decision to the call waiting for it.

        Raises:
            CallNotPending: no such call is waiting (never asked, decided, or timed out).
            InvalidRequest: it approves a question with an answer its schema refuses
                (the question stays open).
        """
        entry = self._waiting.get((session_id, call_id))
        if entry is None or entry[0].done():
            raise CallNotPending(session_id, call_id)
        future, check = entry
        if check is not None and decision.approved:
            answer = decision.answer if decision.answer is not None else {}
            try:
                check(answer)
            except fastjsonschema.JsonSchemaValueException as exc:
                where = (exc.name or "data").removeprefix("data").lstrip(".") or "answer"
                raise InvalidRequest.field(
                    "answer", f"does not match the question's schema: {where} {exc.message}"
                ) from None
            decision = Decision(True, decision.reason, answer)
        elif check is None:
            decision = Decision(decision.approved, decision.reason)
        future.set_result(decision)

    def deny_session(self, session_id: str, reason: str) -> None:
        """Deny every call of ``session_id`` still waiting for a decision."""
        for (session, _), (future, _check) in list(self._waiting.items()):
            if session == session_id and not future.done():
                future.set_result(Decision(False, reason))
