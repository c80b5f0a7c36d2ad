"""Errors to gRPC statuses: canonical codes, ``google.rpc`` details.

Each error class names its code and reason (``sidecar.errors``); this module turns them
into a status. Every status the sidecar answers with carries a ``google.rpc.Status`` in the
``grpc-status-details-bin`` trailer (``grpcio-status``): an ``ErrorInfo`` whose
``reason`` is stable and documented (clients branch on it, never on the message), and,
where they apply, ``BadRequest`` field violations, ``ResourceInfo`` for the missing or
taken resource, ``QuotaFailure`` for a principal's used-up quota, ``RetryInfo`` when a
retry delay is known. The reasons are listed in ``protos/agentsidecar/v1/agent.proto``
and ``docs/errors.md``.

An exception that is not a :class:`~sidecar.errors.SidecarError` is a bug: it is logged
with its traceback and an error id, and the caller gets INTERNAL with that id and no
Python text.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from sidecar.errors import RequestError, SidecarError, request_errors

__all__ = ["DOMAIN", "REASONS", "internal_status", "to_status"]

log = logging.getLogger(__name__)

DOMAIN = "agentsidecar.v1"
"""``ErrorInfo.domain`` of every reason the sidecar sends."""


@dataclass(frozen=True, slots=True)
class _Entry:
    code: grpc.StatusCode
    reason: str


_INTERNAL = _Entry(grpc.StatusCode.INTERNAL, "INTERNAL")

REASONS: dict[str, grpc.StatusCode] = {
    cls.reason: grpc.StatusCode[cls.code] for cls in request_errors()
} | {_INTERNAL.reason: _INTERNAL.code}
"""Every reason a caller can get, with its code (the docs and a test hold to it)."""


def _entry(exc: SidecarError) -> _Entry:
    """The error's own code and reason; INTERNAL for one without (a bug)."""
    if isinstance(exc, RequestError) and exc.reason and exc.code:
        return _Entry(grpc.StatusCode[exc.code], exc.reason)
    return _INTERNAL


def _pack(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)  # type: ignore[arg-type]
    return packed


def _status(
    entry: _Entry, message: str, details: list[any_pb2.Any], metadata: dict[str, str]
) -> grpc.Status:
    info = error_details_pb2.ErrorInfo(reason=entry.reason, domain=DOMAIN, metadata=metadata)
    proto = status_pb2.Status(
        code=getattr(code_pb2, entry.code.name),
        message=message,
        details=[_pack(info), *details],
    )
    return rpc_status.to_status(proto)


def to_status(exc: SidecarError) -> grpc.Status:
    """The status a caller gets for ``exc``, with its details.

    A :class:`SidecarError` the table does not know (one that should never reach a
    caller) is answered as :func:`internal_status`.
    """
    entry = _entry(exc)
    if entry is _INTERNAL or not isinstance(exc, RequestError):
        return internal_status(exc)
    details: list[any_pb2.Any] = []
    if exc.violations:
        details.append(
            _pack(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(
                            field=v.field, description=v.description
                        )
                        for v in exc.violations
                    ]
                )
            )
        )
    if exc.resource is not None:
        kind, name = exc.resource
        details.append(
            _pack(error_details_pb2.ResourceInfo(resource_type=kind, resource_name=name))
        )
    if exc.quota is not None:
        subject, description = exc.quota
        details.append(
            _pack(
                error_details_pb2.QuotaFailure(
                    violations=[
                        error_details_pb2.QuotaFailure.Violation(
                            subject=subject, description=description
                        )
                    ]
                )
            )
        )
    if exc.retry_after is not None:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(round(exc.retry_after * 1e9))
        details.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
    return _status(entry, exc.message, details, exc.metadata)


def internal_status(exc: BaseException) -> grpc.Status:
    """INTERNAL for an unexpected exception: logged with its traceback under an error id,
    which is all the caller learns."""
    error_id = uuid.uuid4().hex[:16]
    log.error("internal error %s", error_id, exc_info=exc)
    message = f"internal error {error_id}; the sidecar's log has the details"
    return _status(_INTERNAL, message, [], {"error_id": error_id})
