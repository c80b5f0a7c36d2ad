"""``auth`` and ``security``: principals, quotas, the audit record, the identity tool calls
carry, redaction."""

from __future__ import annotations

import re

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from sidecar.config.base import _Strict, _unique


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
