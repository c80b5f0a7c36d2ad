"""Turn a decorated function and the decorator's arguments into a ``Tool``, or say why not.

Every check here runs at decoration time, so a mistake stops the server at
import instead of surfacing as a confusing failure on some later call.
"""

from __future__ import annotations

import inspect
import re
import string
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from toolservers._docstring import parse_docstring
from toolservers._exceptions import ToolDefinitionError
from toolservers._signature import inspect_signature
from toolservers._tool import Tool

# The pattern model APIs (OpenAI, Groq) accept for function names.
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

Seconds = float | timedelta


def define_tool(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    read_only: bool,
    idempotent: bool,
    destructive: bool,
    requires_approval: bool,
    read_keys: Iterable[str],
    write_keys: Iterable[str],
    timeout: Seconds | None,
    cache_ttl: Seconds | None,
    version: str,
    result_fields: Iterable[str] = (),
) -> Tool:
    """Validate the declaration of one tool and build it.

    Raises:
        ToolDefinitionError: the declaration is inconsistent or the function
            cannot be described to a model; the message says how to fix it.
    """
    if not callable(fn):
        raise ToolDefinitionError(f"@tool decorates a function, got {fn!r}")
    tool_name = name if name is not None else getattr(fn, "__name__", "")
    where = f"tool {tool_name!r}"
    if not isinstance(tool_name, str) or not _NAME.fullmatch(tool_name):
        raise ToolDefinitionError(
            f"{where}: invalid name; use 1 to 64 characters of letters, digits, '_' and '-' "
            "(model APIs reject other names), or pass name='...'"
        )
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise ToolDefinitionError(
            f"{where}: generators are not supported; return the result and report progress "
            "with a ToolContext parameter's report_progress()"
        )
    if read_only and destructive:
        raise ToolDefinitionError(f"{where}: a tool cannot be both read_only and destructive")
    if cache_ttl is not None and not read_only:
        raise ToolDefinitionError(
            f"{where}: cache_ttl needs read_only=True; serving a cached result would skip "
            "the tool's effect"
        )
    doc = parse_docstring(inspect.getdoc(fn))
    text = description if description is not None else doc.description
    if not text.strip():
        raise ToolDefinitionError(
            f"{where}: no description; add a docstring saying what the tool does and when "
            "to use it, or pass description='...'"
        )
    signature = inspect_signature(fn, tool_name, doc.args)
    reads = _keys(where, "read_keys", read_keys, signature.parameters)
    writes = _keys(where, "write_keys", write_keys, signature.parameters)
    if read_only and writes:
        raise ToolDefinitionError(f"{where}: a read_only tool cannot declare write_keys")
    fields = _result_fields(where, result_fields, signature.output_schema)
    return Tool(
        name=tool_name,
        description=text.strip(),
        fn=fn,
        is_async=inspect.iscoroutinefunction(fn),
        input_schema=signature.input_schema,
        output_schema=signature.output_schema,
        read_only=read_only,
        idempotent=idempotent,
        destructive=destructive,
        requires_approval=requires_approval,
        read_keys=reads,
        write_keys=writes,
        timeout=_duration(where, "timeout", timeout),
        cache_ttl=_duration(where, "cache_ttl", cache_ttl),
        version=version,
        result_fields=fields,
        signature=signature,
    )


def _keys(
    where: str, what: str, keys: Iterable[str], parameters: tuple[str, ...]
) -> tuple[str, ...]:
    if isinstance(keys, str):
        raise ToolDefinitionError(
            f"{where}: {what} takes a list of keys, got the string {keys!r}; "
            f"write {what}=[{keys!r}]"
        )
    result = tuple(keys)
    for key in result:
        if not isinstance(key, str) or not key:
            raise ToolDefinitionError(f"{where}: {what} entries must be non-empty strings")
        try:
            parts = list(string.Formatter().parse(key))
        except ValueError as exc:
            raise ToolDefinitionError(f"{where}: {what} entry {key!r} is malformed: {exc}") from exc
        for _, field_name, spec, conversion in parts:
            if field_name is None:
                continue
            if spec or conversion or field_name not in parameters:
                raise ToolDefinitionError(
                    f"{where}: {what} entry {key!r} uses {{{field_name}}}, but a placeholder "
                    f"must name a top-level argument, one of {list(parameters)}"
                )
    return result


def _result_fields(
    where: str, fields: Iterable[str], output_schema: Mapping[str, Any] | None
) -> tuple[str, ...]:
    if isinstance(fields, str):
        raise ToolDefinitionError(
            f"{where}: result_fields takes a list of field names, got the string {fields!r}; "
            f"write result_fields=[{fields!r}]"
        )
    result = tuple(fields)
    for path in result:
        if not isinstance(path, str) or not path or any(not p for p in path.split(".")):
            raise ToolDefinitionError(
                f"{where}: result_fields entries are field names or dotted paths such as "
                f"'parcel.eta', got {path!r}"
            )
        known = _output_fields(output_schema)
        head = path.split(".", 1)[0]
        if known is not None and head not in known:
            raise ToolDefinitionError(
                f"{where}: result_fields entry {path!r} names no field of the output; "
                f"the return type declares {sorted(known)}"
            )
    return result


def _output_fields(schema: Mapping[str, Any] | None) -> set[str] | None:
    """Top-level field names the output schema declares (of its items, for a list), or
    None when it declares none (then any name is accepted)."""
    if not schema:
        return None
    if schema.get("type") == "array" and isinstance(schema.get("items"), Mapping):
        schema = schema["items"]
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return None
    return set(properties)


def _duration(where: str, what: str, value: Seconds | None) -> timedelta | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        raise ToolDefinitionError(f"{where}: {what} is seconds (a number) or a timedelta")
    duration = value if isinstance(value, timedelta) else timedelta(seconds=value)
    if duration <= timedelta(0):
        raise ToolDefinitionError(f"{where}: {what} must be positive, got {value!r}")
    return duration
