"""An SDK tool server whose calls are late on request, for hedging tests.

``python tests/support/tail_toolserver.py --port 0``. Its calls go on the SDK's
``CallTools`` stream, so a cancelled second copy is cancelled over the stream.

- ``late_read(tag, ms)``: read-only, idempotent. The first call of a tag answers after
  ``ms`` milliseconds, every later call of the same tag after 1 ms: a second copy of a
  late call answers at once.
- ``late_write(tag, ms)``: the same, but neither read-only nor idempotent.
- ``tail_stats()``: for the test: calls and cancellations per tag.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from toolservers import ToolServer

server = ToolServer("tail", version="test")

_calls: Counter[str] = Counter()
_cancelled: Counter[str] = Counter()


async def _late(tag: str, ms: int) -> str:
    _calls[tag] += 1
    delay = ms if _calls[tag] == 1 else 1
    try:
        await asyncio.sleep(delay / 1000)
    except asyncio.CancelledError:
        _cancelled[tag] += 1
        raise
    return f"{tag} after {delay} ms"


@server.tool(read_only=True, idempotent=True)
async def late_read(tag: str, ms: int) -> str:
    """Read a tag; its first call is late.

    Args:
        tag: Any short text.
        ms: How late the tag's first call is, in milliseconds.
    """
    return await _late(tag, ms)


@server.tool
async def late_write(tag: str, ms: int) -> str:
    """Write a tag; its first call is late.

    Args:
        tag: Any short text.
        ms: How late the tag's first call is, in milliseconds.
    """
    return await _late(tag, ms)


@server.tool(read_only=True)
async def tail_stats() -> dict[str, dict[str, int]]:
    """Calls and cancelled calls per tag."""
    return {"calls": dict(_calls), "cancelled": dict(_cancelled)}


if __name__ == "__main__":
    server.run()
