"""LangChain's ``create_agent`` (on LangGraph) with ``langchain-openai``, tools in-process."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_openai import ChatOpenAI

from bench.peers.contenders._langchain_tools import langchain_tools
from bench.workload import MODEL, PROMPT, SYSTEM, Mode


class Contender:
    def __init__(self) -> None:
        self._agents: dict[tuple[str, str], Any] = {}

    def _agent(self, mode: Mode, target: str) -> Any:
        key = (mode.name, target)
        if key not in self._agents:
            model = ChatOpenAI(model=MODEL, base_url=target, api_key="bench", max_retries=0)
            self._agents[key] = create_agent(model, langchain_tools(mode), system_prompt=SYSTEM)
        return self._agents[key]

    async def run_once(self, mode: Mode, target: str) -> None:
        state = await self._agent(mode, target).ainvoke(
            {"messages": [{"role": "user", "content": PROMPT}]}
        )
        if len(state["messages"]) != 6:
            raise RuntimeError(f"unexpected conversation: {len(state['messages'])} messages")
