"""The sidecar's declarative configuration: one YAML file, secrets from the environment.

Config decides *what* (which model, which tools, which limits); the hot path decides
*how fast*. Everything here is validated once, at start, by :func:`load_config`; an
invalid file fails with a message naming the offending key.
"""

from __future__ import annotations

import difflib
import ipaddress
import random
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from sidecar import catalog
from sidecar.catalog import DEFAULT_ANSWER_MODEL
from sidecar.errors import ConfigError
from sidecar.schemas import compile_schema_safely

GROQ_BASE_URL = "https://api.groq.com/openai/v1"
REASONING_OUTPUT_RESERVE = 16_384
"""Tokens a reasoning model's answer is assumed to take, its reasoning included, when
``model.max_tokens`` does not say: kept free of the context window's input budget."""


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
MODEL_RETRY = RetryPolicy(max_attempts=4, initial_backoff=0.25, max_backoff=8.0)
"""The model's default: 429s and 5xx are worth a few patient retries."""


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


class ToolServerConfig(_Strict):
    """One tool server the sidecar discovers tools from and dispatches calls to."""

    name: str = Field(pattern=r"^[a-zA-Z][a-zA-Z0-9_-]{0,31}$")
    """A short name, used in logs, metrics and to namespace colliding tool names."""
    address: str = Field(min_length=1)
    """``host:port`` of the server's gRPC endpoint."""
    timeout: float = Field(10.0, gt=0)
    """Seconds one call may take unless the tool declares a shorter default."""
    retry: RetryPolicy = RetryPolicy()
    """Retries for idempotent tools on UNAVAILABLE / RESOURCE_EXHAUSTED; others never retry."""
    breaker: BreakerPolicy = BreakerPolicy()
    """The server's circuit breaker."""
    hedge: HedgePolicy | None = None
    """Hedged calls to the server's idempotent tools; unset: a call is sent once (and
    retried only after a failure)."""
    discovery_timeout: float = Field(5.0, gt=0)
    """Seconds to wait for the server's tool list at start before starting without it."""
    version_of: str | None = None
    """This server is a new version of the named one: it serves that server's tools
    (its own tool list is not offered under its name), and takes ``weight`` of their
    calls. Unset: a server of its own."""
    weight: float = Field(1.0, ge=0)
    """Its share of the calls to its tools among the versions of one server (the first
    server and each ``version_of`` it), relative to theirs; reloaded without a restart."""
    tls: ClientTlsConfig | None = None
    """TLS to the server (with ``cert_file``, mutual TLS); unset: plaintext."""
    token_env: str | None = None
    """Environment variable holding a bearer token the sidecar sends the server on every
    call (for a server that requires it)."""
    token_file: str | None = None
    """File holding that token, read at start."""
    keepalive_time: float = Field(300.0, ge=0.1)
    """Seconds between the pings that check an idle connection is alive. Default 300: the
    most often a gRPC server that sets no keepalive policy accepts (Python's, Go's and
    Java's defaults); oftener, and it answers GOAWAY ``too_many_pings`` and drops the
    connection. SDK tool servers accept a ping every 10 s: set it lower for them."""
    call_stream: bool = True
    """Send the server's calls on one long-lived ``CallTools`` stream when it offers one
    (``ListToolsResponse.call_stream``; the Python SDK does), instead of one ``CallTool``
    per call: the same calls, deadlines, cancellation and metadata, for a fraction of the
    CPU on both sides. Off, or for a server that does not offer it: one call each."""
    max_result_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    """Largest response accepted from the server; a larger tool result is that call's
    error (the model is told to ask for less), never retried, and never counted against
    the server's breaker."""


_HEADER_NAME = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"


class McpToolConfig(_Strict):
    """What the configuration decides about one tool of an MCP server, over its annotations.

    Every key left unset keeps what the server's trust decides (``trust_annotations``,
    ``approval``)."""

    read_only: bool | None = None
    """The tool changes nothing: it may start while the model still streams, and share a
    step with others that read what it reads."""
    idempotent: bool | None = None
    """Calling it twice does what calling it once does: a failed call is retried."""
    destructive: bool | None = None
    """It may destroy or overwrite something (shown with its approval)."""
    requires_approval: bool | None = None
    """Each call waits for the caller's approval."""
    timeout: float | None = Field(None, gt=0)
    """Seconds one call may take, under the server's ``timeout``."""
    max_attempts: int | None = Field(None, ge=1, le=20)
    """Attempts in all for an idempotent call that failed UNAVAILABLE; unset: the server's
    ``retry.max_attempts``."""
    read_keys: list[str] = Field(default_factory=list)
    """Resource keys the tool reads (``"repo:{repo_path}"``): calls writing them wait."""
    write_keys: list[str] = Field(default_factory=list)
    """Resource keys the tool writes: calls reading or writing them wait for each other."""


class McpServerConfig(_Strict):
    """An MCP server the sidecar uses as a tool server, through its bridge (``docs/mcp.md``).

    Either ``command`` (a process the sidecar starts and speaks stdio to) or ``url`` (a
    Streamable HTTP endpoint)."""

    name: str = Field(pattern=r"^[a-zA-Z][a-zA-Z0-9_-]{0,31}$")
    """A short name, unique among ``tool_servers`` and ``mcp_servers``: logs, metrics, the
    audit record, a profile's ``server.tool`` entries."""
    command: str | None = Field(None, min_length=1)
    """The program that serves MCP on its stdin and stdout (started by the sidecar)."""
    args: list[str] = Field(default_factory=list)
    """Its arguments."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables it gets, besides ``PATH``, ``HOME``, ``LANG`` and ``TZ`` of
    the sidecar's own; nothing else of the sidecar's environment is passed on."""
    env_from: dict[str, str] = Field(default_factory=dict)
    """Secrets it gets as environment variables: its variable's name to the name of the
    sidecar's variable holding the value (``{GITHUB_TOKEN: SIDECAR_GITHUB_TOKEN}``)."""
    cwd: str | None = None
    """Its working directory; unset: the sidecar's."""
    url: str | None = None
    """The Streamable HTTP endpoint (``https://host/mcp``); plain ``http`` only to loopback
    unless ``server.insecure``."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Headers sent with every request (not secret)."""
    headers_from_env: dict[str, str] = Field(default_factory=dict)
    """Secret headers: a header's name to the environment variable holding its value
    (``{Authorization: GITHUB_MCP_AUTH}``, the variable holding ``Bearer …``)."""
    tls: ClientTlsConfig | None = None
    """TLS to an ``https`` URL: the CA bundle (unset: the system's), a client certificate
    for mutual TLS, the name to verify. ``server_name`` is not supported here."""
    protocol: Literal["auto", "legacy", "2026-07-28"] = "auto"
    """The revision spoken: ``auto`` asks ``server/discover`` and falls back to the 2025
    handshake (``initialize``); ``legacy`` always uses the handshake; ``2026-07-28`` only
    the stateless revision."""
    timeout: float = Field(30.0, gt=0)
    """Seconds one call may take unless a tool's ``timeout`` is shorter; the run's remaining
    time caps it, and a task is polled at most this long."""
    retry: RetryPolicy = RetryPolicy()
    """Retries of idempotent tools' calls that failed UNAVAILABLE (the server down or
    restarting); others never retry."""
    breaker: BreakerPolicy = BreakerPolicy()
    """The server's circuit breaker."""
    discovery_timeout: float = Field(10.0, gt=0)
    """Seconds to wait at start for the server's tool list (and for a start, a connect or a
    re-list later) before going on without it."""
    health_interval: float = Field(10.0, ge=0.1)
    """Seconds between health probes while the server is idle (a ping on the 2025 revisions,
    ``server/discover`` on 2026-07-28); a probe unanswered within ``discovery_timeout``
    marks it NOT_SERVING and a started server is restarted."""
    restart_backoff: float = Field(0.5, gt=0)
    """Seconds before the first restart of a started server that exited or hung, or the
    first reconnect to a URL; each further attempt waits twice as long."""
    max_restart_backoff: float = Field(30.0, gt=0)
    """The longest wait between restarts or reconnects."""
    min_relist_interval: float = Field(1.0, ge=0)
    """Seconds between re-listings at least: a storm of ``list_changed`` notifications
    costs one listing per interval."""
    max_result_bytes: int = Field(1024 * 1024, ge=1024)
    """Largest message accepted from the server (one line on stdio, one response over
    HTTP), and largest result passed on; a larger result is the call's error."""
    max_tools: int = Field(512, ge=1, le=4096)
    """Tools taken from the server's list at most; the rest are left out (logged)."""
    trust_annotations: bool = False
    """Believe the server's ``readOnlyHint`` and ``idempotentHint`` (early starts, retries)
    and a ``destructiveHint`` of false (no approval). Off: its tools are neither read-only
    nor idempotent, and each may be destructive."""
    approval: Literal["destructive", "always", "never"] = "destructive"
    """Which calls wait for the caller's approval: ``destructive`` those of tools that may
    be destructive (all of them, unless annotations are trusted or a tool is configured),
    ``always`` every call, ``never`` none. A tool's ``requires_approval`` wins."""
    elicitation: Literal["approval", "refuse"] = "approval"
    """A server's question during a call (elicitation): asked of the caller through the
    approval flow (``approval``), or declined at once (``refuse``). Unary runs, which
    nobody can answer, decline it."""
    identity: bool = True
    """Send who a call serves (principal, session, run, call, labels, and the signed
    assertion when ``auth.tool_assertion`` is set) in each call's ``_meta``."""
    allow_tools: list[str] | None = None
    """The server's tools the sidecar offers, by their names on the server; unset: all."""
    tools: dict[str, McpToolConfig] = Field(default_factory=dict)
    """Per tool, by its name on the server: trust, approval, timeout, retries, keys."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("set command (stdio) or url (Streamable HTTP), not both")
        if self.url is None and (self.headers or self.headers_from_env or self.tls):
            raise ValueError("headers, headers_from_env and tls go with url")
        if self.command is None and (self.args or self.env or self.env_from or self.cwd):
            raise ValueError("args, env, env_from and cwd go with command")
        if self.url is not None:
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError("url must be an http or https URL with a host")
            if parts.username or parts.password:
                raise ValueError("url must not carry credentials: use headers_from_env")
            if self.tls is not None and parts.scheme != "https":
                raise ValueError("tls needs an https url")
            if self.tls is not None and self.tls.server_name is not None:
                raise ValueError("tls.server_name is not supported for MCP servers")
        for header in [*self.headers, *self.headers_from_env]:
            if not re.fullmatch(_HEADER_NAME, header):
                raise ValueError(f"{header[:40]!r} is not an HTTP header name")
        for name in [*self.env_from, *self.env_from.values(), *self.headers_from_env.values()]:
            if not re.fullmatch(_ENV_NAME, name):
                raise ValueError(f"{name[:40]!r} is not an environment variable name")
        if self.max_restart_backoff < self.restart_backoff:
            raise ValueError("max_restart_backoff must be at least restart_backoff")
        return self


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


class BudgetConfig(_Strict):
    """A profile's latency budget: for the whole run and for each kind of stage.

    Every budget is optional; a profile that sets none has no budget. Overruns are seen
    at stage boundaries (after each model call and each step's tool calls) and reported
    once per stage and run; ``policy`` decides what happens next.
    """

    total: float | None = Field(None, gt=0)
    """Seconds the whole run may take, from the moment the sidecar received the request."""
    model: float | None = Field(None, gt=0)
    """Seconds of model calls per run, summed (retries and backoff included)."""
    tools: float | None = Field(None, gt=0)
    """Seconds of tool calls per run: each step's wall time of tool calls, summed."""
    other: float | None = Field(None, gt=0)
    """Seconds of everything else per run: queueing, context building, the sidecar's own
    overhead."""
    policy: Literal["continue", "answer", "stop"] = "continue"
    """What an overrun does. ``continue``: report it and go on (only the caller's deadline
    bounds calls). ``answer``: one last model call with tool calls turned off, then stop
    with STOP_REASON_BUDGET_ANSWERED. ``stop``: stop with STOP_REASON_BUDGET_STOPPED.
    Under ``answer`` and ``stop`` each model request and tool call gets at most what is
    left of the total budget and of its stage's budget as its timeout."""

    @property
    def declared(self) -> bool:
        """Whether any budget is set."""
        return any(b is not None for b in (self.total, self.model, self.tools, self.other))


class CostConfig(_Strict):
    """What one run of a profile may spend (the cost guard). A model call that would take
    the run past a limit is not made: the run stops with STOP_REASON_COST_LIMIT, between
    calls, never during a tool call."""

    per_run: float | None = Field(None, gt=0)
    """The most a run may cost, in the price table's currency (``prices``: US dollars),
    counting the calls to models the table prices. Unset: no limit."""
    tokens_per_run: int | None = Field(None, ge=1)
    """The most tokens (prompt and completion) a run may use on models the price table
    has no price for, which ``per_run`` cannot count. Unset: no limit."""


class ContextConfig(_Strict):
    """How a profile's model input is kept small: the window, tool-result trimming, memory.

    Token counts are estimates (about 4 bytes per token), calibrated by the prompt tokens
    the provider reports for each request, per model and per session: a session in
    Chinese or Japanese, whose characters count about one token each, gets a smaller
    window after its first call. Leave the provider's limit some headroom.
    """

    max_tokens: int | None = Field(32_000, ge=256)
    """Token budget of the model input at the start of a turn: system prompt, tool
    schemas, memory, history and the user's input. Older turns' tool results are trimmed,
    then the oldest turns dropped, to stay under it. ``null`` turns the window off and
    sends the whole history every turn."""
    keep_recent_turns: int = Field(2, ge=0)
    """The most recent turns, always sent whole, even above the budget."""
    old_tool_result_chars: int = Field(400, ge=0)
    """When the history is over budget, each tool result of an older turn is cut to this
    many characters (with a marker saying how much was cut) before any turn is dropped."""
    drop_batch_turns: int = Field(4, ge=1)
    """Turns are dropped from the window this many at a time, so the history the provider
    sees stays the same for several turns (its prompt cache keeps hitting) and memory is
    summarised once per batch, not once per turn."""
    tool_result_max_chars: int | None = Field(16_000, ge=64)
    """Cap on one tool result as it enters the context, after the tool's ``result_fields``
    are applied; the rest is cut with a marker saying how much. ``null``: no cap."""
    memory: bool = False
    """Summarise turns the window drops into the session's memory (one model call per
    batch of dropped turns, after the turn that dropped them), and send that memory instead
    of the turns. Off: dropped turns are simply not sent."""
    memory_max_chars: int = Field(2_000, ge=100)
    """Longest memory kept; the model is asked to stay under it and longer text is cut."""
    memory_model: dict[str, Any] | None = None
    """The model that writes memory summaries, as keys of the top-level ``model`` section
    that differ (``{model: openai/gpt-oss-20b}``); unset: the top-level model."""


_VARIANT_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class VariantConfig(_Strict):
    """One variant of a profile: a model (and optionally a prompt) with a share of sessions."""

    name: str = Field(pattern=_VARIANT_NAME)
    """Its name, on every turn, in the timeline, metrics and the audit record."""
    weight: float = Field(ge=0)
    """Its share of new sessions, relative to the other variants' (90 and 10: 90%)."""
    model: dict[str, Any] = Field(default_factory=dict)
    """Keys of the top-level ``model`` section that differ for this variant (``model``,
    ``base_url``, ``temperature`` ...); empty: the top-level model as it is."""
    system_prompt: str | None = None
    """Its system prompt; unset: the profile's."""
    tools_model: dict[str, Any] | None = None
    """Tiering for this variant; unset: the profile's ``tools_model``."""
    shadow: float | None = Field(None, gt=0, le=1)
    """Shadow mode: the share of the profile's live turns this variant runs a copy of,
    with tool calls answered from the live run's results, its answer never shown and its
    cost counted apart; it takes no sessions (``weight`` counts again once the key is
    removed: promotion to canary). Unset: a variant that serves its share of sessions."""


class RollbackConfig(_Strict):
    """When a canary variant is taken out of rotation: it breaches its objective against
    the stable variant (the first one listed) over a window with enough runs of both."""

    enabled: bool = True
    window: float = Field(300.0, gt=0)
    """Seconds of the latest runs compared."""
    min_runs: int = Field(20, ge=1)
    """Runs of the canary and of the stable variant the window needs before judging."""
    max_error_rate_increase: float = Field(0.05, ge=0, le=1)
    """How far the canary's share of failed runs may exceed the stable variant's. A run
    fails that ends in a way a sound model would not end it: a model error, an invalid
    answer, a refusal, the step or tool-call limit, the budget stopping it; cancelled and
    interrupted runs are not counted."""
    max_p95_ratio: float = Field(1.5, ge=1)
    """How many times the stable variant's P95 run latency the canary's may be."""
    min_p95_increase: float = Field(0.25, ge=0)
    """Seconds the canary's P95 run latency may exceed the stable variant's whatever the
    ratio: a canary is slower only by both measures. Default 0.25: below it, a ratio of
    two fast P95s is noise (4 ms against 2 ms), not a regression users feel."""
    significance: float = Field(0.001, gt=0, lt=1)
    """How unlikely by chance a difference must be before it counts (the p-value of a
    one-sided test: two proportions for failures, Mann-Whitney U for latency). Default
    0.001: the canary is judged again after each run, and each look is a chance to be
    fooled; at this level an identical twin was rolled back in 2 of 300 simulated windows
    of 300 runs, while a canary twice as slow, or failing 25% of runs against 2%, was
    caught in every one, after 50 runs at the median."""


class SpeculationConfig(_Strict):
    """Speculative prefetch: the first step's read-only, idempotent calls the model is very
    likely to ask for start while it thinks, predicted by rules learned from the profile's
    stored turns (an order number in the input, say, followed by a status lookup of it)."""

    enabled: bool = False
    """Start predicted calls before the model asks for them. Off by default: a call the
    model does not ask for is extra load on its tool server."""
    min_precision: float = Field(0.9, gt=0, le=1)
    """A rule is used once, over the turns it was learned from, this share of the calls it
    predicted were the model's own (the rest would have been waste). Default 0.9: at most
    about one speculated call in ten is wasted."""
    min_support: int = Field(20, ge=1)
    """A rule is used once it predicted a call for at least this many of the stored turns:
    a precision over fewer is luck. Default 20."""
    history_turns: int = Field(500, ge=10, le=10_000)
    """The latest turns of the profile's sessions the rules are learned from."""
    relearn_interval: float = Field(60.0, gt=0)
    """Seconds between learnings from the session store (every replica's turns, when the
    store is shared)."""
    max_calls: int = Field(3, ge=1, le=16)
    """Calls speculated per run at most, the most precise rules' first."""


class LightContextConfig(_Strict):
    """The light path's context window: keys of the profile's ``context`` that differ."""

    max_tokens: int | None = Field(None, ge=256)
    """Token budget of the model input on the light path; unset: the profile's."""
    keep_recent_turns: int | None = Field(None, ge=0)
    """The most recent turns always sent whole on the light path; unset: the profile's."""


class LightConfig(_Strict):
    """A profile's light variant: what a run does instead of being refused when the sidecar
    is overloaded (``server.light_path``). Every key left unset is the profile's own; the
    light path never tiers, never writes memory summaries (it reads the memory there is),
    and its runs are not judged against the session's variant."""

    model: dict[str, Any] = Field(default_factory=dict)
    """The light path's model, as keys of the top-level ``model`` section that differ (a
    smaller, faster model: ``{model: openai/gpt-oss-20b}``); empty: the top-level model."""
    system_prompt: str | None = None
    """Its system prompt (a shorter one); unset: the profile's."""
    max_steps: int | None = Field(None, ge=1, le=256)
    """Model calls per light run; unset: the profile's."""
    max_tool_calls: int | None = Field(None, ge=0, le=4096)
    """Tool calls per light run; unset: the profile's."""
    context: LightContextConfig = LightContextConfig()
    """A shorter context window."""


class ReasoningPolicy(_Strict):
    """What becomes of a reasoning model's reasoning text on a profile's runs. It is
    never the answer and never sent back to the model; its tokens are counted (usage,
    cost, the timeline, the cost guard) whatever this says."""

    stream: bool = False
    """Stream it to the caller as ``reasoning_delta`` events (StreamRun). Off: the model
    is asked to leave it out of its responses, which then carry less."""
    record: bool = False
    """Keep it in recordings (``recording.path``) and the audit record. Off: they hold
    its token count only."""


class ServiceTiers(_Strict):
    """The provider's service tier by run class, over ``model.service_tier``."""

    caller: Literal["auto", "on_demand", "flex", "performance"] | None = None
    """Runs a caller waits for (Run, StreamRun, A2A, MCP)."""
    background: Literal["auto", "on_demand", "flex", "performance"] | None = None
    """Background runs (StartRun, A2A tasks run in the background): ``flex`` suits them."""
    shadow: Literal["auto", "on_demand", "flex", "performance"] | None = None
    """Shadow variants' runs, whose answers nobody waits for."""


class ProfileConfig(_Strict):
    """An agent profile: what the agent is told, which tools it may use, its limits."""

    reasoning: ReasoningPolicy = ReasoningPolicy()
    """What becomes of a reasoning model's reasoning (docs/models.md#reasoning)."""
    service_tiers: ServiceTiers = ServiceTiers()
    """The provider's service tier per run class; unset ones: ``model.service_tier``."""

    system_prompt: str = "You are a helpful assistant. Use the tools when they help."
    """The system prompt, sent first and byte-identical on every call."""
    tools: list[str] | None = None
    """Tools the profile may use, by name (``get_x``) or by server and name
    (``orders.get_x``, allowed only while that server owns the name); unset allows every
    tool."""
    max_steps: int = Field(8, ge=1, le=256)
    """Model calls per run before it stops with STOP_REASON_MAX_STEPS."""
    max_tool_calls: int = Field(32, ge=0, le=4096)
    """Tool calls per run before it stops with STOP_REASON_MAX_TOOL_CALLS."""
    answer_schema: dict[str, Any] | None = None
    """JSON Schema the final answer must match in structured mode; unset: free text."""
    max_input_chars: int = Field(200_000, ge=1, le=10_000_000)
    """Longest user input a run accepts, in characters (about 50,000 tokens at the
    default); a longer one fails with INPUT_TOO_LARGE before anything runs or is stored."""
    approval_timeout: float = Field(300.0, gt=0)
    """Seconds a call waits for ApproveToolCall before it counts as denied."""
    early_dispatch: bool = True
    """Start read-only calls while the model is still streaming the rest of its answer."""
    budget: BudgetConfig = BudgetConfig()
    """The profile's latency budget; unset budgets are not checked."""
    cost: CostConfig = CostConfig()
    """What a run may spend; unset limits are not checked."""
    context: ContextConfig = ContextConfig()
    """The context window, tool-result trimming and memory of the profile's sessions."""
    tools_model: dict[str, Any] | None = None
    """Tiering: the model for the steps that choose tools, as keys of the top-level
    ``model`` section that differ (a small fast model); the answer comes from the
    profile's own model, asked once the small one needs no more tools. Unset: one model
    for every step."""
    variants: list[VariantConfig] = Field(default_factory=list)
    """Model variants sharing the profile's new sessions by weight; the first is the
    stable one, the others canaries. A session stays on the variant it started on. Empty:
    the top-level model alone."""
    rollback: RollbackConfig = RollbackConfig()
    """When a canary is taken out of rotation automatically."""
    speculation: SpeculationConfig = SpeculationConfig()
    """Speculative prefetch of the first step's likely calls; off by default."""
    light: LightConfig | None = None
    """The light variant new runs take while the sidecar is overloaded
    (``server.light_path``), instead of being refused; unset: runs always take the full
    path."""

    def light_profile(self) -> ProfileConfig | None:
        """The profile as its light path runs it; None when it has none."""
        light = self.light
        if light is None:
            return None
        context = self.context.model_copy(
            update={k: v for k, v in light.context.model_dump().items() if v is not None}
        )
        return self.model_copy(
            update={
                "system_prompt": light.system_prompt or self.system_prompt,
                "max_steps": light.max_steps or self.max_steps,
                "max_tool_calls": self.max_tool_calls
                if light.max_tool_calls is None
                else light.max_tool_calls,
                "context": context,
                "tools_model": None,
                "variants": [],
                "light": None,
            }
        )

    record: float = Field(0.0, ge=0, le=1)
    """The share of the profile's turns recorded into ``recording.path`` (0.05: one in
    twenty, drawn at random per turn). Default 0: none, and a turn not recorded costs
    nothing."""

    @field_validator("answer_schema")
    @classmethod
    def _answer_schema_compiles(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is None:
            return None
        # Structured outputs (Groq's, OpenAI's) ask for a JSON object: a schema whose root
        # is anything else could never be met.
        if schema.get("type") != "object":
            raise ValueError('the root must be an object schema ("type": "object")')
        try:
            compile_schema_safely(schema)
        except ValueError as exc:
            raise ValueError(f"not a JSON Schema answers can be checked with: {exc}") from None
        return schema

    @field_validator("variants")
    @classmethod
    def _variants(cls, variants: list[VariantConfig]) -> list[VariantConfig]:
        _unique("variant", [v.name for v in variants])
        if variants and variants[0].shadow is not None:
            raise ValueError("the first variant is the stable one and cannot be a shadow")
        if variants and not any(v.weight > 0 for v in variants if v.shadow is None):
            raise ValueError("at least one variant that is not a shadow needs a weight above 0")
        return variants


class ServerTlsConfig(_Strict):
    """TLS on the sidecar's endpoint; with ``client_ca_file``, mutual TLS."""

    cert_file: str
    """PEM certificate chain the sidecar presents."""
    key_file: str
    """PEM private key of that certificate."""
    client_ca_file: str | None = None
    """PEM CA bundle that client certificates must chain to; set, every caller must
    present one (mutual TLS), and a principal may be named by its certificate's SAN."""
    reload_interval: float = Field(5.0, gt=0)
    """Seconds between checks of the files; a changed file is used for new connections
    from then on, calls in flight keep theirs."""


_MAX_SOCKET_PATH = 107
"""Bytes of a Unix socket's path: ``sun_path`` holds 108 with the terminating NUL."""


class LightPathConfig(_Strict):
    """When new runs take their profile's light path (``profiles.NAME.light``) instead of
    the full one: while the runs in flight are near ``max_concurrent_runs``, with
    hysteresis so a sidecar at the threshold does not flip on every run."""

    enter: float = Field(0.5, gt=0, le=1)
    """The sidecar is overloaded once this share of ``max_concurrent_runs`` is in flight:
    new runs of a profile with a light variant take it. The full runs in flight keep their
    places, so the light runs have the rest of the capacity to absorb a burst in. Default
    0.5: half of it (measured, ``make bench``: at three quarters, full runs let in at each
    end of overload left too little room, and some light runs were refused)."""
    leave: float = Field(0.25, ge=0, lt=1)
    """It is no longer overloaded once the runs in flight fall to this share: new runs take
    the full path again. Default 0.25: the gap keeps it from flipping at the threshold."""

    @model_validator(mode="after")
    def _leave_below_enter(self) -> LightPathConfig:
        if self.leave >= self.enter:
            raise ValueError("leave must be below enter")
        return self


class ServerConfig(_Strict):
    """The sidecar's own gRPC endpoint."""

    host: str = "127.0.0.1"
    """Interface to bind; ``0.0.0.0`` to accept connections from other hosts."""
    port: int = Field(50051, ge=0, le=65535)
    """Port to bind; 0 picks a free one (the chosen port is printed at start)."""
    grace_period: float = Field(10.0, ge=0)
    """Seconds in-flight runs get to finish after SIGTERM."""
    max_message_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    """Largest gRPC message accepted or sent. An answer may take half of it (a longer one
    ends the run ``answer_too_large``), a tool call's arguments or result a quarter."""
    max_concurrent_runs: int = Field(1024, ge=1)
    """Runs in flight at once in this process; one more is refused with
    RESOURCE_EXHAUSTED (reason OVERLOADED, with a retry delay) before anything runs."""
    light_path: LightPathConfig = LightPathConfig()
    """When new runs of a profile with a light variant take it (near capacity)."""
    stream_buffer_bytes: int = Field(8 * 1024 * 1024, ge=64 * 1024)
    """Bytes of events a stream holds for a caller that reads them too slowly: past it
    the model's stream pauses until the caller takes events; a caller that takes none
    for 5 s meanwhile, or lets twice this pile up, has its run cancelled and the stream
    ends RESOURCE_EXHAUSTED (STREAM_BACKLOG). A slow reader costs at most twice this;
    one that keeps up is never cut off."""
    tls: ServerTlsConfig | None = None
    """TLS (and mutual TLS) on the endpoint; unset: plaintext, allowed on loopback only
    unless ``insecure``."""
    insecure: bool = False
    """Allow binding an address other than loopback without TLS or without caller
    authentication (``auth.principals``); the sidecar then warns at start. Without it,
    such a setup stops the sidecar at start."""
    reflection: bool = True
    """Serve gRPC server reflection (v1 and v1alpha), open to every caller like health."""
    health_port: int | None = Field(None, ge=0, le=65535)
    """A second, plaintext port that serves only ``grpc.health.v1`` (for probes that
    speak no TLS, such as the kubelet's); unset: none."""
    config_watch_interval: float | None = Field(2.0, gt=0)
    """Seconds between checks of the configuration file; a changed file is reloaded
    (as on SIGHUP). ``null``: only SIGHUP reloads."""
    unix_socket: str | None = Field(None, min_length=1)
    """The path of a Unix domain socket the endpoint listens on besides its TCP port,
    with the same TLS and callers, for callers on the same host or in the same pod (a
    shared ``emptyDir``); they dial ``unix:PATH``. Created mode 0660 (the sidecar's user
    and group); a socket left by a process that died is replaced, one a live process
    listens on stops the sidecar at start. Unset: none."""

    @field_validator("unix_socket")
    @classmethod
    def _socket_path(cls, path: str | None) -> str | None:
        if path is None:
            return None
        if path.startswith("unix:"):
            raise ValueError("a path, without the unix: prefix callers dial")
        if path.endswith("/"):
            raise ValueError("the socket's own path, not its directory")
        if len(path.encode()) > _MAX_SOCKET_PATH:
            raise ValueError(f"at most {_MAX_SOCKET_PATH} bytes (the limit of a socket address)")
        return path


class MetricsConfig(_Strict):
    """The Prometheus endpoint."""

    enabled: bool = False
    """Serve metrics; off, the hot path records none."""
    host: str = "127.0.0.1"
    """Interface the metrics endpoint binds."""
    port: int = Field(9464, ge=0, le=65535)
    """Port of the metrics endpoint (``/metrics``); 0 picks a free one, printed at start."""
    read_timeout: float = Field(10.0, gt=0)
    """Seconds a scrape's request may take to arrive whole; a slower connection is
    closed (each holds a thread)."""
    max_connections: int = Field(16, ge=1)
    """Connections served at once; one beyond is closed as it is accepted."""


class TracingConfig(_Strict):
    """OpenTelemetry tracing, exported over OTLP/gRPC."""

    enabled: bool = False
    """Record spans (run, step, model call, tool call) and carry the trace context to
    tool servers; off, the hot path creates no span."""
    otlp_endpoint: str = "127.0.0.1:4317"
    """``host:port`` of the OTLP/gRPC receiver (an OpenTelemetry Collector, Jaeger, Tempo)."""
    insecure: bool = True
    """Plaintext to the receiver; false for TLS with the system's trust store."""
    service_name: str = "agent-sidecar"
    """The ``service.name`` resource attribute of every span."""
    sample_ratio: float = Field(1.0, ge=0, le=1)
    """Share of new traces recorded; a caller's sampling decision is always followed."""
    export_delay: float = Field(1.0, gt=0)
    """Seconds between batched exports; spans wait at most this long in memory."""


class TelemetryConfig(_Strict):
    """Metrics, tracing and the timeline log. All off by default."""

    label: str | None = None
    """The config or version label written with each timeline record, for comparing
    releases in ``agent-sidecar report``; unset: ``agent-sidecar VERSION``."""
    metrics: MetricsConfig = MetricsConfig()
    """The Prometheus endpoint."""
    tracing: TracingConfig = TracingConfig()
    """OpenTelemetry tracing."""
    timeline_log: str | None = None
    """Path of a JSON-lines file that gets one record per finished run (its timeline,
    usage, cost and budget overruns), appended; unset: no log."""


class PriceConfig(_Strict):
    """A model's list prices, in US dollars per million tokens."""

    prompt: float = Field(ge=0)
    """Price of a million prompt tokens."""
    completion: float = Field(ge=0)
    """Price of a million completion tokens."""
    cached_prompt: float | None = Field(None, ge=0)
    """Price of a million prompt tokens served from the provider's prompt cache; unset:
    the prompt price."""


class SqliteConfig(_Strict):
    """The embedded session store: one SQLite file, used by one sidecar process."""

    path: str = "agent-sidecar.db"
    """The database file, relative to the working directory unless absolute. A lock file
    next to it (``PATH.lock``) keeps a second sidecar from using the same file."""
    synchronous: Literal["normal", "full"] = "normal"
    """SQLite's ``synchronous`` setting in WAL mode. ``normal``: a finished turn survives
    the process being killed; ``full``: it also survives a power loss, at one fsync per
    turn."""


class PostgresConfig(_Strict):
    """The shared session store: PostgreSQL, for several sidecar replicas."""

    dsn: str | None = None
    """Connection string, e.g. ``postgresql://sidecar@db:5432/sidecar``. Put no password
    here: the environment variable named by ``dsn_env`` wins when it is set."""
    dsn_env: str = "SIDECAR_POSTGRES_DSN"
    """Environment variable holding the connection string (with its password)."""
    pool_size: int = Field(4, ge=1, le=100)
    """Connections kept open to the server."""
    connect_timeout: float = Field(10.0, gt=0)
    """Seconds to wait for the server at start before the sidecar gives up."""
    lease: float = Field(15.0, ge=0.1)
    """Seconds a turn in progress stays claimed without a heartbeat. The sidecar renews
    the claims of its running turns every third of this; a claim not renewed in time
    belongs to a replica that died, and its turn is reported as interrupted."""


class SessionsConfig(_Strict):
    """Where sessions are kept, and for how long."""

    store: Literal["sqlite", "postgres", "memory"] = "sqlite"
    """``sqlite`` (embedded, one process), ``postgres`` (shared by replicas) or
    ``memory`` (gone when the process ends; for tests and demos)."""
    sqlite: SqliteConfig = SqliteConfig()
    """Settings of the SQLite store."""
    postgres: PostgresConfig = PostgresConfig()
    """Settings of the PostgreSQL store."""
    idle_ttl: float | None = Field(None, gt=0)
    """Seconds after its last turn a session expires and is deleted. Unset: never."""
    max_sessions: int | None = Field(100_000, ge=1)
    """Sessions the store may hold; creating one more is refused with RESOURCE_EXHAUSTED
    (reason TOO_MANY_SESSIONS). Counted about every second, so a burst may pass it by a
    few. ``null``: no limit."""
    sweep_interval: float = Field(60.0, gt=0)
    """Seconds between sweeps for expired sessions and cached results."""
    replica_id: str | None = Field(None, min_length=1, max_length=128)
    """A name for this replica that stays the same across its restarts (a StatefulSet
    pod's name, say). With it, a restarted replica reports its own cut-off turns as
    interrupted at once, instead of after their lease runs out. Two live replicas must
    never share one. Unset: a new random id at every start."""


class CacheConfig(_Strict):
    """The tool-result cache."""

    tool_results: bool = True
    """Cache results of read-only tools that declare a ``cache_ttl``."""
    max_entries: int = Field(10_000, ge=1)
    """Results kept in this process's memory; the least recently used go first."""
    shared: bool = False
    """Also keep results in the shared store, so replicas reuse each other's results.
    Needs ``sessions.store: postgres``."""


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


_SKILL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class A2ASkillConfig(_Strict):
    """One agent profile exposed as an A2A skill (an entry of the agent card's ``skills``)."""

    profile: str
    """The agent profile a task of this skill runs (``profiles.NAME``)."""
    id: str | None = None
    """The skill's id on the card, which a message names in its metadata (``skill``) to
    pick it; unset: the profile's name."""
    name: str | None = None
    """The skill's name on the card; unset: the profile's name."""
    description: str = ""
    """What the skill does, for the humans and agents that read the card."""
    tags: list[str] = Field(default_factory=list)
    """Keywords on the card."""
    examples: list[str] = Field(default_factory=list)
    """Example prompts on the card."""

    @property
    def skill_id(self) -> str:
        return self.id or self.profile

    @field_validator("id")
    @classmethod
    def _id_shape(cls, value: str | None) -> str | None:
        if value is not None and not _SKILL_ID.fullmatch(value):
            raise ValueError("1 to 64 letters, digits, '.', '_' or '-', starting alphanumeric")
        return value


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


class A2AHttpConfig(_Strict):
    """The HTTP listener of the A2A front: the agent card at its well-known path, the
    JSON-RPC binding and the HTTP+JSON binding."""

    host: str | None = None
    """Interface to bind; unset: ``server.host``. It follows the rules of the gRPC port:
    off loopback it needs TLS and principals (or ``server.insecure``)."""
    port: int = Field(8080, ge=0, le=65535)
    """Port to bind; 0 picks a free one (printed at start as ``a2a http on HOST:PORT``)."""
    jsonrpc_path: str = "/a2a/jsonrpc"
    """Path of the JSON-RPC binding."""
    rest_prefix: str = "/a2a/rest"
    """Path prefix of the HTTP+JSON binding (``/message:send``, ``/tasks/{id}`` ...)."""
    rest: bool = True
    """Serve the HTTP+JSON binding besides JSON-RPC."""
    public_url: str | None = None
    """The URL callers reach the listener at (behind a proxy or a Service), the base of
    the card's interface URLs; unset: ``http(s)://HOST:PORT`` as bound."""
    allowed_origins: list[str] = Field(default_factory=list)
    """Browser origins allowed to call it besides loopback ones (``https://app.example``):
    any other ``Origin`` is refused 403, against DNS rebinding (as ``mcp.allowed_origins``)."""
    limits: HttpLimits = HttpLimits()
    """Read timeout and connection cap of the listener."""

    @field_validator("jsonrpc_path", "rest_prefix")
    @classmethod
    def _path_shape(cls, value: str) -> str:
        if not value.startswith("/") or value.endswith("/") or "{" in value:
            raise ValueError("a path starting with '/', not ending with one")
        return value

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        return _check_origins(origins)

    @field_validator("public_url")
    @classmethod
    def _url_shape(cls, value: str | None) -> str | None:
        if value is not None and urlsplit(value).scheme not in ("http", "https"):
            raise ValueError("an http:// or https:// URL")
        return value.rstrip("/") if value is not None else None


class A2ASigningConfig(_Strict):
    """The key that signs the agent card (a JWS over its canonical JSON, RFC 8785)."""

    key_file: str
    """PEM private key (EC P-256 for ES256, RSA for RS256, Ed25519 for EdDSA)."""
    algorithm: Literal["ES256", "RS256", "EdDSA"] = "ES256"
    """The JWS algorithm; it must suit the key."""
    key_id: str = ""
    """``kid`` in the protected header, so verifiers pick the matching public key."""
    jku: str = ""
    """``jku`` in the protected header: where verifiers fetch the public key set; empty:
    left out."""


class A2AConfig(_Strict):
    """The A2A front: the Agent2Agent protocol (v1.0, as ``a2a-sdk`` 1.3.0 implements it)
    served beside ``AgentService``, tasks being background runs. Unset: not served, and
    nothing of it is loaded."""

    skills: list[A2ASkillConfig] = Field(min_length=1)
    """The profiles exposed as skills; the first is the skill of a message that names
    none."""
    name: str = "agent-sidecar"
    """The agent's name on the card."""
    description: str = "An agent served by agent-sidecar"
    """The agent's description on the card."""
    organization: str = ""
    """The provider's organization on the card; empty: no provider."""
    grpc: bool = True
    """Serve the gRPC binding (``lf.a2a.v1.A2AService``) on the sidecar's gRPC port."""
    grpc_url: str | None = None
    """The address callers reach the gRPC port at (``HOST:PORT``), for the card; unset:
    ``server.host:PORT`` as bound."""
    http: A2AHttpConfig | None = None
    """The HTTP listener (card, JSON-RPC, HTTP+JSON); unset: none, and the card is served
    through the gRPC binding's ``GetExtendedAgentCard`` only."""
    signing: A2ASigningConfig | None = None
    """Sign the agent card; unset: unsigned."""

    @field_validator("skills")
    @classmethod
    def _unique_skills(cls, skills: list[A2ASkillConfig]) -> list[A2ASkillConfig]:
        _unique("a2a skill", [s.skill_id for s in skills])
        return skills

    @model_validator(mode="after")
    def _some_binding(self) -> A2AConfig:
        if not self.grpc and self.http is None:
            raise ValueError("serve the gRPC binding or configure http, or leave a2a out")
        return self


class SecurityConfig(_Strict):
    """What the sidecar protects: secrets in what leaves the process."""

    redact: list[str] = Field(default_factory=list)
    """Regular expressions of secrets to redact from errors, tool results, logs and traces,
    beside the model's API key, the session store's password and the built-in shapes of
    provider keys and bearer tokens (``sidecar.redaction.BUILT_IN_PATTERNS``)."""

    @field_validator("redact")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        return patterns


class QuotaConfig(_Strict):
    """What one principal may use; unset limits are not checked."""

    concurrent_runs: int | None = Field(None, ge=1)
    """Runs in flight at once."""
    runs_per_minute: int | None = Field(None, ge=1)
    """Runs started in any 60 seconds."""
    sessions: int | None = Field(None, ge=1)
    """Sessions the principal holds in the store."""
    background_runs: int | None = Field(None, ge=1)
    """Background runs queued and running at once (counted in the store, so across
    replicas); one more is refused with RESOURCE_EXHAUSTED (QUOTA_EXCEEDED)."""
    daily_cost: float | None = Field(None, gt=0)
    """What its runs may cost in a day (UTC), in the price table's currency; past it new
    runs are refused until midnight, and a run stops before a model call that would take
    the day past it. Counted in the session store, so replicas sharing one count together."""
    daily_tokens: int | None = Field(None, ge=1)
    """Tokens its runs may use in a day (UTC) on models the price table has no price for;
    as ``daily_cost``."""
    mcp_sessions: int | None = Field(None, ge=1, le=100_000)
    """Sessions it may hold open on the MCP endpoint; unset: ``mcp.sessions.max_per_principal``."""

    @property
    def daily(self) -> bool:
        """Whether the principal's runs count against a daily quota."""
        return self.daily_cost is not None or self.daily_tokens is not None


class PrincipalConfig(_Strict):
    """One caller: how it proves who it is, and what it may use.

    Exactly one of the token sources, or ``san``, or a token source and ``san`` both (the
    caller may use either)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
    """The principal's name, in the audit log and in its sessions' namespace."""
    token_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    """SHA-256 (hex) of its bearer token: the token itself is never in the file."""
    token_env: str | None = None
    """Environment variable holding its bearer token."""
    token_file: str | None = None
    """File holding its bearer token (reread when it changes)."""
    san: str | None = None
    """A subject alternative name (URI or DNS) of its client certificate, with mutual TLS
    (``server.tls.client_ca_file``)."""
    profiles: list[str] | None = None
    """Profiles it may create sessions under and run; unset: every profile."""
    quota: QuotaConfig = QuotaConfig()
    """What it may use."""
    operator: bool = False
    """Whether it may change the variants of the profiles it may use (``agent-sidecar
    variants``, ``VariantService``)."""
    callback_secret_env: str | None = None
    """Environment variable holding the secret its background runs' completion callbacks
    are signed with (HMAC-SHA256); without one (or ``callback_secret_file``) its runs may
    name no callback."""
    callback_secret_file: str | None = None
    """File holding that secret, read at start and on a reload."""

    @model_validator(mode="after")
    def _one_way_to_prove_it(self) -> PrincipalConfig:
        tokens = [x for x in (self.token_sha256, self.token_env, self.token_file) if x]
        if len(tokens) > 1:
            raise ValueError("set one of token_sha256, token_env and token_file")
        if not tokens and self.san is None:
            raise ValueError("set a token (token_sha256, token_env or token_file) or a san")
        if self.callback_secret_env and self.callback_secret_file:
            raise ValueError("set one of callback_secret_env and callback_secret_file")
        return self


class AuditConfig(_Strict):
    """The audit record: one JSON line per event, appended."""

    path: str | None = None
    """File the lines are appended to; ``-`` for stdout; unset: no audit record."""


class ToolAssertionConfig(_Strict):
    """The signed identity assertion sent with every tool call: a JWT naming the principal,
    session and run, which a tool server verifies with the published public key
    (``agent-sidecar identity jwks``). Unset: none is signed."""

    key_file: str = Field(min_length=1)
    """PEM private key the sidecar signs with (PKCS#8 or the traditional form, not
    encrypted): Ed25519 (signs EdDSA) or ECDSA P-256 (signs ES256). Read at start and on a
    reload."""
    issuer: str = Field("agent-sidecar", min_length=1, max_length=256)
    """The ``iss`` claim; tool servers check it."""
    ttl: float = Field(300.0, ge=10, le=86_400)
    """Seconds an assertion is valid. One is signed per run and tool server, reused for the
    run's calls to that server, and signed anew once three quarters of it have passed:
    short enough that a leaked token soon expires, long enough that a run signs once."""
    published_key_files: list[str] = Field(default_factory=list)
    """More PEM keys (public or private) whose public halves ``agent-sidecar identity jwks``
    publishes beside the signing key's: the next key before a rotation, the previous one
    after it. Never used to sign."""


class AuthConfig(_Strict):
    """Who may call the sidecar, the record of what they did, and how tools learn who they
    serve."""

    principals: list[PrincipalConfig] = Field(default_factory=list)
    """The callers. Empty: no authentication, every caller is the anonymous principal
    (loopback only, unless ``server.insecure``)."""
    audit: AuditConfig = AuditConfig()
    """The audit record."""
    tool_assertion: ToolAssertionConfig | None = None
    """The signed identity assertion for tool servers; unset: tool calls carry the plain
    identity metadata only."""

    @field_validator("principals")
    @classmethod
    def _unique_names(cls, principals: list[PrincipalConfig]) -> list[PrincipalConfig]:
        _unique("principal", [p.name for p in principals])
        return principals


class McpTasksConfig(_Strict):
    """Tasks of the MCP endpoint (the tasks extension of 2026-07-28): which tools a host
    that declares it gets as tasks, and how long they are kept (``docs/mcp.md``)."""

    tools: dict[str, Literal["optional", "required"]] = Field(default_factory=dict)
    """Tools, by the names the endpoint lists, that run as tasks for a host declaring the
    extension: ``optional`` ones run synchronously for other hosts, ``required`` ones are
    refused to them (``-32021``)."""
    timeout: float = Field(3600.0, gt=0)
    """Seconds a task's call may take (``mcp.call_timeout`` is for calls answered at
    once); approvals and questions included."""
    ttl: float = Field(3600.0, gt=0)
    """Seconds a task is kept from its creation (its ``ttlMs``); then it is forgotten, and
    cancelled if it still runs. At least ``timeout``."""
    poll_interval: float = Field(0.5, gt=0, le=60)
    """Seconds between polls suggested to hosts (``pollIntervalMs``)."""
    max_per_principal: int = Field(64, ge=1)
    """Tasks one principal may hold at once; past it a call runs synchronously, or is
    refused if its tool requires a task."""
    max_tasks: int = Field(4096, ge=1)
    """Tasks the process holds at once."""

    @model_validator(mode="after")
    def _kept_while_running(self) -> McpTasksConfig:
        if self.ttl < self.timeout:
            raise ValueError("ttl must be at least timeout: a task is kept while it may run")
        return self


class McpSessionsConfig(_Strict):
    """The Streamable HTTP endpoint's sessions (the 2025 revisions' ``Mcp-Session-Id``;
    2026-07-28 has none): how many, and for how long (``docs/mcp.md``)."""

    max_per_principal: int = Field(32, ge=1, le=100_000)
    """Sessions one principal may hold open (a principal's ``quota.mcp_sessions`` says
    otherwise); one more is refused 429 with ``Retry-After``."""
    max_sessions: int = Field(1024, ge=1, le=100_000)
    """Sessions the process holds open. When full, a principal holding fewer than the
    biggest holder takes that holder's least recently used idle session (closed; its host
    opens another); when none can give one up, 503."""
    idle_timeout: float = Field(300.0, gt=0, le=86_400)
    """Seconds a session may go with no request in flight (an open GET stream counts)
    before it is closed; its host then gets 404 and opens another, as MCP says."""


class McpEndpointConfig(_Strict):
    """The sidecar as an MCP server: the tools a profile allows, for MCP hosts, over
    Streamable HTTP (both revisions) and ``agent-sidecar mcp-stdio``. Its callers are the
    gRPC port's principals, with the same tokens and the same TLS (``server.tls``)."""

    port: int | None = Field(None, ge=0, le=65535)
    """Port of the Streamable HTTP endpoint; 0 picks a free one (printed as
    ``mcp on http://HOST:PORT/mcp``); unset: no endpoint."""
    host: str = "127.0.0.1"
    """Interface it binds; beyond loopback the rules of ``server.host`` apply (TLS and
    principals, or ``server.insecure``)."""
    path: str = Field("/mcp", pattern=r"^/[A-Za-z0-9._~/-]{0,127}$")
    """The endpoint's path."""
    profile: str = "default"
    """The profile whose tools it offers; a principal must be allowed it."""
    call_timeout: float = Field(60.0, gt=0)
    """Seconds a host's tool call may take (MCP carries no deadline); approvals included."""
    allowed_origins: list[str] = Field(default_factory=list)
    """Browser origins allowed to call it besides loopback ones (``https://app.example``):
    any other ``Origin`` is refused 403, against DNS rebinding."""
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    """Largest request body accepted (413 beyond)."""
    read_timeout: float = Field(30.0, gt=0)
    """Seconds a request may take to arrive whole once its connection is open or its
    previous response sent; a slower connection is closed (a response or an SSE stream
    being served is not bounded by it)."""
    max_connections: int = Field(1000, ge=1)
    """Open connections at most; one beyond is closed as it is accepted."""
    agent_tool: bool = False
    """Also offer ``agent``: a tool that runs one turn of the profile on a session of the
    caller's (the whole loop, its model calls and tools), for hosts that delegate a task."""
    tasks: McpTasksConfig = McpTasksConfig()
    """Tools run as tasks for hosts that declare MCP's tasks extension (2026-07-28)."""
    sessions: McpSessionsConfig = McpSessionsConfig()
    """Bounds of the sessions hosts on the 2025 revisions open."""

    @property
    def limits(self) -> HttpLimits:
        """What its listener lets a connection hold."""
        return HttpLimits(
            read_timeout=self.read_timeout,
            max_body_bytes=self.max_body_bytes,
            max_connections=self.max_connections,
        )

    request_state_key_env: str | None = Field(None, pattern=_ENV_NAME)
    """Environment variable holding the secret (32 bytes or more) that seals the
    ``requestState`` of a multi-round call (an approval, a bridged server's questions) on
    2026-07-28; replicas behind one address share it. Unset: a key made at start, so a
    host's next round must reach the same process."""

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        for origin in origins:
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.path:
                raise ValueError(f"{origin[:60]!r} is not an origin (scheme://host[:port])")
        return origins


class RecordingConfig(_Strict):
    """Where recorded turns are written (``profiles.NAME.record``, shadow variants) and how
    much room they may take: JSON lines files, one turn a line (``docs/replay.md``)."""

    path: str | None = None
    """The directory of the recording files; unset: nothing is recorded."""
    max_turn_bytes: int = Field(256 * 1024, ge=4096)
    """The largest document one turn may write: past it, the longest texts (tool results,
    messages) are cut and the turn says ``truncated``."""
    max_file_bytes: int = Field(64 * 1024 * 1024, ge=64 * 1024)
    """A file that has grown past this is closed and the next turn starts a new one."""
    max_files: int = Field(16, ge=1)
    """Files kept; the oldest is deleted when one more would be: the recordings take at
    most about ``max_files`` x ``max_file_bytes``."""


class ReplayThresholds(_Strict):
    """When ``agent-sidecar replay`` fails (exit 1): any measure past its threshold."""

    min_same_tool_calls: float = Field(0.9, ge=0, le=1)
    """The share of turns whose tool calls (names and arguments) must be the recording's."""
    min_same_answers: float = Field(0.0, ge=0, le=1)
    """The share of turns whose answers must compare the same (``replay.answers``).
    Default 0: a model's wording varies; raise it with a structured or judged comparison."""
    max_new_failures: int = Field(0, ge=0)
    """Turns that ended well in the recording and fail in the replay (a model error, an
    invalid answer, a refusal, a limit)."""
    max_latency_ratio: float | None = Field(None, gt=0)
    """The median of each turn's replayed duration over its recorded one; unset: not
    checked (tool calls answered from a recording take no time)."""
    max_token_ratio: float | None = Field(None, gt=0)
    """All replayed tokens over all recorded ones; unset: not checked."""
    max_cost_ratio: float | None = Field(None, gt=0)
    """All replayed cost over all recorded cost; unset: not checked."""


class ReplayConfig(_Strict):
    """How a replay, and a shadow variant, compare a run with its recording."""

    answers: Literal["exact", "structured", "judge"] = "exact"
    """``exact``: the same text; ``structured``: the same JSON value (or the same
    ``fields`` of it); ``judge``: the ``judge`` model says they mean the same (replay
    only: a shadow variant compares structured answers as ``structured``, others exactly)."""
    fields: list[str] = Field(default_factory=list)
    """With ``structured``: the answer fields compared, as dotted paths (``order.status``);
    empty: the whole value."""
    judge: dict[str, Any] | None = None
    """With ``judge``: the judging model, as keys of the top-level ``model`` section that
    differ (``{model: openai/gpt-oss-120b}``)."""
    fail: ReplayThresholds = ReplayThresholds()
    """When a replay exits 1."""


class SidecarConfig(_Strict):
    """The whole configuration file."""

    server: ServerConfig = ServerConfig()
    model: ModelConfig = ModelConfig()
    profiles: dict[str, ProfileConfig] = Field(default_factory=lambda: {"default": ProfileConfig()})
    tool_servers: list[ToolServerConfig] = Field(default_factory=list)
    mcp_servers: list[McpServerConfig] = Field(default_factory=list)
    """MCP servers used as tool servers, through the bridge (``docs/mcp.md``)."""
    mcp: McpEndpointConfig = McpEndpointConfig()
    """The sidecar's own MCP endpoint, for MCP hosts."""
    telemetry: TelemetryConfig = TelemetryConfig()
    prices: dict[str, PriceConfig] = Field(default_factory=dict)
    """Price table by model name (as sent in requests), for each run's cost."""
    sessions: SessionsConfig = SessionsConfig()
    cache: CacheConfig = CacheConfig()
    security: SecurityConfig = SecurityConfig()
    auth: AuthConfig = AuthConfig()
    background: BackgroundConfig = BackgroundConfig()
    recording: RecordingConfig = RecordingConfig()
    replay: ReplayConfig = ReplayConfig()

    @model_validator(mode="after")
    def _recording_has_somewhere_to_go(self) -> SidecarConfig:
        if self.recording.path is not None:
            return self
        for name, profile in self.profiles.items():
            if profile.record > 0:
                raise ValueError(f"profiles.{name}.record needs recording.path")
            for i, variant in enumerate(profile.variants):
                if variant.shadow is not None:
                    raise ValueError(
                        f"profiles.{name}.variants[{i}].shadow needs recording.path "
                        "(the comparisons are written there)"
                    )
        return self

    @model_validator(mode="after")
    def _a_judge_to_judge_with(self) -> SidecarConfig:
        if self.replay.answers == "judge" and self.replay.judge is None:
            raise ValueError("replay.answers: judge needs replay.judge (the judging model)")
        if self.replay.judge is not None:
            try:
                resolve_model(self.model, self.replay.judge)
            except ValidationError as exc:
                problem = "; ".join(f"{key_path(e['loc'])}: {e['msg']}" for e in exc.errors())
                raise ValueError(f"replay.judge: {problem}") from None
        return self

    a2a: A2AConfig | None = None
    """The A2A front (docs/a2a.md); unset: not served."""

    @field_validator("tool_servers")
    @classmethod
    def _unique_server_names(cls, servers: list[ToolServerConfig]) -> list[ToolServerConfig]:
        _unique("tool server", [s.name for s in servers])
        return servers

    @model_validator(mode="after")
    def _mcp_names_apart_from_tool_servers(self) -> SidecarConfig:
        # One namespace: breakers, metrics, the catalog's owners and profiles' server.tool.
        _unique(
            "tool server and MCP server",
            [s.name for s in self.tool_servers] + [s.name for s in self.mcp_servers],
        )
        return self

    @model_validator(mode="after")
    def _versions_of_servers_that_exist(self) -> SidecarConfig:
        by_name = {s.name: s for s in self.tool_servers}
        for server in self.tool_servers:
            if server.version_of is None:
                continue
            target = by_name.get(server.version_of)
            if target is None or target is server or target.version_of is not None:
                raise ValueError(
                    f"tool_servers: {server.name}.version_of must name another tool server "
                    "that is not itself a version"
                )
        return self

    @model_validator(mode="after")
    def _mcp_profile_exists(self) -> SidecarConfig:
        if self.mcp.port is not None and self.mcp.profile not in self.profiles:
            raise ValueError(f"mcp.profile {self.mcp.profile!r} names no profile")
        return self

    @model_validator(mode="after")
    def _skills_of_profiles_that_exist(self) -> SidecarConfig:
        if self.a2a is not None:
            for skill in self.a2a.skills:
                if skill.profile not in self.profiles:
                    raise ValueError(f"a2a.skills: no profile named {skill.profile!r}")
        return self

    @model_validator(mode="after")
    def _shared_cache_needs_a_shared_store(self) -> SidecarConfig:
        if self.cache.shared and self.sessions.store != "postgres":
            raise ValueError("cache.shared needs sessions.store: postgres")
        return self

    @field_validator("profiles")
    @classmethod
    def _some_profile(cls, profiles: dict[str, ProfileConfig]) -> dict[str, ProfileConfig]:
        if not profiles:
            raise ValueError("at least one agent profile is required")
        return profiles

    @model_validator(mode="after")
    def _windows_leave_room_for_the_answer(self) -> SidecarConfig:
        # The input budget plus what the answer may take (its reasoning included) must fit
        # in the model's context window, or the provider refuses the request when the
        # session grows to its budget.
        for name, profile in self.profiles.items():
            for where, override in [("model", None), ("tools_model", profile.tools_model)]:
                model = resolve_model(self.model, override or {})
                known = catalog.facts(model.model)
                budget = profile.context.max_tokens
                if known is None or known.context_window is None or budget is None:
                    continue
                reserved = model.max_tokens or (
                    REASONING_OUTPUT_RESERVE if known.reasoning is not None else 0
                )
                if budget + reserved > known.context_window:
                    raise ValueError(
                        f"profiles.{name}.context.max_tokens ({budget}) plus the output "
                        f"reserved for {where}'s answer and reasoning ({reserved}: "
                        f"model.max_tokens, else {REASONING_OUTPUT_RESERVE} for a reasoning "
                        f"model) exceeds {model.model}'s context window of "
                        f"{known.context_window} tokens: lower it"
                    )
        return self

    @model_validator(mode="after")
    def _tool_lists_fit_in_a_request(self) -> SidecarConfig:
        for name, profile in self.profiles.items():
            cap = self.model.max_tools_per_request
            if profile.tools is not None and len(set(profile.tools)) > cap:
                raise ValueError(
                    f"profiles.{name}.tools allows {len(set(profile.tools))} tools, more than "
                    f"one model request may carry (model.max_tools_per_request: {cap}; Groq "
                    "refuses more than 128): allow fewer"
                )
        return self

    @model_validator(mode="after")
    def _model_overrides_are_models(self) -> SidecarConfig:
        # Each partial model section must make a valid model with the top-level one.
        for name, profile in self.profiles.items():
            overrides = [("tools_model", profile.tools_model)]
            overrides.append(("context.memory_model", profile.context.memory_model))
            if profile.light is not None:
                overrides.append(("light.model", profile.light.model))
            for i, variant in enumerate(profile.variants):
                overrides.append((f"variants[{i}].model", variant.model))
                overrides.append((f"variants[{i}].tools_model", variant.tools_model))
            for where, override in overrides:
                if override is None:
                    continue
                try:
                    resolve_model(self.model, override)
                except ValidationError as exc:
                    problem = "; ".join(f"{key_path(e['loc'])}: {e['msg']}" for e in exc.errors())
                    raise ValueError(f"profiles.{name}.{where}: {problem}") from None
        return self

    @model_validator(mode="after")
    def _listeners_have_ports_of_their_own(self) -> SidecarConfig:
        # Two of the sidecar's listeners on one port: the second cannot bind, and serve
        # would stop with "address already in use" without naming the first.
        listeners = [("server.port", self.server.port)]
        if self.server.health_port is not None:
            listeners.append(("server.health_port", self.server.health_port))
        if self.mcp.port is not None:
            listeners.append(("mcp.port", self.mcp.port))
        if self.a2a is not None and self.a2a.http is not None:
            listeners.append(("a2a.http.port", self.a2a.http.port))
        if self.telemetry.metrics.enabled:
            listeners.append(("telemetry.metrics.port", self.telemetry.metrics.port))
        taken: dict[int, str] = {}
        for key, port in listeners:
            if port == 0:  # a free port, picked at start: never another's
                continue
            if port in taken:
                raise ValueError(
                    f"{key} and {taken[port]} are both {port}: each listener needs a port "
                    "of its own"
                )
            taken[port] = key
        return self

    @model_validator(mode="after")
    def _the_light_path_leaves_the_full_flex_tier(self) -> SidecarConfig:
        # flex_fallback: light sends a call that found the flex tier full to the light
        # path's model on its own tier: the same full tier would only fail again.
        for name, profile in self.profiles.items():
            if profile.light is None:
                continue
            full = [profile.tools_model or {}] + [v.model for v in profile.variants]
            full += [v.tools_model or {} for v in profile.variants]
            if not any(resolve_model(self.model, o).flex_fallback == "light" for o in full):
                continue
            if resolve_model(self.model, profile.light.model).service_tier == "flex":
                raise ValueError(
                    f"profiles.{name}.light.model would be sent on the flex tier it falls "
                    "back from (flex_fallback: light): give it another service_tier "
                    "(on_demand, auto)"
                )
        return self


def model_sections(config: SidecarConfig) -> list[tuple[str, Mapping[str, Any] | None]]:
    """Every model section the configuration names, with where: ``("model", None)`` for
    the top-level one, then each profile's tools model, memory summariser, light path and
    variants, and the replay's judge, as partial sections over the top-level one."""
    sections: list[tuple[str, Mapping[str, Any] | None]] = [("model", None)]
    for name, profile in config.profiles.items():
        where = f"profiles.{name}"
        sections.append((f"{where}.tools_model", profile.tools_model))
        sections.append((f"{where}.context.memory_model", profile.context.memory_model))
        if profile.light is not None:
            sections.append((f"{where}.light.model", profile.light.model))
        for i, variant in enumerate(profile.variants):
            sections.append((f"{where}.variants[{i}].model", variant.model))
            sections.append((f"{where}.variants[{i}].tools_model", variant.tools_model))
    sections.append(("replay.judge", config.replay.judge))
    return [(where, o) for where, o in sections if where == "model" or o]


def resolve_model(base: ModelConfig, override: Mapping[str, Any]) -> ModelConfig:
    """The model section ``base`` with the keys of ``override`` replaced.

    Raises:
        ValidationError: the result is not a valid model section.
    """
    if not override:
        return base
    return ModelConfig.model_validate({**base.model_dump(exclude_unset=True), **override})


def parse_config(data: Mapping[str, Any] | None, *, source: str = "config") -> SidecarConfig:
    """Validate a parsed configuration document.

    Raises:
        ConfigError: a key is unknown or a value is invalid; the message names the key.
    """
    try:
        return SidecarConfig.model_validate(data or {})
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            message = error["msg"]
            if error["type"] == "extra_forbidden":
                message = "unknown key" + _did_you_mean(error["loc"])
            problems.append(f"  {key_path(error['loc']) or '(root)'}: {message}")
        raise ConfigError(f"{source} is invalid:\n" + "\n".join(problems)) from None


def key_path(loc: Sequence[int | str]) -> str:
    """A key's place as the docs write it: ``tool_servers[0].timeout``."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path


def _did_you_mean(loc: Sequence[int | str]) -> str:
    """``; did you mean 'grace_period'?`` for an unknown key close to one its section has."""
    known = _keys_at(loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f" (its section takes {', '.join(sorted(known))})" if 0 < len(known) <= 12 else ""


def _keys_at(loc: Sequence[int | str]) -> list[str]:
    """The keys the section at ``loc`` takes; empty when the path leaves the models (a
    union, a list of plain values)."""
    kinds: list[Any] = [SidecarConfig]
    for part in loc:
        inner: list[Any] = []
        for kind in _unwrapped(kinds):
            if isinstance(part, int) or _is_collection(kind):
                inner.extend(typing.get_args(kind)[-1:])  # a list's items, a dict's values
            elif isinstance(kind, type) and issubclass(kind, BaseModel):
                field = kind.model_fields.get(part)
                if field is not None:
                    inner.append(field.annotation)
        kinds = inner
    models = [k for k in _unwrapped(kinds) if isinstance(k, type) and issubclass(k, BaseModel)]
    return sorted({name for model in models for name in model.model_fields})


def _unwrapped(kinds: Sequence[Any]) -> list[Any]:
    """Optional[X] and unions as their members, lists as themselves."""
    out: list[Any] = []
    for kind in kinds:
        origin = typing.get_origin(kind)
        if origin in (typing.Union, types.UnionType):
            out.extend(_unwrapped(typing.get_args(kind)))
        elif origin is typing.Annotated:
            out.extend(_unwrapped(typing.get_args(kind)[:1]))
        else:
            out.append(kind)
    return out


def _is_collection(kind: Any) -> bool:
    """A list, tuple or mapping type: its part of a key's path is an index or a name."""
    origin = typing.get_origin(kind)
    return origin in (list, tuple, dict) or (origin is not None and issubclass(origin, Mapping))


_REFERENCE = re.compile(r"\$\$\{|\$\{([^}]*)\}|\$\{")
"""``$${`` (a literal ``${``), ``${BODY}``, or an unterminated ``${``."""
_BODY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)
"""A reference's body: ``NAME`` or ``NAME:-DEFAULT``."""
_REDACT_FROM = 4
"""Substituted values this long or longer are replaced by their reference in error
messages: a variable may hold a secret; shorter values tell nothing and would garble them."""


def expand_variables(
    data: Any, environ: Mapping[str, str], *, source: str = "config"
) -> tuple[Any, dict[str, str]]:
    """``data`` (a parsed document) with ``${NAME}`` in its string values replaced.

    ``${NAME}`` is the variable's value; ``${NAME:-DEFAULT}`` is DEFAULT when the variable
    is unset or empty; ``$${`` is a literal ``${``. Keys are never expanded, and a value is
    never parsed again: a variable can fill a string, not add keys or change a type
    (pydantic then converts ``"8080"`` for an integer key as it would from the file).

    Returns:
        The expanded document, and each variable used with the value it gave.

    Raises:
        ConfigError: a variable is not set and has no default, or a ``${`` is no reference;
            the message names the key and the variable, never a value.
    """
    used: dict[str, str] = {}

    def expand(node: Any, where: str) -> Any:
        if isinstance(node, dict):
            return {k: expand(v, f"{where}.{k}" if where else str(k)) for k, v in node.items()}
        if isinstance(node, list):
            return [expand(v, f"{where}[{i}]") for i, v in enumerate(node)]
        if isinstance(node, str) and "${" in node:
            return _REFERENCE.sub(lambda m: substitute(m, where or "(root)"), node)
        return node

    def substitute(match: re.Match[str], where: str) -> str:
        if match[0] == "$${":
            return "${"
        body = _BODY.fullmatch(match[1] or "") if match[1] is not None else None
        if body is None:
            raise ConfigError(
                f"{source}: {where}: {match[0][:40]!r} is no variable reference: write "
                "${NAME} or ${NAME:-DEFAULT} (NAME: letters, digits and _), or $${ for a "
                "literal ${"
            )
        name, default = body[1], body[2]
        value = environ.get(name)
        if not value and default is not None:
            return default
        if value is None:
            raise ConfigError(
                f"{source}: {where}: the environment variable {name} is not set "
                f"(set it, or give a default: ${{{name}:-DEFAULT}})"
            )
        used[name] = value
        return value

    return expand(data, ""), used


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> SidecarConfig:
    """Read and validate a YAML configuration file.

    Args:
        path: The file.
        environ: The variables ``${NAME}`` in the file's strings are replaced with
            (:func:`expand_variables`); None: none are set, so a reference without a
            default is an error.

    Raises:
        ConfigError: the file cannot be read, is not YAML, names a variable that is not
            set, or is invalid.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = str(exc).replace('"<unicode string>"', f'"{path}"')
        raise ConfigError(f"{path} is not valid YAML: {where}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys")
    data, used = expand_variables(data, environ or {}, source=str(path))
    try:
        return parse_config(data, source=str(path))
    except ConfigError as exc:
        message = str(exc)
        # Longest first, so a value that contains another is replaced whole.
        for name, value in sorted(used.items(), key=lambda item: -len(item[1])):
            if len(value) >= _REDACT_FROM:
                message = message.replace(value, f"${{{name}}}")
        raise ConfigError(message) from None


def resolve_api_key(model: ModelConfig, environ: Mapping[str, str]) -> str | None:
    """The model API key from the environment, or None when it is unset or empty."""
    return environ.get(model.api_key_env) or None


def secret_environment(config: SidecarConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment variables the configuration names for secrets beyond the model
    key (``token_env`` of principals and tool servers, ``api_key_env`` of model variants,
    tiers and the replay's judge, the callback secrets' ``*_env``, the MCP endpoint's
    ``request_state_key_env``), with their values; unset
    or empty ones are left out."""
    names = {p.token_env for p in config.auth.principals if p.token_env}
    names |= {p.callback_secret_env for p in config.auth.principals if p.callback_secret_env}
    if config.background.callbacks.secret_env:
        names.add(config.background.callbacks.secret_env)
    names |= {s.token_env for s in config.tool_servers if s.token_env}
    for mcp in config.mcp_servers:
        names |= set(mcp.env_from.values()) | set(mcp.headers_from_env.values())
    for profile in config.profiles.values():
        overrides = [profile.tools_model, profile.context.memory_model]
        if profile.light is not None:
            overrides.append(profile.light.model)
        for variant in profile.variants:
            overrides += [variant.model, variant.tools_model]
        names |= {
            o["api_key_env"] for o in overrides if o and isinstance(o.get("api_key_env"), str)
        }
    if config.mcp.request_state_key_env:
        names.add(config.mcp.request_state_key_env)
    judge = config.replay.judge or {}
    if isinstance(judge.get("api_key_env"), str):
        names.add(judge["api_key_env"])
    return {name: environ[name] for name in sorted(names) if environ.get(name)}


def dsn_password(dsn: str | None) -> str | None:
    """The password in a PostgreSQL connection string (URL or ``key=value`` form)."""
    if not dsn:
        return None
    if "://" in dsn:
        return urlsplit(dsn).password
    match = re.search(r"(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", dsn)
    return match.group(1).strip("'") if match else None


def resolve_postgres_dsn(config: PostgresConfig, environ: Mapping[str, str]) -> str | None:
    """The PostgreSQL connection string: from ``dsn_env`` when set, else ``dsn``."""
    return environ.get(config.dsn_env) or config.dsn
