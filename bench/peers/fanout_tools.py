"""A tool server for the fan-out benchmark: ``probe(tag)`` answers after ``--latency-ms``.

``python -m bench.peers.fanout_tools --port 0 --latency-ms 20``
"""

from __future__ import annotations

from toolservers import ToolServer

server = ToolServer("fanout", version="1")


@server.tool(read_only=True, idempotent=True)
async def probe(tag: str) -> str:
    """Echo the tag back after the server's simulated latency.

    Args:
        tag: Any short text.
    """
    return tag


if __name__ == "__main__":
    server.run()
