"""LangGraph's prebuilt ReAct agent with ``langchain-openai``, tools in-process."""

from __future__ import annotations

from typing import Any

from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent

from bench.peers.contenders._langchain_tools import langchain_tools
from bench.workload import MODEL, PROMPT, SYSTEM, Mode


class Contender:
    def __init__(self) -> None:
        self._agents: dict[tuple[str, str], Any] = {}

    def _agent(self, mode: Mode, target: str) -> Any:
        key = (mode.name, target)
        if key not in self._agents:
            model = ChatOpenAI(model=MODEL, base_url=target, api_key="bench", max_retries=0)
            self._agents[key] = create_react_agent(model, langchain_tools(mode), prompt=SYSTEM)
        return self._agents[key]

    async def run_once(self, mode: Mode, target: str) -> None:
        state = await self._agent(mode, target).ainvoke({"messages": [("user", PROMPT)]})
        if len(state["messages"]) != 6:  # user, ai(3 calls), 3 tool results, ai answer
            raise RuntimeError(f"unexpected conversation: {len(state['messages'])} messages")
