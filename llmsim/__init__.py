"""The built-in LLM simulator: a real HTTP server speaking Groq's chat-completions protocol.

It is a simulator, never a model: every text answer starts with ``[simulated]`` and every
response carries ``system_fingerprint: "agent-sidecar-llm-simulator"``. The sidecar, its
demo, tests and benchmarks use it when no model key is configured. Planning rules, the
scenario format, faults and latency options are described in ``docs/llm-simulator.md``.

Run it alone with ``python -m llmsim --port 0``; it prints
``listening on HOST:PORT`` once it accepts connections. Embed it with::

    simulator = LLMSimulator(SimulatorOptions(ttft_ms=50))
    await simulator.start()
    client = openai.AsyncOpenAI(base_url=simulator.base_url, api_key="sim")
    ...
    await simulator.stop()

The package is its own process and imports nothing of the sidecar's. Its private modules
have one job each: ``_server`` (HTTP routes), ``_planner`` (what to answer), ``_arguments``
(schema-shaped values), ``_text`` (reading the user's text), ``_scenario`` (scripted
rules), ``_recording`` (a recording's model side as rules), ``_faults`` (fault queue),
``_wire`` (response bytes), ``_ratelimit``, ``_prompt_cache``, ``_validation``; ``_cli``
is the command line (``python -m llmsim``).
"""

from __future__ import annotations

from llmsim._cli import add_arguments, main, options_from_args, serve_from_args
from llmsim._errors import FaultSpecError, ScenarioError, SimulatorError
from llmsim._faults import Fault
from llmsim._options import SimulatorOptions
from llmsim._scenario import Scenario
from llmsim._server import LLMSimulator

__all__ = [
    "Fault",
    "FaultSpecError",
    "LLMSimulator",
    "Scenario",
    "ScenarioError",
    "SimulatorError",
    "SimulatorOptions",
    "add_arguments",
    "main",
    "options_from_args",
    "serve_from_args",
]
