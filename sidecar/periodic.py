"""Periodic background work, owned and stopped: a store's lease renewals and expiry sweeps,
the shared result cache's sweeps."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class Periodic:
    """Runs ``job`` every ``interval`` seconds on one owned task until :meth:`stop`.

    A failing job is logged and tried again next time: upkeep must outlive a database
    that is briefly away.
    """

    def __init__(self, name: str, interval: float, job: Callable[[], Awaitable[object]]) -> None:
        self.name = name
        self.interval = interval
        self._job = job
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self._job()
            except Exception:
                log.exception("%s failed; trying again in %.1fs", self.name, self.interval)
