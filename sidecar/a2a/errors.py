"""The sidecar's errors as A2A errors: the spec's where it has one, a refusal otherwise.

The A2A spec names the errors of its own operations (``TaskNotFoundError``,
``TaskNotCancelableError``, ``InvalidParamsError`` ...); the SDK turns each into a
``google.rpc.Status`` with an ``ErrorInfo`` (domain ``a2a-protocol.org``) on gRPC, a
JSON-RPC error with the same details, or an HTTP status. What the spec has no error for
(authentication, permissions, quotas, a busy session, the drain) is a :class:`Refused`:
on gRPC its canonical code with the sidecar's own ``ErrorInfo`` (domain
``agentsidecar.v1``, the reasons of docs/errors.md) and ``RetryInfo``; on JSON-RPC a
server error (-32040 to -32046) whose details carry the same reason.

::

    A2AError (a2a-sdk)
    └── Refused                    reason, retry_after     gRPC code   JSON-RPC  HTTP
        ├── RefusedUnauthenticated                         UNAUTHENTICATED    -32040  401
        ├── RefusedPermission                              PERMISSION_DENIED  -32041  403
        ├── RefusedExhausted                               RESOURCE_EXHAUSTED -32042  429
        ├── RefusedPrecondition                            FAILED_PRECONDITION -32043 409
        ├── RefusedUnavailable                             UNAVAILABLE        -32044  503
        ├── RefusedNotFound                                NOT_FOUND          -32045  404
        └── RefusedExists                                  ALREADY_EXISTS     -32046  409
"""

from __future__ import annotations

import grpc
from a2a.server.jsonrpc_models import JSONRPCError
from a2a.server.request_handlers.response_helpers import EXCEPTION_MAP
from a2a.utils import errors as sdk
from a2a.utils.errors import (
    A2AError,
    ErrorMapping,
    InvalidParamsError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from sidecar.errors import (
    BackgroundRunsDisabled,
    CallNotPending,
    InputTooLarge,
    InvalidRequest,
    MalformedRequest,
    RequestError,
    RunNotFound,
    request_errors,
)

__all__ = ["DOMAIN", "REASONS", "Refused", "to_a2a"]

DOMAIN = "agentsidecar.v1"
"""``ErrorInfo.domain`` of the sidecar's own reasons (as on ``AgentService``)."""


class Refused(A2AError):
    """A refusal the A2A spec has no error for; ``reason`` is the sidecar's."""

    code = grpc.StatusCode.FAILED_PRECONDITION

    def __init__(self, reason: str, message: str, retry_after: float | None = None) -> None:
        data: dict[str, object] = {"reason": reason, "domain": DOMAIN}
        if retry_after is not None:
            data["retry_after_seconds"] = f"{retry_after:.3f}"
        super().__init__(message, data)
        self.reason = reason
        self.retry_after = retry_after


class RefusedUnauthenticated(Refused):
    code = grpc.StatusCode.UNAUTHENTICATED


class RefusedPermission(Refused):
    code = grpc.StatusCode.PERMISSION_DENIED


class RefusedExhausted(Refused):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class RefusedPrecondition(Refused):
    code = grpc.StatusCode.FAILED_PRECONDITION


class RefusedUnavailable(Refused):
    code = grpc.StatusCode.UNAVAILABLE


class RefusedNotFound(Refused):
    code = grpc.StatusCode.NOT_FOUND


class RefusedExists(Refused):
    code = grpc.StatusCode.ALREADY_EXISTS


# JSON-RPC codes in the range JSON-RPC leaves to servers, below the A2A spec's own
# (-32001 ... -32009), and HTTP statuses for the HTTP+JSON binding. The SDK looks both up
# by the error's class, so each class is registered once, here, at import.
_REGISTERED: dict[type[Refused], tuple[int, int]] = {
    RefusedUnauthenticated: (-32040, 401),
    RefusedPermission: (-32041, 403),
    RefusedExhausted: (-32042, 429),
    RefusedPrecondition: (-32043, 409),
    RefusedUnavailable: (-32044, 503),
    RefusedNotFound: (-32045, 404),
    RefusedExists: (-32046, 409),
}
for _cls, (_rpc, _http) in _REGISTERED.items():
    sdk.JSON_RPC_ERROR_CODE_MAP[_cls] = _rpc
    # The JSON-RPC error's model: unregistered, the SDK builds an InternalError, whose
    # code may only be -32603, and the caller got pydantic's complaint instead.
    EXCEPTION_MAP[_cls] = JSONRPCError
    sdk.A2A_ERROR_MAPPING[_cls] = ErrorMapping(_http, _cls.code.name, _cls.code.name)
    sdk.A2A_ERROR_REASONS[_cls] = _cls.code.name

_REFUSED: dict[str, type[Refused]] = {cls.code.name: cls for cls in _REGISTERED}
"""The refusal of each canonical code."""
_SPEC_ERRORS = (RunNotFound, InvalidRequest, CallNotPending, BackgroundRunsDisabled)
"""What the spec has an error of its own for (see :func:`to_a2a`)."""

REASONS: dict[str, grpc.StatusCode] = {
    cls.reason: grpc.StatusCode[cls.code]
    for cls in request_errors()
    if not issubclass(cls, _SPEC_ERRORS) and cls.code in _REFUSED
}
"""The sidecar's reasons an A2A caller may get, with their gRPC codes (those of
``AgentService``: each error class names both)."""


def to_a2a(exc: RequestError) -> A2AError:
    """The A2A error a caller gets for ``exc``."""
    if isinstance(exc, RunNotFound):
        return TaskNotFoundError(f"task {exc.resource[1] if exc.resource else ''} not found")
    if isinstance(exc, InvalidRequest | InputTooLarge | MalformedRequest | CallNotPending):
        errors = [{"field": v.field, "message": v.description} for v in exc.violations]
        return InvalidParamsError(exc.message, {"errors": errors} if errors else None)
    if isinstance(exc, BackgroundRunsDisabled):
        return UnsupportedOperationError(
            "tasks are background runs, and background.enabled is off on this sidecar"
        )
    refused = _REFUSED.get(exc.code)
    if refused is not None and exc.reason:
        return refused(exc.reason, exc.message, exc.retry_after)
    return sdk.InternalError("the request could not be served")
