"""A gRPC proxy between the sidecar and a tool server that changes the identity on the way:
what an attacker on the network would do, for the tests of the signed assertion.

Run: ``python tests/support/tampering_proxy.py --port 0 --upstream HOST:PORT --key PEM``.
It forwards every call (health's Watch and StreamTool as streams, CallTools as the
bidirectional stream it is) and picks what to do to a ``CallTool``, or to a call on a
``CallTools`` stream (whose identity travels in the message), by the tool's name:

- ``*_tamper``: the assertion's payload names another principal (the plain metadata too),
  its signature kept;
- ``*_expire``: the assertion re-signed with the sidecar's own key (``--key``), expired an
  hour ago;
- ``*_contradict``: the plain ``x-agent-principal`` names another principal, the
  assertion kept;
- anything else passes unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import signal
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import jwt
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from agentsidecar.tool_identity import ASSERTION_KEY, PRINCIPAL_KEY
from agentsidecar.v1 import tool_pb2

_STREAMS = {"/grpc.health.v1.Health/Watch", "/agentsidecar.v1.ToolService/StreamTool"}
_CALL_STREAM = "/agentsidecar.v1.ToolService/CallTools"
_HOP = {"user-agent", "content-type", "te"}
Metadata = list[tuple[str, str | bytes]]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _payload(token: str) -> dict[str, Any]:
    segment = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))  # type: ignore[no-any-return]


class Proxy(grpc.GenericRpcHandler):
    def __init__(self, channel: grpc.aio.Channel, key: Any) -> None:
        self.channel = channel
        self.key = key

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method = details.method
        if method in _STREAMS:
            return grpc.unary_stream_rpc_method_handler(self._stream(method))
        if method == _CALL_STREAM:
            return grpc.stream_stream_rpc_method_handler(self._calls())
        return grpc.unary_unary_rpc_method_handler(self._unary(method))

    def _metadata(self, context: grpc.aio.ServicerContext) -> Metadata:
        return [
            (k, v)
            for k, v in context.invocation_metadata() or ()
            if not k.startswith((":", "grpc-")) and k not in _HOP
        ]

    def _changed(self, request: bytes, metadata: Metadata) -> Metadata:
        name = tool_pb2.CallToolRequest.FromString(request).tool_name
        out = []
        for key, value in metadata:
            if key == ASSERTION_KEY and isinstance(value, str):
                if name.endswith("_tamper"):
                    header, _, signature = value.split(".")
                    payload = {**_payload(value), "sub": "mallory"}
                    body = _b64(json.dumps(payload).encode())
                    value = f"{header}.{body}.{signature}"
                elif name.endswith("_expire"):
                    payload = {**_payload(value), "iat": 1_000_000_000, "exp": 1_000_000_300}
                    kid = jwt.get_unverified_header(value)["kid"]
                    value = jwt.encode(payload, self.key, algorithm="EdDSA", headers={"kid": kid})
            if key == PRINCIPAL_KEY and name.endswith(("_tamper", "_contradict")):
                value = "mallory"
            out.append((key, value))
        return out

    def _unary(self, method: str) -> Any:
        forward = self.channel.unary_unary(method)

        async def handle(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            metadata = self._metadata(context)
            if method == "/agentsidecar.v1.ToolService/CallTool":
                metadata = self._changed(request, metadata)
            try:
                response: bytes = await forward(
                    request, metadata=metadata, timeout=context.time_remaining()
                )
            except grpc.aio.AioRpcError as exc:
                await context.abort(exc.code(), exc.details() or "")
            return response

        return handle

    def _calls(self) -> Any:
        forward = self.channel.stream_stream(_CALL_STREAM)

        async def handle(
            requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
        ) -> AsyncIterator[bytes]:
            async def changed() -> AsyncIterator[bytes]:
                async for raw in requests:
                    message = tool_pb2.CallToolsRequest.FromString(raw)
                    for streamed in message.calls:
                        entries: Metadata = [
                            (k, v if k.endswith("-bin") else v.decode())
                            for k, v in streamed.metadata.items()
                        ]
                        entries = self._changed(streamed.call.SerializeToString(), entries)
                        streamed.ClearField("metadata")
                        for key, value in entries:
                            streamed.metadata[key] = (
                                value if isinstance(value, bytes) else value.encode()
                            )
                    raw = message.SerializeToString()
                    yield raw

            call = forward(changed(), metadata=self._metadata(context))
            try:
                async for response in call:
                    yield response
            except grpc.aio.AioRpcError as exc:
                await context.abort(exc.code(), exc.details() or "")

        return handle

    def _stream(self, method: str) -> Any:
        forward = self.channel.unary_stream(method)

        async def handle(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
            call = forward(request, metadata=self._metadata(context))
            try:
                async for response in call:
                    yield response
            except grpc.aio.AioRpcError as exc:
                await context.abort(exc.code(), exc.details() or "")

        return handle


async def serve(port: int, upstream: str, key: Any) -> None:
    channel = grpc.aio.insecure_channel(upstream)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([Proxy(channel, key)])
    port = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"listening on 127.0.0.1:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(0.2)
    await channel.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--key", required=True)
    args = parser.parse_args(argv)
    with open(args.key, "rb") as f:
        key = load_pem_private_key(f.read(), password=None)
    asyncio.run(serve(args.port, args.upstream, key))


if __name__ == "__main__":
    main()
