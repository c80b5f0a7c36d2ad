"""A tool server with a heavy tail, for the hedging benchmark: ``lookup(key)`` answers in
``--fast-ms``, except a ``--tail-share`` of calls, at random, which take ``--slow-ms``.

``python -m bench.micro.tail_tools --port 0 --fast-ms 10 --slow-ms 200 --tail-share 0.05``
"""

from __future__ import annotations

import argparse
import asyncio
import random

from toolservers import ToolServer

server = ToolServer("tail", version="1")
_tail = {"fast": 0.010, "slow": 0.200, "share": 0.05}
_rng = random.Random(1)


@server.tool(read_only=True, idempotent=True)
async def lookup(key: str) -> str:
    """Look a key up; most calls are fast, a few very slow.

    Args:
        key: Any short text.
    """
    slow = _rng.random() < _tail["share"]
    await asyncio.sleep(_tail["slow"] if slow else _tail["fast"])
    return key


if __name__ == "__main__":
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--fast-ms", type=float, default=10)
    parser.add_argument("--slow-ms", type=float, default=200)
    parser.add_argument("--tail-share", type=float, default=0.05)
    ours, rest = parser.parse_known_args()
    _tail.update(fast=ours.fast_ms / 1000, slow=ours.slow_ms / 1000, share=ours.tail_share)
    server.run(rest)
