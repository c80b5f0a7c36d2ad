"""The sidecar: a gRPC client → sidecar → simulator over HTTP, tool servers over gRPC."""

from __future__ import annotations

from collections import deque

import grpc

from agentsidecar.v1 import agent_pb2, agent_pb2_grpc
from bench.workload import PROMPT, Mode


class Contender:
    def __init__(self) -> None:
        self._stubs: dict[str, agent_pb2_grpc.AgentServiceStub] = {}
        self._sessions: deque[str] = deque()

    def _stub(self, target: str) -> agent_pb2_grpc.AgentServiceStub:
        stub = self._stubs.get(target)
        if stub is None:
            stub = self._stubs[target] = agent_pb2_grpc.AgentServiceStub(
                grpc.aio.insecure_channel(target)
            )
        return stub

    async def prepare(self, mode: Mode, target: str, runs: int) -> None:
        stub = self._stub(target)
        self._sessions.clear()
        for _ in range(runs):
            response = await stub.CreateSession(agent_pb2.CreateSessionRequest(), timeout=10)
            self._sessions.append(response.session.session_id)

    async def run_once(self, mode: Mode, target: str) -> None:
        session_id = self._sessions.popleft()
        response = await self._stub(target).Run(
            agent_pb2.RunRequest(session_id=session_id, input=PROMPT), timeout=60
        )
        if response.result.stop_reason != agent_pb2.STOP_REASON_ANSWERED or (
            response.result.tool_calls != 3
        ):
            raise RuntimeError(f"unexpected run result: {response.result}")
