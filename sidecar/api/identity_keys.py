"""``agentsidecar.v1.IdentityKeysService``: the public keys tool servers verify the
sidecar's identity assertions with, served on the gRPC port so no tool server needs a
copy. Public data: no caller token is asked for; the keys are those of the configuration
applied now, so a reload that rotates them is served at once."""

from __future__ import annotations

import json
from collections.abc import Callable

import grpc
from google.protobuf.duration_pb2 import Duration

from agentsidecar.v1 import identity_pb2, identity_pb2_grpc
from sidecar.security.tool_identity import ToolIdentity

__all__ = ["MAX_AGE_SECONDS", "SERVICE_NAME", "IdentityKeysServicer"]

SERVICE_NAME = identity_pb2.DESCRIPTOR.services_by_name["IdentityKeysService"].full_name
MAX_AGE_SECONDS = 300
"""How long a tool server may rely on the keys it fetched: a rotation publishes the next
key beside the signing one for longer than this (docs/security.md), so no tool server
meets a kid it has not fetched."""


class IdentityKeysServicer(identity_pb2_grpc.IdentityKeysServiceServicer):
    """Answers with the JWKS of the signer in use now.

    Args:
        identity: The tool identity of the configuration applied now, read per call.
    """

    def __init__(self, identity: Callable[[], ToolIdentity]) -> None:
        self._identity = identity
        self._served: tuple[object, identity_pb2.GetIdentityKeysResponse] | None = None

    @property
    def service_name(self) -> str:
        return SERVICE_NAME

    def register(self, server: grpc.aio.Server) -> None:
        identity_pb2_grpc.add_IdentityKeysServiceServicer_to_server(self, server)

    async def GetIdentityKeys(
        self,
        request: identity_pb2.GetIdentityKeysRequest,
        context: grpc.aio.ServicerContext,
    ) -> identity_pb2.GetIdentityKeysResponse:
        signer = self._identity().signer
        if signer is None:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                "this sidecar signs no identity assertion (auth.tool_assertion is unset)",
            )
        assert signer is not None
        served = self._served
        if served is None or served[0] is not signer:  # built once per signer
            response = identity_pb2.GetIdentityKeysResponse(
                jwks=json.dumps(signer.jwks(), separators=(",", ":")),
                max_age=Duration(seconds=MAX_AGE_SECONDS),
            )
            served = self._served = (signer, response)
        return served[1]
