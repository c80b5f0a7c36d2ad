"""What one run sent to the model and got back, and the tool calls it made: its recording.

A run chosen for recording (or for a shadow variant, or a replay) gets a
:class:`RunCapture`: its models are wrapped so that each call's request and response
are noted as they pass, and it listens to the end of each tool call. Nothing is copied
or encoded while the run goes on: a message is noted by reference, once, however many
requests send it; the document (``sidecar.recording.format``) is built when the run has
ended. A run that is not captured never meets any of this.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sidecar.agent.variants import RunModels
from sidecar.errors import ModelError
from sidecar.llm.model import Model, ModelRequest, ModelResponse, TextSink, ToolCallSink
from sidecar.recording.format import FORMAT, VERSION, cost_document, usage_document
from sidecar.tools.catalog import CatalogTool
from sidecar.types import Clock, RunOutcome, StopReason, ToolCall, ToolOutcome, Usage

__all__ = ["RunCapture"]


class _CapturedModel:
    """A model whose calls the capture notes; everything else is the model's."""

    def __init__(self, model: Model, capture: RunCapture) -> None:
        self.name = model.name
        self._model = model
        self._capture = capture

    async def complete(
        self,
        request: ModelRequest,
        on_text: TextSink | None = None,
        on_tool_call: ToolCallSink | None = None,
    ) -> ModelResponse:
        capture = self._capture
        start = capture.clock.now()
        try:
            response = await self._model.complete(request, on_text, on_tool_call)
        except ModelError as exc:
            capture.exchange(self.name, request, start, None, exc)
            raise
        capture.exchange(self.name, request, start, response, None)
        return response

    async def close(self) -> None:
        """Nothing: the model belongs to the process, not to the run."""


class RunCapture:
    """Notes one run's model exchanges and tool calls and makes its recording.

    Args:
        clock: The run's clock (exchanges and calls are timed on it).
        describe: The catalog's tool by name, to record where each offered tool lives.
    """

    def __init__(self, clock: Clock, describe: Callable[[str], CatalogTool | None]) -> None:
        self.clock = clock
        self._describe = describe
        self._messages: list[dict[str, Any]] = []
        self._index: dict[int, int] = {}  # id(message) -> its place in _messages
        self._exchanges: list[dict[str, Any]] = []
        self._calls: list[tuple[int, ToolCall, str | None, ToolOutcome]] = []
        self._call_steps: dict[str, int] = {}
        self._tools: dict[str, dict[str, Any]] = {}
        self.history = 0
        """Messages before the run's input in what it sends (the system message and the
        conversation so far): set by whoever starts the run."""

    def models(self, models: RunModels) -> RunModels:
        """``models``, each noting its calls here."""
        tools = _CapturedModel(models.tools, self) if models.tools is not None else None
        return RunModels(_CapturedModel(models.answer, self), tools)

    def exchange(
        self,
        model: str,
        request: ModelRequest,
        start: float,
        response: ModelResponse | None,
        error: ModelError | None,
    ) -> None:
        sent = []
        index, messages = self._index, self._messages
        for message in request.messages:
            # Held in _messages, a message's id stays its own for the capture's life.
            place = index.get(id(message))
            if place is None:
                place = index[id(message)] = len(messages)
                messages.append(message)
            sent.append(place)
        # The step: one more than the assistant messages after the run's input.
        step = 1 + sum(1 for m in request.messages[self.history :] if m.get("role") == "assistant")
        names = []
        for definition in request.tools:
            name = definition["function"]["name"]
            names.append(name)
            if name not in self._tools:
                self._tools[name] = _tool_document(name, definition, self._describe(name))
        found: dict[str, Any] = {
            "step": step,
            "model": model,
            "messages": sent,
            "tools": names,
            "tool_choice": request.tool_choice,
            "response_schema": request.response_schema,
            "stream": request.stream,
            "start": start,
            "duration": self.clock.now() - start,
            "response": None,
            "error": None,
        }
        if response is not None:
            for call in response.tool_calls:
                self._call_steps[call.id] = step
            found["response"] = {
                "text": response.text,
                # Kept only where the profile says so (reasoning.record).
                "reasoning": response.reasoning if request.keep_reasoning else None,
                "refusal": response.refusal,
                "tool_calls": [
                    {"id": c.id, "name": c.name, "arguments": c.arguments}
                    for c in response.tool_calls
                ],
                "finish_reason": response.finish_reason,
                "usage": usage_document(response.usage),
                "time_to_first_token": response.time_to_first_token,
                "attempts": response.attempts,
                "request_id": response.request_id,
            }
        elif error is not None:
            found["error"] = {"code": error.code, "message": error.message}
        self._exchanges.append(found)

    def tool_finished(self, call: ToolCall, server: str | None, outcome: ToolOutcome) -> None:
        """A :data:`~sidecar.tools.dispatch.ToolCallListener`."""
        step = self._call_steps.get(call.id, self._exchanges[-1]["step"] if self._exchanges else 1)
        self._calls.append((step, call, server, outcome))

    def listener(
        self, other: Callable[[ToolCall, str | None, ToolOutcome], None] | None
    ) -> Callable[[ToolCall, str | None, ToolOutcome], None]:
        """A tool-call listener telling this capture and ``other`` (the audit record)."""
        if other is None:
            return self.tool_finished
        mine = self.tool_finished

        def both(call: ToolCall, server: str | None, outcome: ToolOutcome) -> None:
            mine(call, server, outcome)
            other(call, server, outcome)

        return both

    def document(
        self,
        *,
        run_id: str,
        session_id: str,
        profile: str,
        variant: str,
        principal: str,
        started_at: float,
        user_input: str,
        outcome: RunOutcome | None,
        shadow_of: str | None = None,
    ) -> dict[str, Any]:
        """The run's recording (not yet redacted: the writer redacts it)."""
        document: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "run_id": run_id,
            "session_id": session_id,
            "profile": profile,
            "variant": variant,
            "principal": principal,
            "shadow_of": shadow_of,
            "started_at": started_at,
            "duration": outcome.total if outcome is not None else self.clock.now(),
            "input": user_input,
            "history": self.history,
            "messages": self._messages,
            "tools": list(self._tools.values()),
            "exchanges": self._exchanges,
            "tool_calls": [
                {
                    "step": step,
                    "id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                    "server": server,
                    "status": o.status.name,
                    "content": o.content,
                    "start": o.start,
                    "duration": o.duration,
                    "attempts": o.attempts,
                    "cache": o.cache.name,
                }
                for step, call, server, o in self._calls
            ],
            "truncated": False,
        }
        if outcome is None:
            document.update(
                answer="",
                stop_reason=StopReason.CANCELLED.name,
                error=None,
                usage=usage_document(Usage()),
                cost=None,
                steps=0,
            )
            return document
        error = outcome.error
        document.update(
            answer=outcome.answer,
            stop_reason=outcome.stop_reason.name,
            error={"code": error.code, "message": error.message} if error else None,
            usage=usage_document(outcome.usage),
            cost=cost_document(outcome.cost),
            steps=outcome.steps,
        )
        return document


def _tool_document(
    name: str, definition: Mapping[str, Any], tool: CatalogTool | None
) -> dict[str, Any]:
    return {
        "name": name,
        "server": tool.server if tool is not None else "",
        "read_only": tool.read_only if tool is not None else False,
        "idempotent": tool.idempotent if tool is not None else False,
        "definition": definition,
    }
