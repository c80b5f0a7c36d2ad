"""Helpers shared by the test modules: stacks of real processes, scripted servers, a
private PostgreSQL server and an OTLP receiver."""

from pathlib import Path

SUPPORT = Path(__file__).parent
ROOT = SUPPORT.parent.parent
"""The repository's root."""
SCRIPTED_TOOLSERVER = SUPPORT / "scripted_toolserver.py"
"""A tool server written from the protos alone, whose tools script behaviours."""
TAIL_TOOLSERVER = SUPPORT / "tail_toolserver.py"
"""An SDK tool server whose calls are late on request (hedging)."""
TOOLSERVER_FIXTURES = SUPPORT / "toolserver_fixtures.py"
"""An SDK tool server whose tools let a test observe the SDK."""
SIDECAR_SCENARIO = SUPPORT / "sidecar_scenario.yaml"
"""The simulator's scripted rules for the sidecar tests."""
