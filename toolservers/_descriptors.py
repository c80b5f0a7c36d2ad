"""Convert tools to their protocol descriptors; built once when a server starts."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from agentsidecar.v1 import tool_pb2
from toolservers._tool import Tool


def tool_descriptor(tool: Tool) -> tool_pb2.ToolDescriptor:
    """The ``ToolDescriptor`` of one tool."""
    descriptor = tool_pb2.ToolDescriptor(
        name=tool.name,
        description=tool.description,
        input_schema=schema_text(tool.input_schema),
        output_schema=schema_text(tool.output_schema) if tool.output_schema else "",
        read_only=tool.read_only,
        idempotent=tool.idempotent,
        destructive=tool.destructive,
        requires_approval=tool.requires_approval,
        read_keys=tool.read_keys,
        write_keys=tool.write_keys,
        version=tool.version,
        result_fields=tool.result_fields,
    )
    if tool.timeout is not None:
        descriptor.default_timeout.FromTimedelta(tool.timeout)
    if tool.cache_ttl is not None:
        descriptor.cache_ttl.FromTimedelta(tool.cache_ttl)
    return descriptor


def list_tools_response(tools: Iterable[Tool]) -> tool_pb2.ListToolsResponse:
    """The ``ListToolsResponse`` for a set of tools, ``tool_set_version`` included.

    The version is a hash of the deterministic encoding of every descriptor, so
    it is the same across restarts and replicas and changes with any descriptor.
    """
    response = tool_pb2.ListToolsResponse(tools=[tool_descriptor(tool) for tool in tools])
    encoded = response.SerializeToString(deterministic=True)
    response.tool_set_version = hashlib.sha256(encoded).hexdigest()[:16]
    response.call_stream = True  # the SDK serves CallTools
    return response


def schema_text(schema: Any) -> str:
    """A schema as compact JSON text, keys in declaration order (models read them in order)."""
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
