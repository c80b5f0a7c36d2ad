"""A judge model: does a new run's answer say what the recorded one said?

``replay.answers: judge`` asks a model (``replay.judge``) once per turn whose answers
differ as text, with the user's request and both answers, to reply ``same`` or
``different``. A reply that says neither, or a model call that fails, is no verdict: the
turn's answers count as not compared, never as the same.
"""

from __future__ import annotations

from sidecar.errors import ModelError
from sidecar.llm.model import Model, ModelRequest

__all__ = ["JUDGE_PROMPT", "judge"]

JUDGE_PROMPT = (
    "You compare two answers to the same request. Reply with one word: 'same' if they "
    "give the user the same information and outcome (wording and order aside), or "
    "'different' if they do not."
)


async def judge(
    model: Model, request: str, recorded: str, replayed: str, *, timeout: float
) -> bool | None:
    """True: the same; False: different; None: no verdict."""
    messages = [
        {"role": "system", "content": JUDGE_PROMPT},
        {
            "role": "user",
            "content": f"Request:\n{request}\n\nAnswer A:\n{recorded}\n\nAnswer B:\n{replayed}",
        },
    ]
    try:
        response = await model.complete(ModelRequest(messages, [], False, timeout))
    except ModelError:
        return None
    verdict = response.text.lower()
    if "different" in verdict:
        return False
    if "same" in verdict:
        return True
    return None
