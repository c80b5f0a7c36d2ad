"""How much longer than usual a wait in a test may take on this machine, now.

A wait sized for an idle machine fails on a loaded one: a sidecar with every front that
starts in 4 s at load 3 took 43-55 s at load 12 on two cores. Every wait of the test
harness (a process announcing its address, a state polled in another process, a test's
own time limit) is multiplied by :func:`slowness`:

- ``AGENT_SIDECAR_TEST_SLOWNESS`` (a number, at least 1) when it is set: CI on a machine
  known to be slow, or a run beside other work;
- else the machine's load per core right now (the 1-minute load average over the cores),
  at least 1 and at most :data:`MAX_SLOWNESS`: the CPU a process gets shrinks about in
  proportion.
"""

from __future__ import annotations

import os

__all__ = ["MAX_SLOWNESS", "SLOWNESS_ENV", "scaled", "slowness"]

SLOWNESS_ENV = "AGENT_SIDECAR_TEST_SLOWNESS"
MAX_SLOWNESS = 8.0
"""The most the load alone stretches a wait: past it a test that waits is likely hung."""


def slowness() -> float:
    """The factor waits are stretched by, now (see the module's docstring)."""
    told = os.environ.get(SLOWNESS_ENV, "").strip()
    if told:
        try:
            return max(1.0, float(told))
        except ValueError:
            raise ValueError(f"{SLOWNESS_ENV}={told!r} is not a number") from None
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform
        return 1.0
    return min(MAX_SLOWNESS, max(1.0, load / (os.cpu_count() or 1)))


def scaled(seconds: float) -> float:
    """``seconds`` of waiting, stretched for this machine's pace now."""
    return seconds * slowness()
