"""What a run's tokens cost, from the configured price table.

Prices are list prices in US dollars per million tokens, per model name. Prompt tokens
the provider served from its prompt cache are charged at the cached price (the prompt
price when the table sets none); the rest at the prompt price. A model missing from the
table has no cost: the run reports none rather than a wrong zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sidecar.config import PriceConfig
from sidecar.types import RunCost, Usage

__all__ = ["PriceTable"]

_PER_TOKEN = 1e-6  # prices are per million tokens


@dataclass(frozen=True, slots=True)
class _Rates:
    prompt: float
    cached_prompt: float
    completion: float


class PriceTable:
    """Prices by model name.

    Args:
        prices: Model name to its prices, as configured.
    """

    __slots__ = ("_rates",)

    def __init__(self, prices: Mapping[str, PriceConfig]) -> None:
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
        rates = self._rates.get(model)
        if rates is None:
            return None
        cached = min(usage.cached_prompt_tokens, usage.prompt_tokens)
        cached_usd = cached * rates.cached_prompt
        return RunCost(
            prompt_usd=(usage.prompt_tokens - cached) * rates.prompt + cached_usd,
            completion_usd=usage.completion_tokens * rates.completion,
            cached_prompt_usd=cached_usd,
        )
