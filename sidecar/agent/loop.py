"""The decision loop: perceive (build the model input), think (call the model), act (run
the tools it asked for), until an answer, a limit, or the run's time runs out.

Each stop condition has its own :class:`~sidecar.types.StopReason`. The loop never raises
for a model or tool failure: the run ends with an outcome that says what happened. Only
cancellation propagates, after cancelling every tool call in flight. With a cost guard
(:mod:`sidecar.agent.cost_guard`), each model call is priced before it is made, and one the run
cannot pay for ends it, between calls.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fastjsonschema
import orjson

from sidecar.agent.budget import RunBudget
from sidecar.agent.profiles import Profile
from sidecar.agent.scope import Progress, RunScope
from sidecar.errors import DEADLINE_EXCEEDED, FlexTierFull, ModelError, ToolUseFailed
from sidecar.llm.model import Model, ModelRequest, ModelResponse
from sidecar.tokens import tokens_of
from sidecar.tools.ahead import EarlyCalls, Prefetch
from sidecar.tools.availability import ToolAccess
from sidecar.tools.catalog import ToolCatalog
from sidecar.tools.dispatch import Dispatcher, StepScope
from sidecar.tools.link import ToolLink
from sidecar.tools.result_cache import ResultCache
from sidecar.types import (
    MODEL_PACING,
    BudgetOverrun,
    BudgetPolicy,
    BudgetStage,
    ModelCallDetail,
    ProviderTiming,
    RunError,
    RunOutcome,
    Stage,
    StageKind,
    StopReason,
    ToolCall,
    ToolCallStatus,
    ToolOutcome,
    Usage,
)

__all__ = ["AgentLoop", "RunResultWithMessages"]

log = logging.getLogger(__name__)

_REPAIR_PROMPT = (
    "Your last tool call could not be parsed: {error}\nYour output was: {generation}\n"
    "Call the tool again with arguments that are one valid JSON object matching its schema."
)
# Sent (not kept) with the last model call of a run whose budget policy is "answer".
_ANSWER_NOW = {
    "role": "system",
    "content": "This turn's time budget is used up. Answer now from what you already know "
    "and the tool results above; do not call tools.",
}


@dataclass(slots=True)
class RunResultWithMessages:
    """A run's outcome and the messages it adds to the session's conversation."""

    outcome: RunOutcome
    messages: list[dict[str, Any]]


class AgentLoop:
    """Runs user turns against the connected tool servers; each run brings its models and
    profile in its :class:`~sidecar.agent.scope.RunScope`.

    Args:
        catalog: Every discovered tool.
        connections: The tool servers' connections, by name.
        results: The tool-result cache; None when it is off.
        redact: Applied to every tool result and error.
        max_message_bytes: The largest message a front sends: an answer may take half of
            it, a tool call's arguments or result a quarter, whatever a model or a tool
            server sends.
    """

    def __init__(
        self,
        catalog: ToolCatalog,
        connections: Mapping[str, ToolLink],
        *,
        results: ResultCache | None = None,
        redact: Callable[[str], str] | None = None,
        max_message_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self.tools = ToolAccess(catalog, connections)
        self.max_answer_bytes = max_message_bytes // 2
        self._dispatcher = Dispatcher(
            catalog, connections, results, redact, max_text_bytes=max_message_bytes // 4
        )

    async def call_tools(self, scope: StepScope, calls: Sequence[ToolCall]) -> list[ToolOutcome]:
        """Run calls a caller made itself, as one step (see :mod:`sidecar.agent.direct`)."""
        return await self._dispatcher.run_step(scope, calls)

    def tool_definitions(self, profile: Profile) -> list[dict[str, Any]]:
        """The tool list the model sees for ``profile`` now."""
        return self.tools.definitions(profile.name, profile.allowed)

    async def run(
        self,
        scope: RunScope,
        history: Sequence[dict[str, Any]],
        user_input: str,
        resume: Progress | None = None,
    ) -> RunResultWithMessages:
        """Run one user turn.

        Args:
            scope: What the run reads while it runs.
            history: The conversation so far (model messages, no system prompt).
            user_input: The user's new message.
            resume: Where an earlier attempt at this turn got to (a background run taken
                up again): the run goes on with the step after.
        """
        run = _Run(self, scope)
        try:
            return await run.execute(history, user_input, resume)
        finally:
            if run.early is not None:
                run.early.cancel()  # the run ended (or was cancelled) before its tools
            run.end_speculation()


class _Run:
    """The state of one run; lives for one call of :meth:`AgentLoop.run`."""

    def __init__(self, loop: AgentLoop, scope: RunScope) -> None:
        self.loop = loop
        self.scope = scope
        self.profile = scope.profile
        self.clock = scope.clock
        self.sink = scope.sink
        self.stages: list[Stage] = []
        self.usage = Usage()
        self.tool_calls = 0
        self.steps = 0
        self.repairs = 0
        self.budget: RunBudget | None = None
        if scope.profile.budget is not None:
            started = time.monotonic() - scope.clock.now()
            self.budget = RunBudget(scope.profile.budget, started=started, deadline=scope.deadline)
        self.overruns: list[BudgetOverrun] = []
        self.history: Sequence[dict[str, Any]] = ()
        self.new: list[dict[str, Any]] = []  # what the run adds to the conversation
        self.early: EarlyCalls | None = None  # this step's calls started from the stream
        self.prefetch: Prefetch | None = None  # the first step's speculated calls
        self.speculated = 0
        self.spend = scope.spend
        self._tools_tokens: tuple[object, int] = ((), 0)  # a tool list and its tokens
        self._history_tokens: int | None = None  # of the system prompt and the history

    def _stage(
        self,
        kind: StageKind,
        name: str,
        step: int,
        start: float,
        duration: float,
        *,
        detail: ModelCallDetail | None = None,
    ) -> Stage:
        stage = Stage(
            kind=kind, name=name, step=step, start=start, duration=duration, detail=detail
        )
        self.stages.append(stage)
        return stage

    def finish(
        self,
        answer: str,
        reason: StopReason,
        new_messages: list[dict[str, Any]],
        error: RunError | None = None,
    ) -> RunResultWithMessages:
        total = self.clock.now()
        self.end_speculation()
        if self.budget is not None:
            self._report_overruns(self.steps)
        self._stage(StageKind.OVERHEAD, "sidecar", 0, 0.0, _uncovered(self.stages, total))
        outcome = RunOutcome(
            answer=answer,
            stop_reason=reason,
            usage=self.usage,
            stages=self.stages,
            total=total,
            steps=self.steps,
            tool_calls=self.tool_calls,
            error=error,
            overruns=self.overruns,
            repairs=self.repairs,
            speculated=self.speculated,
        )
        named = self.profile.config.tools
        if named:  # a profile that lists no tools was promised none in particular
            outcome.unavailable_tools = self.loop.tools.unavailable(named)
        return RunResultWithMessages(outcome, new_messages)

    def end_speculation(self) -> None:
        """Drop the speculated calls the model did not ask for (once its first step's
        calls were dispatched, or the run ended)."""
        if self.prefetch is not None:
            self.prefetch.discard()
            self.speculated = self.prefetch.started
            self.prefetch = None

    @property
    def _streamed(self) -> bool:
        return not self.scope.structured and self.sink is not None

    async def execute(
        self, history: Sequence[dict[str, Any]], user_input: str, resume: Progress | None
    ) -> RunResultWithMessages:
        self.new = [{"role": "user", "content": user_input}]
        if resume is not None:
            self.new = list(resume.messages)
            self.steps, self.tool_calls = resume.steps, resume.tool_calls
            self.usage.add(resume.usage)
        try:
            return await self._steps(history, self.new)
        except _SpendStop as stop:
            # Between model calls: every step the run kept is whole, its tools all ended.
            error = RunError("cost_limit", self._stopped_for_cost(stop.why), retryable=False)
            return self.finish("", StopReason.COST_LIMIT, self.new, error)

    def _stopped_for_cost(self, why: str) -> str:
        """What a caller of a run the cost guard stopped is told: why, and what had run
        (with no answer, this is all it learns without reading the timeline)."""
        ran = [
            f"{stage.name} ({stage.detail.status.name.lower()})"
            for stage in self.stages
            if stage.kind is StageKind.TOOL_CALL and isinstance(stage.detail, ToolOutcome)
        ]
        done = f"{self.steps} model call(s)"
        if ran:
            shown = ", ".join(ran[:10]) + (f" and {len(ran) - 10} more" if len(ran) > 10 else "")
            done += f" and {len(ran)} tool call(s): {shown}"
        return (
            f"the run was stopped before its next model call, with no answer: {why}; it had "
            f"made {done}; their results are in the timeline and the session"
        )

    async def _steps(
        self, history: Sequence[dict[str, Any]], new: list[dict[str, Any]]
    ) -> RunResultWithMessages:
        scope = self.scope
        config = self.profile.config
        # A profile with an answer schema answers in its form in either output mode; a
        # streamed run streams the answer's JSON text as it comes.
        schema = config.answer_schema
        stream = self._streamed
        self.history = history
        # Since the request arrived: session lookup, admission.
        self._stage(StageKind.QUEUE, "queue", 0, 0.0, self.clock.now())
        # Tiered, the tools model chooses tools: its text is never shown (the answer model
        # writes the answer), and it gets no answer schema.
        tiered = scope.models.tools is not None
        model = scope.models.tools or scope.models.answer
        step_schema = None if tiered else schema
        while True:
            built = self.clock.now()
            messages = [scope.system_message, *history, *new]
            tools = self.loop.tool_definitions(self.profile)
            if self.spend is not None:
                self._afford(model, messages, tools)  # a step it cannot pay for never begins
            self.steps += 1
            step = self.steps
            if scope.trace is not None:
                scope.trace.step(step, built)
            self._stage(StageKind.CONTEXT_BUILD, "context", step, built, self.clock.now() - built)
            if step == 1 and scope.speculate:
                # While the model thinks: its likely first calls, answered when it asks.
                step_scope = scope.step(step, self._tools_deadline(), approvals=False)
                self.prefetch = Prefetch(self.loop._dispatcher, step_scope)
                self.prefetch.start(scope.speculate)
            if stream and config.early_dispatch:
                step_scope = scope.step(step, self._tools_deadline(), approvals=False)
                self.early = EarlyCalls(self.loop._dispatcher, step_scope, self.prefetch)
            try:
                response = await self._think(
                    step,
                    messages,
                    tools,
                    stream,
                    step_schema,
                    model=model,
                    show=not tiered,
                    afforded=True,
                )
            except ToolUseFailed as exc:
                self._drop_early()
                # One repair round: tell the model what was wrong, once per step.
                self.repairs += 1
                repair = {
                    "role": "user",
                    "content": _REPAIR_PROMPT.format(
                        error=exc.message, generation=exc.failed_generation[:2000]
                    ),
                }
                try:
                    response = await self._think(
                        step,
                        [*messages, repair],
                        tools,
                        stream,
                        step_schema,
                        model=model,
                        show=not tiered,
                    )
                except ModelError as again:
                    return await self._model_failed(again, history_kept=new)
            except ModelError as exc:
                return await self._model_failed(exc, history_kept=new)
            if tiered and not response.tool_calls:
                # The tools model needs no more tools (or declined): the answer model
                # answers, with the tools still in the prompt (its cached prefix stays the
                # same) but not callable. The tools model's text is never shown.
                self._drop_early()
                try:
                    response = await self._think(
                        step, messages, tools, stream, schema, tool_choice="none"
                    )
                except ModelError as exc:
                    return await self._model_failed(exc, history_kept=new)
                if response.tool_calls:
                    return self._tools_refused(response, new)

            if response.refusal is not None and not response.tool_calls:
                new.append({"role": "assistant", "content": response.refusal})
                return self.finish(response.refusal, StopReason.REFUSED, new)
            if not response.tool_calls:
                return self._answer(response.text, new)
            if self.budget is not None and (over := await self._over_budget(step, new)):
                return over
            if self.spend is not None and (why := self.spend.spent_past()) is not None:
                # Its tools would run for a model call the run cannot pay for.
                raise _SpendStop(why)

            calls = response.tool_calls
            assistant = {
                "role": "assistant",
                "content": response.text or None,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for c in calls
                ],
            }
            # A limit reached here ends the run before the tools run; the dangling
            # assistant message is not kept, so the conversation stays well-formed.
            if step >= config.max_steps:
                return self.finish("", StopReason.MAX_STEPS, new)
            if self.tool_calls + len(calls) > config.max_tool_calls:
                return self.finish("", StopReason.MAX_TOOL_CALLS, new)
            self.tool_calls += len(calls)
            new.append(assistant)

            stage_start = self.clock.now()
            step_scope = scope.step(step, self._tools_deadline())
            outcomes = await self.loop._dispatcher.run_step(
                step_scope, calls, self.early, self.prefetch
            )
            self.early = None
            self.end_speculation()
            if self.budget is not None:
                self.budget.tools_spent += self.clock.now() - stage_start
            for o in outcomes:
                new.append({"role": "tool", "tool_call_id": o.call_id, "content": _content(o)})
                self.stages.append(Stage.of_tool_call(step, o))
            if self.sink is not None:
                step_stages = [s for s in self.stages if s.step == step]
                self.sink.step_finished(step, step_stages, self.clock.now() - built)
            if scope.on_step is not None:
                await scope.on_step(
                    step,
                    Progress(
                        messages=new, steps=self.steps, tool_calls=self.tool_calls, usage=self.usage
                    ),
                )
            if self.budget is not None and (over := await self._over_budget(step, new)):
                return over
            if time.monotonic() >= scope.deadline:
                return self.finish("", StopReason.BUDGET_EXHAUSTED, new[:1])

    def _drop_early(self) -> None:
        """Cancel the calls started from a stream whose answer will not be used."""
        if self.early is not None:
            self.early.cancel()
            self.early = None

    async def _think(
        self,
        step: int,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        stream: bool,
        schema: dict[str, Any] | None,
        deadline: float | None = None,
        tool_choice: str | None = None,
        *,
        model: Model | None = None,
        show: bool = True,
        afforded: bool = False,
    ) -> ModelResponse:
        """One model call (``model``, the answer model unless told); ``show``: its text
        streams to the caller; ``afforded``: the cost guard priced it already."""
        model = model or self.scope.models.answer
        if deadline is None:
            deadline = (
                self.scope.deadline
                if self.budget is None
                else self.budget.deadline(BudgetStage.MODEL)
            )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ModelError(DEADLINE_EXCEEDED, "the run's time ran out", retryable=False)
        if self.spend is not None and not afforded:
            self._afford(model, messages, tools)
        sink = self.sink
        on_text = on_reasoning = None
        policy = self.scope.profile.config.reasoning
        if stream and show and sink is not None:

            def on_text(text: str) -> None:
                sink.text_delta(step, text)

            if policy.stream:

                def on_reasoning(text: str) -> None:
                    sink.reasoning_delta(step, text)

        request = ModelRequest(
            messages,
            tools,
            stream,
            remaining,
            response_schema=schema,
            tool_choice=tool_choice,
            backlog=sink.backlog if on_text is not None and sink is not None else None,
            on_reasoning=on_reasoning,
            keep_reasoning=policy.record,
            # The light path's model, answering for a full flex tier, asks for its own.
            service_tier=None if model is self.scope.light_model else self.scope.service_tier,
        )
        on_tool_call = self.early.offer if self.early is not None else None
        start = self.clock.now()
        try:
            async with asyncio.timeout(remaining):
                response = await model.complete(request, on_text, on_tool_call)
        except TimeoutError:
            self._model_stage(model, step, start, remaining, response=None, error=DEADLINE_EXCEEDED)
            raise ModelError(DEADLINE_EXCEEDED, "the run's time ran out", retryable=False) from None
        except ModelError as exc:
            self._model_stage(
                model, step, start, remaining, response=None, error=exc.code, attempts=exc.attempts
            )
            light = self.scope.light_model
            if not isinstance(exc, FlexTierFull) or light is None or light is model:
                raise
            log.warning(
                "run %s step %d: the flex tier of %s is full (498): sent to the light path's %s",
                self.scope.run_id,
                step,
                model.name,
                light.name,
            )
            return await self._think(
                step, messages, tools, stream, schema, deadline, tool_choice, model=light, show=show
            )
        self.usage.add(response.usage)
        if self.spend is not None:
            self.spend.charge(model.name, response.usage)
        if response.paced > 0:
            # Held back by the endpoint's rate limits before it was sent: a stage of its own.
            self._stage(StageKind.QUEUE, MODEL_PACING, step, start, response.paced)
        self._model_stage(model, step, start, remaining, response=response)
        return response

    def _afford(
        self, model: Model, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> None:
        """Raises _SpendStop when a call of ``model`` with ``messages`` and ``tools`` would
        take the run past what it may spend."""
        assert self.spend is not None
        if self._tools_tokens[0] is not tools:  # tool lists are cached: identity is enough
            self._tools_tokens = (tools, tokens_of(tools))
        # messages are the system prompt, the history (the same for the whole run: sized
        # once) and what the run added since.
        head = 1 + len(self.history)
        if self._history_tokens is None:
            self._history_tokens = tokens_of(messages[:head])
        estimate = self._history_tokens + self._tools_tokens[1] + tokens_of(messages[head:])
        prompt = round(estimate * self.scope.token_scale)
        why = self.spend.refusal(model.name, prompt)
        if why is not None:
            raise _SpendStop(why)

    def _tools_deadline(self) -> float:
        if self.budget is None:
            return self.scope.deadline
        return self.budget.deadline(BudgetStage.TOOLS)

    def _model_stage(
        self,
        model: Model,
        step: int,
        start: float,
        allowed: float,
        *,
        response: ModelResponse | None,
        error: str | None = None,
        attempts: int = 0,
    ) -> None:
        duration = self.clock.now() - start
        if self.budget is not None:
            self.budget.model_spent += duration
        if response is not None and response.paced > 0:
            start += response.paced
            duration -= response.paced
        if response is None:
            detail = ModelCallDetail(
                usage=Usage(),
                provider=ProviderTiming(),
                time_to_first_token=None,
                attempts=attempts,
                error=error,
                time_allowed=allowed,
            )
        else:
            detail = ModelCallDetail(
                usage=response.usage,
                provider=response.provider,
                time_to_first_token=response.time_to_first_token,
                attempts=response.attempts,
                time_allowed=allowed,
                request_bytes=response.request_bytes,
                service_tier=response.service_tier or "",
            )
        stage = self._stage(StageKind.MODEL_CALL, model.name, step, start, duration, detail=detail)
        if self.scope.trace is not None:
            self.scope.trace.model_call(stage)

    def _answer(
        self, text: str, new: list[dict[str, Any]], reason: StopReason = StopReason.ANSWERED
    ) -> RunResultWithMessages:
        limit = self.loop.max_answer_bytes
        if len(text) * 4 > limit and (size := len(text.encode())) > limit:
            error = RunError(
                "answer_too_large",
                f"the model's answer is {size} bytes; the sidecar delivers answers of at most "
                f"{limit} bytes (half of server.max_message_bytes)",
                retryable=False,
            )
            return self.finish("", StopReason.MODEL_ERROR, [], error)
        new.append({"role": "assistant", "content": text})
        validate = self.profile.validate_answer
        if validate is not None:
            try:
                validate(orjson.loads(text))
            except (orjson.JSONDecodeError, fastjsonschema.JsonSchemaException) as exc:
                error = RunError(
                    "invalid_answer",
                    f"the answer does not match the profile's schema: {exc}",
                    retryable=True,
                )
                return self.finish(text, StopReason.INVALID_ANSWER, new, error)
        return self.finish(text, reason, new)

    def _report_overruns(self, step: int) -> list[BudgetOverrun]:
        assert self.budget is not None
        found = self.budget.overruns(step, self.clock.now())
        for overrun in found:
            self.overruns.append(overrun)
            if self.sink is not None:
                self.sink.budget_exceeded(overrun)
        return found

    async def _over_budget(
        self, step: int, new: list[dict[str, Any]]
    ) -> RunResultWithMessages | None:
        """Report new overruns and apply the policy; None when the run goes on."""
        assert self.budget is not None
        if not self._report_overruns(step):
            return None
        policy = self.budget.policy
        if policy is BudgetPolicy.STOP:
            return self.finish("", StopReason.BUDGET_STOPPED, new)
        if policy is BudgetPolicy.ANSWER:
            return await self._answer_now(new)
        return None

    async def _answer_now(self, new: list[dict[str, Any]]) -> RunResultWithMessages:
        """The "answer" policy: one last model call, tools offered (the prompt prefix stays
        cacheable) but turned off, bounded by the run's deadline rather than its budget."""
        self.budget = None  # the budget has had its say: no second policy round
        self.steps += 1
        step = self.steps
        scope = self.scope
        if scope.trace is not None:
            scope.trace.step(step, self.clock.now())
        messages = [scope.system_message, *self.history, *new, _ANSWER_NOW]
        tools = self.loop.tool_definitions(self.profile)
        schema = self.profile.config.answer_schema
        try:
            response = await self._think(
                step,
                messages,
                tools,
                self._streamed,
                schema,
                deadline=scope.deadline,
                tool_choice="none",
            )
        except ModelError as exc:
            return await self._model_failed(exc, history_kept=new)
        if response.tool_calls:
            return self._tools_refused(response, new, StopReason.BUDGET_ANSWERED)
        return self._answer(response.text, new, StopReason.BUDGET_ANSWERED)

    def _tools_refused(
        self,
        response: ModelResponse,
        new: list[dict[str, Any]],
        reason: StopReason = StopReason.ANSWERED,
    ) -> RunResultWithMessages:
        """A model asked with ``tool_choice: none`` that called tools anyway: the calls
        are never run; its text, if it wrote any, is the answer."""
        names = ", ".join(c.name for c in response.tool_calls)
        log.warning(
            "model %s called tools (%s) though told not to; the calls were not run",
            self.scope.models.answer.name,
            names,
        )
        if response.text.strip():
            return self._answer(response.text, new, reason)
        error = RunError(
            "model_ignored_tool_choice",
            f"the model was asked for an answer without tools and called {names} instead; "
            "no call was run",
            retryable=True,
        )
        return self.finish("", StopReason.MODEL_ERROR, [], error)

    async def _model_failed(
        self, exc: ModelError, history_kept: list[dict[str, Any]]
    ) -> RunResultWithMessages:
        if self.budget is not None and (over := await self._over_budget(self.steps, history_kept)):
            return over
        # Timers may fire up to a couple of milliseconds early (see budget._TIMER_SLACK).
        if exc.out_of_time and time.monotonic() >= self.scope.deadline - 0.002:
            reason = StopReason.BUDGET_EXHAUSTED
        else:
            reason = StopReason.MODEL_ERROR
        # A failed run adds nothing to the conversation: the next turn starts clean.
        return self.finish("", reason, [], RunError(exc.code, exc.message, exc.retryable))


class _SpendStop(Exception):
    """The next model call would take the run past what it may spend."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _content(outcome: ToolOutcome) -> str:
    if outcome.status is ToolCallStatus.OK or outcome.status is ToolCallStatus.CACHED:
        return outcome.content
    return f"error ({outcome.status.name.lower()}): {outcome.content}"


def _uncovered(stages: Sequence[Stage], total: float) -> float:
    """The run's time no stage covers: the sidecar's own overhead.

    Stages may overlap (a step's tool calls run together, and a call started early runs
    while the model still streams), so what counts is the time their union covers.
    """
    covered, reach = 0.0, 0.0
    for start, end in sorted((s.start, s.start + s.duration) for s in stages):
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    return max(0.0, total - covered)
