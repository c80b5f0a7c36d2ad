"""Bounded pools of what a replica's background runs do besides running.

A run slot (``background.max_running``) is for a run that is running. A run waiting for a
call's approval, and a finished run whose completion callback is being delivered, take a
place in a pool of their own instead: bounded in all and per principal, so one principal's
undecided calls or dead receiver delay only its own waits or deliveries, never another
principal's run, wait or delivery.
"""

from __future__ import annotations

__all__ = ["Pool"]


class Pool:
    """Places taken, in all and by principal.

    Args:
        total: Places in all.
        per_principal: Places one principal may hold.
    """

    def __init__(self, total: int, per_principal: int) -> None:
        self.total = total
        self.per_principal = per_principal
        self._held: dict[str, int] = {}
        self._count = 0

    def take(self, principal: str) -> bool:
        """Take a place for ``principal``; False (nothing taken) when the pool, or the
        principal's share of it, is full."""
        held = self._held.get(principal, 0)
        if self._count >= self.total or held >= self.per_principal:
            return False
        self._held[principal] = held + 1
        self._count += 1
        return True

    def give(self, principal: str) -> None:
        """Give back a place :meth:`take` gave ``principal``."""
        left = self._held.get(principal, 0) - 1
        if left > 0:
            self._held[principal] = left
        else:
            self._held.pop(principal, None)
        self._count -= 1

    @property
    def free(self) -> int:
        """Places left in all."""
        return self.total - self._count

    def held(self, principal: str) -> int:
        return self._held.get(principal, 0)
