"""Recordings read back: ``agent-sidecar record export`` and ``agent-sidecar shadow report``.

An export copies the lines of the recorded turns a filter keeps (a session, a profile, a
variant, a time range) into one JSON lines file: a recording ``agent-sidecar replay`` and
the simulator take. A shadow report pairs each shadow variant's run with the live run it
copied (``shadow_of``) and compares them with the replay's measures.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from sidecar.config import SidecarConfig
from sidecar.recording.compare import TurnComparison, compare_turn
from sidecar.recording.format import RecordedTurn

__all__ = ["parse_time", "shadow_comparisons"]


def parse_time(text: str) -> float:
    """Seconds since the epoch from ISO 8601 (UTC unless it says otherwise) or a number.

    Raises:
        ValueError: neither.
    """
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is no time: write ISO 8601 (2026-12-01T10:00:00Z) or seconds since the epoch"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def shadow_comparisons(
    turns: Sequence[RecordedTurn], config: SidecarConfig
) -> dict[tuple[str, str], list[TurnComparison]]:
    """Each shadow run compared with the live run it copied, by (profile, variant), as
    the sidecar compared it (``replay.answers``; a judge runs in replays only, so a
    profile with an answer schema compares ``structured``, others ``exact``). A shadow
    run whose live run is not among ``turns`` is left out."""
    live = {t.run_id: t for t in turns if t.shadow_of is None}
    replay = config.replay
    found: dict[tuple[str, str], list[TurnComparison]] = {}
    for shadow in turns:
        original = live.get(shadow.shadow_of or "")
        if original is None:
            continue
        how = replay.answers
        if how == "judge":
            profile = config.profiles.get(shadow.profile)
            schema = profile.answer_schema if profile is not None else None
            how = "structured" if schema is not None else "exact"
        comparison = compare_turn(original, shadow, answers=how, fields=replay.fields)
        found.setdefault((shadow.profile, shadow.variant), []).append(comparison)
    return found
