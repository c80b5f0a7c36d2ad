"""The decision loop: perceive (build the model input), think (call the model), act (run
the tools it asked for), until an answer, a limit, or the run's time runs out.

Each stop condition has its own :class:`~sidecar.run.StopReason`. The loop never raises
for a model or tool failure: the run ends with an outcome that says what happened. Only
cancellation propagates, after cancelling every tool call in flight.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import fastjsonschema
import orjson

from sidecar.agent.budget import RunBudget
from sidecar.agent.variants import RunModels
from sidecar.config import BudgetConfig, ProfileConfig
from sidecar.context.trim import ResultTrimmer
from sidecar.errors import ModelError, ToolUseFailed
from sidecar.llm.model import Model, ModelRequest, ModelResponse
from sidecar.schemas import compile_schema_safely
from sidecar.tools.catalog import CatalogTool, ListedTool, ToolCatalog, allows
from sidecar.tools.connection import ToolServerConnection
from sidecar.tools.dispatch import Approver, Dispatcher, EarlyCalls, StepScope, ToolCallListener
from sidecar.tools.result_cache import ResultCache
from sidecar.types import (
    MODEL_PACING,
    BudgetOverrun,
    BudgetPolicy,
    BudgetStage,
    Clock,
    EventSink,
    ModelCallDetail,
    ProviderTiming,
    RunError,
    RunOutcome,
    Stage,
    StageKind,
    StopReason,
    ToolAvailability,
    ToolCallDetail,
    ToolCallStatus,
    ToolOutcome,
    Usage,
)

if TYPE_CHECKING:
    from sidecar.security.tool_identity import RunIdentity
    from sidecar.telemetry.tracing import RunTrace

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


@dataclass(frozen=True, slots=True)
class Profile:
    """An agent profile, with what every run of it reuses built once."""

    name: str
    config: ProfileConfig
    system_message: dict[str, Any]
    allowed: frozenset[str] | None
    validate_answer: Callable[[Any], Any] | None
    budget: BudgetConfig | None = None
    """The latency budget; None when the profile declares none."""
    trim: ResultTrimmer | None = None
    """Cuts each tool result to what enters the model's context."""

    @classmethod
    def build(cls, name: str, config: ProfileConfig) -> Profile:
        return cls(
            trim=ResultTrimmer(config.context.tool_result_max_chars),
            name=name,
            config=config,
            system_message={"role": "system", "content": config.system_prompt},
            allowed=frozenset(config.tools) if config.tools is not None else None,
            validate_answer=compile_schema_safely(config.answer_schema)
            if config.answer_schema is not None
            else None,
            budget=config.budget if config.budget.declared else None,
        )


@dataclass(slots=True)
class RunResultWithMessages:
    """A run's outcome and the messages it adds to the session's conversation."""

    outcome: RunOutcome
    messages: list[dict[str, Any]]


class AgentLoop:
    """Runs user turns for every profile, against one model and one set of tool servers."""

    def __init__(
        self,
        model: Model,
        catalog: ToolCatalog,
        connections: Mapping[str, ToolServerConnection],
        profiles: Mapping[str, ProfileConfig],
        results: ResultCache | None = None,
        redact: Callable[[str], str] | None = None,
        max_message_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self.model = model
        self._catalog = catalog
        self._connections = connections
        # What a caller can rely on, whatever a model or a tool server sends: an answer
        # fits in half a message (the rest holds the timeline), and a tool call's
        # arguments or result in a quarter.
        self.max_answer_bytes = max_message_bytes // 2
        self._dispatcher = Dispatcher(
            catalog, connections, results, redact, max_text_bytes=max_message_bytes // 4
        )
        self.profiles = {name: Profile.build(name, p) for name, p in profiles.items()}

    def set_tool_versions(self, versions: Mapping[str, Sequence[tuple[str, float]]]) -> None:
        """Share each server's calls among its versions by weight (see ``Dispatcher``)."""
        self._dispatcher.set_versions(versions)

    def set_profiles(self, profiles: Mapping[str, ProfileConfig]) -> None:
        """Use these profiles for runs that start from now on (a reload); a run in flight
        keeps the :class:`Profile` it started with."""
        self.profiles = {name: Profile.build(name, p) for name, p in profiles.items()}

    def unavailable_servers(self) -> frozenset[str]:
        return frozenset(n for n, c in self._connections.items() if not c.available)

    def tool_definitions(self, profile: Profile) -> list[dict[str, Any]]:
        return self._catalog.definitions(profile.name, profile.allowed, self.unavailable_servers())

    def session_tools(
        self, profile: Profile
    ) -> list[tuple[CatalogTool | ListedTool, ToolAvailability]]:
        """The tools a profile allows, each with whether it can be called now; a tool whose
        name another server owns is listed as NAME_TAKEN."""
        entries: list[tuple[CatalogTool | ListedTool, ToolAvailability]] = []
        for tool in self._catalog.tools():
            if not allows(profile.allowed, tool):
                continue
            connection = self._connections[tool.server]
            if not connection.serving:
                availability = ToolAvailability.SERVER_UNAVAILABLE
            elif not connection.breaker.allows_calls():
                availability = ToolAvailability.BREAKER_OPEN
            else:
                availability = ToolAvailability.AVAILABLE
            entries.append((tool, availability))
        for taken in self._catalog.taken:
            if allows(profile.allowed, taken):
                entries.append((taken, ToolAvailability.NAME_TAKEN))
        return entries

    async def run(
        self,
        profile: Profile,
        history: Sequence[dict[str, Any]],
        user_input: str,
        *,
        deadline: float,
        structured: bool,
        sink: EventSink | None = None,
        approver: Approver | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        identity: RunIdentity | None = None,
        clock: Clock | None = None,
        trace: RunTrace | None = None,
        on_tool_call: ToolCallListener | None = None,
        models: RunModels | None = None,
        system_message: dict[str, Any] | None = None,
    ) -> RunResultWithMessages:
        """Run one user turn.

        Args:
            profile: the session's profile.
            history: the conversation so far (model messages, no system prompt).
            user_input: the user's new message.
            deadline: ``time.monotonic()`` value when the run's time is up.
            structured: True for OUTPUT_MODE_STRUCTURED (no text deltas; answer schema).
            sink: receives events as they happen; None when nobody listens.
            approver: decides calls that need approval.
            metadata: gRPC metadata for tool calls (trace context).
            identity: who the run serves, for its tool calls; unset: they carry none.
            clock: the run's clock, when the caller started it earlier.
            trace: the run's spans, when tracing is on.
            on_tool_call: told of every tool call's end (the audit record).
            models: the models to call (a variant's, tiered or not); unset: the loop's.
            system_message: the system message (a variant's); unset: the profile's.
        """
        clock = clock or Clock()
        run = _Run(self, profile, clock, deadline, structured, sink, approver, metadata)
        run.trace = trace
        run.identity = identity
        run.on_tool_call = on_tool_call
        run.models = models or RunModels(self.model)
        run.system_message = system_message or profile.system_message
        if profile.budget is not None:
            started = time.monotonic() - clock.now()
            run.budget = RunBudget(profile.budget, started=started, deadline=deadline)
        try:
            return await run.execute(history, user_input)
        finally:
            if run.early is not None:
                run.early.cancel()  # the run ended (or was cancelled) before its tools


class _Run:
    """The state of one run; lives for one call of :meth:`AgentLoop.run`."""

    def __init__(
        self,
        loop: AgentLoop,
        profile: Profile,
        clock: Clock,
        deadline: float,
        structured: bool,
        sink: EventSink | None,
        approver: Approver | None,
        metadata: Sequence[tuple[str, str]],
    ) -> None:
        self.loop = loop
        self.profile = profile
        self.clock = clock
        self.deadline = deadline
        self.structured = structured
        self.sink = sink
        self.approver = approver
        self.metadata = metadata
        self.stages: list[Stage] = []
        self.usage = Usage()
        self.tool_calls = 0
        self.steps = 0
        self.trace: RunTrace | None = None
        self.identity: RunIdentity | None = None
        self.on_tool_call: ToolCallListener | None = None
        self.models = RunModels(loop.model)
        self.system_message = profile.system_message
        self.repairs = 0
        self.budget: RunBudget | None = None
        self.overruns: list[BudgetOverrun] = []
        self.history: Sequence[dict[str, Any]] = ()
        self.early: EarlyCalls | None = None  # this step's calls started from the stream

    def finish(
        self,
        answer: str,
        reason: StopReason,
        new_messages: list[dict[str, Any]],
        error: RunError | None = None,
    ) -> RunResultWithMessages:
        total = self.clock.now()
        if self.budget is not None:
            self._report_overruns(self.steps)
        overhead = _uncovered(self.stages, total)
        self.stages.append(Stage(StageKind.OVERHEAD, "sidecar", 0, 0.0, overhead))
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
        )
        return RunResultWithMessages(outcome, new_messages)

    async def execute(
        self, history: Sequence[dict[str, Any]], user_input: str
    ) -> RunResultWithMessages:
        config = self.profile.config
        new: list[dict[str, Any]] = [{"role": "user", "content": user_input}]
        # A profile with an answer schema answers in its form in either output mode; a
        # streamed run streams the answer's JSON text as it comes.
        schema = config.answer_schema
        stream = not self.structured and self.sink is not None
        self.history = history
        # Since the request arrived: session lookup, admission.
        self.stages.append(Stage(StageKind.QUEUE, "queue", 0, 0.0, self.clock.now()))
        while True:
            self.steps += 1
            step = self.steps
            if self.trace is not None:
                self.trace.step(step, self.clock.now())
            built = self.clock.now()
            messages = [self.system_message, *history, *new]
            tools = self.loop.tool_definitions(self.profile)
            self.stages.append(
                Stage(StageKind.CONTEXT_BUILD, "context", step, built, self.clock.now() - built)
            )
            if stream and config.early_dispatch:
                self.early = self._early_calls(step)
            # Tiered, the tools model chooses tools: its text is never shown (the answer
            # model writes the answer), and it gets no answer schema.
            tiered = self.models.tools is not None
            model = self.models.tools or self.models.answer
            step_schema = None if tiered else schema
            try:
                response = await self._think(
                    step, messages, tools, stream, step_schema, model=model, show=not tiered
                )
            except ToolUseFailed as exc:
                if self.early is not None:
                    self.early.cancel()
                    self.early = None
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
                if self.early is not None:
                    self.early.cancel()
                    self.early = None
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
            scope = StepScope(
                step=step,
                clock=self.clock,
                deadline=self._tools_deadline(),
                allowed=self.profile.allowed,
                sink=self.sink,
                approver=self.approver,
                metadata=self.metadata,
                identity=self.identity,
                trace=self.trace,
                trim=self.profile.trim,
                on_finished=self.on_tool_call,
            )
            outcomes = await self.loop._dispatcher.run_step(scope, calls, self.early)
            self.early = None
            if self.budget is not None:
                self.budget.tools_spent += self.clock.now() - stage_start
            for o in outcomes:
                new.append({"role": "tool", "tool_call_id": o.call_id, "content": _content(o)})
                self.stages.append(_tool_stage(step, o))
            if self.sink is not None:
                step_stages = [s for s in self.stages if s.step == step]
                self.sink.step_finished(step, step_stages, self.clock.now() - built)
            if self.budget is not None and (over := await self._over_budget(step, new)):
                return over
            if time.monotonic() >= self.deadline:
                return self.finish("", StopReason.BUDGET_EXHAUSTED, new[:1])

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
    ) -> ModelResponse:
        """One model call (``model``, the answer model unless told); ``show``: its text
        streams to the caller."""
        model = model or self.models.answer
        if deadline is None:
            deadline = (
                self.deadline if self.budget is None else self.budget.deadline(BudgetStage.MODEL)
            )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ModelError("deadline_exceeded", "the run's time ran out", retryable=False)
        sink = self.sink
        on_text = None
        if stream and show and sink is not None:

            def on_text(text: str) -> None:
                sink.text_delta(step, text)

        request = ModelRequest(
            messages,
            tools,
            stream,
            remaining,
            schema,
            tool_choice,
            backlog=sink.backlog if on_text is not None and sink is not None else None,
        )
        on_tool_call = self.early.offer if self.early is not None else None
        start = self.clock.now()
        try:
            async with asyncio.timeout(remaining):
                response = await model.complete(request, on_text, on_tool_call)
        except TimeoutError:
            self._model_stage(model, step, start, remaining, None, "deadline_exceeded")
            raise ModelError(
                "deadline_exceeded", "the run's time ran out", retryable=False
            ) from None
        except ModelError as exc:
            self._model_stage(model, step, start, remaining, None, exc.code, exc.attempts)
            raise
        self.usage.add(response.usage)
        if response.paced > 0:
            # Held back by the endpoint's rate limits before it was sent: a stage of its own.
            self.stages.append(Stage(StageKind.QUEUE, MODEL_PACING, step, start, response.paced))
        self._model_stage(model, step, start, remaining, response, None)
        return response

    def _tools_deadline(self) -> float:
        return self.deadline if self.budget is None else self.budget.deadline(BudgetStage.TOOLS)

    def _early_calls(self, step: int) -> EarlyCalls:
        scope = StepScope(
            step=step,
            clock=self.clock,
            deadline=self._tools_deadline(),
            allowed=self.profile.allowed,
            sink=self.sink,
            metadata=self.metadata,
            identity=self.identity,
            trace=self.trace,
            on_finished=self.on_tool_call,
        )
        return EarlyCalls(self.loop._dispatcher, scope)

    def _model_stage(
        self,
        model: Model,
        step: int,
        start: float,
        allowed: float,
        response: ModelResponse | None,
        error: str | None,
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
            )
        stage = Stage(StageKind.MODEL_CALL, model.name, step, start, duration, detail)
        self.stages.append(stage)
        if self.trace is not None:
            self.trace.model_call(stage)

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
        if self.trace is not None:
            self.trace.step(step, self.clock.now())
        messages = [self.profile.system_message, *self.history, *new, _ANSWER_NOW]
        tools = self.loop.tool_definitions(self.profile)
        stream = not self.structured and self.sink is not None
        schema = self.profile.config.answer_schema
        try:
            response = await self._think(
                step, messages, tools, stream, schema, deadline=self.deadline, tool_choice="none"
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
            self.models.answer.name,
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
        if exc.code in ("deadline_exceeded", "model_timeout") and time.monotonic() >= (
            self.deadline - 0.002
        ):
            reason = StopReason.BUDGET_EXHAUSTED
        else:
            reason = StopReason.MODEL_ERROR
        # A failed run adds nothing to the conversation: the next turn starts clean.
        return self.finish("", reason, [], RunError(exc.code, exc.message, exc.retryable))


def _content(outcome: ToolOutcome) -> str:
    if outcome.status is ToolCallStatus.OK or outcome.status is ToolCallStatus.CACHED:
        return outcome.content
    return f"error ({outcome.status.name.lower()}): {outcome.content}"


def _tool_stage(step: int, o: ToolOutcome) -> Stage:
    return Stage(
        StageKind.TOOL_CALL,
        o.tool_name,
        step,
        o.start,
        o.duration,
        ToolCallDetail(
            call_id=o.call_id,
            status=o.status,
            handler_duration=o.handler_duration,
            attempts=o.attempts,
            wait_duration=o.wait_duration,
            backoff=o.backoff,
            breaker_rejected=o.breaker_rejected,
            time_allowed=o.time_allowed,
            cache=o.cache,
            saved=o.saved,
        ),
    )


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
