import datetime

from agentsidecar.v1 import tool_pb2 as _tool_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OutputMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTPUT_MODE_UNSPECIFIED: _ClassVar[OutputMode]
    OUTPUT_MODE_STREAMED: _ClassVar[OutputMode]
    OUTPUT_MODE_STRUCTURED: _ClassVar[OutputMode]

class RunPath(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_PATH_UNSPECIFIED: _ClassVar[RunPath]
    RUN_PATH_FULL: _ClassVar[RunPath]
    RUN_PATH_LIGHT: _ClassVar[RunPath]

class ToolCallStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CALL_STATUS_UNSPECIFIED: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_OK: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_ERROR: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_TIMED_OUT: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_UNAVAILABLE: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_DENIED: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_UNKNOWN_TOOL: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_CACHED: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_CANCELLED: _ClassVar[ToolCallStatus]

class StopReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STOP_REASON_UNSPECIFIED: _ClassVar[StopReason]
    STOP_REASON_ANSWERED: _ClassVar[StopReason]
    STOP_REASON_MAX_STEPS: _ClassVar[StopReason]
    STOP_REASON_MAX_TOOL_CALLS: _ClassVar[StopReason]
    STOP_REASON_BUDGET_EXHAUSTED: _ClassVar[StopReason]
    STOP_REASON_MODEL_ERROR: _ClassVar[StopReason]
    STOP_REASON_CANCELLED: _ClassVar[StopReason]
    STOP_REASON_INTERRUPTED: _ClassVar[StopReason]
    STOP_REASON_INVALID_ANSWER: _ClassVar[StopReason]
    STOP_REASON_BUDGET_ANSWERED: _ClassVar[StopReason]
    STOP_REASON_BUDGET_STOPPED: _ClassVar[StopReason]
    STOP_REASON_REFUSED: _ClassVar[StopReason]
    STOP_REASON_COST_LIMIT: _ClassVar[StopReason]

class BudgetStage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BUDGET_STAGE_UNSPECIFIED: _ClassVar[BudgetStage]
    BUDGET_STAGE_TOTAL: _ClassVar[BudgetStage]
    BUDGET_STAGE_MODEL: _ClassVar[BudgetStage]
    BUDGET_STAGE_TOOLS: _ClassVar[BudgetStage]
    BUDGET_STAGE_OTHER: _ClassVar[BudgetStage]

class BudgetPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BUDGET_POLICY_UNSPECIFIED: _ClassVar[BudgetPolicy]
    BUDGET_POLICY_CONTINUE: _ClassVar[BudgetPolicy]
    BUDGET_POLICY_ANSWER: _ClassVar[BudgetPolicy]
    BUDGET_POLICY_STOP: _ClassVar[BudgetPolicy]

class StageKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STAGE_KIND_UNSPECIFIED: _ClassVar[StageKind]
    STAGE_KIND_QUEUE: _ClassVar[StageKind]
    STAGE_KIND_CONTEXT_BUILD: _ClassVar[StageKind]
    STAGE_KIND_MODEL_CALL: _ClassVar[StageKind]
    STAGE_KIND_TOOL_CALL: _ClassVar[StageKind]
    STAGE_KIND_PERSISTENCE: _ClassVar[StageKind]
    STAGE_KIND_OVERHEAD: _ClassVar[StageKind]

class ToolHedge(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_HEDGE_UNSPECIFIED: _ClassVar[ToolHedge]
    TOOL_HEDGE_FIRST_WON: _ClassVar[ToolHedge]
    TOOL_HEDGE_SECOND_WON: _ClassVar[ToolHedge]

class ToolCacheResult(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CACHE_RESULT_UNSPECIFIED: _ClassVar[ToolCacheResult]
    TOOL_CACHE_RESULT_HIT: _ClassVar[ToolCacheResult]
    TOOL_CACHE_RESULT_MISS: _ClassVar[ToolCacheResult]
    TOOL_CACHE_RESULT_SHARED: _ClassVar[ToolCacheResult]

class ApprovalDecision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPROVAL_DECISION_UNSPECIFIED: _ClassVar[ApprovalDecision]
    APPROVAL_DECISION_APPROVE: _ClassVar[ApprovalDecision]
    APPROVAL_DECISION_DENY: _ClassVar[ApprovalDecision]

class ToolAvailability(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_AVAILABILITY_UNSPECIFIED: _ClassVar[ToolAvailability]
    TOOL_AVAILABILITY_AVAILABLE: _ClassVar[ToolAvailability]
    TOOL_AVAILABILITY_SERVER_UNAVAILABLE: _ClassVar[ToolAvailability]
    TOOL_AVAILABILITY_BREAKER_OPEN: _ClassVar[ToolAvailability]
    TOOL_AVAILABILITY_NAME_TAKEN: _ClassVar[ToolAvailability]
    TOOL_AVAILABILITY_NOT_OFFERED: _ClassVar[ToolAvailability]

class RunState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATE_UNSPECIFIED: _ClassVar[RunState]
    RUN_STATE_SUBMITTED: _ClassVar[RunState]
    RUN_STATE_WORKING: _ClassVar[RunState]
    RUN_STATE_COMPLETED: _ClassVar[RunState]
    RUN_STATE_FAILED: _ClassVar[RunState]
    RUN_STATE_CANCELED: _ClassVar[RunState]
    RUN_STATE_INPUT_REQUIRED: _ClassVar[RunState]
    RUN_STATE_REJECTED: _ClassVar[RunState]

class CallbackStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CALLBACK_STATUS_UNSPECIFIED: _ClassVar[CallbackStatus]
    CALLBACK_STATUS_PENDING: _ClassVar[CallbackStatus]
    CALLBACK_STATUS_DELIVERED: _ClassVar[CallbackStatus]
    CALLBACK_STATUS_FAILED: _ClassVar[CallbackStatus]
OUTPUT_MODE_UNSPECIFIED: OutputMode
OUTPUT_MODE_STREAMED: OutputMode
OUTPUT_MODE_STRUCTURED: OutputMode
RUN_PATH_UNSPECIFIED: RunPath
RUN_PATH_FULL: RunPath
RUN_PATH_LIGHT: RunPath
TOOL_CALL_STATUS_UNSPECIFIED: ToolCallStatus
TOOL_CALL_STATUS_OK: ToolCallStatus
TOOL_CALL_STATUS_ERROR: ToolCallStatus
TOOL_CALL_STATUS_TIMED_OUT: ToolCallStatus
TOOL_CALL_STATUS_UNAVAILABLE: ToolCallStatus
TOOL_CALL_STATUS_DENIED: ToolCallStatus
TOOL_CALL_STATUS_UNKNOWN_TOOL: ToolCallStatus
TOOL_CALL_STATUS_CACHED: ToolCallStatus
TOOL_CALL_STATUS_CANCELLED: ToolCallStatus
STOP_REASON_UNSPECIFIED: StopReason
STOP_REASON_ANSWERED: StopReason
STOP_REASON_MAX_STEPS: StopReason
STOP_REASON_MAX_TOOL_CALLS: StopReason
STOP_REASON_BUDGET_EXHAUSTED: StopReason
STOP_REASON_MODEL_ERROR: StopReason
STOP_REASON_CANCELLED: StopReason
STOP_REASON_INTERRUPTED: StopReason
STOP_REASON_INVALID_ANSWER: StopReason
STOP_REASON_BUDGET_ANSWERED: StopReason
STOP_REASON_BUDGET_STOPPED: StopReason
STOP_REASON_REFUSED: StopReason
STOP_REASON_COST_LIMIT: StopReason
BUDGET_STAGE_UNSPECIFIED: BudgetStage
BUDGET_STAGE_TOTAL: BudgetStage
BUDGET_STAGE_MODEL: BudgetStage
BUDGET_STAGE_TOOLS: BudgetStage
BUDGET_STAGE_OTHER: BudgetStage
BUDGET_POLICY_UNSPECIFIED: BudgetPolicy
BUDGET_POLICY_CONTINUE: BudgetPolicy
BUDGET_POLICY_ANSWER: BudgetPolicy
BUDGET_POLICY_STOP: BudgetPolicy
STAGE_KIND_UNSPECIFIED: StageKind
STAGE_KIND_QUEUE: StageKind
STAGE_KIND_CONTEXT_BUILD: StageKind
STAGE_KIND_MODEL_CALL: StageKind
STAGE_KIND_TOOL_CALL: StageKind
STAGE_KIND_PERSISTENCE: StageKind
STAGE_KIND_OVERHEAD: StageKind
TOOL_HEDGE_UNSPECIFIED: ToolHedge
TOOL_HEDGE_FIRST_WON: ToolHedge
TOOL_HEDGE_SECOND_WON: ToolHedge
TOOL_CACHE_RESULT_UNSPECIFIED: ToolCacheResult
TOOL_CACHE_RESULT_HIT: ToolCacheResult
TOOL_CACHE_RESULT_MISS: ToolCacheResult
TOOL_CACHE_RESULT_SHARED: ToolCacheResult
APPROVAL_DECISION_UNSPECIFIED: ApprovalDecision
APPROVAL_DECISION_APPROVE: ApprovalDecision
APPROVAL_DECISION_DENY: ApprovalDecision
TOOL_AVAILABILITY_UNSPECIFIED: ToolAvailability
TOOL_AVAILABILITY_AVAILABLE: ToolAvailability
TOOL_AVAILABILITY_SERVER_UNAVAILABLE: ToolAvailability
TOOL_AVAILABILITY_BREAKER_OPEN: ToolAvailability
TOOL_AVAILABILITY_NAME_TAKEN: ToolAvailability
TOOL_AVAILABILITY_NOT_OFFERED: ToolAvailability
RUN_STATE_UNSPECIFIED: RunState
RUN_STATE_SUBMITTED: RunState
RUN_STATE_WORKING: RunState
RUN_STATE_COMPLETED: RunState
RUN_STATE_FAILED: RunState
RUN_STATE_CANCELED: RunState
RUN_STATE_INPUT_REQUIRED: RunState
RUN_STATE_REJECTED: RunState
CALLBACK_STATUS_UNSPECIFIED: CallbackStatus
CALLBACK_STATUS_PENDING: CallbackStatus
CALLBACK_STATUS_DELIVERED: CallbackStatus
CALLBACK_STATUS_FAILED: CallbackStatus

class CreateSessionRequest(_message.Message):
    __slots__ = ("profile", "session_id", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    profile: str
    session_id: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, profile: _Optional[str] = ..., session_id: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id", "page_size", "page_token")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    page_size: int
    page_token: str
    def __init__(self, session_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ("session", "next_page_token", "total_turns")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TURNS_FIELD_NUMBER: _ClassVar[int]
    session: Session
    next_page_token: str
    total_turns: int
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ..., next_page_token: _Optional[str] = ..., total_turns: _Optional[int] = ...) -> None: ...

class DeleteSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class DeleteSessionResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ("session_id", "profile", "labels", "create_time", "update_time", "turns", "memory", "memory_turns")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TURNS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    profile: str
    labels: _containers.ScalarMap[str, str]
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    turns: _containers.RepeatedCompositeFieldContainer[Turn]
    memory: str
    memory_turns: int
    def __init__(self, session_id: _Optional[str] = ..., profile: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., turns: _Optional[_Iterable[_Union[Turn, _Mapping]]] = ..., memory: _Optional[str] = ..., memory_turns: _Optional[int] = ...) -> None: ...

class Turn(_message.Message):
    __slots__ = ("run_id", "input", "answer", "stop_reason", "start_time", "end_time", "usage", "variant")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    input: str
    answer: str
    stop_reason: StopReason
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    usage: TokenUsage
    variant: str
    def __init__(self, run_id: _Optional[str] = ..., input: _Optional[str] = ..., answer: _Optional[str] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., usage: _Optional[_Union[TokenUsage, _Mapping]] = ..., variant: _Optional[str] = ...) -> None: ...

class StreamRunRequest(_message.Message):
    __slots__ = ("session_id", "input", "output_mode")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MODE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    input: str
    output_mode: OutputMode
    def __init__(self, session_id: _Optional[str] = ..., input: _Optional[str] = ..., output_mode: _Optional[_Union[OutputMode, str]] = ...) -> None: ...

class StreamRunResponse(_message.Message):
    __slots__ = ("run_id", "sequence", "run_started", "text_delta", "tool_call_started", "tool_call_finished", "approval_required", "step_finished", "run_finished", "budget_exceeded", "run_resumed", "tool_call_progress", "reasoning_delta")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RUN_STARTED_FIELD_NUMBER: _ClassVar[int]
    TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_STARTED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FINISHED_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    STEP_FINISHED_FIELD_NUMBER: _ClassVar[int]
    RUN_FINISHED_FIELD_NUMBER: _ClassVar[int]
    BUDGET_EXCEEDED_FIELD_NUMBER: _ClassVar[int]
    RUN_RESUMED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    REASONING_DELTA_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    sequence: int
    run_started: RunStarted
    text_delta: TextDelta
    tool_call_started: ToolCallStarted
    tool_call_finished: ToolCallFinished
    approval_required: ApprovalRequired
    step_finished: StepFinished
    run_finished: RunResult
    budget_exceeded: BudgetExceeded
    run_resumed: RunResumed
    tool_call_progress: ToolCallProgress
    reasoning_delta: ReasoningDelta
    def __init__(self, run_id: _Optional[str] = ..., sequence: _Optional[int] = ..., run_started: _Optional[_Union[RunStarted, _Mapping]] = ..., text_delta: _Optional[_Union[TextDelta, _Mapping]] = ..., tool_call_started: _Optional[_Union[ToolCallStarted, _Mapping]] = ..., tool_call_finished: _Optional[_Union[ToolCallFinished, _Mapping]] = ..., approval_required: _Optional[_Union[ApprovalRequired, _Mapping]] = ..., step_finished: _Optional[_Union[StepFinished, _Mapping]] = ..., run_finished: _Optional[_Union[RunResult, _Mapping]] = ..., budget_exceeded: _Optional[_Union[BudgetExceeded, _Mapping]] = ..., run_resumed: _Optional[_Union[RunResumed, _Mapping]] = ..., tool_call_progress: _Optional[_Union[ToolCallProgress, _Mapping]] = ..., reasoning_delta: _Optional[_Union[ReasoningDelta, _Mapping]] = ...) -> None: ...

class ReasoningDelta(_message.Message):
    __slots__ = ("step", "text")
    STEP_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    step: int
    text: str
    def __init__(self, step: _Optional[int] = ..., text: _Optional[str] = ...) -> None: ...

class RunResumed(_message.Message):
    __slots__ = ("step", "attempt")
    STEP_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    step: int
    attempt: int
    def __init__(self, step: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class RunStarted(_message.Message):
    __slots__ = ("session_id", "profile", "model", "variant", "path")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    profile: str
    model: str
    variant: str
    path: RunPath
    def __init__(self, session_id: _Optional[str] = ..., profile: _Optional[str] = ..., model: _Optional[str] = ..., variant: _Optional[str] = ..., path: _Optional[_Union[RunPath, str]] = ...) -> None: ...

class TextDelta(_message.Message):
    __slots__ = ("step", "text")
    STEP_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    step: int
    text: str
    def __init__(self, step: _Optional[int] = ..., text: _Optional[str] = ...) -> None: ...

class ToolCallStarted(_message.Message):
    __slots__ = ("step", "call_id", "tool_name", "arguments")
    STEP_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    step: int
    call_id: str
    tool_name: str
    arguments: str
    def __init__(self, step: _Optional[int] = ..., call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class ToolCallFinished(_message.Message):
    __slots__ = ("step", "call_id", "tool_name", "status", "content", "duration", "attempts")
    STEP_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    step: int
    call_id: str
    tool_name: str
    status: ToolCallStatus
    content: str
    duration: _duration_pb2.Duration
    attempts: int
    def __init__(self, step: _Optional[int] = ..., call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., status: _Optional[_Union[ToolCallStatus, str]] = ..., content: _Optional[str] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., attempts: _Optional[int] = ...) -> None: ...

class ApprovalRequired(_message.Message):
    __slots__ = ("step", "call_id", "tool_name", "arguments", "destructive", "question")
    STEP_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    DESTRUCTIVE_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    step: int
    call_id: str
    tool_name: str
    arguments: str
    destructive: bool
    question: ToolQuestion
    def __init__(self, step: _Optional[int] = ..., call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., arguments: _Optional[str] = ..., destructive: _Optional[bool] = ..., question: _Optional[_Union[ToolQuestion, _Mapping]] = ...) -> None: ...

class ToolQuestion(_message.Message):
    __slots__ = ("message", "requested_schema")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    message: str
    requested_schema: str
    def __init__(self, message: _Optional[str] = ..., requested_schema: _Optional[str] = ...) -> None: ...

class ToolCallProgress(_message.Message):
    __slots__ = ("step", "call_id", "tool_name", "progress", "total", "message")
    STEP_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    step: int
    call_id: str
    tool_name: str
    progress: float
    total: float
    message: str
    def __init__(self, step: _Optional[int] = ..., call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., progress: _Optional[float] = ..., total: _Optional[float] = ..., message: _Optional[str] = ...) -> None: ...

class StepFinished(_message.Message):
    __slots__ = ("step", "timeline")
    STEP_FIELD_NUMBER: _ClassVar[int]
    TIMELINE_FIELD_NUMBER: _ClassVar[int]
    step: int
    timeline: Timeline
    def __init__(self, step: _Optional[int] = ..., timeline: _Optional[_Union[Timeline, _Mapping]] = ...) -> None: ...

class RunRequest(_message.Message):
    __slots__ = ("session_id", "input", "output_mode")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MODE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    input: str
    output_mode: OutputMode
    def __init__(self, session_id: _Optional[str] = ..., input: _Optional[str] = ..., output_mode: _Optional[_Union[OutputMode, str]] = ...) -> None: ...

class RunResponse(_message.Message):
    __slots__ = ("run_id", "result")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    result: RunResult
    def __init__(self, run_id: _Optional[str] = ..., result: _Optional[_Union[RunResult, _Mapping]] = ...) -> None: ...

class RunResult(_message.Message):
    __slots__ = ("answer", "stop_reason", "error", "usage", "cost", "timeline", "steps", "tool_calls", "budget_overruns", "variant", "path", "unpriced_models", "unavailable_tools")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    TIMELINE_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_OVERRUNS_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    UNPRICED_MODELS_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_TOOLS_FIELD_NUMBER: _ClassVar[int]
    answer: str
    stop_reason: StopReason
    error: RunError
    usage: TokenUsage
    cost: Cost
    timeline: Timeline
    steps: int
    tool_calls: int
    budget_overruns: _containers.RepeatedCompositeFieldContainer[BudgetExceeded]
    variant: str
    path: RunPath
    unpriced_models: _containers.RepeatedScalarFieldContainer[str]
    unavailable_tools: _containers.RepeatedCompositeFieldContainer[UnavailableTool]
    def __init__(self, answer: _Optional[str] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ..., error: _Optional[_Union[RunError, _Mapping]] = ..., usage: _Optional[_Union[TokenUsage, _Mapping]] = ..., cost: _Optional[_Union[Cost, _Mapping]] = ..., timeline: _Optional[_Union[Timeline, _Mapping]] = ..., steps: _Optional[int] = ..., tool_calls: _Optional[int] = ..., budget_overruns: _Optional[_Iterable[_Union[BudgetExceeded, _Mapping]]] = ..., variant: _Optional[str] = ..., path: _Optional[_Union[RunPath, str]] = ..., unpriced_models: _Optional[_Iterable[str]] = ..., unavailable_tools: _Optional[_Iterable[_Union[UnavailableTool, _Mapping]]] = ...) -> None: ...

class UnavailableTool(_message.Message):
    __slots__ = ("name", "availability")
    NAME_FIELD_NUMBER: _ClassVar[int]
    AVAILABILITY_FIELD_NUMBER: _ClassVar[int]
    name: str
    availability: ToolAvailability
    def __init__(self, name: _Optional[str] = ..., availability: _Optional[_Union[ToolAvailability, str]] = ...) -> None: ...

class RunError(_message.Message):
    __slots__ = ("code", "message", "retryable")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    retryable: bool
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., retryable: _Optional[bool] = ...) -> None: ...

class TokenUsage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "cached_prompt_tokens", "reasoning_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REASONING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int
    reasoning_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., cached_prompt_tokens: _Optional[int] = ..., reasoning_tokens: _Optional[int] = ...) -> None: ...

class Cost(_message.Message):
    __slots__ = ("prompt_usd", "completion_usd", "total_usd", "cached_prompt_usd", "priced_as", "simulated", "models")
    PROMPT_USD_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_USD_FIELD_NUMBER: _ClassVar[int]
    TOTAL_USD_FIELD_NUMBER: _ClassVar[int]
    CACHED_PROMPT_USD_FIELD_NUMBER: _ClassVar[int]
    PRICED_AS_FIELD_NUMBER: _ClassVar[int]
    SIMULATED_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    prompt_usd: float
    completion_usd: float
    total_usd: float
    cached_prompt_usd: float
    priced_as: str
    simulated: bool
    models: _containers.RepeatedCompositeFieldContainer[ModelCost]
    def __init__(self, prompt_usd: _Optional[float] = ..., completion_usd: _Optional[float] = ..., total_usd: _Optional[float] = ..., cached_prompt_usd: _Optional[float] = ..., priced_as: _Optional[str] = ..., simulated: _Optional[bool] = ..., models: _Optional[_Iterable[_Union[ModelCost, _Mapping]]] = ...) -> None: ...

class ModelCost(_message.Message):
    __slots__ = ("model", "total_usd")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOTAL_USD_FIELD_NUMBER: _ClassVar[int]
    model: str
    total_usd: float
    def __init__(self, model: _Optional[str] = ..., total_usd: _Optional[float] = ...) -> None: ...

class BudgetExceeded(_message.Message):
    __slots__ = ("stage", "budget", "spent", "policy", "step")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    SPENT_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    stage: BudgetStage
    budget: _duration_pb2.Duration
    spent: _duration_pb2.Duration
    policy: BudgetPolicy
    step: int
    def __init__(self, stage: _Optional[_Union[BudgetStage, str]] = ..., budget: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., spent: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., policy: _Optional[_Union[BudgetPolicy, str]] = ..., step: _Optional[int] = ...) -> None: ...

class Timeline(_message.Message):
    __slots__ = ("stages", "total")
    STAGES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    stages: _containers.RepeatedCompositeFieldContainer[Stage]
    total: _duration_pb2.Duration
    def __init__(self, stages: _Optional[_Iterable[_Union[Stage, _Mapping]]] = ..., total: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Stage(_message.Message):
    __slots__ = ("kind", "name", "step", "start_offset", "duration", "model_call", "tool_call")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    MODEL_CALL_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    kind: StageKind
    name: str
    step: int
    start_offset: _duration_pb2.Duration
    duration: _duration_pb2.Duration
    model_call: ModelCallTiming
    tool_call: ToolCallTiming
    def __init__(self, kind: _Optional[_Union[StageKind, str]] = ..., name: _Optional[str] = ..., step: _Optional[int] = ..., start_offset: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., model_call: _Optional[_Union[ModelCallTiming, _Mapping]] = ..., tool_call: _Optional[_Union[ToolCallTiming, _Mapping]] = ...) -> None: ...

class ModelCallTiming(_message.Message):
    __slots__ = ("time_to_first_token", "provider_queue_time", "provider_prompt_time", "provider_completion_time", "usage", "attempts", "error_code", "time_allowed", "service_tier")
    TIME_TO_FIRST_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_QUEUE_TIME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_PROMPT_TIME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_COMPLETION_TIME_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    TIME_ALLOWED_FIELD_NUMBER: _ClassVar[int]
    SERVICE_TIER_FIELD_NUMBER: _ClassVar[int]
    time_to_first_token: _duration_pb2.Duration
    provider_queue_time: _duration_pb2.Duration
    provider_prompt_time: _duration_pb2.Duration
    provider_completion_time: _duration_pb2.Duration
    usage: TokenUsage
    attempts: int
    error_code: str
    time_allowed: _duration_pb2.Duration
    service_tier: str
    def __init__(self, time_to_first_token: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., provider_queue_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., provider_prompt_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., provider_completion_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., usage: _Optional[_Union[TokenUsage, _Mapping]] = ..., attempts: _Optional[int] = ..., error_code: _Optional[str] = ..., time_allowed: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., service_tier: _Optional[str] = ...) -> None: ...

class ToolCallTiming(_message.Message):
    __slots__ = ("call_id", "status", "handler_duration", "attempts", "wait_duration", "retry_backoff", "breaker_rejected", "time_allowed", "cache_result", "cache_saved", "hedge", "hedge_delay", "speculated")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    HANDLER_DURATION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    WAIT_DURATION_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    BREAKER_REJECTED_FIELD_NUMBER: _ClassVar[int]
    TIME_ALLOWED_FIELD_NUMBER: _ClassVar[int]
    CACHE_RESULT_FIELD_NUMBER: _ClassVar[int]
    CACHE_SAVED_FIELD_NUMBER: _ClassVar[int]
    HEDGE_FIELD_NUMBER: _ClassVar[int]
    HEDGE_DELAY_FIELD_NUMBER: _ClassVar[int]
    SPECULATED_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    status: ToolCallStatus
    handler_duration: _duration_pb2.Duration
    attempts: int
    wait_duration: _duration_pb2.Duration
    retry_backoff: _duration_pb2.Duration
    breaker_rejected: bool
    time_allowed: _duration_pb2.Duration
    cache_result: ToolCacheResult
    cache_saved: _duration_pb2.Duration
    hedge: ToolHedge
    hedge_delay: _duration_pb2.Duration
    speculated: bool
    def __init__(self, call_id: _Optional[str] = ..., status: _Optional[_Union[ToolCallStatus, str]] = ..., handler_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., attempts: _Optional[int] = ..., wait_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., retry_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., breaker_rejected: _Optional[bool] = ..., time_allowed: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., cache_result: _Optional[_Union[ToolCacheResult, str]] = ..., cache_saved: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., hedge: _Optional[_Union[ToolHedge, str]] = ..., hedge_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., speculated: _Optional[bool] = ...) -> None: ...

class ApproveToolCallRequest(_message.Message):
    __slots__ = ("session_id", "call_id", "decision", "reason", "answer")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    call_id: str
    decision: ApprovalDecision
    reason: str
    answer: str
    def __init__(self, session_id: _Optional[str] = ..., call_id: _Optional[str] = ..., decision: _Optional[_Union[ApprovalDecision, str]] = ..., reason: _Optional[str] = ..., answer: _Optional[str] = ...) -> None: ...

class ApproveToolCallResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSessionToolsRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ListSessionToolsResponse(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[SessionTool]
    def __init__(self, tools: _Optional[_Iterable[_Union[SessionTool, _Mapping]]] = ...) -> None: ...

class SessionTool(_message.Message):
    __slots__ = ("tool", "server", "availability")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    AVAILABILITY_FIELD_NUMBER: _ClassVar[int]
    tool: _tool_pb2.ToolDescriptor
    server: str
    availability: ToolAvailability
    def __init__(self, tool: _Optional[_Union[_tool_pb2.ToolDescriptor, _Mapping]] = ..., server: _Optional[str] = ..., availability: _Optional[_Union[ToolAvailability, str]] = ...) -> None: ...

class RunCallback(_message.Message):
    __slots__ = ("url",)
    URL_FIELD_NUMBER: _ClassVar[int]
    url: str
    def __init__(self, url: _Optional[str] = ...) -> None: ...

class StartRunRequest(_message.Message):
    __slots__ = ("session_id", "input", "output_mode", "callback", "request_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MODE_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    input: str
    output_mode: OutputMode
    callback: RunCallback
    request_id: str
    def __init__(self, session_id: _Optional[str] = ..., input: _Optional[str] = ..., output_mode: _Optional[_Union[OutputMode, str]] = ..., callback: _Optional[_Union[RunCallback, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class StartRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("run_id", "session_id", "state", "input", "create_time", "update_time", "end_time", "last_sequence", "result", "pending_approvals", "callback_status", "attempts", "output_mode", "request_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    PENDING_APPROVALS_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MODE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    session_id: str
    state: RunState
    input: str
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    last_sequence: int
    result: RunResult
    pending_approvals: _containers.RepeatedCompositeFieldContainer[ApprovalRequired]
    callback_status: CallbackStatus
    attempts: int
    output_mode: OutputMode
    request_id: str
    def __init__(self, run_id: _Optional[str] = ..., session_id: _Optional[str] = ..., state: _Optional[_Union[RunState, str]] = ..., input: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_sequence: _Optional[int] = ..., result: _Optional[_Union[RunResult, _Mapping]] = ..., pending_approvals: _Optional[_Iterable[_Union[ApprovalRequired, _Mapping]]] = ..., callback_status: _Optional[_Union[CallbackStatus, str]] = ..., attempts: _Optional[int] = ..., output_mode: _Optional[_Union[OutputMode, str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class WatchRunRequest(_message.Message):
    __slots__ = ("run_id", "after_sequence")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    after_sequence: int
    def __init__(self, run_id: _Optional[str] = ..., after_sequence: _Optional[int] = ...) -> None: ...

class WatchRunResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: StreamRunResponse
    def __init__(self, event: _Optional[_Union[StreamRunResponse, _Mapping]] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("session_id", "page_size", "page_token")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    page_size: int
    page_token: str
    def __init__(self, session_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class CancelRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...
