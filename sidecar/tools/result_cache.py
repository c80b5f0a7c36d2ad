"""The tool-result cache: results of read-only tools reused for as long as the tool says.

Only a tool that is read-only, needs no approval and declares a ``cache_ttl`` is cached.
A result is keyed by the tool's server, name and version and the canonical form of its
arguments (parsed and validated, keys sorted), and kept for the tool's TTL. Only
successful outputs are kept; an error is never served from the cache.

- **In memory** by default: an LRU of ``max_entries`` results per process.
- **Shared**, when configured: the same results also go to a shared store (PostgreSQL),
  so a replica reuses a result another replica produced. The in-memory LRU stays in front.
- **Single flight**: concurrent identical calls share one invocation. The first call runs
  the tool (looking in the shared store first); the others wait for it and get its
  outcome, each with its own call id. The invocation belongs to the cache, not to the
  first caller: it is cancelled only when every caller waiting for it is gone.

Each outcome says how the cache took part (:class:`~sidecar.run.CacheResult`) and, for a
reused result, how long the invocation that produced it took (the time saved). The
counters (``hits``, ``misses``, ``shared``, ``saved_seconds``…) are for metrics.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from sidecar.tools.catalog import CatalogTool
from sidecar.types import CacheResult, Clock, ToolCall, ToolCallStatus, ToolOutcome

log = logging.getLogger(__name__)


class SharedResults(Protocol):
    """A store of results shared by replicas."""

    async def get(self, key: str) -> tuple[str, float, float] | None:
        """``(output, invocation seconds, seconds left to live)``, or None."""
        ...

    async def put(self, key: str, output: str, duration: float, ttl: float) -> None:
        """Keep ``output`` for ``ttl`` seconds."""
        ...


@dataclass(slots=True)
class _Entry:
    output: str
    duration: float
    """Seconds the invocation that produced it took."""
    expires: float
    """On the cache's clock (monotonic)."""


@dataclass(slots=True)
class _Flight:
    task: asyncio.Task[ToolOutcome | _Entry]
    waiters: int = 0


def cache_key(tool: CatalogTool, arguments: Mapping[str, Any]) -> str:
    """The key of a call: server, tool, version and canonical arguments."""
    canonical = orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS).decode()
    return f"{tool.server}/{tool.remote_name}@{tool.version}:{canonical}"


class ResultCache:
    """Caches tool results in memory, optionally backed by a shared store.

    Args:
        max_entries: results kept in memory; the least recently used are evicted first.
        shared: the shared store, or None for this process alone.
        clock: monotonic time source, in seconds (for TTLs).
    """

    def __init__(
        self,
        *,
        max_entries: int = 10_000,
        shared: SharedResults | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = max_entries
        self._shared = shared
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._flights: dict[str, _Flight] = {}
        self._puts: set[asyncio.Task[None]] = set()
        self.hits = 0
        """Calls answered from a stored result (in memory or shared)."""
        self.misses = 0
        """Cacheable calls that ran the tool."""
        self.shared = 0
        """Calls that joined an identical call in flight."""
        self.saved_seconds = 0.0
        """Tool time not spent thanks to hits and shared calls."""
        self.evictions = 0
        """Results evicted from memory to stay within ``max_entries``."""

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def caches(tool: CatalogTool) -> bool:
        """Whether calls of ``tool`` are cached at all."""
        return tool.cache_ttl is not None and tool.read_only and not tool.requires_approval

    async def call(
        self,
        tool: CatalogTool,
        arguments: Mapping[str, Any],
        call: ToolCall,
        *,
        invoke: Callable[[], Awaitable[ToolOutcome]],
        clock: Clock,
        deadline: float,
    ) -> ToolOutcome:
        """The outcome of ``call``: a stored result, a share of an identical call in
        flight, or ``invoke()``'s (whose successful result is then stored).

        Args:
            tool: the tool; :meth:`caches` must be true for it.
            arguments: the call's parsed, validated arguments.
            call: the model's call.
            invoke: runs the call for real.
            clock: the run's clock.
            deadline: ``time.monotonic()`` value when the run's time is up.
        """
        assert tool.cache_ttl is not None
        key = cache_key(tool, arguments)
        start = clock.now()
        entry = self._lookup(key)
        if entry is not None:
            self.hits += 1
            return self._reused(entry, call, clock, start, CacheResult.HIT)
        flight = self._flights.get(key)
        if flight is None:
            task = asyncio.get_running_loop().create_task(
                self._produce(key, tool.cache_ttl, invoke), name=f"tool-flight:{tool.name}"
            )
            flight = self._flights[key] = _Flight(task)
            task.add_done_callback(lambda _: self._forget(key, flight))
            produced = await self._wait(flight)
            if isinstance(produced, _Entry):  # found in the shared store
                self.hits += 1
                return self._reused(produced, call, clock, start, CacheResult.HIT)
            self.misses += 1
            return dataclasses.replace(produced, cache=CacheResult.MISS)

        self.shared += 1
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                produced = await self._wait(flight)
        except TimeoutError:
            return ToolOutcome(
                call_id=call.id,
                tool_name=call.name,
                status=ToolCallStatus.TIMED_OUT,
                content=f"tool {call.name} timed out; answer without it or try later",
                start=start,
                duration=clock.now() - start,
                attempts=0,
                cache=CacheResult.SHARED,
            )
        if isinstance(produced, _Entry):
            return self._reused(produced, call, clock, start, CacheResult.SHARED)
        if produced.status is ToolCallStatus.OK:
            entry = _Entry(produced.content, produced.duration, 0.0)
            return self._reused(entry, call, clock, start, CacheResult.SHARED)
        # The shared invocation failed: this call failed the same way.
        return dataclasses.replace(
            produced,
            call_id=call.id,
            start=start,
            duration=clock.now() - start,
            attempts=0,
            cache=CacheResult.SHARED,
        )

    def _lookup(self, key: str) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires <= self._clock():
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry

    def _store(self, key: str, output: str, duration: float, ttl: float) -> _Entry:
        entry = _Entry(output, duration, self._clock() + ttl)
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
            self.evictions += 1
        return entry

    def _reused(
        self, entry: _Entry, call: ToolCall, clock: Clock, start: float, how: CacheResult
    ) -> ToolOutcome:
        took = clock.now() - start
        saved = max(0.0, entry.duration - took)
        self.saved_seconds += saved
        return ToolOutcome(
            call_id=call.id,
            tool_name=call.name,
            status=ToolCallStatus.CACHED,
            content=entry.output,
            start=start,
            duration=took,
            attempts=0,
            cache=how,
            saved=saved,
        )

    async def _wait(self, flight: _Flight) -> ToolOutcome | _Entry:
        flight.waiters += 1
        try:
            return await asyncio.shield(flight.task)
        except asyncio.CancelledError:
            if flight.waiters == 1 and not flight.task.done():
                flight.task.cancel()  # nobody else waits for it
            raise
        finally:
            flight.waiters -= 1

    def _forget(self, key: str, flight: _Flight) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
        if flight.task.cancelled():
            return
        if flight.task.exception() is not None:
            log.error("a cached tool call failed unexpectedly", exc_info=flight.task.exception())

    async def _produce(
        self, key: str, ttl: float, invoke: Callable[[], Awaitable[ToolOutcome]]
    ) -> ToolOutcome | _Entry:
        if self._shared is not None:
            try:
                found = await self._shared.get(key)
            except Exception:
                log.warning("shared result store unreadable; running the tool", exc_info=True)
                found = None
            if found is not None:
                output, duration, left = found
                return self._store(key, output, duration, min(ttl, left))
        outcome = await invoke()
        if outcome.status is ToolCallStatus.OK:
            self._store(key, outcome.content, outcome.duration, ttl)
            if self._shared is not None:
                put = asyncio.get_running_loop().create_task(
                    self._put_shared(key, outcome.content, outcome.duration, ttl)
                )
                self._puts.add(put)
                put.add_done_callback(self._puts.discard)
        return outcome

    async def _put_shared(self, key: str, output: str, duration: float, ttl: float) -> None:
        assert self._shared is not None
        try:
            await self._shared.put(key, output, duration, ttl)
        except Exception:
            log.warning("could not share a tool result", exc_info=True)

    async def close(self) -> None:
        """Finish sharing stored results; cancel invocations nobody waits for."""
        await asyncio.gather(*self._puts, return_exceptions=True)
        for flight in list(self._flights.values()):
            flight.task.cancel()
        await asyncio.gather(*(f.task for f in self._flights.values()), return_exceptions=True)
