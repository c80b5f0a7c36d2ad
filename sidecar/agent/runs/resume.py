"""When a background run cut off mid-run goes on, and from where.

A run is cut off when the process running it stops (SIGKILL, a crash, a lost lease, a
drain that outlasted its grace period). The replica that takes it up next (another one on
PostgreSQL; the next process on SQLite) goes on from the end of its last completed step
(its *checkpoint*: the messages the run had added, its step and tool-call counts, its
usage), and calls the model again for the step that was cut off, only when that is safe:

- no call of the cut-off step that is not safe to repeat was sent. A call is safe to repeat
  when its tool is read-only or idempotent; before any other call is sent, the run records
  its step (``unsafe_step``), so a step that sent one is known even when the process died
  the instant after. Such a step fails the run as interrupted: its call may have taken
  effect, and the model, asked again, might make it again;
- the session did not go on without it: no later turn was stored, and no other turn holds
  the session now. Otherwise the run's turn would land in the conversation out of order;
- it has not been taken up too often (``background.max_attempts``): a run whose every
  attempt stops its process must not stop every replica in turn.

Anything else fails it as interrupted (``STOP_REASON_INTERRUPTED``, error ``interrupted``,
retryable): nothing of it runs twice that should not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from sidecar.agent.scope import Progress
from sidecar.types import RunRecord, Session, Usage

__all__ = ["Verdict", "decode_checkpoint", "encode_checkpoint", "judge"]


def encode_checkpoint(progress: Progress) -> bytes:
    """The stored form of a run's progress at the end of a step."""
    u = progress.usage
    return orjson.dumps(
        {
            "messages": progress.messages,
            "steps": progress.steps,
            "tool_calls": progress.tool_calls,
            "usage": [u.prompt_tokens, u.completion_tokens, u.cached_prompt_tokens],
        }
    )


def decode_checkpoint(data: bytes) -> Progress | None:
    """A run's progress from its stored form; None when there is none or it cannot be read
    (the run then cannot go on: it is interrupted)."""
    try:
        doc: Any = orjson.loads(data)
        messages = doc["messages"]
        usage = [int(n) for n in doc["usage"]]
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return None
        return Progress(
            messages=messages,
            steps=int(doc["steps"]),
            tool_calls=int(doc["tool_calls"]),
            usage=Usage(*usage[:3]),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a cut-off run goes on."""

    resumable: bool
    progress: Progress | None = None
    """Where it goes on from; None: from its first step (the cut-off step was its first)."""
    why: str = ""
    """Why it cannot go on, for its result's error."""

    @property
    def step(self) -> int:
        """The step it goes on with."""
        return (self.progress.steps if self.progress is not None else 0) + 1


def judge(run: RunRecord, session: Session, *, max_attempts: int) -> Verdict:
    """Whether ``run``, taken up again (its ``attempts`` already counts this one), goes on
    in ``session`` as it is stored now."""
    if run.attempts > max_attempts:
        return Verdict(
            False,
            why=f"taken up {run.attempts - 1} times, and each time the process running it "
            f"stopped before it ended (background.max_attempts is {max_attempts})",
        )
    if run.unsafe_step > run.checkpoint_step:
        return Verdict(
            False,
            why=f"the process running it stopped in step {run.unsafe_step}, after a call "
            "that is not safe to repeat (its tool is neither read-only nor idempotent) was "
            "sent; it may have taken effect, so the run did not go on",
        )
    turns = [t.run_id for t in session.turns]
    if run.run_id in turns and turns[-1] != run.run_id:
        return Verdict(False, why="the session went on with other turns meanwhile")
    progress = None
    if run.checkpoint_step > 0:
        progress = decode_checkpoint(run.checkpoint)
        if progress is None:
            return Verdict(False, why="its last completed step could not be read back")
    return Verdict(True, progress)
