"""``background``: background runs and their completion callbacks."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from sidecar.config.base import RetryPolicy, _Strict

_CALLBACK_HOST = re.compile(r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9.:-]{0,252}[A-Za-z0-9])?$")


def _ip_literal(host: str) -> bool:
    """An IP address as a URL or a person writes it: ``::1``, ``[::1]``,
    ``::ffff:127.0.0.1``, ``fe80::1%lo`` (a zone), ``127.0.0.1``."""
    if host.startswith("[") != host.endswith("]"):
        return False
    address, percent, zone = host.removeprefix("[").removesuffix("]").partition("%")
    if percent and not zone:
        return False
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


_CALLBACK_RETRY = RetryPolicy(max_attempts=8, initial_backoff=1.0, max_backoff=300.0)
"""Callbacks' default: a receiver that is down for minutes still gets its delivery."""


class CallbackConfig(_Strict):
    """Where background runs' completion callbacks may go, and how they are delivered.

    A callback connects only to an address its host name resolves to when that address
    is allowed (public unless ``allow_private_networks``), never through a proxy and never
    following a redirect: a caller cannot make the sidecar reach what the configuration
    does not name.
    """

    allowed_hosts: list[str] = Field(default_factory=list)
    """Host names callbacks may go to (``hooks.example.com``), ``*.example.com`` for any
    name under a domain, or IP addresses. Empty: no run may name a callback."""
    allow_private_networks: bool = False
    """Also connect to private, loopback, link-local and other non-public addresses (a
    receiver in the cluster). Off: a host that resolves to one of them is refused, whatever
    its name."""
    allow_http: bool = False
    """Also allow ``http://`` URLs; off: ``https://`` only."""
    timeout: float = Field(10.0, gt=0, le=300)
    """Seconds one delivery attempt may take."""
    retry: RetryPolicy = _CALLBACK_RETRY
    """How failed deliveries (a connection error, a timeout, 408, 429 or 5xx) are retried:
    full-jitter backoff, each attempt signed anew."""
    max_deliveries: int = Field(64, ge=1)
    """Callbacks this process delivers at once (retries and their backoffs included), in
    their own pool: a delivery never holds a run's slot (``background.max_running``). A
    finished run whose callback finds the pool full is delivered when a place frees."""
    max_deliveries_per_principal: int = Field(8, ge=1)
    """Of those, one principal's at most: a principal whose receiver never answers delays
    only its own callbacks."""
    secret_env: str | None = None
    """Environment variable holding the anonymous principal's callback secret (when no
    ``auth.principals`` are configured); a principal's own is ``callback_secret_env``."""
    secret_file: str | None = None
    """File holding that secret, read at start and on a reload."""

    @field_validator("allowed_hosts")
    @classmethod
    def _host_patterns(cls, hosts: list[str]) -> list[str]:
        for host in hosts:
            if not _CALLBACK_HOST.fullmatch(host) and not _ip_literal(host):
                raise ValueError(f"{host!r} is not a host name, *.domain or an IP address")
        return hosts

    @field_validator("retry", mode="before")
    @classmethod
    def _retry_defaults(cls, value: Any) -> Any:
        # Keys left out keep the callbacks' defaults, not the tool servers'.
        if isinstance(value, Mapping):
            return {**_CALLBACK_RETRY.model_dump(), **value}
        return value

    @model_validator(mode="after")
    def _one_secret(self) -> CallbackConfig:
        if self.secret_env and self.secret_file:
            raise ValueError("set one of secret_env and secret_file")
        return self


class BackgroundConfig(_Strict):
    """Background runs: turns that outlive their caller (``StartRun``), their events, their
    bounds and their completion callbacks."""

    enabled: bool = True
    """Serve ``StartRun``, ``WatchRun``, ``GetRun``, ``ListRuns`` and ``CancelRun``, and run
    background runs (and, on PostgreSQL, take over those of replicas that stopped). Off: the
    calls fail with BACKGROUND_RUNS_DISABLED."""
    max_runs: int = Field(10_000, ge=1)
    """Background runs queued and running at once in the store, every principal's (so
    across replicas sharing PostgreSQL); one more is refused with RESOURCE_EXHAUSTED
    (RUN_QUEUE_FULL, with a retry delay)."""
    max_running: int = Field(64, ge=1)
    """Background runs this process runs at once; more wait, submitted, for a free slot
    (here, or on another replica). They count against ``server.max_concurrent_runs`` too.
    A run waiting for approval, or whose callback is being delivered, holds no slot: each
    has its own pool (``max_waiting``, ``callbacks.max_deliveries``)."""
    max_waiting: int = Field(256, ge=1)
    """Background runs of this process waiting for a call's approval at once (in
    input-required), in their own pool: a waiting run gives its slot back and takes one
    again (before any new run) once decided. A call that would wait past the bound is
    denied at once, and the run goes on."""
    max_waiting_per_principal: int = Field(16, ge=1)
    """Of those, one principal's at most, so no principal's undecided calls keep another
    principal's calls from waiting."""
    run_timeout: float = Field(3600.0, gt=0, le=7 * 86_400)
    """Seconds a background run may take (it has no caller's deadline), its waits for
    approval included; each attempt after a resumption gets as long again."""
    approval_timeout: float = Field(3600.0, gt=0)
    """Seconds a background run waits in input-required for a call's approval before the
    call counts as denied (and the run goes on)."""
    retention: float = Field(86_400.0, gt=0)
    """Seconds a finished run (its state, result and events) is kept; then it is deleted
    and reads of it answer RUN_NOT_FOUND."""
    max_events: int = Field(10_000, ge=100, le=1_000_000)
    """Events stored per run. Text deltas stored within one flush are merged, so a run
    rarely comes near it; past it, text deltas are no longer stored (the result holds the
    whole answer), every other event still is."""
    max_event_bytes: int = Field(65_536, ge=4096)
    """Bytes of one stored event at most: longer tool arguments, results and text are cut
    with a marker saying how much. The final event (the result) is never cut."""
    flush_interval: float = Field(0.05, gt=0, le=5)
    """Seconds events wait to be stored together; a watcher sees an event once it is
    stored. State changes (input-required) and the end of each step are stored at once."""
    poll_interval: float = Field(1.0, gt=0, le=60)
    """Seconds between looks, on PostgreSQL, for queued runs, runs whose replica stopped
    (lapsed leases), and events or cancellations a notification did not bring; and, on
    any store, for new events while a watcher waits."""
    max_attempts: int = Field(3, ge=1, le=100)
    """Times a run is taken up in all: a run whose replica keeps stopping (it crashes the
    process, say) fails as interrupted after this many."""
    callbacks: CallbackConfig = CallbackConfig()
    """Where completion callbacks may go and how they are delivered."""

    @model_validator(mode="after")
    def _waits_fit(self) -> BackgroundConfig:
        if self.max_waiting_per_principal > self.max_waiting:
            raise ValueError("max_waiting_per_principal must not exceed max_waiting")
        if self.callbacks.max_deliveries_per_principal > self.callbacks.max_deliveries:
            raise ValueError(
                "callbacks.max_deliveries_per_principal must not exceed callbacks.max_deliveries"
            )
        return self
