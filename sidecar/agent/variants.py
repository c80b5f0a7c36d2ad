"""Model variants of a profile: weighted canaries, sticky sessions, automatic rollback.

A profile's variants share its new sessions by weight; a session keeps the variant its
first turn ran on (the variant is stored with every turn), so a conversation never
changes model mid-way. The first variant is the stable one; the others are canaries, or
shadows: a shadow variant takes no session, it runs copies of live turns
(``sidecar.agent.replay.shadow``), and becomes a canary when its ``shadow`` key is removed.

Each finished run is recorded against its variant: its duration, and whether it failed,
which is every way a run ends that a sound model would not end it (a model error, an
invalid answer, a refusal, the step or tool-call limit, the budget cut short). A run the
caller or the sidecar stopped (cancelled, interrupted) says nothing of the model and is
not recorded. Over the last ``rollback.window`` seconds, with at least
``rollback.min_runs`` runs of both, a canary is rolled back (its weight becomes 0, new
sessions stop going to it, and its sessions move to the stable variant on their next
turn) when it is worse than the stable variant by more than noise, on either count:

- **failures**: its share of failed runs exceeds the stable one's by more than
  ``max_error_rate_increase``, and a one-sided two-proportion test says the difference is
  significant at ``significance``;
- **latency**: its P95 is more than ``max_p95_ratio`` times the stable one's *and* more
  than ``min_p95_increase`` seconds above it, and a one-sided Mann-Whitney U test says its
  runs are slower at ``significance``.

Both a relative and an absolute threshold, and a test of significance: an identical twin
is not rolled back for "4 ms against 2 ms". A rollback is logged, audited and counted; it
lasts until the configuration is reloaded, or an operator puts the canary back.

An operator's change (``sidecar.agent.variant_control``) sets weights over the configured
ones and takes canaries out by hand: :meth:`VariantRouter.override`.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from sidecar.config import RollbackConfig
from sidecar.llm.model import Model
from sidecar.types import StopReason

__all__ = ["RunModels", "Variant", "VariantRouter", "judged"]

_SOUND = frozenset({StopReason.ANSWERED, StopReason.BUDGET_ANSWERED})
"""How a run of a sound model ends."""
_NOT_THE_MODELS = frozenset({StopReason.CANCELLED, StopReason.INTERRUPTED})
"""Ends the caller or the sidecar caused: they say nothing of the model."""


def judged(reason: StopReason) -> bool | None:
    """Whether a run that ended with ``reason`` counts as failed against its variant;
    None when it says nothing of the model (not recorded)."""
    if reason in _NOT_THE_MODELS:
        return None
    return reason not in _SOUND


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
    """Why it was rolled back automatically, once it was."""
    held_back: str | None = None
    """Why an operator took it out of rotation, while they do."""
    samples: deque[_Sample] = field(default_factory=deque)
    unjudged: int = 0
    """Runs recorded since the canary was last judged."""
    shadow: float | None = None
    """A shadow variant: the share of live turns it runs a copy of; it takes no sessions."""
    configured_weight: float = -1.0
    """Its weight in the configuration (``weight`` is the one in force)."""

    def __post_init__(self) -> None:
        if self.configured_weight < 0:
            self.configured_weight = self.weight

    @property
    def out(self) -> str | None:
        """Why it takes no session at all (rolled back, by the router or an operator)."""
        return self.held_back or self.rolled_back

    @property
    def in_rotation(self) -> bool:
        return self.out is None and self.weight > 0 and self.shadow is None

    def figures(self) -> tuple[int, int, float | None, float | None]:
        """Its runs over the window: how many, how many failed, median and P95 seconds."""
        durations = sorted(s.duration for s in self.samples)
        if not durations:
            return 0, 0, None, None
        failed = sum(s.failed for s in self.samples)
        return len(durations), failed, durations[len(durations) // 2], _p95(durations)


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
        self.shadows = [v for v in variants if v.shadow is not None]
        """The shadow variants: each runs copies of a share of the live turns."""
        self._rollback = rollback
        self._on_rollback = on_rollback
        self._rng = rng or random.Random()

    def choose(self, pinned: str | None) -> Variant:
        """The variant of a run: the session's own while it is in rotation, else a new
        pick by weight among those in rotation (the stable one when none is)."""
        if pinned is not None:
            variant = self.variants.get(pinned)
            if variant is not None and variant.out is None and variant.shadow is None:
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

    @property
    def window(self) -> float:
        return self._rollback.window

    def share(self, variant: Variant) -> float:
        """The share of new sessions ``variant`` takes now."""
        candidates = [v for v in self.variants.values() if v.in_rotation]
        if not candidates:
            return 1.0 if variant is self.stable else 0.0
        return variant.weight / sum(v.weight for v in candidates) if variant.in_rotation else 0.0

    def override(
        self, weights: Mapping[str, float], held_back: Mapping[str, str], reinstated: Set[str]
    ) -> None:
        """Apply an operator's change over the configuration: ``weights`` replace the
        configured ones (the variants it does not name keep theirs), the variants in
        ``held_back`` are out of rotation for the reason given, and those in
        ``reinstated`` are no longer rolled back. Empty arguments: the configuration's."""
        for name, variant in self.variants.items():
            variant.weight = weights.get(name, variant.configured_weight)
            variant.held_back = held_back.get(name)
            if name in reinstated:
                variant.rolled_back = None
                variant.samples.clear()  # judged afresh from here

    def record(self, name: str, duration: float, failed: bool) -> None:
        """A run of variant ``name`` ended after ``duration`` seconds; judge its canary."""
        variant = self.variants.get(name)
        if variant is None:
            return
        now = time.monotonic()
        variant.samples.append(_Sample(now, duration, failed))
        self._forget(variant, now)
        if variant is not self.stable and variant.out is None and self._rollback.enabled:
            self._forget(self.stable, now)
            # Judged after every run while samples are few, then every n-th run: the
            # latency test sorts both windows, a cost that must not grow with traffic.
            variant.unjudged += 1
            if variant.unjudged >= max(1, len(variant.samples) // 100):
                variant.unjudged = 0
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
        stable = self.stable.name or "the stable variant"
        our_failed = sum(s.failed for s in ours)
        their_failed = sum(s.failed for s in theirs)
        our_errors, their_errors = our_failed / len(ours), their_failed / len(theirs)
        if our_errors - their_errors > policy.max_error_rate_increase:
            p = _proportions_p(our_failed, len(ours), their_failed, len(theirs))
            if p < policy.significance:
                return (
                    f"error rate {our_errors:.1%} against {their_errors:.1%} for {stable} "
                    f"over {len(ours)} and {len(theirs)} runs (at most "
                    f"{policy.max_error_rate_increase:.1%} more; p={p:.2g})"
                )
        our_times = [s.duration for s in ours]
        their_times = [s.duration for s in theirs]
        our_p95, their_p95 = _p95(our_times), _p95(their_times)
        if (
            our_p95 > policy.max_p95_ratio * their_p95
            and our_p95 - their_p95 > policy.min_p95_increase
        ):
            p = _slower_p(our_times, their_times)
            if p < policy.significance:
                return (
                    f"P95 latency {our_p95 * 1000:.0f} ms against {their_p95 * 1000:.0f} ms "
                    f"for {stable} over {len(ours)} and {len(theirs)} runs (at most "
                    f"{policy.max_p95_ratio:g}x and {policy.min_p95_increase:g} s more; "
                    f"p={p:.2g})"
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


def _upper_tail(z: float) -> float:
    """P(Z >= z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2))


def _proportions_p(failed_a: int, runs_a: int, failed_b: int, runs_b: int) -> float:
    """One-sided p-value that ``a`` fails more often than ``b`` (a two-proportion z-test
    with a continuity correction)."""
    pooled = (failed_a + failed_b) / (runs_a + runs_b)
    spread = math.sqrt(pooled * (1 - pooled) * (1 / runs_a + 1 / runs_b))
    if spread == 0:
        return 1.0  # both all failed or all fine: no difference to speak of
    correction = 0.5 * (1 / runs_a + 1 / runs_b)
    return _upper_tail((failed_a / runs_a - failed_b / runs_b - correction) / spread)


def _slower_p(a: list[float], b: list[float]) -> float:
    """One-sided p-value that runs of ``a`` take longer than runs of ``b`` (Mann-Whitney
    U, normal approximation, ties ranked by their mean rank)."""
    merged = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    rank_a = 0.0
    i = 0
    while i < len(merged):
        j = i
        while j + 1 < len(merged) and merged[j + 1][0] == merged[i][0]:
            j += 1
        rank = (i + j) / 2 + 1  # ranks from 1, ties share their mean
        rank_a += rank * sum(1 for k in range(i, j + 1) if merged[k][1] == 0)
        i = j + 1
    n_a, n_b = len(a), len(b)
    u = rank_a - n_a * (n_a + 1) / 2
    spread = math.sqrt(n_a * n_b * (n_a + n_b + 1) / 12)
    if spread == 0:
        return 1.0
    return _upper_tail((u - n_a * n_b / 2 - 0.5) / spread)
