"""Recorded turns: their format, the files they are kept in, the results they answer tool
calls with, and how a new run of a turn compares with its recording.

A turn is recorded by the agent (``sidecar.agent.replay.recorder``) as one JSON document
(:mod:`~sidecar.recording.format`, versioned and documented in ``docs/replay.md``),
appended to a file of a bounded directory (:mod:`~sidecar.recording.files`). A replay or
a shadow variant runs the turn again with its tool calls answered from the recording
(:mod:`~sidecar.recording.answers`) and compares the two (:mod:`~sidecar.recording.compare`).
"""

from sidecar.recording.answers import RecordedAnswers
from sidecar.recording.compare import (
    Summary,
    TurnComparison,
    compare_turn,
    same_answer,
    summarize,
)
from sidecar.recording.files import RecordingFiles, TurnFilter, export
from sidecar.recording.format import (
    FORMAT,
    VERSION,
    RecordedCall,
    RecordedTurn,
    bounded,
    read_lines,
    read_turns,
    redacted,
)

__all__ = [
    "FORMAT",
    "VERSION",
    "RecordedAnswers",
    "RecordedCall",
    "RecordedTurn",
    "RecordingFiles",
    "Summary",
    "TurnComparison",
    "TurnFilter",
    "bounded",
    "compare_turn",
    "export",
    "read_lines",
    "read_turns",
    "redacted",
    "same_answer",
    "summarize",
]
