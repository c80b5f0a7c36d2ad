"""A small typed async client for the agent sidecar, over the generated gRPC stub.

Example::

    async with AgentClient("127.0.0.1:50051") as client:
        session = await client.create_session("default")
        async for event in client.stream(session.session_id, "Where is my order 42?"):
            if event.HasField("text_delta"):
                print(event.text_delta.text, end="")
        result = await client.run(session.session_id, "And the parcel?")
        print(result.result.answer)

Approvals answered by a callback while the run streams::

    async def decide(call: agent_pb2.ApprovalRequired) -> Decision:
        return Decision.deny("refunds need a ticket") if call.destructive else Decision.approve()

    async for event in client.stream(session_id, "Refund order 20250101", on_approval=decide):
        ...

A background run, started now and watched (again, after a disconnect) from where the
caller left off::

    run = await client.start_run(session.session_id, "Compile the quarterly report")
    async for event in client.watch_run(run.run_id):   # reconnects on its own
        last = event.sequence
    print((await client.get_run(run.run_id)).result.answer)

A sidecar with TLS and callers' tokens (docs/security.md)::

    AgentClient("sidecar.example:50051", tls=True, ca_file="ca.pem", token=os.environ["TOKEN"])
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentsidecar.addresses import is_local_target
from agentsidecar.errors import error_details
from agentsidecar.tls import channel_credentials
from agentsidecar.v1 import agent_pb2, agent_pb2_grpc

__all__ = ["AgentClient", "ApprovalHandler", "Decision"]


@dataclass(frozen=True)
class Decision:
    """An answer to an ``approval_required`` event: approve the call, or deny it with a reason.

    Attributes:
        approved: True runs the call; False denies it.
        reason: Why it was denied, shown to the model. Ignored for an approval.
        answer: The answer to the event's ``question`` (a running tool asking its caller),
            a JSON object matching ``question.requested_schema``; None for no question.
    """

    approved: bool
    reason: str = ""
    answer: Mapping[str, Any] | None = None

    @classmethod
    def approve(cls) -> Decision:
        """Run the call."""
        return cls(True)

    @classmethod
    def reply(cls, answer: Mapping[str, Any]) -> Decision:
        """Answer the tool's question with ``answer``."""
        return cls(True, answer=answer)

    @classmethod
    def deny(cls, reason: str = "") -> Decision:
        """Do not run the call; the model is told ``reason``."""
        return cls(False, reason)


ApprovalHandler = Callable[
    [agent_pb2.ApprovalRequired], "Awaitable[Decision | bool] | Decision | bool"
]
"""Decides an ``approval_required`` event: returns (or, when async, resolves to) a
:class:`Decision`, or a bool (True approves, False denies without a reason)."""


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
        on_approval: ApprovalHandler | None = None,
    ) -> AsyncGenerator[agent_pb2.StreamRunResponse, None]:
        """Run a turn and yield its events; the last one carries ``run_finished``.

        Closing the generator early cancels the run and its tool calls; use
        ``contextlib.aclosing`` to close it the moment you leave the loop (otherwise it
        closes when it is garbage-collected). ``metadata`` is sent with the call: a W3C
        ``traceparent`` (and ``tracestate``, ``baggage``) there makes the run part of the
        caller's trace.

        With ``on_approval``, each ``approval_required`` event is handed to it when it
        arrives (it may take its time: ask a person); its decision is sent with
        ``ApproveToolCall``, then the event is yielded. A call that no longer waits
        (``CALL_NOT_PENDING``: it timed out meanwhile) does not end the stream; its own
        events say how it ended. Without ``on_approval``, decide with :meth:`approve` or
        :meth:`deny` while iterating.

        Raises:
            grpc.aio.AioRpcError: the call failed; branch on
                ``agentsidecar.errors.error_details(exc).reason``.
            Exception: whatever ``on_approval`` raised; the run is cancelled first.
        """
        mode = agent_pb2.OUTPUT_MODE_STRUCTURED if structured else agent_pb2.OUTPUT_MODE_STREAMED
        call = self.stub.StreamRun(
            agent_pb2.StreamRunRequest(session_id=session_id, input=user_input, output_mode=mode),
            timeout=timeout,
            metadata=(*self._auth, *metadata) or None,
        )
        try:
            async for event in call:
                if on_approval is not None and event.HasField("approval_required"):
                    await self._decide(session_id, event.approval_required, on_approval)
                yield event
        finally:
            call.cancel()

    async def _decide(
        self,
        session_id: str,
        request: agent_pb2.ApprovalRequired,
        handler: ApprovalHandler,
    ) -> None:
        answer = handler(request)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, bool):
            answer = Decision(answer)
        if not isinstance(answer, Decision):
            raise TypeError(
                f"on_approval returned {answer!r}; return Decision.approve(), "
                "Decision.deny(reason) or a bool"
            )
        try:
            await self.approve(
                session_id,
                request.call_id,
                approved=answer.approved,
                reason=answer.reason,
                answer=answer.answer,
            )
        except grpc.aio.AioRpcError as exc:
            # The call stopped waiting meanwhile (its approval timed out): its own events
            # on this stream say how it ended.
            if error_details(exc).reason != "CALL_NOT_PENDING":
                raise

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
        answer: Mapping[str, Any] | None = None,
        timeout: float | None = 10.0,
    ) -> None:
        """Approve or deny a tool call announced by an ``approval_required`` event; with a
        ``question`` in the event, ``answer`` answers it (a JSON object matching its
        ``requested_schema``)."""
        decision = (
            agent_pb2.APPROVAL_DECISION_APPROVE if approved else agent_pb2.APPROVAL_DECISION_DENY
        )
        await self.stub.ApproveToolCall(
            agent_pb2.ApproveToolCallRequest(
                session_id=session_id,
                call_id=call_id,
                decision=decision,
                reason=reason,
                answer=json.dumps(answer) if answer is not None else "",
            ),
            timeout=timeout,
            metadata=self._auth or None,
        )

    async def deny(
        self, session_id: str, call_id: str, reason: str = "", *, timeout: float | None = 10.0
    ) -> None:
        """Deny a tool call announced by an ``approval_required`` event; the model reads
        ``reason``. The same as ``approve(..., approved=False, reason=reason)``."""
        await self.approve(session_id, call_id, approved=False, reason=reason, timeout=timeout)

    async def list_session_tools(
        self, session_id: str, *, timeout: float | None = 10.0
    ) -> list[agent_pb2.SessionTool]:
        """The tools a session's profile offers, each with its server and availability
        (``ListSessionTools``)."""
        response = await self.stub.ListSessionTools(
            agent_pb2.ListSessionToolsRequest(session_id=session_id),
            timeout=timeout,
            metadata=self._auth or None,
        )
        return list(response.tools)

    list_tools = list_session_tools
    """The name ``list_session_tools`` had first; kept for code written against it."""

    # -- background runs ------------------------------------------------------------------

    async def start_run(
        self,
        session_id: str,
        user_input: str,
        *,
        structured: bool = False,
        callback_url: str = "",
        request_id: str = "",
        timeout: float | None = 10.0,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> agent_pb2.Run:
        """Start a background run (``StartRun``): it goes on without the caller. Returns
        the run at once (``RUN_STATE_SUBMITTED`` or later); ``callback_url`` is told its
        final state. With a ``request_id`` (a key the caller makes for this run, such as
        ``uuid.uuid4().hex``) a retry after a lost answer returns the run the first call
        started; without one, a retry starts a second run."""
        mode = agent_pb2.OUTPUT_MODE_STRUCTURED if structured else agent_pb2.OUTPUT_MODE_STREAMED
        request = agent_pb2.StartRunRequest(
            session_id=session_id,
            input=user_input,
            output_mode=mode,
            callback=agent_pb2.RunCallback(url=callback_url) if callback_url else None,
            request_id=request_id,
        )
        response: agent_pb2.StartRunResponse = await self.stub.StartRun(
            request, timeout=timeout, metadata=(*self._auth, *metadata) or None
        )
        return response.run

    async def watch_run(
        self,
        run_id: str,
        *,
        after_sequence: int = 0,
        timeout: float | None = None,
        reconnect: bool = True,
    ) -> AsyncGenerator[agent_pb2.StreamRunResponse, None]:
        """Yield a background run's events after ``after_sequence`` until the last one
        (``run_finished``), stored ones first (``WatchRun``).

        With ``reconnect`` (the default), a stream that breaks off before the last event
        (the sidecar restarting, a replica stopping, the network) is watched again from
        the last event yielded, with a short backoff, until ``timeout`` seconds have passed
        in all (None: no end): no event is missed, none is yielded twice.

        Without ``reconnect``, a stream that breaks off raises; watch again from the last
        sequence seen.

        Raises:
            grpc.aio.AioRpcError: a failure that reconnecting cannot mend (RUN_NOT_FOUND,
                UNAUTHENTICATED ...), or the last one when ``timeout`` ran out.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        last = after_sequence
        backoff = 0.05
        while True:
            left = None if deadline is None else max(0.001, deadline - time.monotonic())
            call = self.stub.WatchRun(
                agent_pb2.WatchRunRequest(run_id=run_id, after_sequence=last),
                timeout=left,
                metadata=self._auth or None,
            )
            try:
                async for response in call:
                    event = response.event
                    last = event.sequence
                    backoff = 0.05
                    yield event
                    if event.HasField("run_finished"):
                        return
                # Ended cleanly: the run has finished and every event after ``last`` was
                # sent (none, when the caller had them all already).
                return
            except grpc.aio.AioRpcError as exc:
                out_of_time = deadline is not None and time.monotonic() >= deadline
                if not reconnect or out_of_time or exc.code() not in _RECONNECT:
                    raise
            finally:
                call.cancel()
            await asyncio.sleep(backoff)
            backoff = min(2.0, backoff * 2)

    async def get_run(self, run_id: str, *, timeout: float | None = 10.0) -> agent_pb2.Run:
        """A background run: its state, and its result once it finished (``GetRun``)."""
        response: agent_pb2.GetRunResponse = await self.stub.GetRun(
            agent_pb2.GetRunRequest(run_id=run_id), timeout=timeout, metadata=self._auth or None
        )
        return response.run

    async def list_runs(
        self,
        session_id: str = "",
        *,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = 10.0,
    ) -> agent_pb2.ListRunsResponse:
        """A page of a session's background runs (no ``session_id``: the caller's in all
        its sessions), newest first, without their results (``ListRuns``);
        ``next_page_token`` continues it."""
        response: agent_pb2.ListRunsResponse = await self.stub.ListRuns(
            agent_pb2.ListRunsRequest(
                session_id=session_id, page_size=page_size, page_token=page_token
            ),
            timeout=timeout,
            metadata=self._auth or None,
        )
        return response

    async def cancel_run(self, run_id: str, *, timeout: float | None = 20.0) -> agent_pb2.Run:
        """Cancel a background run and its tool calls in flight (``CancelRun``); returns it
        once cancelled (or as it finished, when it had). Safe to retry."""
        response: agent_pb2.CancelRunResponse = await self.stub.CancelRun(
            agent_pb2.CancelRunRequest(run_id=run_id), timeout=timeout, metadata=self._auth or None
        )
        return response.run


_RECONNECT = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)
"""Codes of a watch that broke off, which watching again can mend."""
