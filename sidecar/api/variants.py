"""``agentsidecar.v1.VariantService`` over gRPC: the operator's hand on the profiles'
variants (:mod:`sidecar.agent.variant_control`), converted. Calls are authenticated as
``AgentService``'s are, and answer through the same error table."""

from __future__ import annotations

from collections.abc import Callable

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from agentsidecar.v1 import variants_pb2
from sidecar.agent.variant_control import ProfileView, VariantControl
from sidecar.api.service import AuthenticatedServicer, add_to_server, answers
from sidecar.security.audit import AuditLog
from sidecar.security.identity import Authenticator, Principal

__all__ = ["SERVICE_NAME", "VariantServicer"]

SERVICE_NAME = variants_pb2.DESCRIPTOR.services_by_name["VariantService"].full_name

_pb = variants_pb2


class VariantServicer(AuthenticatedServicer):
    """Implements ``VariantService`` over a runtime's :class:`VariantControl`."""

    def __init__(
        self,
        control: VariantControl,
        audit: AuditLog,
        authenticator: Callable[[], Authenticator] | None = None,
    ) -> None:
        super().__init__(audit, authenticator)
        self._control = control

    @property
    def service_name(self) -> str:
        return SERVICE_NAME

    def register(self, server: grpc.aio.Server) -> None:
        add_to_server(self, server, variants_pb2, "VariantService")

    @answers
    async def ListVariants(
        self,
        request: variants_pb2.ListVariantsRequest,
        context: grpc.aio.ServicerContext,
        principal: Principal,
    ) -> variants_pb2.ListVariantsResponse:
        views = self._control.view(principal, request.profile)
        return _pb.ListVariantsResponse(profiles=[_profile(v) for v in views])

    @answers
    async def SetVariantWeights(
        self,
        request: variants_pb2.SetVariantWeightsRequest,
        context: grpc.aio.ServicerContext,
        principal: Principal,
    ) -> variants_pb2.SetVariantWeightsResponse:
        view = await self._control.set_weights(
            principal, request.profile, dict(request.weights), request.reason
        )
        return _pb.SetVariantWeightsResponse(profile=_profile(view))

    @answers
    async def PromoteVariant(
        self,
        request: variants_pb2.PromoteVariantRequest,
        context: grpc.aio.ServicerContext,
        principal: Principal,
    ) -> variants_pb2.PromoteVariantResponse:
        view = await self._control.promote(
            principal, request.profile, request.variant, request.reason
        )
        return _pb.PromoteVariantResponse(profile=_profile(view))

    @answers
    async def RollBackVariant(
        self,
        request: variants_pb2.RollBackVariantRequest,
        context: grpc.aio.ServicerContext,
        principal: Principal,
    ) -> variants_pb2.RollBackVariantResponse:
        view = await self._control.roll_back(
            principal, request.profile, request.variant, request.reason
        )
        return _pb.RollBackVariantResponse(profile=_profile(view))

    @answers
    async def ResetVariants(
        self,
        request: variants_pb2.ResetVariantsRequest,
        context: grpc.aio.ServicerContext,
        principal: Principal,
    ) -> variants_pb2.ResetVariantsResponse:
        view = await self._control.reset(principal, request.profile, request.reason)
        return _pb.ResetVariantsResponse(profile=_profile(view))


def _seconds(value: float) -> Duration:
    duration = Duration()
    duration.FromNanoseconds(round(value * 1e9))
    return duration


def _profile(view: ProfileView) -> variants_pb2.ProfileVariants:
    message = _pb.ProfileVariants(profile=view.profile, window=_seconds(view.window))
    for v in view.variants:
        if v.shadow is not None:
            state = _pb.VARIANT_STATE_SHADOW
        elif v.rolled_back is not None:
            state = _pb.VARIANT_STATE_ROLLED_BACK
        elif v.in_rotation:
            state = _pb.VARIANT_STATE_IN_ROTATION
        else:
            state = _pb.VARIANT_STATE_IDLE
        status = message.variants.add(
            name=v.name,
            state=state,
            stable=v.stable,
            configured_weight=v.configured_weight,
            weight=v.weight,
            session_share=v.session_share,
            rolled_back_reason=v.rolled_back or "",
            shadow_share=v.shadow or 0.0,
            runs=v.runs,
            failed_runs=v.failed_runs,
        )
        if v.p50 is not None:
            status.p50.CopyFrom(_seconds(v.p50))
        if v.p95 is not None:
            status.p95.CopyFrom(_seconds(v.p95))
    change = view.change
    if change is not None:
        time = Timestamp()
        time.FromNanoseconds(round(change.time * 1e9))
        message.change.principal = change.principal
        message.change.time.CopyFrom(time)
        message.change.action = change.action
        message.change.reason = change.reason
    return message
