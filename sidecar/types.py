"""The shared vocabulary: plain types every layer speaks, importing nothing of ours.

Model calls and tool calls (:class:`ToolCall`, :class:`Usage`), a run's outcome and
timeline (:class:`RunOutcome`, :class:`Stage`, :class:`StopReason`), its budget overruns
and cost, a session and its turns (:class:`Session`, :class:`Turn`), a background run as
stored (:class:`RunRecord`, :class:`RunState`), breaker states.
They live here, below every layer, so that the loop, the dispatcher, the stores and
telemetry can share them without importing each other.

The enums mirror the proto enums value for value (a test holds them together), so the
gRPC edge converts them with a plain ``int``; nothing below it touches a protobuf message.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(slots=True)
class ToolCall:
    """One tool call the model asked for. ``arguments`` is the model's JSON text, untouched."""

    id: str
    name: str
    arguments: str


@dataclass(slots=True)
class Usage:
    """Token counts of one or more model calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    reasoning_tokens: int = 0
    """The part of ``completion_tokens`` a reasoning model spent reasoning (billed, never
    shown)."""

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached_prompt_tokens += other.cached_prompt_tokens
        self.reasoning_tokens += other.reasoning_tokens


@dataclass(slots=True)
class ProviderTiming:
    """The provider's own account of a call, in seconds, when it reports one (Groq does)."""

    queue_time: float | None = None
    prompt_time: float | None = None
    completion_time: float | None = None


class BudgetStage(enum.IntEnum):
    """A part of a run that a budget applies to (``agentsidecar.v1.BudgetStage``)."""

    TOTAL = 1
    MODEL = 2
    TOOLS = 3
    OTHER = 4


class BudgetPolicy(enum.IntEnum):
    """What a run does after an overrun (``agentsidecar.v1.BudgetPolicy``)."""

    CONTINUE = 1
    ANSWER = 2
    STOP = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetOverrun:
    """One stage over its budget; seconds."""

    stage: BudgetStage
    budget: float
    spent: float
    policy: BudgetPolicy
    step: int


@dataclass(frozen=True, slots=True)
class RunCost:
    """The cost of some tokens, in US dollars."""

    prompt_usd: float
    """Prompt tokens, cached ones included."""
    completion_usd: float
    cached_prompt_usd: float
    """The part of ``prompt_usd`` charged for cached prompt tokens."""
    priced_as: str = ""
    """The model whose prices were used."""
    simulated: bool = False
    """The tokens came from the LLM simulator: what they would cost on ``priced_as``."""
    models: dict[str, float] = field(default_factory=dict)
    """US dollars by model, when the run called more than one (tiering)."""

    @property
    def total_usd(self) -> float:
        return self.prompt_usd + self.completion_usd


class BreakerState(enum.Enum):
    """Where a breaker is in its cycle."""

    CLOSED = "closed"
    """Calls flow; consecutive failures are counted."""
    OPEN = "open"
    """Every call is refused until the reset timeout has elapsed."""
    HALF_OPEN = "half_open"
    """One trial call is admitted; its outcome closes or re-opens the breaker."""


class StopReason(enum.IntEnum):
    """Why a run ended (``agentsidecar.v1.StopReason``)."""

    ANSWERED = 1
    MAX_STEPS = 2
    MAX_TOOL_CALLS = 3
    BUDGET_EXHAUSTED = 4
    MODEL_ERROR = 5
    CANCELLED = 6
    INTERRUPTED = 7
    INVALID_ANSWER = 8
    BUDGET_ANSWERED = 9
    BUDGET_STOPPED = 10
    REFUSED = 11
    COST_LIMIT = 12


class RunPath(enum.IntEnum):
    """Which of its profile's paths a run took (``agentsidecar.v1.RunPath``)."""

    FULL = 1
    LIGHT = 2
    """The profile's light variant, taken while the sidecar was overloaded."""


class ToolCallStatus(enum.IntEnum):
    """How a tool call ended (``agentsidecar.v1.ToolCallStatus``)."""

    OK = 1
    ERROR = 2
    TIMED_OUT = 3
    UNAVAILABLE = 4
    DENIED = 5
    UNKNOWN_TOOL = 6
    CACHED = 7
    CANCELLED = 8


class CacheResult(enum.IntEnum):
    """How the result cache took part in a tool call (``agentsidecar.v1.ToolCacheResult``)."""

    NONE = 0
    """Not cacheable, or the cache is off (the proto's UNSPECIFIED)."""
    HIT = 1
    MISS = 2
    SHARED = 3


class HedgeResult(enum.IntEnum):
    """Whether a tool call was hedged, and which copy answered (``agentsidecar.v1.ToolHedge``)."""

    NONE = 0
    """Sent once (the proto's UNSPECIFIED)."""
    FIRST_WON = 1
    """A second copy was sent; the first answered first."""
    SECOND_WON = 2
    """A second copy was sent and answered first."""


class ToolAvailability(enum.IntEnum):
    """Whether a tool can be called now (``agentsidecar.v1.ToolAvailability``)."""

    AVAILABLE = 1
    SERVER_UNAVAILABLE = 2
    BREAKER_OPEN = 3
    NAME_TAKEN = 4
    NOT_OFFERED = 5


class StageKind(enum.IntEnum):
    """What a timeline stage measured (``agentsidecar.v1.StageKind``)."""

    QUEUE = 1
    CONTEXT_BUILD = 2
    MODEL_CALL = 3
    TOOL_CALL = 4
    PERSISTENCE = 5
    OVERHEAD = 6


MODEL_PACING = "model_pacing"
"""The QUEUE stage of a model request held back by the endpoint's rate limits: the
provider's wait, not the sidecar's own queueing."""


@dataclass(slots=True, kw_only=True)
class ModelCallDetail:
    """Details of a MODEL_CALL stage."""

    usage: Usage
    provider: ProviderTiming
    time_to_first_token: float | None
    attempts: int
    error: str | None = None
    """The error code when the call failed."""
    time_allowed: float | None = None
    """Seconds the call was allowed, retries included."""
    request_bytes: int = 0
    """Size of the request body sent, for calibrating token estimates."""
    service_tier: str = ""
    """The provider's service tier that answered, as its response said; empty: unsaid."""


@dataclass(slots=True, kw_only=True)
class Stage:
    """One measured interval; offsets and durations in seconds from the run's start."""

    kind: StageKind
    name: str
    step: int
    start: float
    duration: float
    detail: ModelCallDetail | ToolOutcome | None = None
    """A model call's details, or a tool call's outcome (the stage is the outcome's
    interval: the outcome itself, never a copy)."""
    converted: object = field(default=None, repr=False, compare=False)
    """Its message form, once a front converted it (a streamed step's stages are
    converted for the step's event, and the final result reuses them)."""

    @classmethod
    def of_tool_call(cls, step: int, outcome: ToolOutcome) -> Stage:
        """The TOOL_CALL stage of one call's outcome."""
        return cls(
            kind=StageKind.TOOL_CALL,
            name=outcome.tool_name,
            step=step,
            start=outcome.start,
            duration=outcome.duration,
            detail=outcome,
        )


class Clock:
    """Offsets from a run's start, on the monotonic high-resolution clock."""

    __slots__ = ("origin",)

    def __init__(self) -> None:
        self.origin = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.origin


@dataclass(slots=True)
class RunError:
    """Why a run failed, for the calling service."""

    code: str
    message: str
    retryable: bool


@dataclass(slots=True, kw_only=True)
class RunOutcome:
    """The result of one run."""

    answer: str
    stop_reason: StopReason
    usage: Usage
    stages: list[Stage]
    total: float
    steps: int
    tool_calls: int
    error: RunError | None = None
    cost: RunCost | None = None
    unpriced: tuple[str, ...] = ()
    """The models it called that the price table has no price for (``cost`` is then None)."""
    overruns: list[BudgetOverrun] = field(default_factory=list)
    repairs: int = 0
    """Repair rounds: model calls that emitted a malformed tool call and were asked again."""
    variant: str = ""
    """The profile's model variant the run used; empty when the profile has none."""
    path: RunPath = RunPath.FULL
    """The profile's full path, or its light variant (the sidecar was overloaded)."""
    speculated: int = 0
    """Calls started before the model asked for them (speculative prefetch); the ones it
    asked for are the TOOL_CALL stages marked ``speculated``, the rest were wasted."""
    unavailable_tools: tuple[tuple[str, ToolAvailability], ...] = ()
    """The names of the profile's ``tools`` list the model could not be offered when the
    run ended, each with why (never AVAILABLE)."""

    @classmethod
    def failed(
        cls, reason: StopReason, code: str, message: str, *, retryable: bool, total: float
    ) -> RunOutcome:
        """The outcome of a run that ended before it produced anything: stopped by the
        sidecar, or cut short by a bug (the one way every such outcome is built)."""
        return cls(
            answer="",
            stop_reason=reason,
            usage=Usage(),
            stages=[],
            total=total,
            steps=0,
            tool_calls=0,
            error=RunError(code, message, retryable),
        )

    def add_persistence(self, start: float, end: float) -> None:
        """Add the PERSISTENCE stage (recording the turn), which follows the loop's end.

        The run then lasts until ``end``; the moment between the loop's end and ``start``
        is the sidecar's own, so it goes to the OVERHEAD stage.
        """
        stage = Stage(
            kind=StageKind.PERSISTENCE,
            name="session_store",
            step=0,
            start=start,
            duration=end - start,
        )
        stages = self.stages
        if stages and stages[-1].kind is StageKind.OVERHEAD:
            # OVERHEAD sums the whole run's uncovered time; it stays the last stage.
            stages[-1].duration += max(0.0, start - self.total)
            stages.insert(len(stages) - 1, stage)
        else:
            stages.append(stage)
        self.total = end


@dataclass(slots=True, kw_only=True)
class ToolOutcome:
    """How one tool call ended. ``content`` is what the model sees."""

    call_id: str
    tool_name: str
    status: ToolCallStatus
    content: str
    start: float
    duration: float
    handler_duration: float | None = None
    attempts: int = 1
    wait_duration: float = 0.0
    backoff: float = 0.0
    breaker_rejected: bool = False
    time_allowed: float | None = None
    cache: CacheResult = CacheResult.NONE
    saved: float = 0.0
    """Seconds the cache saved (HIT and SHARED only)."""
    server: str = ""
    """The tool server that ran the call (a version of the tool's own, perhaps); empty
    when none did."""
    hedge: HedgeResult = HedgeResult.NONE
    """Whether a second copy was sent (``tool_servers[].hedge``), and which answered."""
    hedge_delay: float | None = None
    """Seconds after the first copy the second was sent; None when none was."""
    speculated: bool = False
    """Started before the model asked for it (speculative prefetch), and answered from
    that start."""


@dataclass(frozen=True, slots=True)
class ToolQuestion:
    """What a running tool asks its caller (an MCP server's elicitation)."""

    message: str
    requested_schema: dict[str, Any]
    """JSON Schema of the answer: an object of flat properties; ``{}``: yes or no."""


@dataclass(frozen=True, slots=True)
class Decision:
    """A caller's decision on one call, or its answer to the call's question."""

    approved: bool
    reason: str = ""
    """Why, shown to the model when the call is denied."""
    answer: dict[str, Any] | None = None
    """The answer to a question (an object matching its schema); None otherwise."""


@dataclass(frozen=True, slots=True)
class RunStart:
    """How a run began: its first event, the same whether it is streamed or stored."""

    session_id: str
    """The id the caller knows the session by."""
    profile: str
    model: str
    """The model that answers it."""
    variant: str
    """The profile's variant it runs on; empty: the profile has none."""
    path: RunPath
    """The profile's path it takes."""


@dataclass(frozen=True, slots=True)
class RunResumed:
    """A resumed run's first event: the step it goes on from, and its attempt."""

    step: int
    attempt: int


@dataclass(frozen=True, slots=True)
class TextDelta:
    """More of the answer's text."""

    step: int
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    step: int
    call_id: str
    tool_name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    step: int
    outcome: ToolOutcome


@dataclass(frozen=True, slots=True)
class ApprovalRequired:
    step: int
    call_id: str
    tool_name: str
    arguments: str
    destructive: bool
    question: ToolQuestion | None = None


@dataclass(frozen=True, slots=True)
class ToolCallProgress:
    step: int
    call_id: str
    tool_name: str
    progress: float
    total: float | None
    message: str


@dataclass(frozen=True, slots=True)
class StepFinished:
    step: int
    stages: list[Stage]
    total: float


@dataclass(frozen=True, slots=True)
class BudgetExceeded:
    overrun: BudgetOverrun


RunEvent = (
    RunStart
    | RunResumed
    | TextDelta
    | ToolCallStarted
    | ToolCallFinished
    | ApprovalRequired
    | ToolCallProgress
    | StepFinished
    | BudgetExceeded
)
"""A run's events as a background run stores them: each :class:`EventSink` call (reasoning
aside, which is streamed live only) and the first event of each attempt."""


class EventSink(Protocol):
    """Receives a run's events as they happen. Streaming callers get one; others don't,
    and then no event is ever built."""

    def text_delta(self, step: int, text: str) -> None: ...

    def reasoning_delta(self, step: int, text: str) -> None:
        """More of a reasoning model's reasoning; sent only on a profile that streams it."""
        ...

    def tool_call_started(
        self, step: int, call_id: str, tool_name: str, arguments: str
    ) -> None: ...

    def tool_call_finished(self, step: int, outcome: ToolOutcome) -> None: ...

    def approval_required(
        self,
        step: int,
        call_id: str,
        tool_name: str,
        arguments: str,
        destructive: bool,
        question: ToolQuestion | None = None,
    ) -> None: ...

    def tool_call_progress(
        self,
        step: int,
        call_id: str,
        tool_name: str,
        progress: float,
        total: float | None,
        message: str,
    ) -> None: ...

    def step_finished(self, step: int, stages: list[Stage], total: float) -> None: ...

    def budget_exceeded(self, overrun: BudgetOverrun) -> None: ...

    def backlog(self) -> Awaitable[None] | None:
        """None while the caller keeps up; else what to await before producing more (the
        model's stream pauses on it), which ends once the caller has caught up."""
        ...


@dataclass(slots=True, kw_only=True)
class Turn:
    """One finished (or interrupted) user turn, as stored with its session."""

    run_id: str
    input: str
    answer: str
    stop_reason: StopReason
    start_time: float
    """Wall-clock start, seconds since the epoch."""
    end_time: float
    usage: Usage = field(default_factory=Usage)
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The model messages the turn added to the conversation, oldest first; empty when the
    turn failed, was cancelled or was cut off, so the next turn starts clean."""
    tokens: int = 0
    """Estimated tokens of ``messages``; 0 until someone estimated them."""
    variant: str = ""
    """The profile's model variant the turn ran on; empty when the profile has none."""


@dataclass(slots=True, kw_only=True)
class Session:
    """One conversation under one agent profile, as loaded from its store."""

    session_id: str
    profile: str
    labels: dict[str, str]
    create_time: float
    update_time: float
    turns: list[Turn] = field(default_factory=list)
    """Finished and interrupted turns, oldest first."""
    memory: str = ""
    """The long-term memory the model summarised older turns into; empty when none."""
    memory_turns: int = 0
    """How many of the oldest turns ``memory`` covers."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The whole conversation as model messages (no system prompt), oldest first."""
        return [m for t in self.turns for m in t.messages]


class RunState(enum.IntEnum):
    """Where a background run is (``agentsidecar.v1.RunState``: A2A's task states, value
    for value)."""

    SUBMITTED = 1
    WORKING = 2
    COMPLETED = 3
    FAILED = 4
    CANCELED = 5
    INPUT_REQUIRED = 6
    REJECTED = 7

    @property
    def finished(self) -> bool:
        return self in _FINAL_STATES

    @classmethod
    def of(cls, reason: StopReason) -> RunState:
        """The final state of a run that ended for ``reason``."""
        if reason in (StopReason.ANSWERED, StopReason.BUDGET_ANSWERED):
            return cls.COMPLETED
        if reason is StopReason.CANCELLED:
            return cls.CANCELED
        if reason is StopReason.REFUSED:
            return cls.REJECTED  # the model declined the task: A2A's "rejected"
        return cls.FAILED


_FINAL_STATES = frozenset(
    {RunState.COMPLETED, RunState.FAILED, RunState.CANCELED, RunState.REJECTED}
)
ACTIVE_STATES = (RunState.SUBMITTED, RunState.WORKING, RunState.INPUT_REQUIRED)
"""The states of a background run that has not finished."""


class CallbackStatus(enum.IntEnum):
    """How a background run's completion callback went (``agentsidecar.v1.CallbackStatus``);
    NONE: the run names none (the proto's UNSPECIFIED)."""

    NONE = 0
    PENDING = 1
    DELIVERED = 2
    FAILED = 3


@dataclass(slots=True, kw_only=True)
class PendingApproval:
    """A background run's tool call waiting for approval, as stored with the run."""

    step: int
    call_id: str
    tool_name: str
    arguments: str
    destructive: bool


@dataclass(slots=True, kw_only=True)
class RunRecord:
    """A background run as its store keeps it."""

    run_id: str
    session_key: str
    """The store's key of its session (see ``Principal.key``)."""
    principal: str
    """The name of the principal that started it; empty for the anonymous one."""
    input: str
    structured: bool
    """OUTPUT_MODE_STRUCTURED: no text deltas."""
    state: RunState
    create_time: float
    """Wall-clock times, seconds since the epoch."""
    update_time: float
    end_time: float = 0.0
    last_sequence: int = 0
    """The sequence of its latest stored event."""
    result: bytes = b""
    """Its result once it finished, encoded by the front that stores its events."""
    pending: list[PendingApproval] = field(default_factory=list)
    """Its calls waiting for approval (in INPUT_REQUIRED)."""
    callback_url: str = ""
    callback_shape: str = ""
    """What its callback delivers: empty, the run's final state (``RunCodec``); ``a2a``,
    the A2A task (a ``StreamResponse``), registered by the A2A front."""
    callback_token: str = ""
    """Sent back with its callback (``X-A2A-Notification-Token``): the caller's check that
    the notification is about its task."""
    callback_auth: bytes = b""
    """An ``Authorization`` header for the receiver, sealed under the principal's callback
    secret (``security.webhooks.seal_authorization``); empty: none."""
    callback_id: str = ""
    """The id its caller gave the callback (an A2A push config's id); empty: the run's."""
    callback_status: CallbackStatus = CallbackStatus.NONE
    """What became of the callback its end was due to send; one named after the end (an
    A2A push config on a finished task) has nothing to send and leaves it as it was."""
    callback_attempts: int = 0
    attempts: int = 0
    """How many times a replica took it up; each take bumps it, and a write is accepted
    only from the replica holding the latest (a fencing token)."""
    checkpoint: bytes = b""
    """Where its last completed step left it (see ``agent.runs.resume``); empty before."""
    checkpoint_step: int = 0
    unsafe_step: int = 0
    """The latest step that dispatched a tool call not safe to repeat."""
    cancel_requested: bool = False
    ordinal: int = 0
    """Its place in the order runs were started, store-wide (for paging)."""
    request_id: str = ""
    """The caller's key for the request that started it (``StartRunRequest.request_id``),
    unique per principal while the run is kept; empty: none."""
    message_id: str = ""
    """The id the caller gave its input (an A2A ``messageId``), kept to show it back."""

    @property
    def origin(self) -> str:
        """The operation that started it: A2A's ``SendMessage`` (an A2A message always
        has its ``messageId``) or ``StartRun``."""
        return "SendMessage" if self.message_id else "StartRun"
