"""The sidecar, each run's session created inside the timed run (a one-shot caller)."""

from __future__ import annotations

from agentsidecar.v1 import agent_pb2
from bench.peers.contenders import sidecar
from bench.workload import Mode


class Contender(sidecar.Contender):
    async def prepare(self, mode: Mode, target: str, runs: int) -> None:
        self._stub(target)  # the channel is set up ahead; the sessions are not

    async def run_once(self, mode: Mode, target: str) -> None:
        response = await self._stub(target).CreateSession(
            agent_pb2.CreateSessionRequest(), timeout=10
        )
        self._sessions.append(response.session.session_id)
        await super().run_once(mode, target)
