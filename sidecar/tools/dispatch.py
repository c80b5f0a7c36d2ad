"""Dispatch one step's tool calls: concurrently, in key order, each under its deadline.

Every call of a step starts at once, except a call whose resource keys conflict with an
earlier call's (one writes a key the other reads or writes): it waits for that call, so
conflicting writes happen in the model's order and the rest never wait. A step's tool
stage costs the slowest chain, not the sum.

Calls may start ahead of their step (:mod:`sidecar.tools.ahead`): from the model's stream
as soon as their arguments are complete, or speculated before the model answered; the
step claims each such call instead of starting it again.

Each call, in order: the tool must exist and be allowed; its arguments are validated
against the schema (a violation goes back to the model and never reaches the server); a
run answered from a recording takes the recorded result here (``StepScope.answer``);
approval is asked for when the tool requires it; then it runs behind its server's
circuit breaker, with deadline = min(tool timeout, the run's remaining time), retried
with backoff only when the tool is idempotent and the failure is UNAVAILABLE or
RESOURCE_EXHAUSTED. On a server that hedges (``tool_servers[].hedge``), an idempotent
call still unanswered after its tool's usual latency gets a second copy, and the first
answer wins (:mod:`sidecar.tools.hedging`). Every failure becomes a :class:`ToolOutcome`
the model sees; nothing here raises except cancellation, which cancels every call in
flight.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

from agentsidecar.v1 import tool_pb2
from sidecar.config import RetryPolicy
from sidecar.context.trim import ResultTrimmer
from sidecar.errors import ArgumentsInvalid, BreakerOpenError
from sidecar.tools.catalog import CatalogTool, ToolCatalog, allows
from sidecar.tools.hedging import race
from sidecar.tools.link import CallHooks, InputRelay, ToolLink
from sidecar.tools.result_cache import ResultCache
from sidecar.types import (
    Clock,
    Decision,
    EventSink,
    HedgeResult,
    ToolCall,
    ToolCallStatus,
    ToolOutcome,
    ToolQuestion,
)

if TYPE_CHECKING:
    from sidecar.security.tool_identity import RunIdentity
    from sidecar.telemetry.tracing import RunTrace, ToolSpan
    from sidecar.tools.ahead import EarlyCalls, Prefetch, Started

# Codes that say the server (not the request) is unwell: they count against its breaker.
_SERVER_FAULTS = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
_RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})
# How grpc's client says a response exceeded grpc.max_receive_message_length (after
# "Stream removed (CLIENT: ", in grpc 1.85).
_TOO_LARGE = "CLIENT: Received message larger than max"

Approver = Callable[[int, ToolCall, CatalogTool], Awaitable[tuple[bool, str]]]
Asker = Callable[[int, ToolCall, ToolQuestion], Awaitable[Decision]]
"""Asks a running call's question of the caller (an MCP server's elicitation)."""
ToolCallListener = Callable[[ToolCall, "str | None", ToolOutcome], None]
"""Told of every call's end: the call, its tool's server (None: no such tool), its outcome."""
DispatchGuard = Callable[[int, ToolCall, CatalogTool], Awaitable[None]]
"""Awaited just before a call goes to its server, with its step (a background run records a
call that is not safe to repeat first); an exception it raises fails the step unsent."""
ToolAnswerer = Callable[[ToolCall, CatalogTool, float], "ToolOutcome | None"]
"""Answers a valid, allowed call in place of its server (a run answered from a recording):
given the call, its tool and the run's clock now, the outcome; None: the call runs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepScope:
    """What every call of one step shares, built once per step."""

    step: int
    """The step number, for events."""
    clock: Clock
    """The run's clock; outcomes carry offsets on it."""
    deadline: float
    """``time.monotonic()`` value when the step's tools must be done."""
    allowed: frozenset[str] | None
    """Tool names the profile allows; None allows all."""
    sink: EventSink | None = None
    """Receives started/finished events, when the caller streams."""
    approver: Approver | None = None
    """Asked for tools that require approval; None denies them."""
    asker: Asker | None = None
    """Asked a running call's questions; None declines them."""
    metadata: Sequence[tuple[str, str]] = ()
    """gRPC metadata to send with each call (trace context)."""
    identity: RunIdentity | None = None
    """Who the run serves: each call carries it (and the call's id) as metadata."""
    trace: RunTrace | None = None
    """The run's spans, when tracing is on: each call gets a span, and its metadata
    carries that span's context instead of ``metadata``."""
    trim: ResultTrimmer | None = None
    """Cuts each result to what enters the model's context."""
    on_finished: ToolCallListener | None = None
    """Told of every call's end (the audit record), streamed or not."""
    before_dispatch: DispatchGuard | None = None
    """Awaited before each call is sent; None: nothing to wait for."""
    versions: Mapping[str, Sequence[tuple[str, float]]] = dataclasses.field(default_factory=dict)
    """For each server with versions: the servers (itself first) and their weights, which
    share its calls (``tool_servers[].version_of``); a server not named keeps its calls."""
    answer: ToolAnswerer | None = None
    """Answers calls before they reach approval, the cache or a server; None: none is."""
    relay: InputRelay | None = None
    """A 2026-07-28 MCP host's round, passed to the (single) call of a direct call."""


@dataclass(slots=True, kw_only=True)
class Prepared:
    """A call looked up and validated: ready to run, or settled already."""

    call: ToolCall
    tool: CatalogTool | None
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    outcome: ToolOutcome | None = None  # set when the call is settled without running
    arguments: dict[str, Any] | None = None  # parsed and validated
    sent_to: str | None = None  # the server it was sent to, once it was
    sent_at: float = 0.0  # when (the scope's clock), for the record of a call cut off
    tries: _Tries | None = None  # its attempts, counted as they are made


class _Tries:
    """How often a call was attempted, how long it backed off in between, and whether a
    second copy was sent."""

    __slots__ = ("backoff", "count", "hedge", "hedge_delay")

    def __init__(self) -> None:
        self.count = 0
        self.backoff = 0.0
        self.hedge = HedgeResult.NONE
        self.hedge_delay: float | None = None


class _Failed(Exception):
    """An attempt failed with a gRPC status; carries what the outcome needs."""

    def __init__(self, code: grpc.StatusCode, details: str, *, too_large: bool = False):
        super().__init__(details)
        self.code = code
        self.details = details
        self.too_large = too_large
        """The result exceeded what the sidecar accepts (``max_result_bytes``)."""


class Dispatcher:
    """Runs tool calls against the connected tool servers."""

    def __init__(
        self,
        catalog: ToolCatalog,
        connections: Mapping[str, ToolLink],
        results: ResultCache | None = None,
        redact: Callable[[str], str] | None = None,
        *,
        max_text_bytes: int = 1024 * 1024,
    ) -> None:
        self._catalog = catalog
        self._connections = connections
        self.results = results
        self._redact = redact
        self._max_text = max_text_bytes
        """The most bytes of a call's arguments, or of its result, passed on."""
        self._pick = random.Random()

    def _connection(self, server: str, scope: StepScope) -> ToolLink:
        """The connection a call to ``server``'s tool goes to: by weight among its
        versions that are available now; the server itself when none is."""
        versions = scope.versions.get(server)
        if versions is None:
            return self._connections[server]
        candidates = [
            (name, weight)
            for name, weight in versions
            if weight > 0 and self._connections[name].available
        ]
        if not candidates:
            return self._connections[server]
        point = self._pick.random() * sum(w for _, w in candidates)
        for name, weight in candidates:
            point -= weight
            if point < 0:
                return self._connections[name]
        return self._connections[candidates[-1][0]]

    async def run_step(
        self,
        scope: StepScope,
        calls: Sequence[ToolCall],
        early: EarlyCalls | None = None,
        prefetch: Prefetch | None = None,
    ) -> list[ToolOutcome]:
        """Run one step's calls; return their outcomes in the model's order.

        Args:
            scope: What the step's calls share.
            calls: The model's tool calls, in its order.
            early: The calls of this step already started from the model's stream.
            prefetch: The calls speculated before the model answered.
        """
        claimed: dict[int, Started] = {}
        prepared: list[Prepared] = []
        for call in calls:
            # Calls announced by the stream were parsed and validated then: not again.
            item, started = early.claim(call) if early is not None else (None, None)
            item = item or self.prepare(call, scope)
            # A speculated read ran before this answer's writes: never after one it reads.
            if (
                started is None
                and prefetch is not None
                and not any(conflicts(p, item) for p in prepared)
            ):
                started = prefetch.claim(item)
            if started is not None:
                claimed[len(prepared)] = started
            prepared.append(item)
        if early is not None:
            early.cancel()  # started calls the final answer does not hold
        done = [asyncio.Event() for _ in prepared]
        outcomes: list[ToolOutcome | None] = [None] * len(prepared)
        clock, sink, trace = scope.clock, scope.sink, scope.trace

        async def run_one(i: int, waits: list[int]) -> None:
            item = prepared[i]
            started = claimed.get(i)
            span = started.span if started is not None else None
            if trace is not None and started is None:
                span = trace.tool_call(item.call.id, item.call.name)
            outcome: ToolOutcome | None = None
            try:
                if item.outcome is not None:
                    outcome = item.outcome
                elif started is not None:
                    # Nothing before it in the answer conflicts with it: no waits.
                    try:
                        outcome = await started.task
                    finally:
                        started.task.cancel()  # a no-op once done; stops it if we were
                else:
                    queued = clock.now()
                    for j in waits:
                        await done[j].wait()
                    outcome = await self.run_or_reuse(scope, item, queued, span)
                if scope.trim is not None:
                    outcome = _trimmed(outcome, item.tool, scope.trim)
                outcomes[i] = outcome
                if sink is not None:
                    sink.tool_call_finished(scope.step, outcome)
                if scope.on_finished is not None:
                    tool = item.tool
                    server = outcome.server or (tool.server if tool is not None else None)
                    scope.on_finished(item.call, server, outcome)
            finally:
                done[i].set()
                if span is not None:
                    span.end(outcome)
                if outcome is None and item.sent_to is not None:
                    # Cut off after it reached its server (the run cancelled or stopped):
                    # the record still holds it.
                    _report_cut_off(scope, item)

        async with asyncio.TaskGroup() as group:
            for i, item in enumerate(prepared):
                waits = [j for j in range(i) if conflicts(prepared[j], item)]
                group.create_task(run_one(i, waits))
        return [o for o in outcomes if o is not None]

    def prepare(self, call: ToolCall, scope: StepScope) -> Prepared:
        """Look the tool up and validate the arguments; settle the call when either fails."""
        allowed = scope.allowed
        tool = self._catalog.get(call.name)
        if tool is None or not allows(allowed, tool):
            names = ", ".join(sorted(t.name for t in self._catalog.tools() if allows(allowed, t)))
            settled = _settled(
                call,
                ToolCallStatus.UNKNOWN_TOOL,
                f"unknown tool {call.name!r}; available tools: {names or 'none'}",
                scope.clock.now(),
            )
            return Prepared(call=call, tool=None, outcome=settled)
        limit = self._max_text
        if len(call.arguments) * 4 > limit and (size := len(call.arguments.encode())) > limit:
            settled = _settled(
                call,
                ToolCallStatus.ERROR,
                f"the arguments are {size} bytes; at most {limit} are passed to a tool",
                scope.clock.now(),
            )
            return Prepared(call=call, tool=tool, outcome=settled)
        try:
            arguments = tool.parse_arguments(call.arguments)
        except ArgumentsInvalid as exc:
            settled = _settled(call, ToolCallStatus.ERROR, str(exc), scope.clock.now())
            return Prepared(call=call, tool=tool, outcome=settled)
        reads, writes = tool.resource_keys(arguments)
        return Prepared(call=call, tool=tool, reads=reads, writes=writes, arguments=arguments)

    async def run_or_reuse(
        self, scope: StepScope, item: Prepared, queued: float, span: ToolSpan | None
    ) -> ToolOutcome:
        """Run the call, or reuse a cached or in-flight result when its tool allows."""
        tool, results = item.tool, self.results
        if scope.answer is not None and tool is not None:
            answered = scope.answer(item.call, tool, scope.clock.now())
            if answered is not None:
                if scope.sink is not None:
                    call = item.call
                    scope.sink.tool_call_started(scope.step, call.id, call.name, call.arguments)
                return answered
        if results is None or tool is None or item.arguments is None or not results.caches(tool):
            return await self._run(scope, item, queued, span)
        # Every dispatched call starts before it finishes, for the caller: one answered
        # from the cache (or by an identical call in flight) too. A cached tool needs no
        # approval, so it starts now.
        call = item.call
        if scope.sink is not None:
            scope.sink.tool_call_started(scope.step, call.id, call.name, call.arguments)

        def invoke() -> Awaitable[ToolOutcome]:
            return self._run(scope, item, queued, span, announced=True)

        return await results.call(
            tool,
            item.arguments,
            call,
            invoke=invoke,
            clock=scope.clock,
            deadline=scope.deadline,
        )

    async def _run(
        self,
        scope: StepScope,
        item: Prepared,
        queued: float,
        span: ToolSpan | None,
        announced: bool = False,
    ) -> ToolOutcome:
        """Approve (when the tool requires it), call the server, describe the outcome;
        ``announced``: its start was told to the caller already."""
        call, tool, clock = item.call, item.tool, scope.clock
        assert tool is not None
        start = clock.now()
        wait = start - queued
        if tool.requires_approval:
            denied = await self._approve(scope, call, tool, start, wait)
            if denied is not None:
                return denied
            start = clock.now()
        if scope.sink is not None and not announced:
            scope.sink.tool_call_started(scope.step, call.id, call.name, call.arguments)
        connection = self._connection(tool.server, scope)
        # Traced, the call carries its span's context; otherwise the run's trace context.
        sent: Sequence[tuple[str, str | bytes]] = (
            span.metadata() if span is not None else scope.metadata
        )
        if scope.identity is not None:
            sent = scope.identity.call_metadata(connection.name, call.id, sent)
        attempt = _Attempt(
            connection=connection,
            tool=tool,
            call=call,
            deadline=scope.deadline,
            metadata=sent,
            redact=self._redact,
            max_text=self._max_text,
            hooks=_hooks(scope, call) if connection.interactive else None,
        )
        if scope.before_dispatch is not None:
            await scope.before_dispatch(scope.step, call, tool)
        item.sent_to, item.sent_at, item.tries = connection.name, start, attempt.tries
        try:
            result = await attempt.run()
        except BreakerOpenError:
            return attempt.outcome(
                ToolCallStatus.UNAVAILABLE,
                f"tool {call.name} is temporarily unavailable (its server is failing); "
                "answer without it or try again later",
                start=start,
                end=clock.now(),
                wait=wait,
                breaker_rejected=True,
            )
        except _Failed as exc:
            status, message = _describe(call.name, exc)
            return attempt.outcome(status, message, start=start, end=clock.now(), wait=wait)
        handler = None
        if result.HasField("handler_duration"):
            handler = result.handler_duration.ToNanoseconds() / 1e9
        if result.WhichOneof("outcome") == "error":
            status, content = ToolCallStatus.ERROR, result.error.message
        else:
            status, content = ToolCallStatus.OK, result.output
        return attempt.outcome(
            status, content, start=start, end=clock.now(), wait=wait, handler=handler
        )

    async def _approve(
        self, scope: StepScope, call: ToolCall, tool: CatalogTool, start: float, wait: float
    ) -> ToolOutcome | None:
        """Ask for approval; the DENIED outcome when it is refused, None when approved."""
        if scope.sink is not None:
            scope.sink.approval_required(
                scope.step, call.id, call.name, call.arguments, tool.destructive
            )
        approved, reason = (False, "no one can approve calls on this run")
        if scope.approver is not None:
            approved, reason = await scope.approver(scope.step, call, tool)
        if approved:
            return None
        return ToolOutcome(
            call_id=call.id,
            tool_name=call.name,
            status=ToolCallStatus.DENIED,
            content=f"the call to {call.name} was denied" + (f": {reason}" if reason else ""),
            start=start,
            duration=scope.clock.now() - start,
            attempts=0,
            wait_duration=wait,
        )


class _Attempt:
    """One call's attempts at its server: deadline, breaker, retries, and their record."""

    __slots__ = (
        "_call",
        "_connection",
        "_deadline",
        "_hooks",
        "_max_text",
        "_metadata",
        "_own_timeout",
        "_redact",
        "_request",
        "_tool",
        "allowed",
        "tries",
    )

    def __init__(
        self,
        *,
        connection: ToolLink,
        tool: CatalogTool,
        call: ToolCall,
        deadline: float,
        metadata: Sequence[tuple[str, str | bytes]],
        redact: Callable[[str], str] | None,
        max_text: int,
        hooks: CallHooks | None = None,
    ) -> None:
        self._max_text = max_text
        self._hooks = hooks
        self._connection = connection
        self._redact = redact
        self._tool = tool
        self._call = call
        self._metadata = metadata
        self._request = tool_pb2.CallToolRequest(
            call_id=call.id, tool_name=tool.remote_name, arguments=call.arguments
        )
        timeout = min(tool.timeout or connection.config.timeout, connection.config.timeout)
        sent = time.monotonic()
        self._deadline = min(deadline, sent + timeout)
        self.allowed = max(0.0, self._deadline - sent)
        """Seconds the call is allowed (its gRPC deadline)."""
        # A call cut off by the run's deadline or budget, before the tool's own timeout,
        # says nothing about the server's health: its breaker must not count it.
        self._own_timeout = self._deadline >= sent + timeout
        self.tries = _Tries()

    async def run(self) -> tool_pb2.ToolResult:
        """The call's result.

        Raises:
            _Failed: the last attempt failed with a gRPC status.
            BreakerOpenError: the server's breaker refused the call.
        """
        try:
            return await self._once()
        except _Failed as exc:
            # Retries only for idempotent tools, only on codes that say "try again";
            # tenacity's bookkeeping is paid only then.
            retry = self._tool.retry or self._connection.config.retry
            if exc.too_large or not (
                self._tool.idempotent and retry.max_attempts > 1 and exc.code in _RETRYABLE
            ):
                raise
            return await _retry(self._once, retry, self._deadline, exc, self.tries)

    async def _once(self) -> tool_pb2.ToolResult:
        """One attempt: sent once, or raced against a second copy when the server hedges
        and the tool is idempotent."""
        self.tries.count += 1
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise _Failed(grpc.StatusCode.DEADLINE_EXCEEDED, "no time left")
        hedging = self._connection.hedging
        if hedging is None:
            return await self._send(remaining)
        hedging.budget.earn()
        if not self._tool.idempotent:
            return await self._send(remaining)
        window = hedging.window(self._tool.remote_name)
        delay = window.delay
        sent = time.monotonic()
        if delay is None or delay >= remaining:
            result = await self._send(remaining)
        else:
            breaker = self._connection.breaker
            result, second = await race(
                self._send,
                deadline=self._deadline,
                delay=delay,
                may_hedge=lambda: hedging.may_hedge(breaker.state),
                on_second=self._second_copy,
            )
            if self.tries.hedge_delay is not None:
                self.tries.hedge = HedgeResult.SECOND_WON if second else HedgeResult.FIRST_WON
        hedging.record(window, time.monotonic() - sent)
        return result

    def _second_copy(self, delay: float) -> None:
        self.tries.hedge_delay = delay

    async def _send(self, timeout: float) -> tool_pb2.ToolResult:
        """One copy of the call behind the server's breaker. A deadline that is the run's,
        shorter than the tool's own timeout, expiring says nothing of the server's health."""
        connection = self._connection
        breaker = connection.breaker
        permit = breaker.admit()
        try:
            result = await connection.call(self._request, timeout, self._metadata, self._hooks)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            details = exc.details() or ""
            if code == grpc.StatusCode.RESOURCE_EXHAUSTED and (
                _TOO_LARGE in details or getattr(exc, "too_large", False)
            ):
                # This call's result is too large for us: the call's error, not a sign of
                # the server's health (never retried, never counted against its breaker).
                breaker.record_success(permit)
                raise _Failed(code, details, too_large=True) from None
            if code == grpc.StatusCode.DEADLINE_EXCEEDED and not self._own_timeout:
                breaker.release(permit)
            elif code in _SERVER_FAULTS:
                breaker.record_failure(permit)
            elif code == grpc.StatusCode.CANCELLED:
                breaker.release(permit)
            else:
                breaker.record_success(permit)  # the server answered sanely
            raise _Failed(code, details) from None
        except BaseException:
            breaker.release(permit)
            raise
        breaker.record_success(permit)
        return result

    def outcome(
        self,
        status: ToolCallStatus,
        content: str,
        *,
        start: float,
        end: float,
        wait: float,
        handler: float | None = None,
        breaker_rejected: bool = False,
    ) -> ToolOutcome:
        if len(content) * 4 > self._max_text:
            content = _capped(content, self._max_text)
        if self._redact is not None:
            content = self._redact(content)  # what the model, the caller and the store see
        return ToolOutcome(
            call_id=self._call.id,
            tool_name=self._call.name,
            status=status,
            content=content,
            start=start,
            duration=end - start,
            handler_duration=handler,
            attempts=self.tries.count,
            wait_duration=wait,
            backoff=self.tries.backoff,
            breaker_rejected=breaker_rejected,
            time_allowed=self.allowed,
            server=self._connection.name,
            hedge=self.tries.hedge,
            hedge_delay=self.tries.hedge_delay,
        )


def _hooks(scope: StepScope, call: ToolCall) -> CallHooks:
    """What a call to an interactive link tells and asks its caller."""
    sink, asker, step = scope.sink, scope.asker, scope.step

    def progress(done: float, total: float | None, message: str) -> None:
        assert sink is not None
        sink.tool_call_progress(step, call.id, call.name, done, total, message)

    async def ask(question: ToolQuestion) -> Decision:
        assert asker is not None
        if sink is not None:
            sink.approval_required(step, call.id, call.name, call.arguments, False, question)
        return await asker(step, call, question)

    return CallHooks(
        progress=progress if sink is not None else None,
        ask=ask if asker is not None else None,
        relay=scope.relay,
    )


def _capped(content: str, limit: int) -> str:
    """``content`` cut to at most ``limit`` bytes of UTF-8, with a marker saying so."""
    data = content.encode()
    if len(data) <= limit:
        return content
    kept = data[: limit - 200].decode(errors="ignore")
    return (
        kept
        + f"\n[... {len(data) - len(kept.encode())} more bytes cut: the sidecar passes on {limit}]"
    )


def cancelled(call: ToolCall, why: str, scope: StepScope) -> ToolOutcome:
    """The outcome of a call cut off (or dropped) before it ended."""
    return ToolOutcome(
        call_id=call.id,
        tool_name=call.name,
        status=ToolCallStatus.CANCELLED,
        content=why,
        start=scope.clock.now(),
        duration=0.0,
        attempts=0,
    )


def _report_cut_off(scope: StepScope, item: Prepared) -> None:
    """Tell the listener (the audit record) and the events (a stream still read, a
    background run's record) of a call its run cut off after it was sent."""
    if scope.on_finished is None and scope.sink is None:
        return
    outcome = cancelled(item.call, "cut off: the run ended before the call did", scope)
    # It ran from when it was sent until now, in as many attempts as were made.
    outcome.start = item.sent_at
    outcome.duration = max(0.0, scope.clock.now() - item.sent_at)
    outcome.attempts = max(1, item.tries.count if item.tries is not None else 1)
    if scope.sink is not None:
        scope.sink.tool_call_finished(scope.step, outcome)
    if scope.on_finished is not None:
        scope.on_finished(item.call, item.sent_to, outcome)


def _settled(call: ToolCall, status: ToolCallStatus, content: str, now: float) -> ToolOutcome:
    """The outcome of a call settled before it was sent."""
    return ToolOutcome(
        call_id=call.id,
        tool_name=call.name,
        status=status,
        content=content,
        start=now,
        duration=0.0,
        attempts=0,
    )


async def _retry(
    attempt: Callable[[], Awaitable[tool_pb2.ToolResult]],
    policy: RetryPolicy,
    call_deadline: float,
    first: _Failed,
    tries: _Tries,
) -> tool_pb2.ToolResult:
    """Attempts 2..N of an idempotent call whose first attempt failed with ``first``."""

    def delay(exc: BaseException | None, retry_number: int) -> float:
        seconds = policy.backoff(retry_number + 1)
        if time.monotonic() + seconds >= call_deadline:
            raise exc if exc is not None else first  # no time left to wait
        return seconds

    def slept(seconds: float) -> None:
        # Counted when the wait happens, never for one the attempt limit then stops.
        tries.backoff += seconds

    first_wait = delay(first, 0)
    slept(first_wait)
    await asyncio.sleep(first_wait)
    retrying = AsyncRetrying(
        stop=stop_after_attempt(policy.max_attempts - 1),
        wait=lambda state: delay(
            state.outcome.exception() if state.outcome else None, state.attempt_number
        ),
        retry=retry_if_exception(lambda e: isinstance(e, _Failed) and e.code in _RETRYABLE),
        before_sleep=lambda state: slept(state.upcoming_sleep),
        reraise=True,
    )
    result: tool_pb2.ToolResult = await retrying(attempt)
    return result


def _describe(name: str, exc: _Failed) -> tuple[ToolCallStatus, str]:
    code = exc.code
    if exc.too_large:
        return (
            ToolCallStatus.ERROR,
            f"the result of {name} is larger than the sidecar accepts; ask for less "
            f"({exc.details})",
        )
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ToolCallStatus.TIMED_OUT, f"tool {name} timed out; answer without it or try later"
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED):
        return ToolCallStatus.UNAVAILABLE, f"tool {name} is unavailable right now: {exc.details}"
    if code == grpc.StatusCode.NOT_FOUND:
        return ToolCallStatus.UNKNOWN_TOOL, f"tool {name} no longer exists: {exc.details}"
    return ToolCallStatus.ERROR, f"tool {name} failed ({code.name}): {exc.details}"


def _trimmed(outcome: ToolOutcome, tool: CatalogTool | None, trim: ResultTrimmer) -> ToolOutcome:
    """The outcome with its content as it enters the context (a copy: a cached or shared
    outcome object is never changed)."""
    ok = outcome.status is ToolCallStatus.OK or outcome.status is ToolCallStatus.CACHED
    fields = tool.result_fields if tool is not None and ok else {}
    content = trim.trim(outcome.content, fields, is_error=not ok)
    if content is outcome.content:
        return outcome
    return dataclasses.replace(outcome, content=content)


def conflicts(a: Prepared, b: Prepared) -> bool:
    """Whether ``a`` writes a key ``b`` reads or writes, or ``b`` one ``a`` reads."""
    if a.outcome is not None or b.outcome is not None:
        return False
    return bool(a.writes & (b.reads | b.writes) or b.writes & a.reads)
