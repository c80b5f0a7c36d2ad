"""The whole configuration tree, and the rules that span its sections."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from sidecar import catalog
from sidecar.config.a2a import A2AConfig
from sidecar.config.auth import AuthConfig, SecurityConfig
from sidecar.config.background import BackgroundConfig
from sidecar.config.base import _Strict, _unique, key_path
from sidecar.config.mcp import McpEndpointConfig
from sidecar.config.model import REASONING_OUTPUT_RESERVE, ModelConfig, PriceConfig, resolve_model
from sidecar.config.profiles import ProfileConfig
from sidecar.config.recording import RecordingConfig, ReplayConfig
from sidecar.config.server import ServerConfig
from sidecar.config.sessions import CacheConfig, SessionsConfig
from sidecar.config.telemetry import TelemetryConfig
from sidecar.config.tools import McpServerConfig, ToolServerConfig


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
