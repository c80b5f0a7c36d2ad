"""The operator's hand on the profiles' variants: weights, promotion, rollback, reset.

A change is one profile's state over its configuration: the weights in force, the
canaries held back by hand, and the variants an operator put back in rotation. It is kept
in the session store, so every replica sharing the store applies it (a shared store is
read again every :data:`REFRESH_INTERVAL` seconds while some profile has variants) and a
restart keeps it. A change is made against one configuration of the profile's variants
(its *basis*, a digest); when the configuration's variants differ, the file is newer
intent and the change no longer applies.

Each change is audited (``variants_changed``) and logged, and the gauges follow it.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sidecar.agent.variants import Variant, VariantRouter
from sidecar.config import ProfileConfig, SidecarConfig
from sidecar.errors import (
    FieldViolation,
    InvalidRequest,
    NotAnOperator,
    PermissionDenied,
    ProfileNotFound,
)
from sidecar.periodic import Periodic
from sidecar.security.audit import AuditLog
from sidecar.security.identity import Principal
from sidecar.sessions.store import SessionStore

__all__ = [
    "MAX_REASON",
    "REFRESH_INTERVAL",
    "ProfileView",
    "VariantChange",
    "VariantControl",
    "VariantView",
]

log = logging.getLogger(__name__)

REFRESH_INTERVAL = 5.0
"""Seconds between reads of a shared store's changes (another replica's operator)."""
MAX_REASON = 1024
"""Characters a change's reason may have."""

VariantStateListener = Callable[[str, str, bool], None]
"""Told of a variant's state: profile, variant, in rotation."""


@dataclass(frozen=True, slots=True)
class VariantChange:
    """An operator's change to one profile's variants, as the store keeps it."""

    action: str
    """The last action: ``set_weights``, ``promote`` or ``roll_back``."""
    principal: str
    time: float
    """When (seconds since the epoch)."""
    reason: str
    basis: str
    """The digest of the profile's variants configuration it was made against."""
    weights: dict[str, float] = field(default_factory=dict)
    """The weights in force over the configured ones."""
    held_back: dict[str, str] = field(default_factory=dict)
    """Variants taken out of rotation by hand, with why."""
    reinstated: tuple[str, ...] = ()
    """Variants this change put back in rotation (their automatic rollback lifted)."""

    def encode(self) -> str:
        return json.dumps(
            {
                "action": self.action,
                "principal": self.principal,
                "time": self.time,
                "reason": self.reason,
                "basis": self.basis,
                "weights": self.weights,
                "held_back": self.held_back,
                "reinstated": list(self.reinstated),
            },
            separators=(",", ":"),
            sort_keys=True,
        )

    @classmethod
    def decode(cls, data: str) -> VariantChange:
        """Raises: ValueError, KeyError, TypeError: not a change this code wrote."""
        raw = json.loads(data)
        return cls(
            action=str(raw["action"]),
            principal=str(raw["principal"]),
            time=float(raw["time"]),
            reason=str(raw["reason"]),
            basis=str(raw["basis"]),
            weights={str(k): float(v) for k, v in raw["weights"].items()},
            held_back={str(k): str(v) for k, v in raw["held_back"].items()},
            reinstated=tuple(str(n) for n in raw["reinstated"]),
        )


def basis(profile: ProfileConfig) -> str:
    """The digest of a profile's variants as configured: what a change is made against."""
    variants = [v.model_dump(mode="json") for v in profile.variants]
    data = json.dumps(variants, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(data).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class VariantView:
    """One variant as this replica runs it."""

    name: str
    stable: bool
    configured_weight: float
    weight: float
    session_share: float
    in_rotation: bool
    rolled_back: str | None
    shadow: float | None
    runs: int
    failed_runs: int
    p50: float | None
    p95: float | None


@dataclass(frozen=True, slots=True)
class ProfileView:
    """One profile's variants, and the operator's change in force."""

    profile: str
    variants: list[VariantView]
    change: VariantChange | None
    window: float


class VariantControl:
    """Applies operators' changes to the routers, keeps them in the store, audits them.

    Args:
        store: Where changes are kept.
        current: The routers and configuration runs are admitted on now.
        audit: The audit record.
        on_state: Told of each variant's state after a change (the gauge).
        clock: The wall clock changes are stamped with.
    """

    def __init__(
        self,
        store: SessionStore,
        current: Callable[[], tuple[Mapping[str, VariantRouter], SidecarConfig]],
        audit: AuditLog,
        on_state: VariantStateListener,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._current = current
        self._audit = audit
        self._on_state = on_state
        self._clock = clock
        self._changes: dict[str, VariantChange] = {}
        self._reinstated_at: dict[str, float] = {}
        """Per profile, the time of the change whose reinstatements were applied last."""
        self._stale: set[tuple[str, float]] = set()  # changes logged as superseded
        self._lock = asyncio.Lock()
        self._refresher = Periodic("variant changes", REFRESH_INTERVAL, self._refresh_job)

    # -- lifecycle -----------------------------------------------------------------------

    async def load(self) -> None:
        """Read the changes kept in the store (before the first routers are built)."""
        self._changes = await self._read()

    def start(self) -> None:
        """Read a shared store again every few seconds: another replica may change it."""
        if self._store.shared:
            self._refresher.start()

    async def stop(self) -> None:
        await self._refresher.stop()

    async def _read(self) -> dict[str, VariantChange]:
        changes = {}
        for profile, data in (await self._store.variant_changes()).items():
            try:
                changes[profile] = VariantChange.decode(data)
            except (ValueError, KeyError, TypeError, AttributeError):
                log.warning(
                    "profile %s: the stored variant change cannot be read; ignored", profile
                )
        return changes

    async def _refresh_job(self) -> None:
        routers, _ = self._current()
        if not any(_named(r) for r in routers.values()):
            return  # no variants: nothing to read
        async with self._lock:
            await self._refresh()

    async def _refresh(self) -> None:
        changes = await self._read()
        if changes != self._changes:
            self._changes = changes
            routers, config = self._current()
            self.apply(routers, config)

    # -- applying ------------------------------------------------------------------------

    def apply(self, routers: Mapping[str, VariantRouter], config: SidecarConfig) -> None:
        """Apply the changes in force to ``routers`` (new ones on a reload, or the current
        ones after a change): each profile's change over its configuration, or the
        configuration alone."""
        for name, router in routers.items():
            profile = config.profiles.get(name)
            if profile is None or not _named(router):
                continue
            change = self._in_force(name, profile)
            if change is None:
                router.override({}, {}, frozenset())
            else:
                # A change's reinstatements lift the rollbacks before it, once: a rollback
                # the router makes after it stands (across reloads too).
                fresh = change.time > self._reinstated_at.get(name, -math.inf)
                router.override(
                    change.weights,
                    change.held_back,
                    frozenset(change.reinstated) if fresh else frozenset(),
                )
                self._reinstated_at[name] = change.time
            for variant in router.variants.values():
                self._on_state(name, variant.name, variant.in_rotation)

    def _in_force(self, name: str, profile: ProfileConfig) -> VariantChange | None:
        change = self._changes.get(name)
        if change is None:
            return None
        if change.basis != basis(profile):
            if (name, change.time) not in self._stale:
                self._stale.add((name, change.time))
                log.warning(
                    "profile %s: the operator's variant change (%s by %s) was made against "
                    "another configuration of its variants; the configuration applies",
                    name,
                    change.action,
                    change.principal or "an anonymous caller",
                )
            return None
        return change

    # -- what operators see --------------------------------------------------------------

    def view(self, principal: Principal, profile: str) -> list[ProfileView]:
        """The variants of ``profile`` (empty: of every profile with variants
        ``principal`` may use).

        Raises:
            NotAnOperator, PermissionDenied: the principal may not see them.
            ProfileNotFound, InvalidRequest: no such profile, or one without variants.
        """
        routers, config = self._current()
        if profile:
            return [self._view(*self._profile(principal, profile, routers, config))]
        _operator(principal)
        return [
            self._view(name, router, config.profiles[name])
            for name, router in sorted(routers.items())
            if _named(router) and principal.may_use(name) and name in config.profiles
        ]

    def _view(self, name: str, router: VariantRouter, profile: ProfileConfig) -> ProfileView:
        variants = [_variant_view(router, v) for v in router.variants.values()]
        return ProfileView(name, variants, self._in_force(name, profile), router.window)

    # -- what operators do ---------------------------------------------------------------

    async def set_weights(
        self, principal: Principal, profile: str, weights: Mapping[str, float], reason: str
    ) -> ProfileView:
        """Set the weights of the named variants; one given a weight above 0 is put back
        in rotation.

        Raises:
            InvalidRequest: an unknown variant, a shadow, a weight below 0 or not finite,
                or weights that leave no variant taking new sessions.
        """
        routers, config = self._current()
        name, router, _ = self._profile(principal, profile, routers, config)
        if not weights:
            raise InvalidRequest.field("weights", "name at least one variant")
        violations = []
        for variant_name, weight in weights.items():
            where = f"weights[{variant_name}]"
            variant = router.variants.get(variant_name)
            if variant is None:
                violations.append(FieldViolation(where, _unknown(variant_name, router)))
            elif variant.shadow is not None:
                violations.append(FieldViolation(where, _SHADOW))
            elif not math.isfinite(weight) or weight < 0:
                violations.append(FieldViolation(where, "a weight is a finite number, at least 0"))
        if violations:
            raise InvalidRequest(violations)

        def change(old: VariantChange | None) -> VariantChange:
            current = _weights(router)
            current.update(weights)
            held = dict(old.held_back) if old is not None else {}
            back = [n for n, w in weights.items() if w > 0]
            for n in back:
                held.pop(n, None)
            if not any(
                current[v.name] > 0
                and v.shadow is None
                and v.name not in held
                and (v.rolled_back is None or v.name in back)
                for v in router.variants.values()
            ):
                raise InvalidRequest.field(
                    "weights", "no variant would take new sessions: give one a weight above 0"
                )
            return self._new(principal, name, config, "set_weights", reason, current, held, back)

        return await self._change(principal, name, reason, change)

    async def promote(
        self, principal: Principal, profile: str, variant: str, reason: str
    ) -> ProfileView:
        """Give ``variant`` every new session.

        Raises:
            InvalidRequest: an unknown variant, or a shadow.
        """
        routers, config = self._current()
        name, router, _ = self._profile(principal, profile, routers, config)
        promoted = self._variant(router, variant)

        def change(old: VariantChange | None) -> VariantChange:
            weights = {v: 0.0 for v in router.variants}
            weights[variant] = promoted.weight or promoted.configured_weight or 1.0
            held = dict(old.held_back) if old is not None else {}
            held.pop(variant, None)
            return self._new(principal, name, config, "promote", reason, weights, held, [variant])

        return await self._change(principal, name, reason, change)

    async def roll_back(
        self, principal: Principal, profile: str, variant: str, reason: str
    ) -> ProfileView:
        """Take a canary out of rotation.

        Raises:
            InvalidRequest: an unknown variant, a shadow, or the stable one.
        """
        routers, config = self._current()
        name, router, _ = self._profile(principal, profile, routers, config)
        canary = self._variant(router, variant)
        if canary is router.stable:
            raise InvalidRequest.field(
                "variant",
                f"{variant!r} is the stable variant (the first listed) and cannot be rolled "
                "back; promote another variant instead",
            )

        def change(old: VariantChange | None) -> VariantChange:
            held = dict(old.held_back) if old is not None else {}
            who = principal.name or "an operator"
            held[variant] = f"rolled back by {who}: {reason or 'no reason given'}"
            return self._new(
                principal, name, config, "roll_back", reason, _weights(router), held, []
            )

        return await self._change(principal, name, reason, change)

    async def reset(self, principal: Principal, profile: str, reason: str) -> ProfileView:
        """Drop the operator's change to ``profile``: the configuration applies."""
        routers, config = self._current()
        name, _, _ = self._profile(principal, profile, routers, config)
        return await self._change(principal, name, reason, lambda old: None)

    # -- the parts -----------------------------------------------------------------------

    def _profile(
        self,
        principal: Principal,
        profile: str,
        routers: Mapping[str, VariantRouter],
        config: SidecarConfig,
    ) -> tuple[str, VariantRouter, ProfileConfig]:
        _operator(principal)
        if profile not in config.profiles:
            raise ProfileNotFound(profile, list(config.profiles))
        if not principal.may_use(profile):
            raise PermissionDenied(principal.name, profile)
        router = routers.get(profile)
        if router is None or not _named(router):
            raise InvalidRequest.field(
                "profile", f"profile {profile!r} has no variants (profiles.{profile}.variants)"
            )
        return profile, router, config.profiles[profile]

    @staticmethod
    def _variant(router: VariantRouter, name: str) -> Variant:
        variant = router.variants.get(name) if name else None
        if variant is None:
            raise InvalidRequest.field("variant", _unknown(name, router))
        if variant.shadow is not None:
            raise InvalidRequest.field("variant", _SHADOW)
        return variant

    def _new(
        self,
        principal: Principal,
        profile: str,
        config: SidecarConfig,
        action: str,
        reason: str,
        weights: dict[str, float],
        held_back: dict[str, str],
        reinstated: list[str],
    ) -> VariantChange:
        return VariantChange(
            action=action,
            principal=principal.name,
            time=max(self._clock(), self._reinstated_at.get(profile, 0.0) + 1e-6),
            reason=reason,
            basis=basis(config.profiles[profile]),
            weights=weights,
            held_back=held_back,
            reinstated=tuple(reinstated),
        )

    async def _change(
        self,
        principal: Principal,
        profile: str,
        reason: str,
        make: Callable[[VariantChange | None], VariantChange | None],
    ) -> ProfileView:
        if len(reason) > MAX_REASON:
            raise InvalidRequest.field("reason", f"at most {MAX_REASON} characters")
        async with self._lock:
            await self._refresh()  # build on what other replicas changed
            routers, config = self._current()
            old = self._in_force(profile, config.profiles[profile])
            new = make(old)
            await self._store.set_variant_change(profile, new.encode() if new else None)
            if new is None:
                self._changes.pop(profile, None)
            else:
                self._changes[profile] = new
            self.apply(routers, config)
        action = new.action if new is not None else "reset"
        router = routers[profile]
        weights = {n: v.weight for n, v in router.variants.items()}
        out = {n: v.out for n, v in router.variants.items() if v.out is not None}
        self._audit.record(
            "variants_changed",
            principal.name,
            profile=profile,
            action=action,
            weights=weights,
            out_of_rotation=out or None,
            reason=reason or None,
        )
        log.info(
            "profile %s: variants %s by %s%s: weights %s",
            profile,
            action,
            principal.name or "an anonymous caller",
            f" ({reason})" if reason else "",
            ", ".join(f"{n}={w:g}" for n, w in weights.items()),
        )
        return self._view(profile, router, config.profiles[profile])


_SHADOW = (
    "a shadow variant takes no sessions whatever its weight; it becomes a canary when its "
    "shadow key is removed from the configuration"
)


def _variant_view(router: VariantRouter, variant: Variant) -> VariantView:
    runs, failed, p50, p95 = variant.figures()
    return VariantView(
        name=variant.name,
        stable=variant is router.stable,
        configured_weight=variant.configured_weight,
        weight=variant.weight,
        session_share=router.share(variant),
        in_rotation=variant.in_rotation,
        rolled_back=variant.out,
        shadow=variant.shadow,
        runs=runs,
        failed_runs=failed,
        p50=p50,
        p95=p95,
    )


def _named(router: VariantRouter) -> bool:
    """Whether the router's profile declares variants (not tiering alone)."""
    return bool(router.stable.name)


def _weights(router: VariantRouter) -> dict[str, float]:
    return {name: variant.weight for name, variant in router.variants.items()}


def _unknown(name: str, router: VariantRouter) -> str:
    close = difflib.get_close_matches(name, list(router.variants), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"no variant {name!r}{hint}; the profile has {', '.join(router.variants)}"


def _operator(principal: Principal) -> None:
    if not principal.operator:
        raise NotAnOperator(principal.name)
