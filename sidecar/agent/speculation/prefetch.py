"""Speculative prefetch, the agent's part: learn each profile's rules, predict a run's calls.

For every profile with ``speculation.enabled``, :class:`Speculation` learns a
:class:`~sidecar.agent.speculation.prediction.Predictor` from the latest turns of the profile's
sessions in the session store (so replicas sharing a store learn from each other's turns),
at start and every ``relearn_interval`` seconds, in a thread (it is pure computing). A run
of such a profile asks it for the calls its input predicts; the loop starts them while the
model thinks (:class:`~sidecar.tools.ahead.Prefetch`), for its first step.

What keeps a speculated call within what the run could do anyway: it is made on the run's
behalf after the run was admitted (the principal may use the profile), with the run's
identity, only for tools the profile allows that are read-only, idempotent and need no
approval, with arguments that validate, every string of them taken from the principal's
own input.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import orjson

from sidecar.agent.profiles import Profile
from sidecar.agent.speculation.prediction import Predictor
from sidecar.config import SidecarConfig
from sidecar.periodic import Periodic
from sidecar.sessions.store import SessionStore
from sidecar.types import ToolCall

__all__ = ["Speculation"]

_TICK = 1.0
"""Seconds between checks of which profiles are due to learn again."""


class Speculation:
    """Each speculating profile's learned rules, kept fresh from the session store.

    Args:
        store: Where the profiles' turns are learned from.
        config: The configuration applied now (a reload may turn speculation on or off).
        on_learned: Told of each learning: the profile, its rules, the turns they came from.
    """

    def __init__(
        self,
        store: SessionStore,
        config: Callable[[], SidecarConfig],
        on_learned: Callable[[str, int, int], None] | None = None,
    ) -> None:
        self._store = store
        self._config = config
        self._on_learned = on_learned
        self._predictors: dict[str, Predictor] = {}
        self._learned: dict[str, float] = {}  # by profile: when it last learned
        self._learning = Periodic("speculation-learning", _TICK, self.learn_due)

    def start(self) -> None:
        """Learn in the background while any profile speculates (at start, and after a
        reload that may have turned it on)."""
        if any(p.speculation.enabled for p in self._config().profiles.values()):
            self._learning.start()

    async def close(self) -> None:
        await self._learning.stop()

    async def learn_due(self) -> None:
        """Learn again for each speculating profile whose interval has passed."""
        now = time.monotonic()
        for name, profile in self._config().profiles.items():
            settings = profile.speculation
            if not settings.enabled:
                self._predictors.pop(name, None)
                continue
            last = self._learned.get(name)
            if last is None or now - last >= settings.relearn_interval:
                self._learned[name] = now
                turns = await self._store.recent_turns(name, settings.history_turns)
                predictor = await asyncio.to_thread(
                    Predictor.learn,
                    turns,
                    min_precision=settings.min_precision,
                    min_support=settings.min_support,
                )
                self._predictors[name] = predictor
                if self._on_learned is not None:
                    self._on_learned(name, len(predictor.rules), predictor.examples)

    def predict(self, profile: Profile, text: str) -> list[ToolCall]:
        """The calls a run of ``profile`` with input ``text`` is very likely to make first;
        [] when the profile does not speculate or nothing is predicted."""
        settings = profile.config.speculation
        if not settings.enabled:
            return []
        predictor = self._predictors.get(profile.name)
        if predictor is None:
            return []
        return [
            ToolCall(
                id=f"speculative-{uuid.uuid4().hex[:16]}",
                name=tool,
                arguments=orjson.dumps(arguments).decode(),
            )
            for tool, arguments in predictor.predict(text, settings.max_calls)
        ]
