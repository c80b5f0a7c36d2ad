"""Read the machine-readable details of a sidecar's error status.

Every error status from the sidecar carries a ``google.rpc.Status`` in the
``grpc-status-details-bin`` trailer: an ``ErrorInfo`` with a stable ``reason`` (branch
on it, never on the message), and where they apply ``BadRequest``, ``ResourceInfo``,
``QuotaFailure`` and ``RetryInfo``. Example::

    try:
        await client.get_session("s-1")
    except grpc.aio.AioRpcError as exc:
        details = error_details(exc)
        if details.reason == "SESSION_NOT_FOUND":
            ...
"""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc
from google.rpc import error_details_pb2, status_pb2

__all__ = ["DOMAIN", "ErrorDetails", "error_details"]

DOMAIN = "agentsidecar.v1"
"""The ``ErrorInfo.domain`` of the sidecar's reasons."""
_DETAILS_KEY = "grpc-status-details-bin"


@dataclass(frozen=True, slots=True)
class ErrorDetails:
    """What an error status says, machine-readably."""

    code: grpc.StatusCode
    message: str
    reason: str = ""
    """``ErrorInfo.reason`` (``SESSION_NOT_FOUND`` ...); empty when the status has none
    (it did not come from the sidecar's handlers: a transport failure, a deadline)."""
    domain: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    """``ErrorInfo.metadata``: ``error_id`` for INTERNAL, for instance."""
    retry_delay: float | None = None
    """Seconds to wait before retrying (``RetryInfo``), when the sidecar knows."""
    violations: tuple[tuple[str, str], ...] = ()
    """``(field, description)`` of each invalid field (``BadRequest``)."""
    resource: tuple[str, str] | None = None
    """``(type, name)`` of the resource the error is about (``ResourceInfo``)."""
    quota: tuple[tuple[str, str], ...] = ()
    """``(subject, description)`` of each used-up quota (``QuotaFailure``)."""


def error_details(error: grpc.RpcError) -> ErrorDetails:
    """The details of a failed call's status (``grpc.aio.AioRpcError`` or a sync error)."""
    code: grpc.StatusCode = error.code()
    message: str = error.details() or ""
    trailers = error.trailing_metadata() or ()
    raw = next((value for key, value in trailers if key == _DETAILS_KEY), None)
    if not isinstance(raw, bytes):
        return ErrorDetails(code, message)
    status = status_pb2.Status.FromString(raw)
    info = error_details_pb2.ErrorInfo()
    retry = error_details_pb2.RetryInfo()
    bad = error_details_pb2.BadRequest()
    resource = error_details_pb2.ResourceInfo()
    quota = error_details_pb2.QuotaFailure()
    seen = set()
    for detail in status.details:
        for message_ in (info, retry, bad, resource, quota):
            if detail.Is(message_.DESCRIPTOR):
                detail.Unpack(message_)
                seen.add(message_.DESCRIPTOR.name)
    return ErrorDetails(
        code=code,
        message=status.message or message,
        reason=info.reason,
        domain=info.domain,
        metadata=dict(info.metadata),
        retry_delay=retry.retry_delay.ToTimedelta().total_seconds()
        if "RetryInfo" in seen
        else None,
        violations=tuple((v.field, v.description) for v in bad.field_violations),
        resource=(resource.resource_type, resource.resource_name)
        if "ResourceInfo" in seen
        else None,
        quota=tuple((v.subject, v.description) for v in quota.violations),
    )
