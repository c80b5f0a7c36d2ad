"""Helpers for background-run tests: a completion-callback receiver over real HTTP, and
readers of a run's events and states."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar.testing import PostgresServer, create_database, drop_database, scaled
from tests.support.stack import eventually

CALLBACK_SECRET = "a-test-callback-secret"
"""The anonymous principal's callback secret in the tests (``CALLBACK_SECRET`` env)."""

STORES = ["sqlite", "memory", "postgres"]
"""Every session store: each runs the same background-run tests."""


@contextlib.contextmanager
def store_section(store: str, request: pytest.FixtureRequest) -> Iterator[dict[str, object]]:
    """The ``sessions`` section of a sidecar on ``store``; on PostgreSQL, a fresh schema
    of the test session's server for as long as the block lasts."""
    if store != "postgres":
        yield {"store": store}
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    dsn = asyncio.run(create_database(server))
    try:
        yield {"store": "postgres", "postgres": {"dsn": dsn}}
    finally:
        asyncio.run(drop_database(server, dsn))


@dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """Records completion callbacks; answers each with the next of ``answers`` (then 200)."""

    url: str = ""
    deliveries: list[Delivery] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)
    """Until it is set, a receiver that :meth:`holds` answers nothing."""
    holding: bool = False

    def hold(self) -> None:
        """Answer no delivery (each hangs, as with a receiver that never answers) until
        :attr:`released` is set."""
        self.holding = True
        self.released.clear()

    async def handle(self, request: web.Request) -> web.Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.deliveries.append(Delivery(headers, await request.read()))
        self.arrived.set()
        if self.holding:
            await self.released.wait()
        status = self.answers.pop(0) if self.answers else 200
        if 300 <= status < 400:
            return web.Response(status=status, headers={"Location": self.url + "/elsewhere"})
        return web.Response(status=status)

    async def wait(self, count: int, timeout: float = 20.0) -> list[Delivery]:
        async def enough() -> bool:
            return len(self.deliveries) >= count

        await eventually(enough, timeout=timeout)
        return self.deliveries


@asynccontextmanager
async def receiver(host: str = "127.0.0.1") -> AsyncIterator[Receiver]:
    """A callback receiver on ``host``, a free port, path ``/hook``: on IPv6 loopback for
    an IPv6 address, on 127.0.0.1 for any other (``::ffff:127.0.0.1`` included)."""
    found = Receiver()
    app = web.Application()
    app.router.add_post("/hook", found.handle)
    app.router.add_post("/hook/elsewhere", found.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    literal = ":" in host  # an IPv6 address, in brackets in the URL
    mapped = host.lower().startswith("::ffff:")  # an IPv4 address written as IPv6
    site = web.TCPSite(runner, "::1" if literal and not mapped else "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    found.url = f"http://[{host}]:{port}/hook" if literal else f"http://{host}:{port}/hook"
    try:
        yield found
    finally:
        await runner.cleanup()


def signed_correctly(delivery: Delivery, secret: str = CALLBACK_SECRET) -> bool:
    """Whether a delivery's Standard Webhooks signature holds."""
    h = delivery.headers
    signed = f"{h['webhook-id']}.{h['webhook-timestamp']}.".encode() + delivery.body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).digest()
    return h["webhook-signature"] == "v1," + base64.b64encode(digest).decode()


WHSEC_KEY = bytes(range(24))
WHSEC_SECRET = "whsec_" + base64.b64encode(WHSEC_KEY).decode()
"""A callback secret in the Standard Webhooks form (``whsec_`` and the base64 key)."""


def verified_as_standard_webhooks(delivery: Delivery, secret: str, tolerance: int = 300) -> bool:
    """Whether a Standard Webhooks receiver accepts the delivery, as the specification's
    libraries verify it: the key is the base64 after ``whsec_``, the timestamp is seconds
    since the epoch within ``tolerance`` of now, and one of the space-separated
    signatures matches."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    h = delivery.headers
    stamp = int(h["webhook-timestamp"])
    if abs(time.time() - stamp) > tolerance:
        return False
    signed = f"{h['webhook-id']}.{stamp}.".encode() + delivery.body
    expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(hmac.compare_digest(expected, s) for s in h["webhook-signature"].split())


async def events_of(
    client: AgentClient, run_id: str, after: int = 0, **options: Any
) -> list[agent_pb2.StreamRunResponse]:
    """Every event of the run after ``after``, to its last."""
    return [e async for e in client.watch_run(run_id, after_sequence=after, **options)]


def kinds(events: list[agent_pb2.StreamRunResponse]) -> list[str]:
    return [str(e.WhichOneof("event")) for e in events]


async def state_becomes(
    client: AgentClient, run_id: str, state: int, timeout: float = 20.0
) -> agent_pb2.Run:
    """The run, once it is in ``state``."""
    found: list[agent_pb2.Run] = []

    async def reached() -> bool:
        found[:] = [await client.get_run(run_id)]
        return found[0].state == state

    await eventually(reached, timeout=timeout, interval=0.05)
    return found[0]


async def first_event(
    client: AgentClient, run_id: str, kind: str, *, after: int = 0, count: int = 1
) -> agent_pb2.StreamRunResponse:
    """The ``count``-th event of ``kind`` of a running run, as soon as it is stored."""
    seen = 0
    async with (
        asyncio.timeout(scaled(30)),
        aclosing(client.watch_run(run_id, after_sequence=after)) as events,
    ):
        async for event in events:
            if event.WhichOneof("event") == kind:
                seen += 1
                if seen == count:
                    return event
    raise AssertionError(f"the run ended without {count} {kind} event(s)")
