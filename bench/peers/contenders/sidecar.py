"""The sidecar: a gRPC client → sidecar → simulator over HTTP, tool servers over gRPC."""

from __future__ import annotations

import time
from collections import deque

import grpc

from agentsidecar.v1 import agent_pb2, agent_pb2_grpc
from bench.workload import PROMPT, Mode

_OWN_STAGES = (
    agent_pb2.STAGE_KIND_QUEUE,
    agent_pb2.STAGE_KIND_CONTEXT_BUILD,
    agent_pb2.STAGE_KIND_PERSISTENCE,
    agent_pb2.STAGE_KIND_OVERHEAD,
)


def breakdown(timeline: agent_pb2.Timeline, latency_ms: float, mode: Mode) -> dict[str, float]:
    """Where one run's overhead went, in ms, from the timeline the sidecar returned.

    ``model``: the model calls beyond their simulated latency (the simulator's timer, the
    HTTP exchange); ``tools``: each tool step's span beyond its slowest tool's latency
    (the gRPC hops, the tool server, its timer); ``sidecar``: the sidecar's own stages
    (queue, context, persistence, the rest of its work); ``client_hop``: what the caller
    saw beyond the sidecar's total (the gRPC hop in and out).
    """
    model = own = 0.0
    steps: dict[int, list[float]] = {}
    for stage in timeline.stages:
        duration = stage.duration.ToNanoseconds() / 1e6
        if stage.kind == agent_pb2.STAGE_KIND_MODEL_CALL:
            model += duration
        elif stage.kind == agent_pb2.STAGE_KIND_TOOL_CALL:
            start = stage.start_offset.ToNanoseconds() / 1e6
            span = steps.setdefault(stage.step, [start, start + duration])
            span[0], span[1] = min(span[0], start), max(span[1], start + duration)
        elif stage.kind in _OWN_STAGES:
            own += duration
    slowest_tool = max(mode.tool_ms.values(), default=0.0)
    return {
        "model": model - 2 * mode.model_ms,
        "tools": sum(end - start - slowest_tool for start, end in steps.values()),
        "sidecar": own,
        "client_hop": latency_ms - timeline.total.ToNanoseconds() / 1e6,
    }


class Contender:
    def __init__(self) -> None:
        self._stubs: dict[str, agent_pb2_grpc.AgentServiceStub] = {}
        self._sessions: deque[str] = deque()
        # Each run's timeline and latency, turned into breakdowns only after the batch:
        # work between runs would delay the next response in the client's loop.
        self._runs: list[tuple[agent_pb2.Timeline, float, Mode]] = []

    def _stub(self, target: str) -> agent_pb2_grpc.AgentServiceStub:
        stub = self._stubs.get(target)
        if stub is None:
            stub = self._stubs[target] = agent_pb2_grpc.AgentServiceStub(
                grpc.aio.insecure_channel(target)
            )
        return stub

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        """Sent with every call (a caller's token, for a sidecar that wants one)."""
        return ()

    def take_breakdowns(self) -> list[dict[str, float]]:
        """Where each run since the last call spent its overhead (see :func:`breakdown`)."""
        runs, self._runs = self._runs, []
        return [breakdown(timeline, latency, mode) for timeline, latency, mode in runs]

    async def prepare(self, mode: Mode, target: str, runs: int) -> None:
        stub = self._stub(target)
        self._sessions.clear()
        for _ in range(runs):
            response = await stub.CreateSession(
                agent_pb2.CreateSessionRequest(), timeout=10, metadata=self._metadata() or None
            )
            self._sessions.append(response.session.session_id)

    async def run_once(self, mode: Mode, target: str) -> None:
        session_id = self._sessions.popleft()
        started = time.perf_counter()
        response = await self._stub(target).Run(
            agent_pb2.RunRequest(session_id=session_id, input=PROMPT),
            timeout=60,
            metadata=self._metadata() or None,
        )
        latency_ms = (time.perf_counter() - started) * 1000
        self._runs.append((response.result.timeline, latency_ms, mode))
        if response.result.stop_reason != agent_pb2.STOP_REASON_ANSWERED or (
            response.result.tool_calls != 3
        ):
            raise RuntimeError(f"unexpected run result: {response.result}")
