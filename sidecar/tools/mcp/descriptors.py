"""An MCP server's tool list as the catalog takes it, with the trust the configuration gives.

Annotations are hints from a server the sidecar does not trust: what a hint would relax
(``readOnlyHint`` starts a call early and lets it share a step, ``idempotentHint`` retries
it, ``destructiveHint: false`` lets it run without approval) counts only with
``trust_annotations`` or the tool's own configuration. Without either, a tool is neither
read-only nor idempotent and may be destructive, so under the default ``approval:
destructive`` every call of it waits for the caller's approval.

The catalog's own rules then apply as to any tool server: a name models accept
(``[a-zA-Z0-9_-]{1,64}``, never renamed), owned by the first server that offers it; an
input schema of at most 64 KiB with no ``$ref`` beyond itself. Here, besides: the root must
be an object schema, a description is cut to 4,096 characters, an output schema must
compile (no remote ``$ref``) or the tool is left out, and at most ``max_tools`` tools are
taken. A tool that runs only as a task (``execution.taskSupport: required``) is noted, so
its calls run as tasks (:mod:`sidecar.tools.mcp.tasks`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import mcp_types as types
import orjson
from google.protobuf.duration_pb2 import Duration

from agentsidecar.v1 import tool_pb2
from sidecar.config import McpServerConfig, McpToolConfig, RetryPolicy
from sidecar.schemas import compile_schema_safely

__all__ = ["MAX_DESCRIPTION", "ToolList", "tool_list"]

log = logging.getLogger(__name__)

MAX_DESCRIPTION = 4096
"""Characters of a tool's description the model sees."""
_NO_OVERRIDE = McpToolConfig()


@dataclass(frozen=True, slots=True)
class ToolList:
    """One listing of a server, ready for the catalog and for calls."""

    response: tool_pb2.ListToolsResponse
    retries: Mapping[str, RetryPolicy] = field(default_factory=dict)
    """Tools' own retry policies, by name."""
    tasks: frozenset[str] = frozenset()
    """The tools that run only as MCP tasks (``execution.taskSupport: required``)."""


def _seconds(value: float) -> Duration:
    whole = int(value)
    return Duration(seconds=whole, nanos=int((value - whole) * 1e9))


def _descriptor(
    tool: types.Tool, config: McpServerConfig, override: McpToolConfig
) -> tool_pb2.ToolDescriptor:
    hints = tool.annotations or types.ToolAnnotations()
    trusted = config.trust_annotations
    read_only = override.read_only
    if read_only is None:
        read_only = trusted and hints.read_only_hint is True
    idempotent = override.idempotent
    if idempotent is None:
        idempotent = read_only or (trusted and hints.idempotent_hint is True)
    destructive = override.destructive
    if destructive is None:
        destructive = not read_only and not (trusted and hints.destructive_hint is False)
    approval = override.requires_approval
    if approval is None:
        approval = config.approval == "always" or (config.approval == "destructive" and destructive)
    description = tool.description or tool.title or ""
    if len(description) > MAX_DESCRIPTION:
        description = description[:MAX_DESCRIPTION] + " [description cut]"
    descriptor = tool_pb2.ToolDescriptor(
        name=tool.name,
        description=description,
        input_schema=orjson.dumps(tool.input_schema).decode(),
        read_only=read_only,
        idempotent=idempotent,
        destructive=destructive,
        requires_approval=approval,
        read_keys=override.read_keys,
        write_keys=override.write_keys,
        version=hashlib.sha256(tool.model_dump_json(by_alias=True).encode()).hexdigest()[:16],
    )
    if override.timeout is not None:
        descriptor.default_timeout.CopyFrom(_seconds(override.timeout))
    if tool.output_schema is not None:
        descriptor.output_schema = orjson.dumps(tool.output_schema).decode()
    return descriptor


def tool_list(tools: Sequence[types.Tool], config: McpServerConfig) -> ToolList:
    """The server's tools, filtered by ``allow_tools`` and the rules above, as the catalog
    takes them; a tool that breaks a rule is left out and logged, the rest stay."""
    allowed = frozenset(config.allow_tools) if config.allow_tools is not None else None
    descriptors: list[tool_pb2.ToolDescriptor] = []
    retries: dict[str, RetryPolicy] = {}
    tasks: set[str] = set()
    seen: set[str] = set()
    for tool in tools:
        name = tool.name
        if allowed is not None and name not in allowed:
            continue
        if name in seen:
            log.warning("MCP server %s lists tool %r twice; the first is used", config.name, name)
            continue
        if len(descriptors) >= config.max_tools:
            log.warning(
                "MCP server %s lists more than %d tools (max_tools); the rest are not offered",
                config.name,
                config.max_tools,
            )
            break
        if tool.execution is not None and tool.execution.task_support == "required":
            tasks.add(name)
        root = tool.input_schema.get("type")
        if root not in (None, "object"):
            log.warning(
                "MCP server %s: tool %s is not offered: its input schema's root is not an "
                "object schema",
                config.name,
                name[:80],
            )
            continue
        if tool.output_schema is not None:
            try:
                compile_schema_safely(tool.output_schema)
            except ValueError as exc:
                log.warning(
                    "MCP server %s: tool %s is not offered: its output schema is unusable: %s",
                    config.name,
                    name[:80],
                    exc,
                )
                continue
        seen.add(name)
        override = config.tools.get(name, _NO_OVERRIDE)
        descriptors.append(_descriptor(tool, config, override))
        if override.max_attempts is not None:
            retries[name] = config.retry.model_copy(update={"max_attempts": override.max_attempts})
    response = tool_pb2.ListToolsResponse(tools=descriptors)
    response.tool_set_version = hashlib.sha256(response.SerializeToString()).hexdigest()
    return ToolList(response, retries, frozenset(tasks))
