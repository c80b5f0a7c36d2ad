"""JSON documents that fit a JSON Schema, filled from what the user wrote.

The simulator uses this for tool-call arguments and for ``json_schema`` answers: required
properties always get a value, optional ones only when the text (or a tool result) provides
one. It also builds the deliberately wrong documents that the ``invalid_arguments`` fault
sends. Only the parts of JSON Schema that tool schemas use in practice are understood:
``type`` (also as a list), ``enum``, ``const``, ``default``, ``properties``, ``required``,
``items``, ``minItems``, numeric bounds, ``minLength``/``maxLength``, ``format``, local
``$ref`` and the first usable branch of ``anyOf``/``oneOf``/``allOf``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from llmsim._text import TextFacts, name_tokens, split_name

PLACEHOLDER: Final = "simulated"
"""The value of a required free-text string the text gives nothing for."""

_MISSING: Final = object()
_MAX_DEPTH = 8
_ID_WORDS = frozenset({"id", "number", "code", "no", "num"})
_FORMAT_PLACEHOLDERS = {
    "date": "2025-01-01",
    "date-time": "2025-01-01T00:00:00Z",
    "time": "00:00:00",
    "email": "simulated@example.com",
    "uri": "https://example.com/simulated",
    "url": "https://example.com/simulated",
    "uuid": "00000000-0000-4000-8000-000000000000",
}
_WRONG_VALUES: dict[str, Any] = {
    "string": 12345,
    "integer": "not-a-number",
    "number": "not-a-number",
    "boolean": "not-a-boolean",
    "array": "not-an-array",
    "object": "not-an-object",
    "null": "not-null",
}


def fill_object(
    schema: Mapping[str, Any],
    facts: TextFacts,
    found: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A JSON object for an object schema (a tool's ``function.parameters``).

    Args:
        schema: the object schema; an empty or missing schema yields ``{}``.
        facts: the user's text, taken apart.
        found: values already known by property name (e.g. from tool results); used
            first when their type fits.
    """
    return _fill_object(schema, schema, facts, found or {}, 0)


def is_id_name(name: str) -> bool:
    """Whether a property holds an identifier: ``*id``, ``*_id``, ``*number``, ``sku``, ``code``."""
    lowered = name.lower()
    parts = split_name(name)
    # By token, not suffix: "order_id" and "orderId" are identifiers, "paid" is not.
    return (bool(parts) and parts[-1] in ("id", "number")) or lowered in ("sku", "code")


def violate(schema: Mapping[str, Any], valid: Mapping[str, Any]) -> Any:
    """Valid JSON that breaks ``schema``: a required property dropped, the others mistyped.

    Falls back to a mistyped first property, and to a non-object when the schema declares
    no properties at all.
    """
    schema = _resolve(schema, schema)
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    required = [name for name in schema.get("required") or () if isinstance(name, str)]
    if required:
        broken = {k: v for k, v in valid.items() if k != required[0]}
        for name in broken:
            if isinstance(props.get(name), Mapping):
                broken[name] = _wrong_value(_resolve(props[name], schema))
        return broken
    if props:
        first = next(iter(props))
        sub = props[first]
        return {first: _wrong_value(_resolve(sub, schema) if isinstance(sub, Mapping) else {})}
    return [PLACEHOLDER]


def _fill_object(
    schema: Mapping[str, Any],
    root: Mapping[str, Any],
    facts: TextFacts,
    found: Mapping[str, Any],
    depth: int,
) -> dict[str, Any]:
    schema = _resolve(schema, root)
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    required = {name for name in schema.get("required") or () if isinstance(name, str)}
    out: dict[str, Any] = {}
    for name, sub in props.items():
        sub_schema = _resolve(sub, root) if isinstance(sub, Mapping) else {}
        value = _fill(name, sub_schema, root, facts, found, name in required, depth + 1)
        if value is not _MISSING:
            out[name] = value
    for name in required - out.keys():
        out[name] = PLACEHOLDER  # required but never declared: any value will do
    return out


def _fill(
    name: str,
    schema: Mapping[str, Any],
    root: Mapping[str, Any],
    facts: TextFacts,
    found: Mapping[str, Any],
    required: bool,
    depth: int,
) -> Any:
    if name in found and _fits(found[name], schema):
        return found[name]
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        explicit = facts.explicit_value(name)
        for option in enum:
            if explicit is not None and str(option).lower() == explicit.lower():
                return option
        return enum[0] if required else _MISSING
    kind = _type_of(schema)
    if kind == "string":
        value = _find_string(name, schema, facts, required)
    elif kind in ("integer", "number"):
        value = _find_number(name, schema, facts, integer=kind == "integer")
    elif kind == "boolean":
        explicit = (facts.explicit_value(name) or "").lower()
        value = explicit == "true" if explicit in ("true", "false") else _MISSING
    else:
        value = _MISSING
    if value is not _MISSING or not required:
        return value
    if "default" in schema:
        return schema["default"]
    if kind in ("integer", "number"):
        number = _clamp(1, schema)
        return int(number) if kind == "integer" else float(number)
    if kind == "boolean":
        return False
    if kind == "array":
        items = schema.get("items")
        count = min(int(schema.get("minItems") or 0), 3)
        if count and isinstance(items, Mapping) and depth < _MAX_DEPTH:
            item = _resolve(items, root)
            return [_fill(name, item, root, facts, found, True, depth + 1) for _ in range(count)]
        return [PLACEHOLDER] * count
    if kind == "object":
        return _fill_object(schema, root, facts, found, depth) if depth < _MAX_DEPTH else {}
    if kind == "null":
        return None
    return _fit_string(PLACEHOLDER, schema)


def _find_string(name: str, schema: Mapping[str, Any], facts: TextFacts, required: bool) -> Any:
    if is_id_name(name):
        value = facts.value_near(name_tokens(name) - _ID_WORDS, numeric=False) or facts.first_id()
        if value is not None:
            return _fit_string(value, schema)
    explicit = facts.explicit_value(name)
    if explicit is not None:
        return _fit_string(explicit, schema)
    if not required:
        return _MISSING
    if facts.quoted:
        return _fit_string(facts.quoted[0], schema)
    placeholder = _FORMAT_PLACEHOLDERS.get(str(schema.get("format", "")), PLACEHOLDER)
    return _fit_string(placeholder, schema)


def _find_number(name: str, schema: Mapping[str, Any], facts: TextFacts, integer: bool) -> Any:
    raw = facts.explicit_value(name)
    if raw is None:
        tokens = name_tokens(name)
        raw = facts.value_near(tokens - _ID_WORDS if is_id_name(name) else tokens, numeric=True)
    if raw is None and is_id_name(name):
        first = facts.first_id()
        raw = first if first is not None and first.isdigit() else None
    if raw is None:
        return _MISSING
    try:
        number = float(raw)
    except ValueError:
        return _MISSING
    if integer:
        if not number.is_integer():
            return _MISSING
        return int(_clamp(number, schema))
    return float(_clamp(number, schema))


def _clamp(number: float, schema: Mapping[str, Any]) -> float:
    low = schema.get("minimum")
    high = schema.get("maximum")
    ex_low = schema.get("exclusiveMinimum")
    ex_high = schema.get("exclusiveMaximum")
    if isinstance(ex_low, int | float) and number <= ex_low:
        number = math.floor(ex_low) + 1
    if isinstance(low, int | float) and number < low:
        number = math.ceil(low)
    if isinstance(ex_high, int | float) and number >= ex_high:
        number = math.ceil(ex_high) - 1
    if isinstance(high, int | float) and number > high:
        number = math.floor(high)
    return number


def _fit_string(value: str, schema: Mapping[str, Any]) -> str:
    min_length = schema.get("minLength")
    max_length = schema.get("maxLength")
    if isinstance(min_length, int) and len(value) < min_length:
        value = value.ljust(min_length, "x")
    if isinstance(max_length, int) and len(value) > max_length:
        value = value[:max_length]
    return value


def _type_of(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if isinstance(kind, str):
        return kind
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return "string"


def _fits(value: Any, schema: Mapping[str, Any]) -> bool:
    enum = schema.get("enum")
    if isinstance(enum, list):
        return value in enum
    kind = _type_of(schema)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    expected = {
        "string": str,
        "boolean": bool,
        "array": list,
        "object": dict,
    }.get(kind)
    return expected is not None and isinstance(value, expected)


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    """Follow a local ``$ref`` and pick the first non-null ``anyOf``/``oneOf`` branch."""
    for _ in range(_MAX_DEPTH):
        ref = schema.get("$ref")
        if isinstance(ref, str):
            target = _pointer(root, ref)
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**target, **rest}
            continue
        for key in ("anyOf", "oneOf"):
            branches = schema.get(key)
            if isinstance(branches, list):
                usable = [b for b in branches if isinstance(b, Mapping) and b.get("type") != "null"]
                rest = {k: v for k, v in schema.items() if k != key}
                schema = {**(usable[0] if usable else {"type": "null"}), **rest}
                break
        else:
            parts = schema.get("allOf")
            if not isinstance(parts, list):
                return schema
            merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
            for part in parts:
                if isinstance(part, Mapping):
                    merged = {**part, **merged}
            schema = merged
    return schema


def _pointer(root: Mapping[str, Any], ref: str) -> Mapping[str, Any]:
    if not ref.startswith("#"):
        return {}  # remote references are out of a simulator's reach
    node: Any = root
    for part in ref[1:].split("/"):
        if not part:
            continue
        key = part.replace("~1", "/").replace("~0", "~")
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else {}


def _wrong_value(schema: Mapping[str, Any]) -> Any:
    if isinstance(schema.get("enum"), list):
        return "simulated-not-in-enum"
    return _WRONG_VALUES.get(_type_of(schema), None)


__all__ = ["PLACEHOLDER", "fill_object", "is_id_name", "violate"]
