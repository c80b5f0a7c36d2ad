"""Load: virtual users holding conversations with the sidecar, one turn after another.

Each virtual user opens a session, runs up to ``turns_per_session`` turns in it back to
back (no think time: a closed loop, so the sidecar always has ``users`` runs in flight),
checks that every finished run left its turn in the session, deletes the session and
opens the next. Even-numbered users stream (``StreamRun``), odd ones call ``Run``. Every
attempt ends up in a :class:`~bench.soak.outcomes.Tally` as completed, degraded or lost.

After a refused attempt (the sidecar draining or not listening), the user waits until
the sidecar's health says SERVING again, polling every 0.1-0.3 s, as a load balancer
routes around a draining replica. When the sidecar restarts, its in-memory
sessions are gone: whoever restarts it bumps :attr:`Load.generation`, and a user whose
session predates the restart starts a new conversation instead of counting a loss.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentsidecar.v1 import agent_pb2, agent_pb2_grpc
from bench.soak.outcomes import Outcome, Tally, Verdict, classify_result, classify_status
from bench.workload import PROMPT

# Reconnect quickly when the sidecar restarts; grpc's default backoff grows to minutes.
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
]
_CONTROL_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class Attempt:
    """One run attempt: how it was judged, and the status code when there was one."""

    outcome: Outcome
    code: grpc.StatusCode | None = None


async def drive_turn(
    stub: agent_pb2_grpc.AgentServiceStub,
    session_id: str,
    text: str = PROMPT,
    *,
    stream: bool,
    timeout: float,
    expect_tools: bool = True,
) -> Attempt:
    """Run one turn through ``StreamRun`` or ``Run`` and judge how it ended."""
    start = time.perf_counter()
    result: agent_pb2.RunResult | None = None
    run_id = ""
    if stream:
        call = stub.StreamRun(
            agent_pb2.StreamRunRequest(
                session_id=session_id, input=text, output_mode=agent_pb2.OUTPUT_MODE_STREAMED
            ),
            timeout=timeout,
        )
        started = False
        try:
            async for event in call:
                started = True
                run_id = event.run_id
                if event.WhichOneof("event") == "run_finished":
                    result = event.run_finished
        except grpc.aio.AioRpcError as exc:
            if result is None:
                verdict, reason = classify_status(exc, started=started)
                return Attempt(Outcome(verdict, f"StreamRun {reason}", run_id=run_id), exc.code())
        if result is None:
            return Attempt(
                Outcome(Verdict.LOST, "StreamRun ended without run_finished", None, run_id)
            )
    else:
        try:
            response = await stub.Run(
                agent_pb2.RunRequest(session_id=session_id, input=text), timeout=timeout
            )
        except grpc.aio.AioRpcError as exc:
            verdict, reason = classify_status(exc, started=False)
            return Attempt(Outcome(verdict, f"Run {reason}"), exc.code())
        result, run_id = response.result, response.run_id
    latency = time.perf_counter() - start
    verdict, reason = classify_result(result, expect_tools=expect_tools)
    return Attempt(Outcome(verdict, reason, latency, run_id))


class Load:
    """Virtual users against one sidecar address, over a few shared channels."""

    def __init__(
        self,
        target: str,
        *,
        users: int,
        turns_per_session: int = 5,
        run_timeout: float = 30.0,
        channels: int = 8,
        text: str = PROMPT,
        profile: str = "default",
    ) -> None:
        self._channels = [
            grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) for _ in range(channels)
        ]
        self._stubs = [agent_pb2_grpc.AgentServiceStub(c) for c in self._channels]
        self._health = [health_pb2_grpc.HealthStub(c) for c in self._channels]
        self.users = users
        self.turns_per_session = turns_per_session
        self.run_timeout = run_timeout
        self.text = text
        self.profile = profile
        self.generation = 0
        """Bumped by whoever restarts the sidecar: sessions of older generations are gone."""
        self.sessions = Counter[str]()
        """Session bookkeeping: opened, checked, check_skipped, gone_with_restart."""

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()

    async def run(self, tally: Tally, stop: asyncio.Event) -> None:
        """Drive every user until ``stop`` is set and their current run has ended."""
        async with asyncio.TaskGroup() as group:
            for index in range(self.users):
                group.create_task(self._user(index, tally, stop))

    async def _user(self, index: int, tally: Tally, stop: asyncio.Event) -> None:
        stub = self._stubs[index % len(self._stubs)]
        health = self._health[index % len(self._health)]
        stream = index % 2 == 0
        while not stop.is_set():
            opened = await self._open(stub, health, tally, stop)
            if opened is None:
                return
            session_id, generation = opened
            outcomes: list[Outcome] = []
            for _ in range(self.turns_per_session):
                if stop.is_set():
                    break
                attempt = await drive_turn(
                    stub, session_id, self.text, stream=stream, timeout=self.run_timeout
                )
                if attempt.code == grpc.StatusCode.NOT_FOUND and generation != self.generation:
                    self.sessions["gone_with_restart"] += 1
                    outcomes.append(
                        Outcome(Verdict.DEGRADED, "refused: session gone with the restart")
                    )
                    break
                outcomes.append(attempt.outcome)
                if attempt.outcome.latency is None and attempt.outcome.verdict is Verdict.DEGRADED:
                    await _until_serving(health, stop)
            for outcome in await self._check_turns(stub, session_id, generation, outcomes):
                tally.add(outcome)
            await _quietly(
                stub.DeleteSession(
                    agent_pb2.DeleteSessionRequest(session_id=session_id),
                    timeout=_CONTROL_TIMEOUT,
                )
            )

    async def _open(
        self,
        stub: agent_pb2_grpc.AgentServiceStub,
        health: health_pb2_grpc.HealthStub,
        tally: Tally,
        stop: asyncio.Event,
    ) -> tuple[str, int] | None:
        """Open a session, retrying refusals (each one counts as a refused attempt)."""
        while not stop.is_set():
            generation = self.generation
            try:
                response = await stub.CreateSession(
                    agent_pb2.CreateSessionRequest(profile=self.profile), timeout=_CONTROL_TIMEOUT
                )
            except grpc.aio.AioRpcError as exc:
                verdict, reason = classify_status(exc, started=False)
                tally.add(Outcome(verdict, f"CreateSession {reason}"))
                await _until_serving(health, stop)
                continue
            self.sessions["opened"] += 1
            return response.session.session_id, generation
        return None

    async def _check_turns(
        self,
        stub: agent_pb2_grpc.AgentServiceStub,
        session_id: str,
        generation: int,
        outcomes: list[Outcome],
    ) -> list[Outcome]:
        """Every run that returned a result must have left its turn in the session."""
        expected = {o.run_id for o in outcomes if o.latency is not None}
        if not expected:
            return outcomes
        try:
            response = await stub.GetSession(
                agent_pb2.GetSessionRequest(session_id=session_id), timeout=_CONTROL_TIMEOUT
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND and generation == self.generation:
                self.sessions["vanished"] += 1
                return [Outcome(Verdict.LOST, "session vanished") for _ in outcomes]
            # Gone with a restart, or the sidecar is down: nothing left to check against.
            self.sessions["check_skipped"] += 1
            return outcomes
        self.sessions["checked"] += 1
        recorded = {turn.run_id for turn in response.session.turns}
        return [
            Outcome(Verdict.LOST, "turn missing from its session", None, o.run_id)
            if o.run_id in expected and o.run_id not in recorded
            else o
            for o in outcomes
        ]


async def _until_serving(health: health_pb2_grpc.HealthStub, stop: asyncio.Event) -> None:
    """Wait until the sidecar's health says SERVING, or until the load stops."""
    while not stop.is_set():
        try:
            reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=_CONTROL_TIMEOUT)
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.aio.AioRpcError:
            pass  # not listening (restarting): poll again
        try:
            async with asyncio.timeout(random.uniform(0.1, 0.3)):
                await stop.wait()
        except TimeoutError:
            pass


async def _quietly(call: Awaitable[object]) -> None:
    try:
        await call
    except grpc.aio.AioRpcError:
        pass  # the session goes with the process anyway
