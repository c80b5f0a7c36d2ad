"""A tool server for the context-window benchmark: one tool whose answer is a sizeable
JSON report (about 4 KB), as real lookups often are. ``python bench/micro/report_tools.py``."""

from __future__ import annotations

from toolservers import ToolServer

server = ToolServer("reports", version="1")


@server.tool(read_only=True, idempotent=True)
async def fetch_report(topic: str) -> dict[str, object]:
    """Fetch the latest report on a topic: a summary and its data rows.

    Args:
        topic: The report's topic, e.g. "t12".
    """
    rows = [
        {"row": i, "topic": topic, "region": f"region-{i % 7}", "value": (i * 37) % 1000}
        for i in range(60)
    ]
    return {"topic": topic, "summary": f"report on {topic}: 60 rows", "rows": rows}


if __name__ == "__main__":
    server.run()
