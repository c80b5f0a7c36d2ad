"""The tools of the payloads OpenAI-compatible servers were reported with: the weather,
and arithmetic. ``python tests/llm/shapes_toolserver.py --port 0``."""

from __future__ import annotations

from toolservers import ToolServer

server = ToolServer("shapes")


@server.tool(read_only=True, idempotent=True)
async def get_current_weather(location: str, unit: str = "celsius") -> dict[str, object]:
    """The current weather in a city."""
    return {"location": location, "temperature": len(location) + 10, "unit": unit}


@server.tool(read_only=True, idempotent=True)
async def add(a: int, b: int) -> dict[str, int]:
    """Add two integers."""
    return {"sum": a + b}


@server.tool(read_only=True, idempotent=True)
async def multiply(a: int, b: int) -> dict[str, int]:
    """Multiply two integers."""
    return {"product": a * b}


if __name__ == "__main__":
    server.run()
