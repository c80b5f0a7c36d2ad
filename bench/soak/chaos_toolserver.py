"""The example shop's three read tools, behind switchable faults: a tool server for chaos runs.

``python bench/soak/chaos_toolserver.py --port 0 --latency check_inventory=30 ...`` (the SDK's
usual flags). It offers ``check_inventory``, ``get_price`` and ``get_discount`` with the
shop's schemas and answers, so the LLM simulator plans the same calls for them, and it
behaves exactly like the shop until told otherwise through two control tools (hide them
from the model with a profile's ``tools`` list):

- ``set_chaos(hang_rate, fail_rate, hold)``: from now on a call hangs (until its deadline
  cancels it) with probability ``hang_rate``; fails with probability ``fail_rate``, half
  of those with a gRPC ``UNAVAILABLE`` status (the server's backend is down) and half by
  raising (the model sees an execution error); and while ``hold`` is true, every call
  waits until ``hold`` is cleared, so a test can keep runs in flight as long as it needs.
- ``chaos_stats()``: what the server did so far, as JSON counters.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import grpc

from toolservers import ToolContext, ToolServer
from toolservers.examples import shop

server = ToolServer("chaos-shop", version="1")


class _Chaos:
    """The faults in force and what they did."""

    def __init__(self) -> None:
        self.hang_rate = 0.0
        self.fail_rate = 0.0
        self.released = asyncio.Event()
        self.released.set()
        self.counts: Counter[str] = Counter()

    async def strike(self, ctx: ToolContext) -> None:
        """Apply the faults in force to one call, before it does its work."""
        self.counts["calls"] += 1
        if not self.released.is_set():
            self.counts["held"] += 1
            try:
                await self.released.wait()
            finally:
                self.counts["held"] -= 1
        draw = random.random()
        if draw < self.hang_rate:
            self.counts["hung"] += 1
            await asyncio.sleep(3600)  # the call's deadline cancels this
        elif draw < self.hang_rate + self.fail_rate:
            if random.random() < 0.5:
                self.counts["unavailable"] += 1
                # The SDK gives tools no way to fail the protocol (a tool failing is
                # data); this double reaches under it to play a server whose backend
                # is down, which answers UNAVAILABLE.
                await ctx._grpc_context.abort(
                    grpc.StatusCode.UNAVAILABLE, "chaos: the shop backend is unavailable"
                )
            self.counts["raised"] += 1
            raise RuntimeError("chaos: the shop backend failed")


_chaos = _Chaos()


@server.tool(read_only=True, idempotent=True, read_keys=["sku:{sku}"])
async def check_inventory(sku: str, ctx: ToolContext) -> shop.Inventory:
    """Check how many units of a product are in stock.

    Args:
        sku: The product's stock-keeping unit, e.g. "SKU-RED-MUG".
    """
    await _chaos.strike(ctx)
    return await shop.check_inventory(sku)


@server.tool(read_only=True, idempotent=True)
async def get_price(sku: str, ctx: ToolContext) -> shop.Price:
    """Get a product's list price, before discounts.

    Args:
        sku: The product's stock-keeping unit, e.g. "SKU-RED-MUG".
    """
    await _chaos.strike(ctx)
    return await shop.get_price(sku)


@server.tool(read_only=True, idempotent=True)
async def get_discount(sku: str, ctx: ToolContext) -> shop.Discount:
    """Get the discount that applies to a product today, in percent.

    Args:
        sku: The product's stock-keeping unit, e.g. "SKU-RED-MUG".
    """
    await _chaos.strike(ctx)
    return await shop.get_discount(sku)


@server.tool
async def set_chaos(
    hang_rate: float = 0.0, fail_rate: float = 0.0, hold: bool = False
) -> dict[str, float | bool]:
    """Set the faults for the calls that start from now on (a control tool, not for models).

    Args:
        hang_rate: Chance that a call hangs until its deadline.
        fail_rate: Chance that a call fails, half with UNAVAILABLE and half by raising.
        hold: Make every call wait until this is set back to false.
    """
    _chaos.hang_rate = hang_rate
    _chaos.fail_rate = fail_rate
    if hold:
        _chaos.released.clear()
    else:
        _chaos.released.set()
    return {"hang_rate": hang_rate, "fail_rate": fail_rate, "hold": hold}


@server.tool(read_only=True)
async def chaos_stats() -> dict[str, int]:
    """Count the calls and the faults dealt so far (a control tool, not for models)."""
    return dict(_chaos.counts)


if __name__ == "__main__":
    server.run()
