"""Errors raised while configuring the LLM simulator.

The simulator answers bad *requests* with HTTP errors, never exceptions; these are only
for bad configuration handed to it (a scenario file, a fault specification)::

    SimulatorError
    ├── ScenarioError      a scenario file or structure is malformed
    └── FaultSpecError     a fault specification is malformed
"""

from __future__ import annotations


class SimulatorError(Exception):
    """Root of the simulator's configuration errors."""


class ScenarioError(SimulatorError):
    """A scenario file or structure is malformed; the message names the offending rule."""


class FaultSpecError(SimulatorError):
    """A fault specification is malformed; the message names the offending field."""
