"""Example tool server: parcel tracking. ``python -m toolservers.examples.logistics --port 0``."""

from __future__ import annotations

from datetime import date, timedelta

from pydantic import BaseModel

from toolservers import ToolServer
from toolservers.examples import _fakedata as fake
from toolservers.examples.orders import CARRIERS

server = ToolServer("logistics", version="1")

STATES = ("label_created", "in_transit", "out_for_delivery", "delivered")
HUBS = ("Exampleton hub", "Sampleburg depot", "Demo City sorting centre", "Testville hub")


class Shipment(BaseModel):
    """Where an order's parcel is."""

    order_id: str
    tracking_number: str
    carrier: str
    state: str
    location: str
    eta: date
    source: str = fake.SOURCE


@server.tool(read_only=True, idempotent=True)
async def track_parcel(order_id: str) -> Shipment:
    """Track the parcel of an order: carrier, current location and estimated delivery date.

    Args:
        order_id: The order number whose parcel to track, e.g. "20250101".
    """
    placed = fake.order_placed(order_id)
    return Shipment(
        order_id=order_id,
        tracking_number=f"FAKE{fake.number(order_id, 'tracking', 10**9, 10**10 - 1)}",
        # The same carrier the orders server reports for this order.
        carrier=fake.pick(order_id, "carrier", CARRIERS),
        state=fake.pick(order_id, "state", STATES),
        location=fake.pick(order_id, "hub", HUBS),
        eta=placed + timedelta(days=fake.number(order_id, "eta", 2, 6)),
    )


if __name__ == "__main__":
    server.run()
