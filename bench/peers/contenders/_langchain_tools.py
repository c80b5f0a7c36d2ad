"""The three tools as LangChain tools, bound to a latency mode."""

from __future__ import annotations

from typing import Any

from langchain_core.tools import StructuredTool

from bench.workload import TOOL_DESCRIPTIONS, Mode, run_tool_async


def langchain_tools(mode: Mode) -> list[Any]:
    def make(name: str) -> Any:
        async def tool(sku: str) -> dict[str, object]:
            return await run_tool_async(mode, name, sku)

        return StructuredTool.from_function(
            coroutine=tool, name=name, description=TOOL_DESCRIPTIONS[name]
        )

    return [make(name) for name in TOOL_DESCRIPTIONS]
