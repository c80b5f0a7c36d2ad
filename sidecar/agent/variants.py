"""Model variants of a profile: weighted canaries, sticky sessions, automatic rollback.

A profile's variants share its new sessions by weight; a session keeps the variant its
first turn ran on (the variant is stored with every turn), so a conversation never
changes model mid-way. The first variant is the stable one; the others are canaries.

Each finished run is recorded against its variant. A canary is rolled back (its weight
becomes 0, new sessions stop going to it, and its sessions move to the stable variant on
their next turn) when, over the last ``rollback.window`` seconds and with at least
``rollback.min_runs`` runs of both, its share of failed runs exceeds the stable one's by
more than ``max_error_rate_increase``, or its P95 run latency is more than
``max_p95_ratio`` times the stable one's. A rollback is logged, audited and counted; it
lasts until the configuration is reloaded (promotion and rollback are config changes).
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sidecar.config import RollbackConfig
from sidecar.llm.model import Model

__all__ = ["RunModels", "Variant", "VariantRouter"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunModels:
    """The models one run calls."""

    answer: Model
    """The model that answers (and, without tiering, chooses tools too)."""
    tools: Model | None = None
    """Tiering: the model for the steps that choose tools; None: ``answer`` for all."""


@dataclass(slots=True)
class _Sample:
    at: float
    duration: float
    failed: bool


@dataclass(slots=True)
class Variant:
    """A variant as it runs: its models, its system message, its weight now."""

    name: str
    """Empty for a profile without variants."""
    weight: float
    models: RunModels
    system_message: dict[str, Any]
    rolled_back: str | None = None
    """Why it was taken out of rotation, once it was."""
    samples: deque[_Sample] = field(default_factory=deque)

    @property
    def in_rotation(self) -> bool:
        return self.rolled_back is None and self.weight > 0


RollbackListener = Callable[[str, str, str], None]
"""Told of a rollback: profile, variant, why."""


class VariantRouter:
    """Picks each run's variant for one profile and watches its canaries.

    Args:
        profile: The profile's name.
        variants: Its variants, the stable one first (one unnamed variant when the
            profile declares none).
        rollback: When a canary is rolled back.
        on_rollback: Told of each rollback (log, audit, metric).
        rng: Chooses new sessions' variants (seeded in tests).
    """

    def __init__(
        self,
        profile: str,
        variants: Sequence[Variant],
        rollback: RollbackConfig,
        on_rollback: RollbackListener | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if not variants:
            raise ValueError("a router needs at least one variant")
        self.profile = profile
        self.variants = {v.name: v for v in variants}
        self.stable = variants[0]
        self._rollback = rollback
        self._on_rollback = on_rollback
        self._rng = rng or random.Random()

    def choose(self, pinned: str | None) -> Variant:
        """The variant of a run: the session's own while it is in rotation, else a new
        pick by weight among those in rotation (the stable one when none is)."""
        if pinned is not None:
            variant = self.variants.get(pinned)
            if variant is not None and variant.rolled_back is None:
                return variant
        candidates = [v for v in self.variants.values() if v.in_rotation]
        if not candidates:
            return self.stable
        if len(candidates) == 1:
            return candidates[0]
        point = self._rng.random() * sum(v.weight for v in candidates)
        for variant in candidates:
            point -= variant.weight
            if point < 0:
                return variant
        return candidates[-1]

    def record(self, name: str, duration: float, failed: bool) -> None:
        """A run of variant ``name`` ended after ``duration`` seconds; judge its canary."""
        variant = self.variants.get(name)
        if variant is None:
            return
        now = time.monotonic()
        variant.samples.append(_Sample(now, duration, failed))
        self._forget(variant, now)
        if variant is not self.stable and variant.rolled_back is None and self._rollback.enabled:
            self._forget(self.stable, now)
            why = self._breach(variant)
            if why is not None:
                self._roll_back(variant, why)

    def _forget(self, variant: Variant, now: float) -> None:
        samples = variant.samples
        while samples and now - samples[0].at > self._rollback.window:
            samples.popleft()

    def _breach(self, canary: Variant) -> str | None:
        policy = self._rollback
        ours, theirs = canary.samples, self.stable.samples
        if len(ours) < policy.min_runs or len(theirs) < policy.min_runs:
            return None
        our_errors = sum(s.failed for s in ours) / len(ours)
        their_errors = sum(s.failed for s in theirs) / len(theirs)
        if our_errors - their_errors > policy.max_error_rate_increase:
            return (
                f"error rate {our_errors:.1%} against {their_errors:.1%} for "
                f"{self.stable.name or 'the stable variant'} over {len(ours)} and "
                f"{len(theirs)} runs (at most {policy.max_error_rate_increase:.1%} more)"
            )
        our_p95, their_p95 = _p95([s.duration for s in ours]), _p95([s.duration for s in theirs])
        if their_p95 > 0 and our_p95 > policy.max_p95_ratio * their_p95:
            return (
                f"P95 latency {our_p95 * 1000:.0f} ms against {their_p95 * 1000:.0f} ms for "
                f"{self.stable.name or 'the stable variant'} over {len(ours)} and "
                f"{len(theirs)} runs (at most {policy.max_p95_ratio:g}x)"
            )
        return None

    def _roll_back(self, canary: Variant, why: str) -> None:
        canary.rolled_back = why
        log.warning("profile %s: variant %s rolled back: %s", self.profile, canary.name, why)
        if self._on_rollback is not None:
            self._on_rollback(self.profile, canary.name, why)


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
