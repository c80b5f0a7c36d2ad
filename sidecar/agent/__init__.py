"""The agent, transport-free: a :class:`Runtime` that builds everything a turn needs from a
configuration and owns reload, and the :class:`Agent` every front calls (sessions, turns,
approvals, the drain); the :class:`Recorder` that records turns and runs shadow variants,
and :func:`rerun`, which runs a recorded turn again (a replay, a shadow). Nothing here
speaks gRPC or imports generated code.
"""

from sidecar.agent.agent import DEFAULT_RUN_TIMEOUT, Agent, ClaimedTurn, SessionPage
from sidecar.agent.approvals import Decision
from sidecar.agent.replay.recorder import Recorder
from sidecar.agent.replay.rerun import RerunPlan, rerun
from sidecar.agent.runtime import Runtime
from sidecar.agent.scope import RunScope
from sidecar.agent.snapshot import Snapshot

__all__ = [
    "DEFAULT_RUN_TIMEOUT",
    "Agent",
    "ClaimedTurn",
    "Decision",
    "Recorder",
    "RerunPlan",
    "RunScope",
    "Runtime",
    "SessionPage",
    "Snapshot",
    "rerun",
]
