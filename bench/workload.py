"""The agent workload every contender runs, and the in-process tools the peers use.

One user turn = 2 model calls (the first asks for 3 parallel tool calls) + 3 tool calls.
The LLM simulator plans the same three calls for every contender, because every
contender offers the same three tools (same names, same one-argument schema).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

PROMPT = "Is SKU X-100 in inventory, what is its price, and is there a discount?"
MODEL = "bench-model"
SYSTEM = "You are a helpful assistant. Use the tools when they help."


@dataclass(frozen=True)
class Mode:
    """One latency setting of the workload."""

    name: str
    model_ms: float
    """Simulated model latency per call (time before the response)."""
    tool_ms: dict[str, float]
    """Simulated handler latency per tool."""

    @property
    def ideal_ms(self) -> float:
        """The critical path: two model calls and the slowest tool."""
        return 2 * self.model_ms + max(self.tool_ms.values(), default=0.0)


ZERO = Mode("zero", 0.0, {"check_inventory": 0.0, "get_price": 0.0, "get_discount": 0.0})
REALISTIC = Mode(
    "realistic", 50.0, {"check_inventory": 30.0, "get_price": 20.0, "get_discount": 10.0}
)
MODES = {m.name: m for m in (ZERO, REALISTIC)}

TOOL_DESCRIPTIONS = {
    "check_inventory": "How many units of a SKU are in stock.",
    "get_price": "A SKU's list price.",
    "get_discount": "The discount that applies to a SKU today.",
}


def tool_result(name: str, sku: str) -> dict[str, object]:
    """What each tool returns (small, fixed payloads, like the example shop server)."""
    if name == "check_inventory":
        return {"sku": sku, "available": 38, "source": "bench data"}
    if name == "get_price":
        return {"sku": sku, "price": 177.01, "currency": "EUR", "source": "bench data"}
    return {"sku": sku, "percent": 15, "source": "bench data"}


async def run_tool_async(mode: Mode, name: str, sku: str) -> dict[str, object]:
    delay = mode.tool_ms[name] / 1000
    if delay:
        await asyncio.sleep(delay)
    return tool_result(name, sku)


def run_tool_sync(mode: Mode, name: str, sku: str) -> dict[str, object]:
    delay = mode.tool_ms[name] / 1000
    if delay:
        time.sleep(delay)
    return tool_result(name, sku)


def openai_tools() -> list[dict[str, object]]:
    """The three tools in the chat-completions ``tools`` shape."""
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": {
                    "type": "object",
                    "properties": {"sku": {"type": "string", "description": "The SKU."}},
                    "required": ["sku"],
                },
            },
        }
        for name, description in TOOL_DESCRIPTIONS.items()
    ]
