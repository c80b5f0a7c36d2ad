"""Which turns may start, which are running, and the drain that stops them.

:class:`Admission` counts the turns in flight against ``server.max_concurrent_runs``,
refuses new work once the drain has begun, and keeps a registry of the running turns by
session, so a delete or the end of the drain can stop one (it then ends with a result its
caller receives, and is stored as such).

It also says whether the sidecar is *overloaded*, the signal new turns take their
profile's light path by (``profiles.NAME.light``): once the turns in flight reach
``server.light_path.enter`` of the capacity, until they fall back to ``leave`` of it. The
two thresholds are hysteresis: at the edge, turns do not flip from one path to the other
with every turn that starts or ends. The turns in flight are the signal because they are
what the capacity refuses by, they are known at once without measuring anything, and a
slow model or a slow tool shows in them (each turn stays in flight longer).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sidecar.config import LightPathConfig
from sidecar.errors import Draining, Overloaded
from sidecar.types import StopReason

__all__ = ["Admission", "Running"]

_DRAIN_RETRY_AFTER = 1.0  # seconds a refused caller is told to wait (another replica)
STOP_WAIT = 10.0
"""Seconds a delete or a drain waits for a stopped turn to unwind."""


@dataclass(slots=True)
class Running:
    """A turn in flight in this process, so it can be stopped (delete, drain)."""

    task: asyncio.Task[Any]
    run_id: str
    stopped: StopReason | None = None
    """Why the sidecar stopped the turn, once it did."""
    why: str = ""
    code: str = ""
    """The stopped run's error code; empty: the reason's own (``session_deleted`` for
    CANCELLED, ``interrupted`` for INTERRUPTED)."""
    in_loop: bool = False
    """The turn is in its loop: stopping it now ends it with a result."""
    done: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)


class Admission:
    """Turns admitted, running and stopped, and the drain.

    Args:
        max_runs: Turns in flight at once; one more is refused (Overloaded).
        light_path: When the sidecar counts as overloaded, as shares of ``max_runs``.
        on_overload: Told when the sidecar becomes overloaded (True) and when it is no
            longer (False).
    """

    def __init__(
        self,
        max_runs: int,
        light_path: LightPathConfig | None = None,
        on_overload: Callable[[bool], None] | None = None,
    ) -> None:
        self.max_runs = max_runs
        policy = light_path or LightPathConfig()
        # In turns: overloaded from ``enter`` turns in flight, until ``leave`` or fewer.
        self._enter = max(1, math.ceil(policy.enter * max_runs))
        self._leave = math.floor(policy.leave * max_runs)
        self._on_overload = on_overload
        self.overloaded = False
        """Turns admitted now take their profile's light path."""
        self.draining = False
        self._admitted = 0  # claimed or claiming, not yet finished
        self._active = 0  # running their loop or storing their turn
        self._idle = asyncio.Event()
        self._idle.set()
        self._running: dict[str, Running] = {}  # by the session's store key
        self._last_refusal = 0.0

    # -- admission -------------------------------------------------------------------------

    def refuse_if_draining(self) -> None:
        """Raises:
        Draining: the sidecar is shutting down."""
        if self.draining:
            self._last_refusal = time.monotonic()
            raise Draining(_DRAIN_RETRY_AFTER)

    @contextlib.contextmanager
    def claiming(self) -> Iterator[None]:
        """Hold a place for a turn being claimed; it is given back if the claim fails.

        Raises:
            Overloaded: as many turns are in flight as the sidecar takes.
        """
        if self._admitted >= self.max_runs:
            raise Overloaded(self.max_runs)
        self._admitted += 1
        if not self.overloaded and self._admitted >= self._enter:
            self._overload(True)
        try:
            yield
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """A claimed turn ended (ran, or never ran)."""
        self._admitted -= 1
        if self.overloaded and self._admitted <= self._leave:
            self._overload(False)

    def _overload(self, overloaded: bool) -> None:
        self.overloaded = overloaded
        if self._on_overload is not None:
            self._on_overload(overloaded)

    # -- running turns ---------------------------------------------------------------------

    def enter(self, key: str, run_id: str) -> Running:
        """The current task runs a turn of the session ``key``; pair with :meth:`leave`."""
        task = asyncio.current_task()
        assert task is not None
        self._active += 1
        self._idle.clear()
        running = self._running[key] = Running(task, run_id)
        return running

    def leave(self, key: str, running: Running) -> None:
        """The turn is stored and done."""
        self._active -= 1
        if self._active == 0:
            self._idle.set()
        if self._running.get(key) is running:
            del self._running[key]
        running.done.set()

    def running(self, key: str) -> Running | None:
        return self._running.get(key)

    @staticmethod
    def stop(running: Running, reason: StopReason, why: str, code: str = "") -> None:
        """Stop a turn in its loop: it ends ``reason`` with ``why`` (and the error ``code``
        when given), and is stored."""
        if running.stopped is None and running.in_loop:
            running.stopped, running.why, running.code = reason, why, code
            running.task.cancel()

    async def stop_and_wait(self, key: str, reason: StopReason, why: str) -> None:
        """Stop the turn of session ``key`` if one runs, and wait until it has unwound."""
        running = self._running.get(key)
        if running is None:
            return
        self.stop(running, reason, why)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(STOP_WAIT):
                await running.done.wait()

    # -- the drain -------------------------------------------------------------------------

    def start_draining(self) -> None:
        """Refuse new sessions and turns from now on; turns in flight go on."""
        self.draining = True
        self._last_refusal = time.monotonic()

    async def wait_idle(self) -> None:
        """Wait until no turn is in flight."""
        await self._idle.wait()

    async def wait_refusals_settled(self, quiet: float) -> None:
        """Wait until nothing has been refused for ``quiet`` seconds (since the drain began).

        A front may hold requests it has accepted but not yet handed over (grpc does,
        under load); stopping it would cancel those, which callers neither expect for a
        request sent before the drain nor retry. While refusals keep coming, some may
        still be waiting: let them be refused with a retryable error first.
        """
        # A timer whose end moves with each refusal, not a poll for a condition.
        while (left := self._last_refusal + quiet - time.monotonic()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(left)

    async def interrupt_all(self, why: str) -> None:
        """Stop every turn in flight, each ending INTERRUPTED with ``why`` (its caller
        gets a result, and the turn is stored); wait until they have unwound."""
        running = list(self._running.values())
        for entry in running:
            self.stop(entry, StopReason.INTERRUPTED, why)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(STOP_WAIT):
                await asyncio.gather(*(entry.done.wait() for entry in running))
