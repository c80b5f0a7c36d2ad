"""The models the simulator serves, and what a reasoning model adds to an answer.

As Groq serves them today (its models and reasoning pages, late 2026): the production
models ``openai/gpt-oss-120b`` and ``openai/gpt-oss-20b`` and the preview
``qwen/qwen3.6-27b`` are reasoning models; ``llm-simulator`` is the simulator's own
name (the sidecar's embedded simulator sends it) and does not reason. A request naming
any other model is answered ``404 model_not_found``, as Groq answers a retired one.

A reasoning model reasons before it answers: the reasoning is billed as completion
tokens (``usage.completion_tokens_details.reasoning_tokens``) whether or not it is
shown, grows with ``reasoning_effort``, and is shown in ``message.reasoning`` (and
``delta.reasoning`` when streamed) unless ``include_reasoning: false`` or
``reasoning_format: hidden`` leave it out; ``reasoning_format: raw`` puts it in the
content inside ``<think>`` tags, which Groq refuses together with tools or JSON mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "SERVED",
    "SIMULATOR_MODEL",
    "ReasoningPlan",
    "model_problem",
    "reasoning_plan",
]

SIMULATOR_MODEL: Final = "llm-simulator"

_GPT_OSS_EFFORTS: Final = ("low", "medium", "high")
_QWEN_EFFORTS: Final = ("none", "default")

SERVED: Final[Mapping[str, tuple[str, ...] | None]] = {
    "openai/gpt-oss-120b": _GPT_OSS_EFFORTS,
    "openai/gpt-oss-20b": _GPT_OSS_EFFORTS,
    "qwen/qwen3.6-27b": _QWEN_EFFORTS,
    SIMULATOR_MODEL: None,
}
"""Model ids ``GET /models`` lists, each with the ``reasoning_effort`` values it takes
(None: not a reasoning model)."""

_FORMATS: Final = frozenset({"parsed", "raw", "hidden"})
_TIERS: Final = frozenset({"auto", "on_demand", "flex", "performance"})
_EFFORT_TOKENS: Final = {"none": 0, "low": 24, "default": 96, "medium": 96, "high": 384}
"""Reasoning tokens a reasoning model spends per answer at each effort (medium when
unset): more effort, more tokens, as the real ones spend."""


@dataclass(frozen=True, slots=True)
class ReasoningPlan:
    """What reasoning one answer carries."""

    tokens: int
    """Reasoning tokens billed (shown or not)."""
    shown: str | None
    """``parsed``: in ``message.reasoning``; ``raw``: in the content; None: not shown."""


def model_problem(body: Mapping[str, Any], served: Mapping[str, Any]) -> tuple[int, str] | None:
    """The status and message Groq answers a request's model and reasoning parameters
    with, or None when they are fine."""
    model = body["model"]
    if model not in served:
        return 404, f"The model `{model}` does not exist or you do not have access to it."
    efforts = served[model]
    fmt = body.get("reasoning_format")
    effort = body.get("reasoning_effort")
    include = body.get("include_reasoning")
    if efforts is None:
        for name in ("reasoning_format", "reasoning_effort", "include_reasoning"):
            if body.get(name) is not None:
                return 400, f"`{name}` is not supported with this model"
    if fmt is not None and fmt not in _FORMATS:
        return 400, "'reasoning_format' : value must be one of parsed, raw, hidden"
    if fmt is not None and include is not None:
        return 400, "`include_reasoning` and `reasoning_format` are mutually exclusive"
    if fmt == "raw" and (body.get("tools") or body.get("response_format") is not None):
        return 400, "reasoning_format=raw is not supported with tool use or JSON mode"
    if include is not None and not isinstance(include, bool):
        return 400, "'include_reasoning' : value must be a boolean"
    if effort is not None and efforts is not None and effort not in efforts:
        return 400, (
            f"`reasoning_effort` must be one of {', '.join(efforts)} for this model, got {effort!r}"
        )
    tier = body.get("service_tier")
    if tier is not None and tier not in _TIERS:
        return 400, "'service_tier' : value must be one of auto, on_demand, flex, performance"
    for index, message in enumerate(body["messages"]):
        if message.get("role") != "assistant":
            continue
        for name in ("reasoning", "reasoning_content"):
            if name in message:
                return 400, (
                    f"'messages.{index}' : for 'role:assistant' the following must be "
                    f"satisfied[('messages.{index}' : property '{name}' is unsupported)]"
                )
    return None


def reasoning_plan(body: Mapping[str, Any], served: Mapping[str, Any]) -> ReasoningPlan | None:
    """The reasoning of an answer to ``body``; None for a model that does not reason."""
    if served.get(body["model"]) is None:
        return None
    tokens = _EFFORT_TOKENS.get(body.get("reasoning_effort") or "medium", 96)
    fmt = body.get("reasoning_format")
    if fmt is None:
        fmt = "hidden" if body.get("include_reasoning") is False else "parsed"
    return ReasoningPlan(tokens, None if fmt == "hidden" or tokens == 0 else fmt)


def reasoning_text(plan: ReasoningPlan, about: str) -> str:
    """Reasoning of ``plan.tokens`` tokens (about four characters each) about ``about``:
    what a reasoning model writes, call-like JSON included, which is never a call."""
    head = f"[simulated reasoning] The user wants: {about[:200]}. "
    filler = "Checking what is known and what is still needed. "
    text = head
    while len(text) < plan.tokens * 4:
        text += filler
    return text[: max(len(head), plan.tokens * 4)]
