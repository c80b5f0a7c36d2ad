"""Waiting for a server's ``grpc.health.v1`` status to say SERVING."""

from __future__ import annotations

import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sidecar.testing._pace import scaled

__all__ = ["wait_serving"]

_POLL = 0.05  # seconds between checks; the state is in another process


def wait_serving(address: str, timeout: float = 30.0, service: str = "") -> None:
    """Block until the server at ``address`` reports SERVING for ``service``.

    Raises:
        TimeoutError: it did not within ``timeout`` seconds, stretched for the machine's
            load (:func:`sidecar.testing.scaled`).
    """
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service=service)
        while (left := deadline - time.monotonic()) > 0:
            try:
                reply = stub.Check(request, timeout=left)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError as exc:
                if exc.code() not in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                ):
                    raise
            time.sleep(min(_POLL, max(0.0, deadline - time.monotonic())))
    raise TimeoutError(f"{address} did not report SERVING within {timeout:.0f}s")
