"""The command line, ``agent-sidecar``: serve, check a configuration, run the LLM simulator
or the demo, print a latency bill, publish the identity key, export recorded turns, replay
them against a configuration, report on shadow variants. Configuration is read here, once,
and passed down; nothing below reads the environment.
"""

from sidecar.commands.cli import main

__all__ = ["main"]
