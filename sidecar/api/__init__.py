"""The gRPC front: ``agentsidecar.v1.AgentService`` over a runtime's agent, with health,
reflection, the Unix socket and the drain (:class:`GrpcFront`); requests decoded and
authenticated, events and results converted once, errors mapped to statuses by one table.
"""

from sidecar.api.server import SERVICE_NAME, GrpcFront
from sidecar.api.service import AgentServicer, add_to_server
from sidecar.api.status import REASONS, to_status

__all__ = ["REASONS", "SERVICE_NAME", "AgentServicer", "GrpcFront", "add_to_server", "to_status"]
