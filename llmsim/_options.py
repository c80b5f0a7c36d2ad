"""Settings of the built-in LLM simulator, and the constants that mark it as one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmsim._scenario import Scenario

SYSTEM_FINGERPRINT = "agent-sidecar-llm-simulator"
"""``system_fingerprint`` of every response, so no answer passes for a real model's."""

TEXT_PREFIX = "[simulated] "
"""Every text answer starts with this."""


@dataclass(frozen=True, slots=True)
class SimulatorOptions:
    """How the simulator behaves; the defaults give an instant, fault-free model.

    Latency values are milliseconds; ``asyncio.sleep`` runs only when a delay is above
    zero, so the zero-latency mode never yields to the event loop for timing.
    """

    ttft_ms: float = 0.0
    """Delay before the first token (streamed) or before the whole response. Default 0."""

    token_ms: float = 0.0
    """Delay per streamed content or argument chunk; non-streamed calls wait the sum of
    what their chunks would have cost. Default 0."""

    prefill_ms_per_1k: float = 0.0
    """Delay per 1,000 prompt tokens not served from the prompt cache, added to the time to
    first token: a provider's prompt processing grows with the context, and cached prefixes
    skip it. Default 0."""

    jitter_ms: float = 0.0
    """Uniform ± jitter added to every delay above (never below zero). Default 0."""

    scenario: Scenario | None = None
    """Scripted rules tried before planning; ``None`` (default) plans every answer."""

    fault_rate_429: float = 0.0
    """Probability that a request with no queued fault gets a 429. Default 0."""

    fault_rate_500: float = 0.0
    """Probability that a request with no queued fault gets a 500. Default 0."""

    fault_rate_hang: float = 0.0
    """Probability that a request with no queued fault hangs. Default 0."""

    seed: int | None = None
    """Seed for chaos faults and jitter, for reproducible runs; ``None`` (default) is random."""

    hang_cap_s: float = 300.0
    """Longest a ``hang`` fault holds a request before answering 504. Default 300 s."""

    ratelimit_requests: int = 100_000
    """Requests per 60 s window reported in ``x-ratelimit-limit-requests``. Default 100 000,
    high enough that benchmarks never see the budget run out."""

    ratelimit_tokens: int = 50_000_000
    """Tokens per 60 s window reported in ``x-ratelimit-limit-tokens``. Default 50 000 000."""

    ratelimit_window_s: float = 60.0
    """Length of the request and token budget windows, in seconds. Default 60, as the
    per-minute limits of Groq; shorter windows make pacing observable in a test."""

    ratelimit_output_tokens: int | None = None
    """Output tokens (completion, reasoning included) per window, enforced with a 429
    under ``enforce_ratelimits`` and reported in no header, as Groq's OTPM. Default none."""

    enforce_ratelimits: bool = False
    """Answer 429 (with ``retry-after``) once a window's budget is spent. Default off: the
    headers only report, so pacing logic can be observed without being forced."""

    tls_cert: str | None = None
    """PEM certificate chain to serve HTTPS with (its key in ``tls_key``, or in the same
    file); ``None`` (default) serves plain HTTP."""

    tls_key: str | None = None
    """PEM private key of ``tls_cert``."""

    extra_models: tuple[str, ...] = ()
    """Model ids served besides Groq's current ones (``llmsim._models.SERVED``), as models
    that do not reason: a local endpoint's names. Any other name is a 404."""

    flex_full: bool = False
    """Answer every ``service_tier: flex`` request ``498 capacity_exceeded`` (also
    ``POST /sim/flex``). Default off."""

    tls_client_ca: str | None = None
    """PEM CA bundle client certificates must be signed by: set, a client without such a
    certificate cannot connect (mutual TLS). ``None`` (default) asks for none."""
