"""Shape pydantic's JSON Schemas into what a model should read.

pydantic titles every schema ("Order Id" for ``order_id``); a model learns
nothing from those and they cost tokens on every request, so they go.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# Keywords whose value maps names to subschemas, holds one subschema, or lists them.
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SCHEMA_VALUES = (
    "items",
    "additionalProperties",
    "not",
    "contains",
    "propertyNames",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_SCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")


def clean_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Return a copy of ``schema`` without ``title`` keywords at any depth.

    Only keywords are removed: a property that happens to be named "title"
    stays.
    """
    cleaned = {key: value for key, value in schema.items() if key != "title"}
    for key in _SCHEMA_MAPS:
        if isinstance(cleaned.get(key), Mapping):
            cleaned[key] = {name: _clean_any(sub) for name, sub in cleaned[key].items()}
    for key in _SCHEMA_VALUES:
        if isinstance(cleaned.get(key), Mapping):
            cleaned[key] = clean_schema(cleaned[key])
    for key in _SCHEMA_LISTS:
        if isinstance(cleaned.get(key), list):
            cleaned[key] = [_clean_any(sub) for sub in cleaned[key]]
    return cleaned


def _clean_any(value: Any) -> Any:
    return clean_schema(value) if isinstance(value, Mapping) else value


def expectation(schema: Mapping[str, Any], defs: Mapping[str, Any], depth: int = 0) -> str:
    """Describe in a few words what value a schema accepts, e.g. ``integer or null``.

    Used in invalid-argument messages, where the model needs the gist, not the
    whole schema.
    """
    if depth > 3:
        return "a value"
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = defs.get(ref.removeprefix("#/$defs/"))
        if isinstance(target, Mapping):
            return expectation(target, defs, depth + 1)
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    if "const" in schema:
        return f"exactly {json.dumps(schema['const'])}"
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " or ".join(expectation(sub, defs, depth + 1) for sub in schema[key])
    kind = schema.get("type")
    if kind == "array" and isinstance(schema.get("items"), Mapping):
        return f"array of {expectation(schema['items'], defs, depth + 1)}"
    if isinstance(kind, str):
        return kind
    return "a value"
