"""What the sidecar knows of the models Groq serves and served: prices, reasoning, retirement.

One table, as data, so that every decision about a model name reads the same facts:

- the price table (``sidecar.agent.prices``) takes each entry's list price, with the page
  it was read from and the date; a model without one is *unpriced*: its runs report no
  cost rather than a guessed one;
- the request builder (``sidecar.llm.openai_model``) sends reasoning parameters only to
  models the table marks as reasoning models, in the form each takes (Groq answers 400
  to ``reasoning_format`` on a model that does not reason, and to a ``reasoning_effort``
  value the model does not accept);
- ``agent-sidecar check`` and the start warn before a shutdown date and refuse a model
  past it, naming the replacement.

A model the table does not know (another provider's, a local vLLM's) is sent as named,
with no reasoning parameters unless its configuration sets them, and unpriced unless
the configuration's ``prices`` prices it.

Facts are Groq's, read off its models, pricing, reasoning and deprecations pages on
:data:`CHECKED`; docs/models.md says which could not be checked.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "CATALOG",
    "CHECKED",
    "DEFAULT_ANSWER_MODEL",
    "DEFAULT_LIGHT_MODEL",
    "ModelFacts",
    "Price",
    "Reasoning",
    "Retirement",
    "facts",
    "retired_names",
]

CHECKED = "2026-12-03"
"""When the facts below were last read off Groq's pages."""

DEFAULT_ANSWER_MODEL = "openai/gpt-oss-120b"
"""The model of ``model.model`` when the configuration names none: answers."""
DEFAULT_LIGHT_MODEL = "openai/gpt-oss-20b"
"""The model the examples give tool steps and the light path: smaller and faster."""

_PRICING = "https://groq.com/pricing"
_DEPRECATIONS = "https://console.groq.com/docs/deprecations"


@dataclass(frozen=True, slots=True, kw_only=True)
class Price:
    """A list price, US dollars per million tokens."""

    prompt: float
    completion: float
    """Reasoning tokens are completion tokens: billed at this price, though never shown."""
    cached_prompt: float | None = None
    """Prompt tokens served from the provider's prompt cache; None: the prompt price."""
    source: str = _PRICING
    checked: str = CHECKED


@dataclass(frozen=True, slots=True, kw_only=True)
class Reasoning:
    """How a reasoning model is driven."""

    efforts: tuple[str, ...]
    """The ``reasoning_effort`` values it accepts (others are a 400)."""
    control: Literal["include_reasoning", "reasoning_format"]
    """How its reasoning text is kept out of a response: ``include_reasoning: false``
    (GPT-OSS) or ``reasoning_format: hidden`` (Qwen). Groq refuses the two together, and
    ``reasoning_format: raw`` together with tools or JSON mode: neither is ever sent."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Retirement:
    """A model's place in Groq's deprecation schedule."""

    deprecated: dt.date | None
    """When Groq announced it; None: the announcement's date could not be checked."""
    shutdown: dt.date
    """From this day requests naming it are answered ``404 model_not_found``."""
    replacement: str
    source: str = _DEPRECATIONS


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelFacts:
    """One model of the table."""

    name: str
    status: Literal["production", "preview", "retired"]
    context_window: int | None = None
    reasoning: Reasoning | None = None
    """None: not a reasoning model; reasoning parameters are never sent to it."""
    price: Price | None = None
    """None: unpriced (no list price could be checked)."""
    retirement: Retirement | None = None

    def retired_on(self, day: dt.date) -> bool:
        """Whether ``day`` is on or after its shutdown date."""
        return self.retirement is not None and day >= self.retirement.shutdown


_GPT_OSS = Reasoning(efforts=("low", "medium", "high"), control="include_reasoning")
_QWEN = Reasoning(efforts=("none", "default"), control="reasoning_format")

_ENTRIES = (
    ModelFacts(
        name="openai/gpt-oss-120b",
        status="production",
        context_window=131_072,
        reasoning=_GPT_OSS,
        price=Price(prompt=0.15, completion=0.60, cached_prompt=0.075),
    ),
    ModelFacts(
        name="openai/gpt-oss-20b",
        status="production",
        context_window=131_072,
        reasoning=_GPT_OSS,
        price=Price(prompt=0.075, completion=0.30, cached_prompt=0.037),
    ),
    ModelFacts(
        # In preview: no list price on the pricing page when checked, so unpriced.
        name="qwen/qwen3.6-27b",
        status="preview",
        context_window=131_072,
        reasoning=_QWEN,
    ),
    # Retired: kept, so a configuration naming one is told what replaces it, and a
    # recording made on one is still priced.
    ModelFacts(
        name="llama-3.3-70b-versatile",
        status="retired",
        context_window=131_072,
        price=Price(prompt=0.59, completion=0.79, checked="2026-06"),
        retirement=Retirement(
            deprecated=dt.date(2026, 6, 17),
            shutdown=dt.date(2026, 8, 16),
            replacement="openai/gpt-oss-120b",
        ),
    ),
    ModelFacts(
        name="llama-3.1-8b-instant",
        status="retired",
        context_window=131_072,
        price=Price(prompt=0.05, completion=0.08, checked="2026-06"),
        retirement=Retirement(
            deprecated=dt.date(2026, 6, 17),
            shutdown=dt.date(2026, 8, 16),
            replacement="openai/gpt-oss-20b",
        ),
    ),
    ModelFacts(
        name="qwen/qwen3-32b",
        status="retired",
        context_window=131_072,
        reasoning=_QWEN,
        price=Price(prompt=0.29, completion=0.59, checked="2026-06"),
        retirement=Retirement(
            deprecated=None,
            shutdown=dt.date(2026, 7, 17),
            replacement="qwen/qwen3.6-27b",
        ),
    ),
    ModelFacts(
        name="meta-llama/llama-4-scout-17b-16e-instruct",
        status="retired",
        context_window=131_072,
        price=Price(prompt=0.11, completion=0.34, checked="2026-06"),
        retirement=Retirement(
            deprecated=None,
            shutdown=dt.date(2026, 7, 17),
            replacement="openai/gpt-oss-20b",
        ),
    ),
)

CATALOG: Mapping[str, ModelFacts] = {entry.name: entry for entry in _ENTRIES}
"""Every model the sidecar knows, by the name requests send."""


def facts(model: str) -> ModelFacts | None:
    """What the table knows of ``model``; None for a model it does not know."""
    return CATALOG.get(model)


def retired_names() -> tuple[str, ...]:
    """The names of every retired model (past or scheduled shutdown)."""
    return tuple(e.name for e in _ENTRIES if e.retirement is not None)
