"""Derive a tool's arguments model, input schema and output encoding from its signature.

The arguments model is a pydantic model with one field per parameter, so one
``model_validate_json`` call both parses the model's JSON text and validates
it (the approach of the MCP python-sdk's ``func_metadata``). Everything here
runs once, when the decorator runs; nothing is rebuilt per call.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model
from pydantic_core import PydanticUndefined

from toolservers._context import ToolContext
from toolservers._exceptions import ToolDefinitionError
from toolservers._schema import clean_schema, expectation

_SUPPORTED = (
    "supported types are str, int, float, bool, enums, Literal, lists, dicts, Optional, "
    "pydantic models, dataclasses and typing_extensions.TypedDict"
)


class ArgumentsModel(BaseModel):
    """Base of every generated arguments model.

    Unknown arguments are rejected rather than ignored: a model that invents an
    argument learns so from the error instead of getting a silently different call.
    """

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class CallSignature:
    """How to turn JSON arguments into a call of one function, and its result into text.

    Attributes:
        args_model: Validates the JSON arguments; one field per schema parameter.
        input_schema: The arguments' JSON Schema, titles removed, root an object.
        output_schema: The return value's JSON Schema, or None when the function
            returns a string or declares no structured return type.
        output_adapter: Serializes a return value the fast path cannot.
        context_param: The name of the ``ToolContext`` parameter, if any.
        renamed: ``(field, parameter)`` pairs where a field name differs from its
            parameter name (parameters that would shadow pydantic attributes).
        expectations: Top-level argument name to a short description of the value
            it expects, for invalid-argument messages.
    """

    args_model: type[BaseModel]
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    output_adapter: TypeAdapter[Any]
    context_param: str | None
    renamed: tuple[tuple[str, str], ...]
    expectations: dict[str, str]

    @property
    def parameters(self) -> tuple[str, ...]:
        """The names the model passes arguments by, in declaration order."""
        return tuple(self.expectations)


def inspect_signature(
    fn: Callable[..., Any], tool_name: str, arg_docs: Mapping[str, str]
) -> CallSignature:
    """Build the ``CallSignature`` of ``fn``.

    Raises:
        ToolDefinitionError: a parameter is variadic, positional-only, private or
            unannotated; a type hint cannot be resolved or has no JSON Schema; the
            docstring documents a parameter that does not exist.
    """
    where = f"tool {tool_name!r} ({_qualname(fn)})"
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(f"{where}: cannot resolve its type hints: {exc}") from exc
    fields: dict[str, Any] = {}
    renamed: list[tuple[str, str]] = []
    context_param: str | None = None
    for param in inspect.signature(fn).parameters.values():
        _check_parameter_kind(where, param)
        if param.name not in hints:
            raise ToolDefinitionError(
                f"{where}: parameter {param.name!r} has no type hint; annotate it "
                f"(e.g. '{param.name}: str') so its JSON Schema can be derived"
            )
        hint = hints[param.name]
        if hint is ToolContext:
            if context_param is not None:
                raise ToolDefinitionError(f"{where}: declares more than one ToolContext parameter")
            context_param = param.name
            continue
        field_name = param.name
        if hasattr(BaseModel, param.name):
            # The name would shadow a pydantic attribute (json, copy, schema...):
            # store it under another field name and keep the name as its alias.
            field_name = f"{param.name}__arg"
            renamed.append((field_name, param.name))
        default = PydanticUndefined if param.default is inspect.Parameter.empty else param.default
        info = Field(
            default=default,
            description=arg_docs.get(param.name),
            alias=param.name if field_name != param.name else None,
        )
        fields[field_name] = (hint, info)
    documented_only = set(arg_docs) - {*fields, *(p for _, p in renamed), context_param}
    if documented_only:
        raise ToolDefinitionError(
            f"{where}: the docstring's Args section documents {sorted(documented_only)}, "
            "which are not parameters; fix the names or remove the entries"
        )
    try:
        model = create_model(f"{_camel(tool_name)}Arguments", __base__=ArgumentsModel, **fields)
        raw_schema = model.model_json_schema()
    except Exception as exc:
        raise ToolDefinitionError(
            f"{where}: cannot derive a JSON Schema from its parameters ({_SUPPORTED}): {exc}"
        ) from exc
    input_schema = clean_schema(raw_schema)
    input_schema["type"] = "object"
    properties = input_schema.get("properties", {})
    defs = input_schema.get("$defs", {})
    output_schema, adapter = _output(where, hints.get("return", Any))
    return CallSignature(
        args_model=model,
        input_schema=input_schema,
        output_schema=output_schema,
        output_adapter=adapter,
        context_param=context_param,
        renamed=tuple(renamed),
        expectations={name: expectation(sub, defs) for name, sub in properties.items()},
    )


def _check_parameter_kind(where: str, param: inspect.Parameter) -> None:
    if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
        raise ToolDefinitionError(
            f"{where}: *args and **kwargs cannot be described to a model; "
            f"replace {param} with named, annotated parameters"
        )
    if param.kind is inspect.Parameter.POSITIONAL_ONLY:
        raise ToolDefinitionError(
            f"{where}: parameter {param.name!r} is positional-only; arguments are passed by "
            "name, so remove the '/' from the signature"
        )
    if param.name.startswith("_"):
        raise ToolDefinitionError(
            f"{where}: parameter {param.name!r} starts with an underscore; pydantic treats "
            "such names as private, so rename it"
        )


def _output(where: str, hint: Any) -> tuple[dict[str, Any] | None, TypeAdapter[Any]]:
    """The output schema and serializer for a return type hint."""
    if hint in (Any, str, None, type(None)):
        return None, TypeAdapter(Any)
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(hint)
        schema = clean_schema(adapter.json_schema(mode="serialization"))
    except Exception as exc:
        raise ToolDefinitionError(
            f"{where}: its return type {hint!r} cannot be serialized to JSON ({_SUPPORTED}); "
            f"return one of those or annotate the return as Any: {exc}"
        ) from exc
    return schema, adapter


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.replace("-", "_").split("_"))
