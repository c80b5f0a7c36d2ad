"""A tool server for the SDK's tests: ``python tests/toolserver_fixtures.py --port 0``.

Its tools let a test observe what happens inside the server process (did a
handler start, was it cancelled) through further tool calls, so tests wait on
events instead of sleeping.
"""

from __future__ import annotations

import asyncio
import enum
import threading
from collections import defaultdict
from typing import Annotated, Literal

from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from toolservers import ToolContext, ToolFailure, ToolServer

server = ToolServer("fixtures", version="test")

_started: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
_cancelled: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
_gates: dict[str, threading.Event] = {}
_gates_lock = threading.Lock()
_pair = threading.Barrier(2)


def _gate(key: str) -> threading.Event:
    with _gates_lock:
        return _gates.setdefault(key, threading.Event())


@server.tool
async def echo_int(value: int) -> int:
    """Return the integer it was given.

    Args:
        value: Any integer, however large.
    """
    return value


@server.tool
def shadow(json: str, schema: int) -> str:
    """Join two arguments whose names are also pydantic attributes."""
    return f"{json}:{schema}"


@server.tool
async def explode(message: str) -> str:
    """Raise a ValueError with the message."""
    raise ValueError(message)


@server.tool
async def refuse(message: str) -> str:
    """Fail with a ToolFailure carrying the message."""
    raise ToolFailure(message)


@server.tool
async def block(key: str, ctx: ToolContext) -> str:
    """Report progress once, then wait until cancelled, recording the cancellation."""
    _started[key].set()
    try:
        # A caller may cancel while the report is still being written: that counts too.
        await ctx.report_progress(0, 1, "started")
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        _cancelled[key].set()
        raise
    return "unreachable"


@server.tool
async def await_started(key: str, timeout_s: float) -> bool:
    """Whether block(key) started within timeout_s seconds."""
    try:
        async with asyncio.timeout(timeout_s):
            await _started[key].wait()
    except TimeoutError:
        return False
    return True


@server.tool
async def await_cancellation(key: str, timeout_s: float) -> bool:
    """Whether block(key) saw CancelledError within timeout_s seconds."""
    try:
        async with asyncio.timeout(timeout_s):
            await _cancelled[key].wait()
    except TimeoutError:
        return False
    return True


@server.tool
async def hold(release_port: int) -> str:
    """Connect to the test on release_port and finish when it sends a byte."""
    reader, writer = await asyncio.open_connection("127.0.0.1", release_port)
    try:
        await reader.readexactly(1)
    finally:
        writer.close()
    return "released"


@server.tool
async def count(steps: int, ctx: ToolContext) -> str:
    """Report progress once per step."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
    return f"counted {steps}"


@server.tool
def count_in_thread(steps: int, ctx: ToolContext) -> str:
    """Report progress once per step, from a sync tool's worker thread."""
    for step in range(1, steps + 1):
        ctx.report_progress_threadsafe(step, steps)
    return f"counted {steps} in a thread"


@server.tool
def rendezvous(timeout_s: float) -> str:
    """Wait until a second rendezvous call arrives; only possible if both run at once."""
    try:
        _pair.wait(timeout_s)
    except threading.BrokenBarrierError:
        _pair.reset()
        raise
    return "met"


@server.tool
def wait_for_release(key: str, timeout_s: float) -> bool:
    """Block this worker thread until release(key) is called; whether it was in time."""
    return _gate(key).wait(timeout_s)


@server.tool
async def release(key: str) -> str:
    """Release wait_for_release(key)."""
    _gate(key).set()
    return "released"


@server.tool
async def whoami(ctx: ToolContext) -> dict[str, object]:
    """Describe the call from its context."""
    return {
        "call_id": ctx.call_id,
        "tool_name": ctx.tool_name,
        "has_deadline": ctx.time_remaining() is not None,
        "metadata": {k: v for k, v in ctx.invocation_metadata() if k.startswith("x-")},
    }


class Pace(enum.Enum):
    """How fast to travel."""

    SLOW = "slow"
    FAST = "fast"


class Stop(BaseModel):
    """A stop on the way."""

    city: str
    nights: int = 1


class Budget(TypedDict):
    amount: float
    currency: str


@server.tool(read_only=True, idempotent=True, read_keys=["trip:{destination}"], timeout=5)
async def plan_trip(
    destination: str,
    travellers: Annotated[int, Field(ge=1)],
    pace: Pace,
    mode: Literal["train", "plane"],
    stops: list[Stop],
    budget: Budget | None = None,
    flexible: bool = False,
    tags: dict[str, str] | None = None,
) -> dict[str, object]:
    """Plan a trip.

    Args:
        destination: Where to go.
        travellers: How many people travel.
        pace: How fast to travel.
        mode: How to get there.
        stops: Stops on the way, in order.
        budget: Spending limit, if any.
        flexible: Whether dates may move.
        tags: Free-form labels.
    """
    return {"destination": destination, "stops": len(stops), "pace": pace.value}


@server.tool
async def echo_text(size: int) -> str:
    """Return a text of ``size`` characters.

    Args:
        size: How many characters.
    """
    return "x" * size


if __name__ == "__main__":
    server.run()
