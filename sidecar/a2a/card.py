"""The agent card: who the agent is, its skills (one per exposed profile), the bindings
actually served, how callers authenticate; signed (JWS over the card's canonical JSON,
RFC 8785) when a key is configured."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from a2a.types import a2a_pb2
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, TransportProtocol

from sidecar.config import A2AConfig, SidecarConfig
from sidecar.errors import StartupError
from sidecar.security.identity import Principal

__all__ = ["CardMaker", "Interfaces"]

_MODES = ["text/plain", "application/json"]


def _version() -> str:
    try:
        return version("agent-sidecar")
    except PackageNotFoundError:  # run from a tree that was not installed
        return "0"


class Interfaces:
    """Where each served binding is reached."""

    def __init__(
        self, grpc: str | None = None, jsonrpc: str | None = None, rest: str | None = None
    ) -> None:
        self.grpc = grpc
        self.jsonrpc = jsonrpc
        self.rest = rest

    def listed(self) -> list[a2a_pb2.AgentInterface]:
        """The bindings served, the card's preferred (the first) being JSON-RPC when
        served (most clients speak it), then gRPC, then HTTP+JSON."""
        found = [
            (self.jsonrpc, TransportProtocol.JSONRPC),
            (self.grpc, TransportProtocol.GRPC),
            (self.rest, TransportProtocol.HTTP_JSON),
        ]
        return [
            a2a_pb2.AgentInterface(
                url=url, protocol_binding=binding.value, protocol_version=PROTOCOL_VERSION_CURRENT
            )
            for url, binding in found
            if url
        ]


class CardMaker:
    """Makes the public card and each principal's extended card.

    Args:
        config: The configuration (its ``a2a``, ``auth`` and ``server.tls``).
        interfaces: Where the bindings are served.
        push: Whether tasks may name push notifications.

    Raises:
        StartupError: the signing key cannot be read or does not suit its algorithm.
    """

    def __init__(self, config: SidecarConfig, interfaces: Interfaces, *, push: bool) -> None:
        settings = config.a2a
        assert settings is not None
        self._settings: A2AConfig = settings
        self._interfaces = interfaces
        self._push = push
        self._bearer = bool(config.auth.principals)
        self._mtls = config.server.tls is not None and config.server.tls.client_ca_file is not None
        self._sign = _signer(settings) if settings.signing is not None else None
        self.public = self._make(None)
        self._extended: dict[str, a2a_pb2.AgentCard] = {}

    def extended(self, principal: Principal) -> a2a_pb2.AgentCard:
        """The card an authenticated caller sees: the skills it may use."""
        card = self._extended.get(principal.name)
        if card is None:
            card = self._extended[principal.name] = self._make(principal)
        return card

    def _make(self, principal: Principal | None) -> a2a_pb2.AgentCard:
        settings = self._settings
        card = a2a_pb2.AgentCard(
            name=settings.name,
            description=settings.description,
            version=_version(),
            supported_interfaces=self._interfaces.listed(),
            capabilities=a2a_pb2.AgentCapabilities(
                streaming=True, push_notifications=self._push, extended_agent_card=True
            ),
            default_input_modes=_MODES,
            default_output_modes=_MODES,
        )
        if settings.organization:
            card.provider.organization = settings.organization
        for skill in settings.skills:
            if principal is not None and not principal.may_use(skill.profile):
                continue
            card.skills.append(
                a2a_pb2.AgentSkill(
                    id=skill.skill_id,
                    name=skill.name or skill.profile,
                    description=skill.description or f"the {skill.profile} profile",
                    tags=skill.tags or [skill.profile],
                    examples=skill.examples,
                    input_modes=_MODES,
                    output_modes=_MODES,
                )
            )
        if self._bearer:
            card.security_schemes["bearer"].http_auth_security_scheme.scheme = "Bearer"
            card.security_requirements.add().schemes["bearer"].SetInParent()
        if self._mtls:
            card.security_schemes[
                "mtls"
            ].mtls_security_scheme.description = (
                "a client certificate issued by the sidecar's client CA"
            )
            if not self._bearer:
                card.security_requirements.add().schemes["mtls"].SetInParent()
        if self._sign is not None:
            card = self._sign(card)
        return card


def _signer(settings: A2AConfig) -> Callable[[a2a_pb2.AgentCard], a2a_pb2.AgentCard]:
    from a2a.utils.signing import create_agent_card_signer
    from jwt.exceptions import PyJWTError

    signing = settings.signing
    assert signing is not None
    try:
        key = Path(signing.key_file).read_text()
    except OSError as exc:
        raise StartupError(f"a2a.signing.key_file: cannot read it ({exc.strerror})") from None
    header: dict[str, str] = {"alg": signing.algorithm, "typ": "JOSE"}
    if signing.key_id:
        header["kid"] = signing.key_id
    if signing.jku:
        header["jku"] = signing.jku
    sign = create_agent_card_signer(key, header)  # type: ignore[arg-type]
    try:
        sign(a2a_pb2.AgentCard(name="check"))  # a key that cannot sign stops the start
    except (PyJWTError, ValueError, TypeError) as exc:
        raise StartupError(
            f"a2a.signing: the key does not sign with {signing.algorithm} ({exc})"
        ) from None
    return sign
