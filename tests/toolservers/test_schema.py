"""Declaring tools: schemas derived from signatures and docstrings, and declaration mistakes.

These run in-process: declaration is what is under test, and it happens when
the decorator runs.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from toolservers import Tool, ToolContext, ToolDefinitionError, ToolServer, ToolServerError


def declare(fn: Callable[..., Any], **facts: Any) -> Tool:
    server = ToolServer("test")
    server.tool(**facts)(fn)
    return server.tools[0]


def properties(tool: Tool) -> dict[str, Any]:
    return dict(tool.input_schema["properties"])


def walk(schema: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            yield key, value
            yield from walk(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from walk(item)


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


class Address(BaseModel):
    """Where to deliver."""

    street: str
    city: str


class Dimensions(TypedDict):
    width: float
    height: float


@dataclass
class Point:
    x: int
    y: int


def test_scalar_types_become_json_schema_types() -> None:
    def scalars(name: str, count: int, ratio: float, enabled: bool) -> str:
        """Take scalars."""
        return name

    assert properties(declare(scalars)) == {
        "name": {"type": "string"},
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "enabled": {"type": "boolean"},
    }


def test_the_root_is_a_closed_object_listing_required_arguments() -> None:
    def root(needed: str, optional: int = 3) -> str:
        """Take one required and one optional argument."""
        return needed

    schema = declare(root).input_schema

    assert schema["type"] == "object"
    assert schema["required"] == ["needed"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["optional"] == {"default": 3, "type": "integer"}


def test_a_tool_without_arguments_has_an_empty_object_schema() -> None:
    def nothing() -> str:
        """Take nothing."""
        return ""

    assert declare(nothing).input_schema == {
        "additionalProperties": False,
        "properties": {},
        "type": "object",
    }


def test_enums_and_literals_become_enums() -> None:
    def choose(colour: Colour, size: Literal["s", "m", "l"]) -> str:
        """Choose."""
        return size

    tool = declare(choose)

    assert properties(tool)["size"] == {"enum": ["s", "m", "l"], "type": "string"}
    assert properties(tool)["colour"] == {"$ref": "#/$defs/Colour"}
    assert tool.input_schema["$defs"]["Colour"] == {"enum": ["red", "green"], "type": "string"}


def test_lists_dicts_and_optionals_keep_their_item_types() -> None:
    def collect(
        tags: list[str], counts: dict[str, int], note: str | None = None, limit: int | None = None
    ) -> str:
        """Collect."""
        return ""

    props = properties(declare(collect))

    assert props["tags"] == {"items": {"type": "string"}, "type": "array"}
    assert props["counts"] == {"additionalProperties": {"type": "integer"}, "type": "object"}
    assert props["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    assert props["limit"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]


def test_nested_models_typeddicts_and_dataclasses_are_defined_once_and_referenced() -> None:
    def ship(to: Address, box: Dimensions, origin: Point, stops: list[Address]) -> str:
        """Ship."""
        return ""

    tool = declare(ship)

    assert properties(tool)["to"] == {"$ref": "#/$defs/Address"}
    assert properties(tool)["stops"] == {"items": {"$ref": "#/$defs/Address"}, "type": "array"}
    defs = tool.input_schema["$defs"]
    assert defs["Address"]["required"] == ["street", "city"]
    assert defs["Address"]["description"] == "Where to deliver."
    assert defs["Dimensions"]["properties"] == {
        "width": {"type": "number"},
        "height": {"type": "number"},
    }
    assert defs["Point"]["properties"] == {"x": {"type": "integer"}, "y": {"type": "integer"}}


def test_constraints_from_annotated_fields_appear_in_the_schema() -> None:
    def reserve(quantity: Annotated[int, Field(gt=0, le=10)]) -> str:
        """Reserve."""
        return ""

    assert properties(declare(reserve))["quantity"] == {
        "exclusiveMinimum": 0,
        "maximum": 10,
        "type": "integer",
    }


def test_no_schema_carries_titles_but_a_property_named_title_stays() -> None:
    def titled(title: str, to: Address) -> str:
        """Has a title."""
        return title

    schema = declare(titled).input_schema

    assert "title" in schema["properties"]
    assert [
        key for key, value in walk(schema) if key == "title" and not isinstance(value, dict)
    ] == []


def test_the_docstring_gives_the_description_and_each_argument_description() -> None:
    def get_order_status(order_id: str, verbose: bool = False) -> str:
        """Look up an order's status by its id.

        Use it for anything about an order's fulfilment,
        not for parcel tracking.

        Args:
            order_id: The order number,
                e.g. "20250101".
            verbose (bool): Include every event.

        Returns:
            The status.
        """
        return ""

    tool = declare(get_order_status)

    assert tool.description == (
        "Look up an order's status by its id.\n\n"
        "Use it for anything about an order's fulfilment, not for parcel tracking."
    )
    assert properties(tool)["order_id"]["description"] == 'The order number, e.g. "20250101".'
    assert properties(tool)["verbose"]["description"] == "Include every event."


def test_an_explicit_description_replaces_the_docstring() -> None:
    def anything() -> str:
        """Docstring."""
        return ""

    assert declare(anything, description="Explicit.").description == "Explicit."


def test_a_tool_context_parameter_is_left_out_of_the_schema() -> None:
    async def with_context(query: str, ctx: ToolContext) -> str:
        """Search."""
        return query

    assert list(properties(declare(with_context))) == ["query"]


def test_a_parameter_named_like_a_pydantic_attribute_keeps_its_name_in_the_schema() -> None:
    def shadow(json: str, copy: int) -> str:
        """Shadow."""
        return json

    assert declare(shadow).input_schema["required"] == ["json", "copy"]


def test_the_output_schema_comes_from_the_return_type_and_strings_have_none() -> None:
    def structured(order_id: str) -> Address:
        """Structured."""
        return Address(street="", city="")

    def text(order_id: str) -> str:
        """Text."""
        return ""

    def untyped(order_id: str):  # type: ignore[no-untyped-def]
        """Untyped."""
        return {}

    assert declare(structured).output_schema == {
        "description": "Where to deliver.",
        "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        "required": ["street", "city"],
        "type": "object",
    }
    assert declare(text).output_schema is None
    assert declare(untyped).output_schema is None


def test_descriptor_facts_default_to_the_safe_choices() -> None:
    def plain(x: str) -> str:
        """Plain."""
        return x

    tool = declare(plain)

    assert (tool.read_only, tool.idempotent, tool.destructive, tool.requires_approval) == (
        False,
        False,
        False,
        False,
    )
    assert (tool.read_keys, tool.write_keys, tool.timeout, tool.cache_ttl) == ((), (), None, None)
    assert tool.is_async is False


def test_durations_accept_seconds_or_a_timedelta() -> None:
    async def lookup(sku: str) -> str:
        """Look up."""
        return sku

    tool = declare(lookup, read_only=True, timeout=1.5, cache_ttl=timedelta(minutes=1))

    assert tool.timeout == timedelta(seconds=1.5)
    assert tool.cache_ttl == timedelta(seconds=60)
    assert tool.is_async is True


def test_a_bare_decorator_registers_the_function_under_its_name_and_returns_it_unchanged() -> None:
    server = ToolServer("bare", version="7")

    @server.tool
    def ping(target: str) -> str:
        """Ping a target."""
        return f"pong {target}"

    assert ping("x") == "pong x"
    assert [(tool.name, tool.version) for tool in server.tools] == [("ping", "7")]


def test_keys_and_name_overrides_are_recorded() -> None:
    def reserve(sku: str, quantity: int) -> str:
        """Reserve."""
        return sku

    tool = declare(reserve, name="reserve-stock", write_keys=["sku:{sku}", "stock"], version="2")

    assert (tool.name, tool.write_keys, tool.version) == (
        "reserve-stock",
        ("sku:{sku}", "stock"),
        "2",
    )


class _Parcel(BaseModel):
    carrier: str
    eta: str
    raw_scan_log: list[str]


def _track(order_id: str) -> _Parcel:
    """Track."""
    return _Parcel(carrier="x", eta="y", raw_scan_log=[])


def test_result_fields_are_recorded_and_reach_the_descriptor() -> None:
    from toolservers._descriptors import tool_descriptor

    tool = declare(_track, read_only=True, result_fields=["carrier", "eta"])

    assert tool.result_fields == ("carrier", "eta")
    assert list(tool_descriptor(tool).result_fields) == ["carrier", "eta"]


class NotSerializable:
    pass


def _no_hint(x) -> str:  # type: ignore[no-untyped-def]
    """No hint."""
    return ""


def _var_args(*names: str) -> str:
    """Var args."""
    return ""


def _var_kwargs(**options: str) -> str:
    """Var kwargs."""
    return ""


def _positional_only(x: str, /) -> str:
    """Positional only."""
    return x


def _private(_x: str) -> str:
    """Private."""
    return _x


def _undocumented(x: str) -> str:
    return x


def _documents_a_ghost(x: str) -> str:
    """Documents a ghost.

    Args:
        y: Not a parameter.
    """
    return x


def _strange_type(thing: NotSerializable) -> str:
    """Strange type."""
    return ""


def _strange_return(x: str) -> NotSerializable:
    """Strange return."""
    return NotSerializable()


def _generator(x: str) -> Iterator[str]:
    """Generator."""
    yield x


def _keyed(sku: str) -> str:
    """Keyed."""
    return sku


def _another(code: str) -> str:
    """Another valid tool."""
    return code


def _two_contexts(a: ToolContext, b: ToolContext) -> str:
    """Two contexts."""
    return ""


@pytest.mark.parametrize(
    ("fn", "facts", "expected"),
    [
        (_no_hint, {}, "parameter 'x' has no type hint"),
        (_var_args, {}, "*args and **kwargs cannot be described"),
        (_var_kwargs, {}, "*args and **kwargs cannot be described"),
        (_positional_only, {}, "positional-only"),
        (_private, {}, "starts with an underscore"),
        (_undocumented, {}, "no description; add a docstring"),
        (_documents_a_ghost, {}, "documents ['y'], which are not parameters"),
        (_strange_type, {}, "cannot derive a JSON Schema"),
        (_strange_return, {}, "cannot be serialized to JSON"),
        (_generator, {}, "generators are not supported"),
        (_two_contexts, {}, "more than one ToolContext"),
        (_keyed, {"cache_ttl": 30}, "cache_ttl needs read_only=True"),
        (_keyed, {"read_only": True, "destructive": True}, "both read_only and destructive"),
        (_keyed, {"read_only": True, "write_keys": ["sku:{sku}"]}, "cannot declare write_keys"),
        (_keyed, {"write_keys": ["sku:{id}"]}, "uses {id}, but a placeholder must name"),
        (_keyed, {"read_keys": ["sku:{sku.upper}"]}, "must name a top-level argument"),
        (_keyed, {"read_keys": "sku:{sku}"}, "takes a list of keys"),
        (_keyed, {"name": "get order"}, "invalid name"),
        (_keyed, {"name": "x" * 65}, "invalid name"),
        (_keyed, {"timeout": 0}, "timeout must be positive"),
        (_keyed, {"timeout": "5s"}, "seconds (a number) or a timedelta"),
        (_track, {"result_fields": "eta"}, "takes a list of field names"),
        (_track, {"result_fields": ["parcel..eta"]}, "dotted paths"),
        (_track, {"result_fields": ["etd"]}, "names no field of the output"),
    ],
)
def test_declaration_mistakes_raise_a_helpful_error_at_decoration_time(
    fn: Callable[..., Any], facts: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ToolDefinitionError) as raised:
        declare(fn, **facts)

    assert expected in str(raised.value)


def test_registering_two_tools_under_one_name_fails() -> None:
    server = ToolServer("dup")
    server.tool(_keyed)

    with pytest.raises(ToolDefinitionError, match="already registered"):
        server.tool(name="_keyed")(_another)


def test_declaration_errors_belong_to_the_package_exception_tree_and_are_type_errors() -> None:
    assert issubclass(ToolDefinitionError, ToolServerError)
    assert issubclass(ToolDefinitionError, TypeError)
