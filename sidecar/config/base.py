"""The parts every section shares: strict models, retry, breaker and hedging policies,
client TLS, HTTP limits, key paths."""

from __future__ import annotations

import random
from collections.abc import Sequence
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)


def _unique(what: str, names: list[str]) -> None:
    """Raises ValueError naming the names that occur more than once."""
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"{what} names must be unique; repeated: {repeated}")


class _Strict(BaseModel):
    # Unknown keys are typos more often than not: reject them.
    model_config = ConfigDict(extra="forbid", frozen=True)


class RetryPolicy(_Strict):
    """How a failed call is retried: the tool servers' calls and the model's requests share
    this one policy type, with defaults of their own (``tool_servers[].retry``,
    ``model.retry``). Each retry waits a random time between zero and a cap that grows by
    ``multiplier`` from ``initial_backoff`` up to ``max_backoff`` (full jitter: retries of
    many callers spread out instead of arriving together); a wait that would outlast the
    call's deadline ends the retries instead."""

    max_attempts: int = Field(3, ge=1, le=20)
    """Attempts in all, the first included. 1 disables retries."""
    initial_backoff: float = Field(0.05, ge=0)
    """Seconds: the cap of the first retry's wait."""
    max_backoff: float = Field(2.0, ge=0)
    """Upper bound of one wait, in seconds."""
    multiplier: float = Field(2.0, ge=1)
    """Growth factor of the cap from one retry to the next."""

    def backoff(self, retry: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
        cap = min(self.max_backoff, self.initial_backoff * self.multiplier ** (retry - 1))
        return (rng or _RNG).uniform(0, cap)


_RNG = random.Random()


class BreakerPolicy(_Strict):
    """When a tool server's circuit breaker opens and how long it stays open."""

    failure_threshold: int = Field(5, ge=1)
    """Consecutive failures that open the breaker. Default 5: one or two transient errors
    don't hide a server from the model, and a dead server is cut off within a few calls."""
    reset_timeout: float = Field(30.0, ge=0)
    """Seconds the breaker stays open before it admits one trial call. Default 30: long
    enough for a restarting pod to come back, short enough that a recovered server returns
    within a turn or two."""
    failure_rate: float | None = Field(None, gt=0, le=1)
    """When set: open when at least this share of the last ``window`` finished calls
    failed, and at least ``failure_threshold`` of them; unset: consecutive failures, as
    pybreaker counts. The share is always of ``window`` calls: until that many have
    finished since the breaker started or closed, it takes ``failure_rate * window``
    failures among them to open."""
    window: int = Field(100, ge=1)
    """How many of the latest finished calls ``failure_rate`` looks at. Default 100: at a
    rate of one half, a server failing one call in four then opens the breaker by chance
    about once in fifteen million windows, where 20 calls would do it about once in
    seventy."""

    @model_validator(mode="after")
    def _window_holds_the_threshold(self) -> BreakerPolicy:
        if self.window < self.failure_threshold:
            raise ValueError("window must be at least failure_threshold")
        return self


class HedgePolicy(_Strict):
    """When a slow call to one of a tool server's idempotent tools gets a second copy.

    A call still unanswered after its tool's observed ``percentile`` latency (never before
    ``min_delay``) is sent again; the first answer wins and the other copy is cancelled.
    Only while the server's breaker is closed, and only as far as ``budget`` allows."""

    percentile: float = Field(95.0, gt=0, lt=100)
    """The latency, as a percentile of the tool's recent calls, after which a call is sent
    again. Default 95: about one call in twenty is hedged. It cuts a tail thinner than
    ``100 - percentile`` percent of calls: when 5% of calls are slow, the 95th percentile
    is itself a slow call, and 90 is the setting (with ``budget`` 0.1)."""
    min_delay: float = Field(0.005, ge=0)
    """Seconds a call waits at least before its second copy, whatever the percentile
    says. Default 5 ms: below it a second copy saves too little to pay for itself."""
    min_samples: int = Field(50, ge=1)
    """Answered calls of a tool the sidecar must have seen before it hedges that tool's
    calls: a percentile of fewer is a guess. Default 50."""
    window: int = Field(200, ge=10, le=10_000)
    """How many of a tool's latest answered calls the percentile is taken over. Default
    200: minutes of history at a few calls a second, seconds at hundreds."""
    budget: float = Field(0.05, gt=0, le=1)
    """The most second copies the server gets, as a share of the calls sent to it (a token
    bucket: each call earns this share of a copy, at most ten copies saved up). Default
    0.05: hedging adds at most 5% to the server's load, even when every call is slow."""

    @model_validator(mode="after")
    def _window_holds_the_samples(self) -> HedgePolicy:
        if self.window < self.min_samples:
            raise ValueError("window must be at least min_samples")
        return self


class ClientTlsConfig(_Strict):
    """TLS from the sidecar to a server it calls."""

    ca_file: str | None = None
    """PEM CA bundle the server's certificate must chain to; unset: the system's."""
    cert_file: str | None = None
    """PEM certificate chain the sidecar presents (mutual TLS)."""
    key_file: str | None = None
    """PEM private key of ``cert_file``."""
    server_name: str | None = None
    """The name to verify the server's certificate against; unset: the address's host."""

    @model_validator(mode="after")
    def _cert_and_key(self) -> ClientTlsConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together")
        return self


_HEADER_NAME = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"


def _check_origins(origins: list[str]) -> list[str]:
    for origin in origins:
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path:
            raise ValueError(f"{origin[:60]!r} is not an origin (scheme://host[:port])")
    return origins


class HttpLimits(_Strict):
    """What one HTTP listener lets a connection hold (any HTTP front may take these)."""

    read_timeout: float = Field(30.0, gt=0)
    """Seconds a request may take to arrive whole (its headers and body) once its
    connection is open or its previous response sent; a connection that is slower is
    closed. A response being served or streamed (SSE) is not bounded by it."""
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    """Largest request body accepted (413, or a JSON-RPC error, beyond)."""
    max_connections: int = Field(1000, ge=1)
    """Open connections at most; a connection beyond it is closed as it is accepted, so a
    flood of idle sockets cannot use up the process's descriptors."""


def key_path(loc: Sequence[int | str]) -> str:
    """A key's place as the docs write it: ``tool_servers[0].timeout``."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path
