"""An MCP tool result as the model sees it: one text, nothing dropped without a word.

The model reads text. ``structuredContent`` becomes JSON; text blocks stay as they are (a
text block that only repeats the structured content, as the spec recommends servers send,
is not repeated); every other
block is described in a line the model can read, so it knows something was there: an
image's type and size, a resource link's name and URI, an embedded text resource's
content under its URI, a binary resource's type and size. ``isError`` makes the whole
text the call's error.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import orjson

__all__ = ["render"]


def _size(base64_text: str) -> int:
    """Bytes a base64 text decodes to."""
    return len(base64_text) * 3 // 4 - base64_text[-2:].count("=")


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # integers beyond 64 bits, which JSON allows and orjson does not
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _block(block: Any) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent):
        return f"[image: {block.mime_type}, {_size(block.data)} bytes; not shown]"
    if isinstance(block, types.AudioContent):
        return f"[audio: {block.mime_type}, {_size(block.data)} bytes; not played]"
    if isinstance(block, types.ResourceLink):
        line = f"[resource link: {block.name} <{block.uri}>"
        if block.mime_type:
            line += f" ({block.mime_type})"
        if block.description:
            line += f": {block.description}"
        return line + "]"
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        kind = f" ({resource.mime_type})" if resource.mime_type else ""
        if isinstance(resource, types.TextResourceContents):
            return f"[resource {resource.uri}{kind}]\n{resource.text}"
        return (
            f"[resource {resource.uri}{kind}: {_size(resource.blob)} bytes of binary data; "
            "not shown]"
        )
    kind = getattr(block, "type", type(block).__name__)
    return f"[{str(kind)[:40]} content; not shown]"


def render(result: types.CallToolResult) -> tuple[bool, str]:
    """Whether the result is the tool's error, and its text for the model (its structured
    content was checked against the tool's output schema by the SDK's client)."""
    structured = result.structured_content
    has_structured = structured is not None or "structured_content" in result.model_fields_set
    parts: list[str] = []
    echo: Any = None
    if has_structured:
        text = _json(structured)
        parts.append(text)
        echo = structured
    for block in result.content:
        if echo is not None and isinstance(block, types.TextContent):
            try:
                if orjson.loads(block.text) == echo:
                    continue  # the structured content again, as text
            except orjson.JSONDecodeError:
                pass
        parts.append(_block(block))
    return result.is_error, "\n".join(parts)
