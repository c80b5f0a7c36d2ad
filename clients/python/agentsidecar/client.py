"""A small typed async client for the agent sidecar, over the generated gRPC stub.

Example::

    async with AgentClient("127.0.0.1:50051") as client:
        session = await client.create_session("default")
        async for event in client.stream(session.session_id, "Where is my order 42?"):
            if event.HasField("text_delta"):
                print(event.text_delta.text, end="")
        result = await client.run(session.session_id, "And the parcel?")
        print(result.result.answer)

A sidecar with TLS and callers' tokens (docs/security.md)::

    AgentClient("sidecar.example:50051", tls=True, ca_file="ca.pem", token=os.environ["TOKEN"])
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping, Sequence
from types import TracebackType

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentsidecar.addresses import is_local_target
from agentsidecar.tls import channel_credentials
from agentsidecar.v1 import agent_pb2, agent_pb2_grpc

__all__ = ["AgentClient"]


class AgentClient:
    """An async connection to one sidecar. Use it as ``async with``."""

    def __init__(
        self,
        target: str,
        *,
        channel: grpc.aio.Channel | None = None,
        tls: bool = False,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        server_name: str | None = None,
        token: str | None = None,
    ) -> None:
        """Connect to ``target`` (``host:port``), or use an existing ``channel``.

        Args:
            target: The sidecar's address.
            channel: A channel of your own (the other arguments are then unused).
            tls: Dial TLS.
            ca_file: PEM CA bundle the sidecar's certificate must chain to; unset: the
                system's.
            cert_file: PEM client certificate (mutual TLS), with ``key_file``.
            key_file: Its private key.
            server_name: The name to check the sidecar's certificate against; unset:
                the target's host.
            token: The principal's bearer token, sent as metadata on every call (over
                plaintext to loopback only).

        Raises:
            agentsidecar.tls.TlsFileError: a PEM file cannot be read.
        """
        self._owns_channel = channel is None
        # The token goes with each call: as call credentials, grpc would run a Python
        # plugin on a thread of its own for every call.
        self._auth: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ()
        )
        if token and not tls and channel is None and not is_local_target(target):
            raise ValueError("a token travels only over TLS, or in plaintext to loopback")
        if channel is None:
            credentials = channel_credentials(
                tls=tls, ca_file=ca_file, cert_file=cert_file, key_file=key_file
            )
            options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
            channel = (
                grpc.aio.insecure_channel(target, options=options)
                if credentials is None
                else grpc.aio.secure_channel(target, credentials, options=options)
            )
        self._channel = channel
        self.stub = agent_pb2_grpc.AgentServiceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_channel:
            await self._channel.close()

    async def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until the sidecar's health says SERVING.

        Raises:
            TimeoutError: it did not become ready within ``timeout`` seconds.
        """
        async with asyncio.timeout(timeout):
            while True:
                try:
                    reply = await self._health.Check(
                        health_pb2.HealthCheckRequest(service=""), timeout=timeout
                    )
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.aio.AioRpcError as exc:
                    if exc.code() != grpc.StatusCode.UNAVAILABLE:
                        raise
                await asyncio.sleep(0.05)

    async def create_session(
        self,
        profile: str = "default",
        *,
        session_id: str = "",
        labels: Mapping[str, str] | None = None,
        timeout: float | None = 10.0,
    ) -> agent_pb2.Session:
        request = agent_pb2.CreateSessionRequest(
            profile=profile, session_id=session_id, labels=dict(labels or {})
        )
        response: agent_pb2.CreateSessionResponse = await self.stub.CreateSession(
            request, timeout=timeout, metadata=self._auth or None
        )
        return response.session

    async def get_session(
        self, session_id: str, *, timeout: float | None = 10.0
    ) -> agent_pb2.Session:
        response: agent_pb2.GetSessionResponse = await self.stub.GetSession(
            agent_pb2.GetSessionRequest(session_id=session_id),
            timeout=timeout,
            metadata=self._auth or None,
        )
        return response.session

    async def delete_session(self, session_id: str, *, timeout: float | None = 10.0) -> bool:
        response: agent_pb2.DeleteSessionResponse = await self.stub.DeleteSession(
            agent_pb2.DeleteSessionRequest(session_id=session_id),
            timeout=timeout,
            metadata=self._auth or None,
        )
        return response.deleted

    async def stream(
        self,
        session_id: str,
        user_input: str,
        *,
        structured: bool = False,
        timeout: float | None = None,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> AsyncGenerator[agent_pb2.StreamRunResponse, None]:
        """Run a turn and yield its events; the last one carries ``run_finished``.

        Closing the generator early cancels the run and its tool calls; use
        ``contextlib.aclosing`` to close it the moment you leave the loop (otherwise it
        closes when it is garbage-collected). ``metadata`` is sent with the call: a W3C
        ``traceparent`` (and ``tracestate``, ``baggage``) there makes the run part of the
        caller's trace.
        """
        mode = agent_pb2.OUTPUT_MODE_STRUCTURED if structured else agent_pb2.OUTPUT_MODE_STREAMED
        call = self.stub.StreamRun(
            agent_pb2.StreamRunRequest(session_id=session_id, input=user_input, output_mode=mode),
            timeout=timeout,
            metadata=(*self._auth, *metadata) or None,
        )
        try:
            async for event in call:
                yield event
        finally:
            call.cancel()

    async def run(
        self,
        session_id: str,
        user_input: str,
        *,
        timeout: float | None = None,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> agent_pb2.RunResponse:
        """Run a turn and return only its result; ``metadata`` as for :meth:`stream`."""
        request = agent_pb2.RunRequest(session_id=session_id, input=user_input)
        response: agent_pb2.RunResponse = await self.stub.Run(
            request, timeout=timeout, metadata=(*self._auth, *metadata) or None
        )
        return response

    async def approve(
        self,
        session_id: str,
        call_id: str,
        *,
        approved: bool,
        reason: str = "",
        timeout: float | None = 10.0,
    ) -> None:
        """Approve or deny a tool call announced by an ``approval_required`` event."""
        decision = (
            agent_pb2.APPROVAL_DECISION_APPROVE if approved else agent_pb2.APPROVAL_DECISION_DENY
        )
        await self.stub.ApproveToolCall(
            agent_pb2.ApproveToolCallRequest(
                session_id=session_id, call_id=call_id, decision=decision, reason=reason
            ),
            timeout=timeout,
            metadata=self._auth or None,
        )

    async def list_tools(
        self, session_id: str, *, timeout: float | None = 10.0
    ) -> list[agent_pb2.SessionTool]:
        response = await self.stub.ListSessionTools(
            agent_pb2.ListSessionToolsRequest(session_id=session_id),
            timeout=timeout,
            metadata=self._auth or None,
        )
        return list(response.tools)
