"""The result cache on its own: keys, TTL, LRU, single flight and its cancellation.

The tool invocation is a coroutine the test controls (with events, never sleeps), so the
interleavings are exact; the clock is one the test moves. The cache through real tool
servers and sidecars is in ``test_result_cache_runs.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses

import orjson
import pytest

from agentsidecar.v1 import tool_pb2
from sidecar.tools.catalog import CatalogTool, ToolCatalog
from sidecar.tools.result_cache import ResultCache
from sidecar.types import CacheResult, Clock, ToolCall, ToolCallStatus, ToolOutcome

FAR = 1e12  # a deadline that never comes


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _tool(name: str = "lookup", *, version: str = "1", **facts: object) -> CatalogTool:
    facts = {"read_only": True, **facts}
    descriptor = tool_pb2.ToolDescriptor(
        name=name,
        description=name,
        input_schema='{"type":"object","properties":{"sku":{"type":"string"},"n":{"type":"integer"}}}',
        version=version,
        **facts,  # type: ignore[arg-type]
    )
    if "cache_ttl" not in facts:
        descriptor.cache_ttl.seconds = 30
    catalog = ToolCatalog()
    catalog.update("shop", tool_pb2.ListToolsResponse(tools=[descriptor], tool_set_version=version))
    tool = catalog.get(name)
    assert tool is not None
    return tool


class Invocations:
    """Counts invocations; each returns OK after ``release`` is set (when given)."""

    def __init__(
        self, release: asyncio.Event | None = None, status: ToolCallStatus = ToolCallStatus.OK
    ):
        self.count = 0
        self.started = asyncio.Event()
        self.cancelled = False
        self._release = release
        self._status = status

    def __call__(self, call_id: str = "leader") -> object:
        async def invoke() -> ToolOutcome:
            self.count += 1
            self.started.set()
            try:
                if self._release is not None:
                    await self._release.wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise
            return ToolOutcome(
                call_id=call_id,
                tool_name="lookup",
                status=self._status,
                content=f"result #{self.count}",
                start=0.0,
                duration=0.25,
            )

        return invoke


def _call(call_id: str, arguments: dict[str, object]) -> tuple[ToolCall, dict[str, object]]:
    return ToolCall(call_id, "lookup", orjson.dumps(arguments).decode()), arguments


async def _lookup(
    cache: ResultCache, tool: CatalogTool, invoke: object, call_id: str = "c", **arguments: object
) -> ToolOutcome:
    call, args = _call(call_id, arguments)
    return await cache.call(tool, args, call, invoke=invoke, clock=Clock(), deadline=FAR)  # type: ignore[arg-type]


async def test_a_repeated_call_is_a_hit_until_the_tools_ttl_passes() -> None:
    clock = FakeClock()
    cache = ResultCache(clock=clock)
    tool = _tool()
    runs = Invocations()
    first = await _lookup(cache, tool, runs(), sku="X-1")
    assert (first.status, first.cache) == (ToolCallStatus.OK, CacheResult.MISS)
    clock.now += 29
    again = await _lookup(cache, tool, runs(), call_id="c2", sku="X-1")
    assert (again.status, again.cache, again.content) == (
        ToolCallStatus.CACHED,
        CacheResult.HIT,
        "result #1",
    )
    assert again.call_id == "c2" and again.saved > 0.2
    clock.now += 2
    expired = await _lookup(cache, tool, runs(), sku="X-1")
    assert (expired.cache, expired.content, runs.count) == (CacheResult.MISS, "result #2", 2)
    assert (cache.hits, cache.misses) == (1, 2)
    assert cache.saved_seconds == pytest.approx(again.saved)


async def test_the_key_is_the_tool_its_version_and_the_canonical_arguments() -> None:
    cache = ResultCache()
    runs = Invocations()
    await _lookup(cache, _tool(), runs(), sku="X-1", n=2)
    assert (await _lookup(cache, _tool(), runs(), n=2, sku="X-1")).cache is CacheResult.HIT
    assert (await _lookup(cache, _tool(), runs(), sku="X-1", n=3)).cache is CacheResult.MISS
    new_version = _tool(version="2")
    assert (await _lookup(cache, new_version, runs(), sku="X-1", n=2)).cache is CacheResult.MISS
    assert runs.count == 3


async def test_the_least_recently_used_result_goes_first_beyond_max_entries() -> None:
    cache = ResultCache(max_entries=2)
    tool = _tool()
    runs = Invocations()
    for sku in ("a", "b"):
        await _lookup(cache, tool, runs(), sku=sku)
    await _lookup(cache, tool, runs(), sku="a")  # a is now the most recent
    await _lookup(cache, tool, runs(), sku="c")  # evicts b
    assert len(cache) == 2 and cache.evictions == 1
    assert (await _lookup(cache, tool, runs(), sku="a")).cache is CacheResult.HIT
    assert (await _lookup(cache, tool, runs(), sku="b")).cache is CacheResult.MISS


async def test_concurrent_identical_calls_share_one_invocation() -> None:
    cache = ResultCache()
    tool = _tool()
    release = asyncio.Event()
    runs = Invocations(release)
    leader = asyncio.create_task(_lookup(cache, tool, runs("c0"), call_id="c0", sku="X"))
    await runs.started.wait()
    followers = [
        asyncio.create_task(_lookup(cache, tool, runs(f"c{i}"), call_id=f"c{i}", sku="X"))
        for i in (1, 2)
    ]
    await asyncio.sleep(0)  # yield once: the followers join the flight before it lands
    release.set()
    outcomes = [await leader, *[await f for f in followers]]
    assert runs.count == 1
    assert [(o.call_id, o.status, o.cache) for o in outcomes] == [
        ("c0", ToolCallStatus.OK, CacheResult.MISS),
        ("c1", ToolCallStatus.CACHED, CacheResult.SHARED),
        ("c2", ToolCallStatus.CACHED, CacheResult.SHARED),
    ]
    assert {o.content for o in outcomes} == {"result #1"}
    assert cache.shared == 2


async def test_a_failure_is_shared_with_the_calls_waiting_for_it_but_never_stored() -> None:
    cache = ResultCache()
    tool = _tool()
    release = asyncio.Event()
    runs = Invocations(release, status=ToolCallStatus.ERROR)
    leader = asyncio.create_task(_lookup(cache, tool, runs(), sku="X"))
    await runs.started.wait()
    follower = asyncio.create_task(_lookup(cache, tool, runs(), call_id="f", sku="X"))
    await asyncio.sleep(0)  # yield once: the follower joins
    release.set()
    assert (await leader).status is ToolCallStatus.ERROR
    shared = await follower
    assert (shared.call_id, shared.status, shared.cache) == (
        "f",
        ToolCallStatus.ERROR,
        CacheResult.SHARED,
    )
    assert len(cache) == 0
    assert (await _lookup(cache, tool, runs(), sku="X")).cache is CacheResult.MISS


async def test_the_invocation_outlives_its_first_caller_and_stops_when_nobody_waits() -> None:
    cache = ResultCache()
    tool = _tool()
    release = asyncio.Event()
    runs = Invocations(release)
    leader = asyncio.create_task(_lookup(cache, tool, runs(), sku="X"))
    await runs.started.wait()
    follower = asyncio.create_task(_lookup(cache, tool, runs(), call_id="f", sku="X"))
    await asyncio.sleep(0)  # yield once: the follower joins
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    release.set()
    assert (await follower).status is ToolCallStatus.CACHED
    assert not runs.cancelled

    lonely = Invocations(asyncio.Event())
    only = asyncio.create_task(_lookup(cache, tool, lonely(), sku="Y"))
    await lonely.started.wait()
    only.cancel()
    with pytest.raises(asyncio.CancelledError):
        await only
    await cache.close()
    assert lonely.cancelled


def test_only_read_only_tools_with_a_ttl_and_no_approval_are_cached() -> None:
    assert ResultCache.caches(_tool())
    assert not ResultCache.caches(_tool(read_only=False))
    assert not ResultCache.caches(_tool(requires_approval=True))
    assert not ResultCache.caches(dataclasses.replace(_tool(), cache_ttl=None))
