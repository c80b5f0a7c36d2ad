"""What a run's tokens cost: the catalog's list prices, and the configured ones over them.

Prices are list prices in US dollars per million tokens, per model name. Prompt tokens
the provider served from its prompt cache are charged at the cached price (the prompt
price when the table sets none); the rest at the prompt price. Reasoning tokens are
completion tokens, billed as such. A model with no price is *unpriced*: the run reports
no cost and names the model (:meth:`PriceTable.unpriced`), rather than a wrong number.
The catalog (:mod:`sidecar.catalog`) ships Groq's list prices, each with its source and
date; ``prices`` in the configuration replaces any of them and adds others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sidecar.catalog import CATALOG
from sidecar.config import PriceConfig
from sidecar.types import ModelCallDetail, RunCost, Stage, StageKind, Usage

__all__ = ["CATALOG_PRICES", "PriceTable"]

_PER_TOKEN = 1e-6  # prices are per million tokens

CATALOG_PRICES: Mapping[str, PriceConfig] = {
    name: PriceConfig(
        prompt=entry.price.prompt,
        completion=entry.price.completion,
        cached_prompt=entry.price.cached_prompt,
    )
    for name, entry in CATALOG.items()
    if entry.price is not None
}
"""The catalog's list prices, US dollars per million tokens (retired models' included:
recordings made on them are still priced)."""


@dataclass(frozen=True, slots=True)
class _Rates:
    prompt: float
    cached_prompt: float
    completion: float


class PriceTable:
    """Prices by model name.

    Args:
        prices: Model name to its prices, as configured; they replace or add to
            :data:`CATALOG_PRICES`.
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
        prices = {**CATALOG_PRICES, **prices}
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

    def unpriced(self, model: str, stages: Sequence[Stage]) -> tuple[str, ...]:
        """The models of a run (``model``, and each model call's) the table has no price
        for, in the order the run first called them."""
        if self._priced_as is not None:
            return () if self._priced_as in self._rates else (self._priced_as,)
        names = [model]
        names += [s.name for s in stages if s.kind is StageKind.MODEL_CALL]
        return tuple(dict.fromkeys(n for n in names if n not in self._rates))

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
