"""Example tool server: a shop's stock, prices, reservations and refunds.

``python -m toolservers.examples.shop --port 0``. Stock lives in memory and
``reserve_stock`` reads it, spends its latency, then writes it: two overlapping
reservations of one SKU would lose an update, which is what its
``write_keys`` tell a scheduler to prevent.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from toolservers import ToolContext, ToolFailure, ToolServer
from toolservers.examples import _fakedata as fake

server = ToolServer("shop", version="1")

_stock: dict[str, int] = {}
_reservations = 0


def _available(sku: str) -> int:
    return _stock.setdefault(sku, fake.number(sku, "stock", 5, 50))


class Inventory(BaseModel):
    """How many units of a SKU are in stock."""

    sku: str
    available: int
    source: str = fake.SOURCE


class Price(BaseModel):
    """A SKU's list price."""

    sku: str
    price: float
    currency: str
    source: str = fake.SOURCE


class Discount(BaseModel):
    """The discount that applies to a SKU today."""

    sku: str
    percent: int
    source: str = fake.SOURCE


class Reservation(BaseModel):
    """Units of a SKU set aside for an order."""

    reservation_id: str
    sku: str
    reserved: int
    remaining: int


class Refund(BaseModel):
    """A refund that was issued."""

    refund_id: str
    order_id: str
    amount: float
    reason: str
    source: str = fake.SOURCE


@server.tool(read_only=True, idempotent=True, read_keys=["sku:{sku}"])
async def check_inventory(sku: str) -> Inventory:
    """Check how many units of a product are in stock.

    Args:
        sku: The product's stock-keeping unit, e.g. "SKU-RED-MUG".
    """
    return Inventory(sku=sku, available=_available(sku))


@server.tool(read_only=True, idempotent=True)
async def get_price(sku: str) -> Price:
    """Get a product's list price, before discounts.

    Args:
        sku: The product's stock-keeping unit, e.g. "SKU-RED-MUG".
    """
    cents = fake.number(sku, "price", 499, 19999)
    return Price(sku=sku, price=cents / 100, currency="EUR")


@server.tool(read_only=True, idempotent=True)
async def get_discount(sku: str) -> Discount:
    """Get the discount that applies to a product today, in percent.

    Args:
        sku: The product's stock-keeping unit, e.g. "SKU-RED-MUG".
    """
    return Discount(sku=sku, percent=fake.pick(sku, "discount", (0, 0, 5, 10, 15, 20)))


@server.tool(write_keys=["sku:{sku}"])
async def reserve_stock(
    sku: str, quantity: Annotated[int, Field(gt=0)], ctx: ToolContext
) -> Reservation:
    """Reserve units of a product for an order, reducing the stock available to others.

    Args:
        sku: The product's stock-keeping unit, e.g. "SKU-RED-MUG".
        quantity: How many units to reserve; at least 1.
    """
    global _reservations
    available = _available(sku)
    # Read, wait, write: deliberately not atomic, so unordered overlapping
    # reservations of one SKU lose an update.
    await ctx.simulate_latency()
    if quantity > available:
        raise ToolFailure(f"only {available} units of {sku} are in stock; reserve at most that")
    _stock[sku] = available - quantity
    _reservations += 1
    return Reservation(
        reservation_id=f"RES-{_reservations:06d}",
        sku=sku,
        reserved=quantity,
        remaining=available - quantity,
    )


@server.tool(destructive=True, requires_approval=True)
async def refund_order(order_id: str, amount: Annotated[float, Field(gt=0)], reason: str) -> Refund:
    """Refund money to the customer of an order. Cannot be undone; a person approves each call.

    Args:
        order_id: The order number to refund, e.g. "20250101".
        amount: The amount to refund in EUR, greater than zero.
        reason: Why the refund is given, in a few words, for the customer's record.
    """
    return Refund(
        refund_id=f"REF-{fake.number(order_id, 'refund', 100000, 999999)}",
        order_id=order_id,
        amount=amount,
        reason=reason,
    )


if __name__ == "__main__":
    server.run()
