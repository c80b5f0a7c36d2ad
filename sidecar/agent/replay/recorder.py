"""Which turns are recorded or shadowed, and where their recordings go.

When a turn starts, :meth:`Recorder.choose` draws it into the profile's recorded share
(``profiles.NAME.record``) and into each shadow variant's share; a turn drawn into none
gets no capture and costs nothing more. A captured turn, once ended and stored, is told
to :meth:`Recorder.finished`: its recording is written (redacted, bounded) and handed to
its shadow variants. A shadowed turn is always written, so that a shadow report finds
both sides of each comparison.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sidecar.agent.loop import AgentLoop
from sidecar.agent.profiles import Profile
from sidecar.agent.replay.capture import RunCapture
from sidecar.agent.replay.shadow import Shadows
from sidecar.agent.snapshot import Snapshot
from sidecar.agent.variants import Variant, VariantRouter
from sidecar.config import RecordingConfig, ReplayConfig
from sidecar.recording.files import RecordingFiles
from sidecar.recording.format import bounded, redacted
from sidecar.telemetry import Telemetry
from sidecar.types import Clock, RunOutcome

__all__ = ["Recorder", "TurnRecording"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class TurnRecording:
    """A turn drawn for recording or shadowing: its capture and what it was drawn for."""

    capture: RunCapture
    recorded: bool
    shadows: list[Variant]


class Recorder:
    """Draws turns for recording and shadowing and writes their recordings.

    Args:
        config: Where recordings go and their bounds.
        redact: Applied to every string of a recording before it is written.
        loop: The decision loop (shadow runs use it).
        telemetry: Shadow comparisons are counted there.
        replay: How shadow runs are compared.
        rng: Draws the turns (seeded in tests).
    """

    def __init__(
        self,
        config: RecordingConfig,
        *,
        redact: Callable[[str], str],
        loop: AgentLoop,
        telemetry: Telemetry,
        replay: ReplayConfig,
        rng: random.Random | None = None,
    ) -> None:
        assert config.path is not None, "a recorder needs recording.path"
        self._files = RecordingFiles(
            config.path, max_file_bytes=config.max_file_bytes, max_files=config.max_files
        )
        self._max_turn_bytes = config.max_turn_bytes
        self._redact = redact
        self._rng = rng or random.Random()
        self._describe = loop.tools.catalog.get
        self.shadows = Shadows(loop, write=self.write, telemetry=telemetry, replay=replay)

    def choose(
        self, profile: Profile, router: VariantRouter | None, clock: Clock
    ) -> TurnRecording | None:
        """Draw a starting turn; None when it is neither recorded nor shadowed."""
        share, draw = profile.config.record, self._rng.random
        recorded = share > 0 and draw() < share
        shadows = [v for v in router.shadows if draw() < (v.shadow or 0.0)] if router else []
        if not recorded and not shadows:
            return None
        return TurnRecording(RunCapture(clock, self._describe), recorded, shadows)

    def finished(
        self,
        recording: TurnRecording,
        *,
        snapshot: Snapshot,
        profile: Profile,
        outcome: RunOutcome | None,
        **identity: Any,
    ) -> None:
        """A captured turn ended: write its recording and start its shadow runs.

        Args:
            recording: From :meth:`choose`.
            snapshot: The configuration the turn ran on.
            profile: Its profile.
            outcome: How it ended; None: cancelled by its caller.
            identity: ``run_id``, ``session_id``, ``variant``, ``principal``,
                ``started_at``, ``user_input`` (:meth:`RunCapture.document`).
        """
        try:
            document = recording.capture.document(profile=profile.name, outcome=outcome, **identity)
            self.write(document)
            if recording.shadows and outcome is not None:
                self.shadows.offer(snapshot, profile, recording.shadows, document)
        except Exception:
            # A recording is never worth a turn: the turn has ended well already.
            log.exception("run %s: its recording failed", identity.get("run_id"))

    def write(self, document: dict[str, Any]) -> None:
        """Write one recording: every string redacted, the whole bounded."""
        self._files.write(bounded(redacted(document, self._redact), self._max_turn_bytes))

    async def close(self) -> None:
        await self.shadows.close()
        self._files.close()
