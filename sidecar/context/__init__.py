"""The model's input: the history window over a session's turns, tool-result trimming,
session memory, and the calibration of token estimates by what the provider counts.
"""

from sidecar.context.assembler import ContextAssembler
from sidecar.context.memory import MemoryKeeper
from sidecar.context.trim import ResultTrimmer
from sidecar.context.window import Window, WindowPolicy

__all__ = ["ContextAssembler", "MemoryKeeper", "ResultTrimmer", "Window", "WindowPolicy"]
