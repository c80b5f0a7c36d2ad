"""Puts a run's history together: the window over the session's turns, and the memory
summaries it calls for once the turn is stored."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sidecar.config import ProfileConfig
from sidecar.context.memory import MemoryKeeper
from sidecar.context.window import Window, WindowPolicy
from sidecar.llm.model import Model
from sidecar.tokens import tokens_of, tokens_of_size
from sidecar.types import Session


class ContextAssembler:
    """Windows every profile's history; hands dropped turns to the memory keeper.

    Args:
        profiles: the configured profiles by name.
        memory: the keeper of session memories, or None to never summarise.
        memory_models: the model that writes each profile's summaries (profiles with
            memory on); one not named uses the keeper's own.
    """

    def __init__(
        self,
        profiles: Mapping[str, ProfileConfig],
        memory: MemoryKeeper | None,
        memory_models: Mapping[str, Model] | None = None,
    ) -> None:
        self._policies = {name: WindowPolicy(p.context) for name, p in profiles.items()}
        # The light path's windows are shorter and never summarise (they read the memory).
        self._light = {
            name: WindowPolicy(light.context, summarise=False)
            for name, p in profiles.items()
            if (light := p.light_profile()) is not None
        }
        self._limits = {name: p.context.memory_max_chars for name, p in profiles.items()}
        self.memory = memory
        self._memory_models = dict(memory_models or {})
        # Per profile: the tool list object last seen and its prefix's estimated tokens.
        # Tool lists are cached per catalog version, so identity says "unchanged".
        self._prefix: dict[tuple[str, Any], tuple[object, int]] = {}

    def window(
        self,
        session: Session,
        profile: str,
        system_message: dict[str, Any],
        tools: list[dict[str, Any]],
        user_input: str,
        scale: float = 1.0,
        *,
        light: bool = False,
    ) -> Window:
        """The history a run of ``session`` sends with ``user_input``; ``scale`` is provider
        tokens per estimated token (see ``sidecar.context.calibration``); ``light``: the
        run takes its profile's light path."""
        key = (profile, system_message["content"])  # variants may differ in their prompt
        cached = self._prefix.get(key)
        if cached is None or cached[0] is not tools:
            cached = (tools, tokens_of([system_message, tools]))
            self._prefix[key] = cached
        policies = self._light if light else self._policies
        return policies[profile].build(
            session.turns,
            memory=session.memory,
            memory_turns=session.memory_turns,
            prefix_tokens=cached[1],
            input_tokens=tokens_of_size(len(user_input.encode())) + 4,
            scale=scale,
        )

    def turn_finished(self, session: Session, profile: str, window: Window) -> None:
        """Called once the turn is stored: summarise what the window wants dropped."""
        if window.summarise is not None and self.memory is not None:
            self.memory.schedule(
                session,
                window.summarise,
                self._limits[profile],
                model=self._memory_models.get(profile),
            )
