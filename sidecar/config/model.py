"""``model`` and ``prices``: the model endpoint, its retries and limits, and what its tokens
cost."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from sidecar import catalog
from sidecar.catalog import DEFAULT_ANSWER_MODEL
from sidecar.config.base import RetryPolicy, _Strict

GROQ_BASE_URL = "https://api.groq.com/openai/v1"
REASONING_OUTPUT_RESERVE = 16_384
"""Tokens a reasoning model's answer is assumed to take, its reasoning included, when
``model.max_tokens`` does not say: kept free of the context window's input budget."""
MODEL_RETRY = RetryPolicy(max_attempts=4, initial_backoff=0.25, max_backoff=8.0)
"""The model's default: 429s and 5xx are worth a few patient retries."""


class ModelConfig(_Strict):
    """The OpenAI-compatible chat-completions endpoint the loop thinks with."""

    base_url: str | None = None
    """Endpoint base URL. Unset: Groq when the API key is set, otherwise the built-in
    LLM simulator, started embedded."""
    api_key_env: str = "GROQ_API_KEY"
    """Environment variable holding the API key (never put the key in this file)."""
    keyless: bool = False
    """The endpoint at ``base_url`` takes no API key (a local vLLM, Ollama or the LLM
    simulator): no ``Authorization`` header is sent. Otherwise a ``base_url`` with the key
    variable unset or empty stops the sidecar at start."""
    model: str = DEFAULT_ANSWER_MODEL
    """The model name sent with each request (docs/models.md lists Groq's current ones)."""
    reasoning_effort: Literal["none", "default", "low", "medium", "high"] | None = None
    """How hard a reasoning model thinks before it answers (Groq's ``reasoning_effort``):
    more effort, more reasoning tokens (billed, never shown) and a later first token.
    GPT-OSS takes ``low`` / ``medium`` / ``high``, Qwen ``none`` / ``default``; a value
    the catalog knows the model refuses is a configuration error. Unset: the provider's
    default. Set it per stage in ``tools_model``, ``light.model``, a variant's ``model``
    or ``replay.judge``."""
    service_tier: Literal["auto", "on_demand", "flex", "performance"] | None = None
    """Groq's service tier for the requests (``flex``: higher limits, ``498`` when full;
    ``auto``: the best the organisation has). Unset: the provider's default
    (``on_demand``). A profile may choose another per run class (``service_tiers``)."""
    flex_fallback: Literal["on_demand", "auto", "light"] | None = None
    """When a ``flex`` request is answered ``498 capacity_exceeded`` and its retries are
    spent, send it once more on this tier instead of failing, or with ``light`` to the
    profile's light path model (``profiles.NAME.light.model``, on its own tier; a profile
    without a light variant fails as when unset); unset: fail (``model_unavailable``)."""
    max_tools_per_request: int = Field(128, ge=1, le=10_000)
    """The most tools one request may carry (Groq refuses more than 128 with a 400). A
    profile whose allowed tools can exceed it is refused at start and by ``check``; a
    request over it (an MCP server that grew its list) fails before it is sent
    (``model_too_many_tools``)."""
    temperature: float | None = Field(None, ge=0, le=2)
    """Sampling temperature; unset leaves the provider's default."""
    max_tokens: int | None = Field(None, ge=1)
    """Cap on generated tokens per model call; unset leaves the provider's default."""
    parallel_tool_calls: bool = True
    """Let the model ask for several tool calls in one step."""
    timeout: float = Field(60.0, gt=0)
    """Seconds one model request may take, further capped by the run's remaining time."""
    transport: Literal["direct", "sdk"] = "direct"
    """How requests are sent: ``direct`` through one aiohttp session (less CPU per
    request), ``sdk`` through ``openai.AsyncOpenAI`` (raw bytes in and out). Both send the
    same request, through the same proxy, with the same trust."""
    ca_file: str | None = None
    """PEM bundle of the CAs an ``https`` endpoint (or an HTTPS proxy) is trusted by,
    instead of the system's; unset: the system's (or ``SSL_CERT_FILE``)."""
    cert_file: str | None = None
    """PEM client certificate presented to the endpoint (mutual TLS); holds the key too
    unless ``key_file`` is set."""
    key_file: str | None = None
    """PEM private key of ``cert_file``."""
    pacing: bool = True
    """Hold requests back, in a queue shared by every run of the process, while the
    rate limits the endpoint reports (``x-ratelimit-*``, ``retry-after``) have no room
    for them, instead of sending them into a 429; a run whose deadline cannot absorb the
    wait fails at once (``model_rate_limit_wait``). An endpoint that reports no limits is
    never held back."""
    max_rate_limit_wait: float = Field(60.0, gt=0, le=86_400)
    """Seconds: the longest wait the sidecar takes from what a response says about rate
    limits (``retry-after``, ``retry-after-ms``, ``x-ratelimit-reset-*``); a longer one is
    cut to this. Default 60: the per-minute windows of Groq and OpenAI fit in it, while a
    daily quota's reset (or a forged header) holds requests back a minute at most. While
    requests are held back longer than 10 s, one request every 10 s goes out to learn
    whether the limit is gone."""
    input_tokens_per_minute: int | None = Field(None, ge=1)
    """The account's limit on input tokens per minute, where it has one apart from the
    combined limit the headers report (Groq's ITPM, on its Limits page as "X in"):
    requests wait for room under it instead of meeting a 429. Unset: none."""
    output_tokens_per_minute: int | None = Field(None, ge=1)
    """The account's limit on output tokens per minute (Groq's OTPM, "Y out"): counted
    from each answer's completion tokens, reasoning included, and held for the output a
    request is expected to generate. Unset: none."""
    token_limits_window: float = Field(60.0, gt=0, le=3600)
    """Seconds ``input_tokens_per_minute`` and ``output_tokens_per_minute`` count over:
    a minute, as Groq counts them (shorter only to test)."""
    retry: RetryPolicy = MODEL_RETRY
    """Retries of failed model requests (429, 498, 5xx, connection errors). A 429's
    ``retry-after`` (at most ``max_rate_limit_wait``) replaces the backoff; a wait the
    run's remaining time cannot absorb ends the retries."""

    @model_validator(mode="after")
    def _effort_the_model_takes(self) -> ModelConfig:
        known = catalog.facts(self.model)
        if self.reasoning_effort is None or known is None:
            return self
        if known.reasoning is None:
            raise ValueError(
                f"reasoning_effort: {self.model} is not a reasoning model (Groq refuses "
                "reasoning parameters for it): leave reasoning_effort unset"
            )
        if self.reasoning_effort not in known.reasoning.efforts:
            raise ValueError(
                f"reasoning_effort: {self.model} takes "
                + " / ".join(known.reasoning.efforts)
                + f", not {self.reasoning_effort}"
            )
        return self

    @model_validator(mode="after")
    def _key_needs_its_certificate(self) -> ModelConfig:
        if self.key_file is not None and self.cert_file is None:
            raise ValueError("key_file is set but cert_file is not: set both")
        return self

    @field_validator("retry", mode="before")
    @classmethod
    def _model_retry_defaults(cls, value: Any) -> Any:
        # Keys left out keep the model's defaults, not the tool servers'.
        if isinstance(value, Mapping):
            return {**MODEL_RETRY.model_dump(), **value}
        return value


class PriceConfig(_Strict):
    """A model's list prices, in US dollars per million tokens."""

    prompt: float = Field(ge=0)
    """Price of a million prompt tokens."""
    completion: float = Field(ge=0)
    """Price of a million completion tokens."""
    cached_prompt: float | None = Field(None, ge=0)
    """Price of a million prompt tokens served from the provider's prompt cache; unset:
    the prompt price."""


def resolve_model(base: ModelConfig, override: Mapping[str, Any]) -> ModelConfig:
    """The model section ``base`` with the keys of ``override`` replaced.

    Raises:
        ValidationError: the result is not a valid model section.
    """
    if not override:
        return base
    return ModelConfig.model_validate({**base.model_dump(exclude_unset=True), **override})
