"""What a run's tokens cost: Groq's published prices, and the configured ones over them.

Prices are list prices in US dollars per million tokens, per model name. Prompt tokens
the provider served from its prompt cache are charged at the cached price (the prompt
price when the table sets none); the rest at the prompt price. A model missing from the
table has no cost: the run reports none rather than a wrong zero. :data:`GROQ_PRICES`
ships Groq's list prices, dated; ``prices`` in the configuration replaces any of them
and adds others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sidecar.config import PriceConfig
from sidecar.types import ModelCallDetail, RunCost, Stage, StageKind, Usage

__all__ = ["PriceTable"]

_PER_TOKEN = 1e-6  # prices are per million tokens

PRICES_CHECKED = "2026-11"
"""When :data:`GROQ_PRICES` were read off Groq's pricing page."""
GROQ_PRICES: Mapping[str, PriceConfig] = {
    "llama-3.3-70b-versatile": PriceConfig(prompt=0.59, completion=0.79),
    "llama-3.1-8b-instant": PriceConfig(prompt=0.05, completion=0.08),
    "openai/gpt-oss-120b": PriceConfig(prompt=0.15, completion=0.60, cached_prompt=0.075),
    "openai/gpt-oss-20b": PriceConfig(prompt=0.075, completion=0.30, cached_prompt=0.037),
    "meta-llama/llama-4-scout-17b-16e-instruct": PriceConfig(prompt=0.11, completion=0.34),
    "qwen/qwen3-32b": PriceConfig(prompt=0.29, completion=0.59),
}
"""Groq's list prices, US dollars per million tokens (as of :data:`PRICES_CHECKED`)."""


@dataclass(frozen=True, slots=True)
class _Rates:
    prompt: float
    cached_prompt: float
    completion: float


class PriceTable:
    """Prices by model name.

    Args:
        prices: Model name to its prices, as configured; they replace or add to
            :data:`GROQ_PRICES`.
        priced_as: Price every run as this model whatever model name it used (the LLM
            simulator's runs, priced as the configured model); unset: the run's own.
        simulated: The runs use the LLM simulator; their cost says so.
    """

    __slots__ = ("_priced_as", "_rates", "_simulated")

    def __init__(
        self,
        prices: Mapping[str, PriceConfig],
        *,
        priced_as: str | None = None,
        simulated: bool = False,
    ) -> None:
        prices = {**GROQ_PRICES, **prices}
        self._priced_as = priced_as
        self._simulated = simulated
        self._rates = {
            model: _Rates(
                prompt=p.prompt * _PER_TOKEN,
                cached_prompt=(p.prompt if p.cached_prompt is None else p.cached_prompt)
                * _PER_TOKEN,
                completion=p.completion * _PER_TOKEN,
            )
            for model, p in prices.items()
        }

    def cost(self, model: str, usage: Usage) -> RunCost | None:
        """The cost of ``usage`` on ``model``; None when the table has no price for it."""
        model = self._priced_as or model
        rates = self._rates.get(model)
        if rates is None:
            return None
        cached = min(usage.cached_prompt_tokens, usage.prompt_tokens)
        cached_usd = cached * rates.cached_prompt
        return RunCost(
            prompt_usd=(usage.prompt_tokens - cached) * rates.prompt + cached_usd,
            completion_usd=usage.completion_tokens * rates.completion,
            cached_prompt_usd=cached_usd,
            priced_as=model,
            simulated=self._simulated,
        )

    def run_cost(self, model: str, usage: Usage, stages: Sequence[Stage]) -> RunCost | None:
        """The cost of a run: ``usage`` on ``model``, or, when its model calls went to
        several models (tiering), the sum of each call on its own model, split by model
        in ``RunCost.models``. None when a model it called has no price."""
        by_model: dict[str, Usage] = {}
        for stage in stages:
            detail = stage.detail
            if stage.kind is StageKind.MODEL_CALL and isinstance(detail, ModelCallDetail):
                by_model.setdefault(stage.name, Usage()).add(detail.usage)
        if len(by_model) <= 1 or self._priced_as is not None:
            return self.cost(model, usage)
        parts = {name: self.cost(name, part) for name, part in by_model.items()}
        if any(part is None for part in parts.values()):
            return None
        priced = [part for part in parts.values() if part is not None]
        return RunCost(
            prompt_usd=sum(p.prompt_usd for p in priced),
            completion_usd=sum(p.completion_usd for p in priced),
            cached_prompt_usd=sum(p.cached_prompt_usd for p in priced),
            priced_as="",
            simulated=self._simulated,
            models={name: part.total_usd for name, part in parts.items() if part is not None},
        )
