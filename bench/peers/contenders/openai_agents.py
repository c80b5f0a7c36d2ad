"""The OpenAI Agents SDK (``openai-agents``) with function tools, in-process."""

from __future__ import annotations

from typing import Any

import openai
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)

from bench.workload import MODEL, PROMPT, SYSTEM, TOOL_DESCRIPTIONS, Mode, run_tool_async

set_tracing_disabled(True)  # no export to a hosted tracing backend


class Contender:
    def __init__(self) -> None:
        self._agents: dict[tuple[str, str], Any] = {}

    def _agent(self, mode: Mode, target: str) -> Any:
        key = (mode.name, target)
        if key not in self._agents:
            client = openai.AsyncOpenAI(base_url=target, api_key="bench", max_retries=0)

            def make(name: str) -> Any:
                async def tool(sku: str) -> dict[str, object]:
                    return await run_tool_async(mode, name, sku)

                tool.__name__ = name
                tool.__doc__ = TOOL_DESCRIPTIONS[name]
                return function_tool(tool)

            self._agents[key] = Agent(
                name="bench",
                instructions=SYSTEM,
                model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
                tools=[make(n) for n in TOOL_DESCRIPTIONS],
            )
        return self._agents[key]

    async def run_once(self, mode: Mode, target: str) -> None:
        result = await Runner.run(self._agent(mode, target), PROMPT)
        if not str(result.final_output).startswith("[simulated]"):
            raise RuntimeError(f"unexpected answer: {result.final_output!r}")
