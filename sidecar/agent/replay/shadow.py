"""Shadow variants: a copy of a live turn run on another variant, seen by no caller.

A live turn picked for a shadow variant (``variants[].shadow``, a share of the turns)
is run again on that variant once it has ended, from the same conversation and input,
with its tool calls answered from the live run's results: no tool runs twice, and a call
the live run did not make is answered with an error, never run. The shadow run streams
to nobody and is stored in no session; its cost is its own (never the caller's run's);
its recording is written beside the live one's (``shadow_of`` names it), and the two are
compared with the replay's measures: a metric now, ``agent-sidecar shadow report`` later.

Shadow runs are bounded: at most ``max_in_flight`` at once in the process; a turn that
finds no room is not shadowed (and counted). They end with the process: close() cancels
those still running.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from sidecar.agent.loop import AgentLoop
from sidecar.agent.profiles import Profile
from sidecar.agent.replay.rerun import RerunPlan, answered_from, rerun
from sidecar.agent.snapshot import Snapshot
from sidecar.agent.variants import Variant
from sidecar.config import ReplayConfig
from sidecar.recording.compare import compare_turn
from sidecar.recording.format import RecordedTurn
from sidecar.telemetry import Telemetry
from sidecar.types import StopReason

__all__ = ["SHADOW_TIMEOUT", "Shadows"]

log = logging.getLogger(__name__)

SHADOW_TIMEOUT = 120.0
"""Seconds a shadow run may take: its tools answer at once, so only its model calls take
time, and a stuck one must not hold a slot of ``max_in_flight`` for long."""
_NOT_COMPARED = frozenset({StopReason.CANCELLED, StopReason.INTERRUPTED})


class Shadows:
    """Runs the shadow copies of live turns and compares them with the live runs.

    Args:
        loop: The decision loop (its tool catalog validates the shadow's calls).
        write: Writes a recording (the shadow run's).
        telemetry: Where the comparisons are counted.
        replay: How answers are compared.
        max_in_flight: Shadow runs at once in the process.
    """

    def __init__(
        self,
        loop: AgentLoop,
        *,
        write: Callable[[dict[str, Any]], None],
        telemetry: Telemetry,
        replay: ReplayConfig,
        max_in_flight: int = 8,
    ) -> None:
        self._loop = loop
        self._write = write
        self._telemetry = telemetry
        self._replay = replay
        self._max = max_in_flight
        self._tasks: set[asyncio.Task[None]] = set()

    def offer(
        self,
        snapshot: Snapshot,
        profile: Profile,
        variants: list[Variant],
        live: dict[str, Any],
    ) -> None:
        """Start a shadow run of the live turn ``live`` (its recording) on each variant."""
        recorded = RecordedTurn(live, where=f"run {live['run_id']}")
        if recorded.stop_reason in _NOT_COMPARED:
            return  # the live run was cut short: nothing to compare with
        for variant in variants:
            if len(self._tasks) >= self._max:
                self._telemetry.shadow_skipped(profile.name, variant.name)
                continue
            plan = RerunPlan(
                profile=profile,
                models=variant.models,
                system_message=variant.system_message,
                variant=variant.name,
                prices=snapshot.prices,
                tool_versions=snapshot.tool_versions,
            )
            task = asyncio.get_running_loop().create_task(
                self._run(plan, recorded), name=f"shadow-{variant.name}"
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, plan: RerunPlan, live: RecordedTurn) -> None:
        answer, _ = answered_from(live)  # never live: no tool runs twice
        try:
            document = await rerun(
                self._loop,
                plan,
                live,
                answer=answer,
                timeout=SHADOW_TIMEOUT,
                shadow_of=live.run_id,
            )
        except Exception:
            log.exception("shadow run of %s on variant %s failed", live.run_id, plan.variant)
            return
        self._write(document)
        how = self._replay.answers
        if how == "judge":  # a judge runs in replays only: compare what can be compared
            how = "structured" if plan.profile.config.answer_schema is not None else "exact"
        shadow = RecordedTurn(document, where=f"run {document['run_id']}")
        comparison = compare_turn(live, shadow, answers=how, fields=self._replay.fields)
        self._telemetry.shadow_compared(
            plan.profile.name,
            plan.variant,
            same_tool_calls=comparison.same_tool_calls,
            same_answer=comparison.same_answer,
            new_failure=comparison.new_failure,
            cost=comparison.replayed_cost,
            latency_ratio=comparison.latency_ratio,
        )

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def wait(self) -> None:
        """Wait for the shadow runs in flight (tests, the drain)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        """Cancel the shadow runs still going."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
