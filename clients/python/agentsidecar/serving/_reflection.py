"""gRPC server reflection, both versions, for the sidecar and the SDK's tool servers.

Why not ``grpc_reflection.v1alpha.reflection.enable_server_reflection`` alone:

1. It serves only ``grpc.reflection.v1alpha``. Current tools (grpcurl, ghz, Postman, the
   reflection clients of grpc-go and grpc-java) ask for ``grpc.reflection.v1`` first, and
   some never fall back. ``grpcio-reflection`` ships no v1 (1.85), but the two versions
   are the same messages under another package name, so one servicer answers both: v1 is
   registered with v1alpha's (de)serializers, and v1's file descriptor is added to the
   pool (v1alpha's, renamed) so ``describe grpc.reflection.v1.ServerReflection`` works.
2. Asked for the file that holds a method (``describe agentsidecar.v1.AgentService.Run``),
   it answers "Symbol not found": the upb descriptor pool finds services, messages, fields
   and enums by name, but not methods. The method's service is looked up instead.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection_pb2 as v1alpha_pb2
from grpc_reflection.v1alpha import reflection_pb2_grpc as v1alpha_grpc
from grpc_reflection.v1alpha._async import ReflectionServicer

__all__ = ["SERVICE_NAMES", "enable_reflection"]

_V1ALPHA = "grpc.reflection.v1alpha"
_V1 = "grpc.reflection.v1"
_V1_FILE = "grpc/reflection/v1/reflection.proto"
SERVICE_NAMES = (f"{_V1}.ServerReflection", f"{_V1ALPHA}.ServerReflection")
"""The reflection services :func:`enable_reflection` adds, newest first."""


def _add_v1_descriptor(pool: descriptor_pool.DescriptorPool) -> None:
    """Put ``grpc/reflection/v1/reflection.proto`` into ``pool``, made from v1alpha's."""
    try:
        pool.FindFileByName(_V1_FILE)
        return  # already there (a later grpcio-reflection, or a second server)
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    v1alpha_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = _V1_FILE
    proto.package = _V1
    proto.ClearField("options")
    for message in proto.message_type:
        for field in message.field:
            if field.type_name.startswith(f".{_V1ALPHA}."):
                field.type_name = f".{_V1}." + field.type_name.removeprefix(f".{_V1ALPHA}.")
    for service in proto.service:
        for method in service.method:
            for attr in ("input_type", "output_type"):
                name = getattr(method, attr)
                setattr(method, attr, f".{_V1}." + name.removeprefix(f".{_V1ALPHA}."))
    pool.Add(proto)


class _Reflection(ReflectionServicer):  # type: ignore[misc]
    """v1alpha's async servicer, able to find the file of a method too."""

    def _file_containing_symbol(
        self, request: v1alpha_pb2.ServerReflectionRequest, name: str
    ) -> v1alpha_pb2.ServerReflectionResponse:
        response = super()._file_containing_symbol(request, name)
        if not response.HasField("error_response") or "." not in name:
            return response
        service, method = name.rsplit(".", 1)
        try:
            found = self._pool.FindServiceByName(service)
        except KeyError:
            return response
        if method not in found.methods_by_name:
            return response
        return super()._file_containing_symbol(request, service)


def enable_reflection(server: grpc.aio.Server, service_names: Iterable[str]) -> None:
    """Serve reflection v1 and v1alpha on ``server``, listing ``service_names`` and both
    reflection services."""
    pool = descriptor_pool.Default()
    _add_v1_descriptor(pool)
    servicer = _Reflection((*service_names, *SERVICE_NAMES), pool=pool)
    v1alpha_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=v1alpha_pb2.ServerReflectionRequest.FromString,
        response_serializer=v1alpha_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE_NAMES[0], {"ServerReflectionInfo": handler}),)
    )
