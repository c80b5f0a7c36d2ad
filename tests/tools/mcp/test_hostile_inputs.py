"""What an MCP server sends is untrusted: property-tested over whatever it might send.

Tool lists never relax trust the configuration did not give, never crash the listing,
and drop only the tools that break a rule; results render every block, never raise; an
overlong answer's request id is read only from where a JSON-RPC response keeps it."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.config import McpServerConfig
from sidecar.tools.mcp.descriptors import MAX_DESCRIPTION, tool_list
from sidecar.tools.mcp.render import render
from sidecar.tools.mcp.transport import _answered_id, _unreadable_id

pytestmark = pytest.mark.property

_maybe = st.none() | st.booleans()
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_schema = st.one_of(
    st.just({"type": "object", "properties": {"a": {"type": "string"}}}),
    st.just({"type": "object", "$ref": "http://127.0.0.1:9/x.json"}),
    st.just({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}),
    st.just({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}),
    st.dictionaries(
        st.sampled_from(["type", "properties", "required", "$defs"]), _json, max_size=4
    ),
)
_tool = st.builds(
    lambda name, description, schema, output, hints: types.Tool(
        name=name,
        description=description,
        input_schema=schema,
        output_schema=output,
        annotations=types.ToolAnnotations(
            read_only_hint=hints[0], destructive_hint=hints[1], idempotent_hint=hints[2]
        ),
    ),
    st.text(min_size=1, max_size=80),
    st.none() | st.text(max_size=6000),
    _schema,
    st.none() | _schema,
    st.tuples(_maybe, _maybe, _maybe),
)


@given(tools=st.lists(_tool, max_size=12), trusted=st.booleans())
def test_a_tool_list_never_relaxes_untrusted_hints_and_never_fails_whole(
    tools: list[types.Tool], trusted: bool
) -> None:
    config = McpServerConfig(name="m", command="x", trust_annotations=trusted, max_tools=8)
    listing = tool_list(tools, config).response
    assert len(listing.tools) <= 8
    names = [d.name for d in listing.tools]
    assert len(names) == len(set(names))
    for descriptor in listing.tools:
        assert len(descriptor.description) <= MAX_DESCRIPTION + 40
        assert json.loads(descriptor.input_schema).get("type") in (None, "object")
        if not trusted:
            assert not descriptor.read_only and not descriptor.idempotent
            assert descriptor.destructive and descriptor.requires_approval


_block = st.one_of(
    st.builds(types.TextContent, text=st.text(max_size=50)),
    st.builds(
        types.ImageContent,
        data=st.text(alphabet="ABCD+/=", max_size=40),
        mime_type=st.text(min_size=1, max_size=20),
    ),
    st.builds(
        types.AudioContent,
        data=st.text(alphabet="ABCD", max_size=40),
        mime_type=st.text(min_size=1, max_size=20),
    ),
    st.builds(
        types.ResourceLink,
        name=st.text(min_size=1, max_size=20),
        uri=st.just("file:///x"),
        mime_type=st.none() | st.text(max_size=10),
        description=st.none() | st.text(max_size=20),
    ),
    st.builds(
        types.EmbeddedResource,
        resource=st.one_of(
            st.builds(
                types.TextResourceContents, uri=st.just("file:///t"), text=st.text(max_size=30)
            ),
            st.builds(types.BlobResourceContents, uri=st.just("file:///b"), blob=st.just("AAAA")),
        ),
    ),
)


@given(
    blocks=st.lists(_block, max_size=8),
    structured=st.none() | _json,
    is_error=st.booleans(),
)
def test_every_block_of_a_result_reaches_the_model_in_some_words(
    blocks: list[Any], structured: Any, is_error: bool
) -> None:
    result = types.CallToolResult(content=blocks, structured_content=structured, is_error=is_error)
    error, text = render(result)
    assert error is is_error
    described = [b for b in blocks if not isinstance(b, types.TextContent)]
    assert text.count("[") >= len(described)
    for block in blocks:
        if isinstance(block, types.TextContent) and structured is None:
            assert block.text in text


@given(
    request_id=st.integers(min_value=-(10**17), max_value=10**17)
    | st.text(alphabet="abcdef0123456789-", min_size=1, max_size=30),
    head_first=st.booleans(),
    noise=st.binary(max_size=600),
)
def test_an_overlong_answers_id_is_read_only_from_a_responses_own_places(
    request_id: int | str, head_first: bool, noise: bytes
) -> None:
    encoded = json.dumps(request_id).encode()
    if head_first:
        head, tail = b'{"jsonrpc":"2.0","id":' + encoded + b',"result":{"x":"', noise[-512:]
    else:
        head, tail = (
            b'{"result":{"content":"' + noise[:300],
            b'"},"jsonrpc":"2.0","id":' + encoded + b"}",
        )
    assert _answered_id(head, tail) == request_id
    # Noise alone names no request (or, by chance, one; never an exception).
    _answered_id(noise[:512], noise[-512:])


@given(
    request_id=st.integers(min_value=-(10**17), max_value=10**17)
    | st.text(alphabet="abcdef0123456789-", min_size=1, max_size=30),
    kind=st.sampled_from(["result", "error", "method", "notification"]),
    id_first=st.booleans(),
    noise=st.binary(max_size=600),
)
def test_an_unreadable_line_fails_a_request_only_when_it_begins_as_a_response(
    request_id: int | str, kind: str, id_first: bool, noise: bytes
) -> None:
    """A server's own request or notification that cannot be read never fails one of the
    bridge's requests, whatever id it carries: the ids are the server's."""
    encoded = json.dumps(request_id).encode()
    key = (
        b'"method":"x","params":'
        if kind in ("method", "notification")
        else b'"%s":' % (kind.encode())
    )
    named = kind != "notification"
    if id_first and named:
        line = b'{"jsonrpc":"2.0","id":' + encoded + b"," + key + b'{"a":' + noise
    else:
        line = b'{"jsonrpc":"2.0",' + key + b'{"a":' + noise + b"}"
        if named:
            line += b',"id":' + encoded + b"}"
    found = _unreadable_id(line)
    if kind in ("result", "error"):
        assert found == request_id
    else:
        assert found is None
