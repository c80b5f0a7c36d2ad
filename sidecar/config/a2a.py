"""``a2a``: the A2A front (skills, its HTTP listener, the signed card)."""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from sidecar.config.base import HttpLimits, _check_origins, _Strict, _unique

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
