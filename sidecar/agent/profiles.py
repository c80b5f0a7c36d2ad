"""Agent profiles as runs use them: what each run of a profile reuses, built once.

A :class:`Profile` is built from its configuration when a configuration is applied (at
start and at each reload) and shared by every run admitted on that configuration: its
system message, its allowed tools, its compiled answer schema, its budget and its result
trimmer. A run holds the profile it was admitted with until it ends. A profile's light
variant (:class:`LightPath`) is built the same way, beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sidecar.agent.variants import RunModels
from sidecar.config import BudgetConfig, ProfileConfig
from sidecar.context.trim import ResultTrimmer
from sidecar.schemas import compile_schema_safely

__all__ = ["LightPath", "Profile", "build_profiles"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """An agent profile, with what every run of it reuses built once."""

    name: str
    config: ProfileConfig
    system_message: dict[str, Any]
    """The system message, byte-identical on every call (the provider's cached prefix)."""
    allowed: frozenset[str] | None
    """The tools it may call, by name or ``server.name``; None: every tool."""
    validate_answer: Callable[[Any], Any] | None
    """Checks an answer against ``answer_schema``; None when it declares none."""
    budget: BudgetConfig | None
    """The latency budget; None when the profile declares none."""
    trim: ResultTrimmer
    """Cuts each tool result to what enters the model's context."""

    @classmethod
    def build(cls, name: str, config: ProfileConfig) -> Profile:
        schema = config.answer_schema
        return cls(
            name=name,
            config=config,
            system_message={"role": "system", "content": config.system_prompt},
            allowed=frozenset(config.tools) if config.tools is not None else None,
            validate_answer=compile_schema_safely(schema) if schema is not None else None,
            budget=config.budget if config.budget.declared else None,
            trim=ResultTrimmer(config.context.tool_result_max_chars),
        )


def build_profiles(configs: Mapping[str, ProfileConfig]) -> dict[str, Profile]:
    """Every configured profile, built."""
    return {name: Profile.build(name, config) for name, config in configs.items()}


@dataclass(frozen=True, slots=True)
class LightPath:
    """A profile's light variant, built once: what its runs take while the sidecar is
    overloaded (``profiles.NAME.light``)."""

    profile: Profile
    """The profile as the light path runs it (fewer steps, a shorter window ...)."""
    models: RunModels
    """Its model (never tiered)."""
