"""Example tool server: order status. ``python -m toolservers.examples.orders --port 0``."""

from __future__ import annotations

from datetime import date

from pydantic import BaseModel

from toolservers import ToolServer
from toolservers.examples import _fakedata as fake

server = ToolServer("orders", version="1")

STATUSES = ("processing", "shipped", "in_transit", "delivered")
CARRIERS = ("Demo Parcel Co", "Sample Express", "Example Freight")
PRODUCTS = ("SKU-RED-MUG", "SKU-BLUE-LAMP", "SKU-GREEN-CHAIR", "SKU-TEA-SET", "SKU-DESK-FAN")


class OrderItem(BaseModel):
    """One line of an order."""

    sku: str
    quantity: int


class OrderStatus(BaseModel):
    """An order's status."""

    order_id: str
    status: str
    placed: date
    items: list[OrderItem]
    carrier: str
    source: str = fake.SOURCE


@server.tool(read_only=True, idempotent=True, cache_ttl=30)
async def get_order_status(order_id: str) -> OrderStatus:
    """Look up an order's status: fulfilment state, date placed, items and carrier.

    Use it for questions about an order; use track_parcel for where its parcel is now.

    Args:
        order_id: The order number, e.g. "20250101".
    """
    first = fake.number(order_id, "first", 0, len(PRODUCTS) - 1)
    items = [
        OrderItem(
            sku=PRODUCTS[(first + line) % len(PRODUCTS)],
            quantity=fake.number(order_id, f"quantity{line}", 1, 3),
        )
        for line in range(fake.number(order_id, "lines", 1, 3))
    ]
    return OrderStatus(
        order_id=order_id,
        status=fake.pick(order_id, "status", STATUSES),
        placed=fake.order_placed(order_id),
        items=items,
        carrier=fake.pick(order_id, "carrier", CARRIERS),
    )


if __name__ == "__main__":
    server.run()
