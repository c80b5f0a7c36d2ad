"""Which models an endpoint serves, asked before a run would find out.

At start, on reload and in ``agent-sidecar check``, the sidecar reads the endpoint's
OpenAI-compatible model list (``GET {base_url}/models``) and refuses a configuration
whose model sections (the top-level model, ``tools_model``, ``light.model``, variants,
the memory summariser, ``replay.judge``) name a model it does not serve, naming the
model, what replaces it when :mod:`sidecar.catalog` knows, and the closest served names.
An endpoint without a list (404, not JSON) is a warning, never a refusal: many local
servers have none. The catalog's retirement schedule adds warnings before a shutdown.
"""

from __future__ import annotations

import datetime as dt
import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from sidecar import catalog

__all__ = ["ServedModels", "parse_model_list", "retirement_warnings", "unserved"]

_MAX_IDS = 10_000  # a list longer than this is an endpoint gone wrong: the rest is ignored


@dataclass(frozen=True, slots=True)
class ServedModels:
    """An endpoint's answer to ``GET /models``."""

    ids: frozenset[str] | None
    """The model ids it serves; None: it gave no usable list."""
    why: str = ""
    """Why there is no list, when there is none."""


def parse_model_list(status: int, body: bytes) -> ServedModels:
    """The ids of an OpenAI-compatible ``{"object": "list", "data": [{"id": …}]}``."""
    if status != 200:
        return ServedModels(None, f"GET /models answered {status}")
    try:
        document: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ServedModels(None, "GET /models answered something that is not JSON")
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list):
        return ServedModels(None, "GET /models answered no list of models")
    ids = frozenset(
        entry["id"]
        for entry in data[:_MAX_IDS]
        if isinstance(entry, dict) and isinstance(entry.get("id"), str)
    )
    return ServedModels(ids)


def unserved(named: Iterable[tuple[str, str]], served: frozenset[str]) -> list[str]:
    """Why each ``(where, model)`` whose model ``served`` lacks would fail: one line each,
    naming the replacement the catalog knows and the closest served ids."""
    problems = []
    for where, model in named:
        if model in served:
            continue
        known = catalog.facts(model)
        line = f"{where} names {model}, which the model endpoint does not serve (model_not_found)"
        if known is not None and known.retirement is not None:
            line += (
                f": shut down on {known.retirement.shutdown.isoformat()}, "
                f"replaced by {known.retirement.replacement}"
            )
        close = difflib.get_close_matches(model, sorted(served), n=3, cutoff=0.3)
        if close:
            line += "; closest it serves: " + ", ".join(close)
        problems.append(line)
    return problems


def retirement_warnings(named: Iterable[tuple[str, str]], today: dt.date) -> list[str]:
    """A warning for each ``(where, model)`` the retirement schedule says is deprecated
    or shut down."""
    warnings = []
    for where, model in named:
        known = catalog.facts(model)
        retirement = known.retirement if known is not None else None
        if retirement is None:
            continue
        shutdown = retirement.shutdown.isoformat()
        if today >= retirement.shutdown:
            warnings.append(
                f"{where} names {model}, which Groq shut down on {shutdown}: use "
                f"{retirement.replacement} (docs/models.md#moving-off-a-retired-model)"
            )
        else:
            warnings.append(
                f"{where} names {model}, which Groq shuts down on {shutdown} "
                f"({(retirement.shutdown - today).days} days): move to {retirement.replacement}"
            )
    return warnings
