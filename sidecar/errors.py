"""Every error the sidecar raises on purpose, in one tree.

The root carries the retry facts. Each :class:`RequestError` names its canonical status
code and its stable reason (``code``, ``reason``); each front maps those to its protocol
(``sidecar.api.status``: a gRPC status with ``google.rpc`` details; ``sidecar.a2a.errors``;
the MCP front), so no module picks a code or repeats a reason::

    SidecarError                  retryable, retry_after
    ├── ConfigError               the configuration is missing, unreadable or invalid
    ├── RecordingError            a recording cannot be read (corrupt, foreign, too new)
    ├── StartupError              a configured part cannot start
    │   ├── SessionStoreError     the session store cannot be used (unreachable, locked, too new)
    │   └── TelemetryUnavailable  telemetry is configured but cannot start
    ├── RequestError              a caller's request cannot be served as asked
    │   ├── InvalidRequest        fields of the request are invalid (each one named)
    │   │   ├── InputTooLarge     the user input is longer than the profile allows
    │   │   └── MalformedRequest  the request's bytes are not a valid message
    │   ├── Unauthenticated       no credentials, or ones that name no principal
    │   ├── PermissionDenied      the principal may not use that profile
    │   │   └── NotAnOperator     the principal may not change the sidecar's operation
    │   ├── SessionNotFound       no such session (never created, deleted, expired)
    │   ├── ProfileNotFound       no such agent profile in the configuration
    │   ├── CallNotPending        no such tool call is waiting for approval
    │   ├── RunNotFound           no such background run (never started, expired, deleted)
    │   ├── CallbackNotAllowed    a run's callback URL is one the configuration refuses
    │   ├── BackgroundRunsDisabled  the sidecar serves no background runs
    │   ├── SessionExists         create: the id is taken
    │   ├── RequestIdReused       a run's request id, sent again with another request
    │   ├── SessionBusy           another run holds the session (retryable)
    │   ├── ProfileRemoved        the session's profile is no longer configured
    │   ├── Draining              the sidecar is shutting down (retryable elsewhere)
    │   └── ResourceExhausted     a limit was reached
    │       ├── Overloaded        too many runs in flight (retryable)
    │       ├── TooManySessions   the store holds as many sessions as allowed
    │       ├── QuotaExceeded     the principal used its quota (runs, rate, sessions, spend)
    │       ├── RunQueueFull      as many background runs are queued and running as allowed
    │       └── StreamBacklog     the caller read a stream too slowly
    ├── ModelError                the model could not produce a response (code, status)
    │   ├── ModelRequestRejected  a 4xx other than 429: retrying the same request won't help
    │   │   └── ToolUseFailed     the model emitted a malformed tool call (Groq's tool_use_failed)
    │   └── ModelUnavailable      429 / 498 / 5xx / connection / timeout, after retries
    │       └── FlexTierFull      498 on flex, and the section sends the call to the light path
    ├── ArgumentsInvalid          a tool call's arguments do not fit its tool (for the model)
    └── BreakerOpenError          a circuit breaker refused a call; nothing was sent

A model or tool failure inside a run is not a status: the run ends with an outcome that
says what happened (see ``sidecar.types.RunError``). Only :class:`RequestError` and
:class:`StartupError` ever reach a caller or an operator as such.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from sidecar.types import BreakerState

__all__ = [
    "DEADLINE_EXCEEDED",
    "MODEL_TIMEOUT",
    "ArgumentsInvalid",
    "BackgroundRunsDisabled",
    "BreakerOpenError",
    "CallNotPending",
    "CallbackNotAllowed",
    "ConfigError",
    "Draining",
    "FieldViolation",
    "FlexTierFull",
    "InputTooLarge",
    "InvalidRequest",
    "MalformedRequest",
    "ModelError",
    "ModelRequestRejected",
    "ModelUnavailable",
    "NotAnOperator",
    "Overloaded",
    "PermissionDenied",
    "ProfileNotFound",
    "ProfileRemoved",
    "QuotaExceeded",
    "RecordingError",
    "RequestError",
    "RequestIdReused",
    "ResourceExhausted",
    "RunNotFound",
    "RunQueueFull",
    "SessionBusy",
    "SessionExists",
    "SessionNotFound",
    "SessionStoreError",
    "SidecarError",
    "StartupError",
    "StreamBacklog",
    "TelemetryUnavailable",
    "TooManySessions",
    "ToolUseFailed",
    "Unauthenticated",
    "request_errors",
]


class SidecarError(Exception):
    """The root of every error the sidecar raises on purpose.

    Attributes:
        message: What went wrong and, where it helps, what to do about it.
        retryable: Whether the same request may succeed later.
        retry_after: Seconds to wait before retrying, when known.
    """

    retryable: bool = False
    retry_after: float | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(SidecarError):
    """The configuration file is missing, unreadable or invalid."""


class RecordingError(SidecarError):
    """A recording cannot be read: not JSON, not a recording, a newer format version, or a
    field missing; the message names the file and line."""


class StartupError(SidecarError):
    """A configured part of the sidecar cannot start; the message says why and what to do."""


class SessionStoreError(StartupError):
    """The session store cannot be used; the message says why and what to do."""


class TelemetryUnavailable(StartupError):
    """Telemetry is configured but cannot start (a missing package, an unwritable log)."""


# -- a caller's request ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One invalid field of a request."""

    field: str
    """The field's path in the request message (``session_id``, ``output_mode``)."""
    description: str
    """What is wrong with it, for the caller's developer."""


class RequestError(SidecarError):
    """A caller's request cannot be served as asked.

    Attributes:
        resource: ``(type, name)`` of the resource the error is about, when there is one
            (``("agentsidecar.v1.Session", "s-1")``).
        violations: The request's invalid fields, when there are any.
        metadata: Machine-readable facts for the caller (string to string).
    """

    code: ClassVar[str] = ""
    """Its canonical status code by name (``NOT_FOUND``): each front maps it to its
    protocol's (a gRPC status, an A2A error); empty: none (a bug if it reaches a caller)."""
    reason: ClassVar[str] = ""
    """The stable reason callers branch on (``ErrorInfo.reason``, docs/errors.md)."""
    resource: tuple[str, str] | None = None
    violations: tuple[FieldViolation, ...] = ()
    quota: tuple[str, str] | None = None
    """``(subject, description)`` of the quota that was used up, when one was."""

    def __init__(self, message: str, *, metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.metadata = dict(metadata or {})


class InvalidRequest(RequestError):
    """Fields of the request are invalid; each is named with what is wrong with it."""

    code = "INVALID_ARGUMENT"
    reason = "INVALID_REQUEST"

    def __init__(self, violations: Sequence[FieldViolation]) -> None:
        super().__init__("; ".join(f"{v.field}: {v.description}" for v in violations))
        self.violations = tuple(violations)

    @classmethod
    def field(cls, field: str, description: str) -> InvalidRequest:
        """One invalid field."""
        return cls([FieldViolation(field, description)])


class InputTooLarge(InvalidRequest):
    """The user input is longer than the profile's ``max_input_chars``."""

    code = "INVALID_ARGUMENT"
    reason = "INPUT_TOO_LARGE"

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(
            [FieldViolation("input", f"is {length} characters; the profile allows {limit}")]
        )
        self.metadata = {"limit": str(limit), "length": str(length)}


class MalformedRequest(InvalidRequest):
    """The request's bytes do not decode as the message the method takes."""

    code = "INVALID_ARGUMENT"
    reason = "MALFORMED_REQUEST"

    def __init__(self, message_type: str) -> None:
        super().__init__([FieldViolation("(request)", f"is not a valid {message_type}")])


_SESSION = "agentsidecar.v1.Session"


class Unauthenticated(RequestError):
    """The call carries no credentials, or ones that name no principal.

    The message says which of the two, never which principals exist."""

    code = "UNAUTHENTICATED"
    reason = "UNAUTHENTICATED"


class PermissionDenied(RequestError):
    """The principal may not use the profile (``auth.principals[].profiles``)."""

    code = "PERMISSION_DENIED"
    reason = "PERMISSION_DENIED"

    def __init__(self, principal: str, profile: str) -> None:
        super().__init__(f"principal {principal!r} may not use profile {profile!r}")
        self.resource = ("agentsidecar.v1.Profile", profile)


class NotAnOperator(PermissionDenied):
    """The principal may not change the sidecar's operation (``auth.principals[].operator``)."""

    def __init__(self, principal: str) -> None:
        RequestError.__init__(
            self, f"principal {principal!r} is not an operator (auth.principals[].operator)"
        )


class SessionNotFound(RequestError):
    """No such session (never created, deleted, or expired)."""

    code = "NOT_FOUND"
    reason = "SESSION_NOT_FOUND"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r}")
        self.session_id = session_id
        self.resource = (_SESSION, session_id)


class ProfileNotFound(RequestError):
    """No agent profile of that name is configured."""

    code = "NOT_FOUND"
    reason = "PROFILE_NOT_FOUND"

    def __init__(self, profile: str, configured: Sequence[str]) -> None:
        super().__init__(f"unknown profile {profile!r}; configured: {sorted(configured)}")
        self.profile = profile
        self.resource = ("agentsidecar.v1.Profile", profile)


class CallNotPending(RequestError):
    """No tool call of that id is waiting for approval in the session."""

    code = "NOT_FOUND"
    reason = "CALL_NOT_PENDING"

    def __init__(self, session_id: str, call_id: str) -> None:
        super().__init__(f"no call {call_id!r} is waiting for approval in session {session_id!r}")
        self.resource = ("agentsidecar.v1.ToolCall", f"{session_id}/{call_id}")


class RunNotFound(RequestError):
    """No such background run (never started, expired, or its session was deleted); a run
    another principal started does not exist for the caller."""

    code = "NOT_FOUND"
    reason = "RUN_NOT_FOUND"

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no background run {run_id!r}")
        self.resource = ("agentsidecar.v1.Run", run_id)


class CallbackNotAllowed(RequestError):
    """A run's completion callback names a URL the configuration does not let callbacks go
    to (``background.callbacks``), or its principal has no secret to sign it with."""

    code = "PERMISSION_DENIED"
    reason = "CALLBACK_NOT_ALLOWED"


class BackgroundRunsDisabled(RequestError):
    """The sidecar serves no background runs (``background.enabled: false``)."""

    code = "FAILED_PRECONDITION"
    reason = "BACKGROUND_RUNS_DISABLED"

    def __init__(self) -> None:
        super().__init__(
            "this sidecar serves no background runs (background.enabled is false); use "
            "StreamRun or Run"
        )


class SessionExists(RequestError):
    """A session with that id already exists."""

    code = "ALREADY_EXISTS"
    reason = "SESSION_EXISTS"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} already exists")
        self.session_id = session_id
        self.resource = (_SESSION, session_id)


class RequestIdReused(RequestError):
    """A run was started under this request id already, with another request."""

    code = "ALREADY_EXISTS"
    reason = "REQUEST_ID_REUSED"

    def __init__(self, request_id: str, run_id: str) -> None:
        super().__init__(
            f"request_id {request_id[:80]!r} started run {run_id!r} with another input: a "
            "retry sends the same request again; a new run needs a new request_id",
            metadata={"run_id": run_id},
        )
        self.resource = ("agentsidecar.v1.Run", run_id)


class SessionBusy(RequestError):
    """Another run holds the session; runs of one session never overlap."""

    code = "FAILED_PRECONDITION"
    reason = "SESSION_BUSY"

    retryable = True
    retry_after = 1.0
    """A hint, not a promise: most turns end within a second or two."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} is already running a turn; wait for it to finish")
        self.session_id = session_id
        self.resource = (_SESSION, session_id)


class ProfileRemoved(RequestError):
    """The session's profile is no longer in the configuration."""

    code = "FAILED_PRECONDITION"
    reason = "PROFILE_REMOVED"

    def __init__(self, session_id: str, profile: str) -> None:
        super().__init__(
            f"session {session_id!r} uses profile {profile!r}, which is no longer configured"
        )
        self.resource = ("agentsidecar.v1.Profile", profile)


class Draining(RequestError):
    """The sidecar is shutting down and takes no new work."""

    code = "UNAVAILABLE"
    reason = "DRAINING"

    retryable = True

    def __init__(self, retry_after: float) -> None:
        super().__init__("the sidecar is shutting down; retry on another replica or after restart")
        self.retry_after = retry_after


class ResourceExhausted(RequestError):
    """A limit of the sidecar was reached."""

    code = "RESOURCE_EXHAUSTED"


class Overloaded(ResourceExhausted):
    """Too many runs are in flight in this process (``server.max_concurrent_runs``)."""

    code = "RESOURCE_EXHAUSTED"
    reason = "OVERLOADED"

    retryable = True
    retry_after = 1.0

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"{limit} runs are in flight, the most this sidecar takes; retry shortly or on "
            "another replica",
            metadata={"limit": str(limit)},
        )


class TooManySessions(ResourceExhausted):
    """The store holds as many sessions as ``sessions.max_sessions`` allows."""

    code = "RESOURCE_EXHAUSTED"
    reason = "TOO_MANY_SESSIONS"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the store holds {limit} sessions, the most allowed; delete some first",
            metadata={"limit": str(limit)},
        )


class QuotaExceeded(ResourceExhausted):
    """The principal used up one of its quotas (``auth.principals[].quota``)."""

    code = "RESOURCE_EXHAUSTED"
    reason = "QUOTA_EXCEEDED"

    def __init__(
        self, principal: str, quota: str, limit: float, *, retry_after: float | None
    ) -> None:
        what = quota.replace("_", " ")
        if quota.startswith("daily_"):
            message = (
                f"principal {principal!r} has used its {what} quota of {limit:g} for today "
                "(UTC); new runs are refused until midnight UTC"
            )
        else:
            message = f"principal {principal!r} is at its quota of {limit:g} {what}"
        super().__init__(
            message, metadata={"quota": quota, "limit": f"{limit:g}", "principal": principal}
        )
        self.quota = (f"principal:{principal}", f"{quota} at most {limit:g}")
        self.quota_name = quota
        self.retry_after = retry_after
        self.retryable = retry_after is not None

    @property
    def daily(self) -> bool:
        """A daily quota (``daily_cost``, ``daily_tokens``): it lasts until midnight UTC,
        so waiting a moment does not help."""
        return self.quota_name.startswith("daily_")


class RunQueueFull(ResourceExhausted):
    """As many background runs are queued and running as ``background.max_runs`` allows."""

    code = "RESOURCE_EXHAUSTED"
    reason = "RUN_QUEUE_FULL"

    retryable = True
    retry_after = 5.0
    """A hint: a slot frees when any run finishes."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"{limit} background runs are queued or running, the most the sidecar takes; "
            "retry when some have finished",
            metadata={"limit": str(limit)},
        )


class StreamBacklog(ResourceExhausted):
    """A stream's caller read its events too slowly: the run was cancelled."""

    code = "RESOURCE_EXHAUSTED"
    reason = "STREAM_BACKLOG"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the caller read the stream too slowly: more than {limit} bytes of events "
            "waited, so the run was cancelled",
            metadata={"limit": str(limit)},
        )


# -- the model -------------------------------------------------------------------------


class ModelError(SidecarError):
    """The model could not produce a response.

    Attributes:
        code: a stable machine-readable code (``model_rate_limited``, ``model_bad_request``…).
        retryable: whether the same request may succeed later.
        status: the HTTP status, when there was one.
        retry_after: seconds the provider asked us to wait before retrying, when it said.
        attempts: requests sent for the call before it failed (retries included).
    """

    attempts: int = 1

    def __init__(
        self,
        code: str,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after

    @property
    def out_of_time(self) -> bool:
        """The call ran out of time (the run's deadline, or the request's timeout)."""
        return self.code in (DEADLINE_EXCEEDED, MODEL_TIMEOUT)


DEADLINE_EXCEEDED = "deadline_exceeded"
"""The code of a model call the run's own deadline cut off."""
MODEL_TIMEOUT = "model_timeout"
"""The code of a model request that took longer than its timeout."""


class ModelRequestRejected(ModelError):
    """The provider rejected the request (4xx other than 429)."""


class ToolUseFailed(ModelRequestRejected):
    """The model produced a tool call the provider could not parse.

    Attributes:
        failed_generation: the model's raw output, for the repair round.
    """

    def __init__(self, message: str, failed_generation: str):
        super().__init__("model_tool_use_failed", message, retryable=False, status=400)
        self.failed_generation = failed_generation


class ModelUnavailable(ModelError):
    """The provider did not answer usefully within the retries and the time allowed."""


class FlexTierFull(ModelUnavailable):
    """The ``flex`` tier was full (``498 capacity_exceeded``) through every retry, and the
    model section says such a call goes to the profile's light path (``flex_fallback:
    light``): the run sends it there once, or fails with this when it has none."""


# -- tools -----------------------------------------------------------------------------


class ArgumentsInvalid(SidecarError):
    """A call's arguments are not valid for its tool; the message is written for the model."""


class BreakerOpenError(SidecarError):
    """A call was refused by a circuit breaker; nothing was sent to the tool server.

    Attributes:
        breaker_name: The refusing breaker's name (the tool server it guards).
        state: ``OPEN`` while the reset timeout runs; ``HALF_OPEN`` while a trial is in flight.
        retry_after: Seconds until a trial call may be admitted. While open, the time left of
            the reset timeout. While a trial is in flight, 0.0: there is no timer to wait
            out, the trial's outcome decides (a success closes the breaker, a failure opens
            it for another ``reset_timeout``).
    """

    retryable = True

    def __init__(self, breaker_name: str, state: BreakerState, retry_after: float) -> None:
        if state is BreakerState.OPEN:
            detail = f"open; a trial call is allowed in {retry_after:.3f}s"
        else:
            detail = "half-open and its trial call is still in flight"
        super().__init__(f"circuit breaker {breaker_name!r} is {detail}")
        self.breaker_name = breaker_name
        self.state = state
        self.retry_after = retry_after


def request_errors() -> Iterator[type[RequestError]]:
    """Every class of caller-facing error that has a reason."""
    waiting: list[type[RequestError]] = [RequestError]
    while waiting:
        cls = waiting.pop()
        if "reason" in cls.__dict__ and cls.reason:
            yield cls
        waiting.extend(cls.__subclasses__())
