"""Background runs: turns that outlive their caller. Started with an id at once, their
events stored as they happen and watched from any point on any replica, cancelled, resumed
after the process running them stopped when that is safe, and their completion told to a
callback. :class:`BackgroundRuns` is what fronts call; a front gives it a
:class:`RunCodec`, the stored form of events and results.
"""

from sidecar.agent.runs.background import BackgroundRuns, RunPage
from sidecar.agent.runs.codec import RunCodec

__all__ = ["BackgroundRuns", "RunCodec", "RunPage"]
