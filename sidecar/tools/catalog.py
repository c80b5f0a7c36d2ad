"""The tool catalog: every discovered tool, under the name the model sees.

Discovery answers (``ListToolsResponse``) are turned, once per tool-set version, into
:class:`CatalogTool` entries holding everything the hot path needs precomputed: the
compiled argument validator, the parsed resource-key templates and the tool definition
sent to the model. The model's tool list is built once per catalog version, profile and
availability, and the same objects are reused, so its serialized bytes never change
between turns (the provider's prompt cache keeps hitting).

Tool names are owned, by a rule no server can game: a name belongs to the first server, in
the configuration's order, that offers it. A later server's tool of the same name is not
offered (its server keeps its other tools), the clash is logged, and ListSessionTools
shows it as ``TOOL_AVAILABILITY_NAME_TAKEN``. No tool is ever renamed, so no server can
take another's tool by listing a name the renaming would produce. A profile may name a
tool plainly (``get_x``) or with its server (``orders.get_x``); the qualified form allows
the tool only while that server owns the name.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import fastjsonschema
import orjson

from agentsidecar.v1 import tool_pb2
from sidecar.config import RetryPolicy
from sidecar.context.trim import FieldTree, field_tree
from sidecar.errors import ArgumentsInvalid
from sidecar.schemas import compile_schema_safely

log = logging.getLogger(__name__)


_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.([A-Za-z_][A-Za-z0-9_]*|[0-9]+))*")
MAX_KEY_TEMPLATE = 256
_MAX_KEY_VALUE = 128  # longer argument values enter a key as their digest


@dataclass(frozen=True, slots=True)
class KeyTemplate:
    """A resource key such as ``sku:{sku}`` or ``order:{order.id}``: literal text and
    placeholders that name argument paths (names separated by dots; a number indexes a
    list). Nothing else: no format specs, no attributes, no braces of their own. A value
    enters the key as its text (a string as it is, anything else as canonical JSON); a
    value longer than 128 characters enters as its SHA-256, so a key stays small."""

    text: str
    parts: tuple[str | tuple[str, ...], ...]
    """Literal text, or a placeholder's path."""

    @classmethod
    def parse(cls, text: str) -> KeyTemplate:
        """Raises:
        ValueError: the template is too long, has a stray brace, or a placeholder that
            is not an argument path."""
        if len(text) > MAX_KEY_TEMPLATE:
            raise ValueError(f"it is {len(text)} characters; at most {MAX_KEY_TEMPLATE}")
        parts: list[str | tuple[str, ...]] = []
        at = 0
        for match in _PLACEHOLDER.finditer(text):
            literal = text[at : match.start()]
            path = match.group(1)
            if not _PATH.fullmatch(path):
                raise ValueError(f"{{{path[:40]}}} is not an argument path (name.name...)")
            if literal:
                parts.append(literal)
            parts.append(tuple(path.split(".")))
            at = match.end()
        rest = text[at:]
        if rest:
            parts.append(rest)
        if any(isinstance(p, str) and ("{" in p or "}" in p) for p in parts):
            raise ValueError("it has a brace outside a placeholder")
        return cls(text, tuple(parts))

    def resolve(self, arguments: Mapping[str, Any]) -> str:
        """The key for a call with these (validated) arguments; a missing path is empty."""
        out = []
        for part in self.parts:
            out.append(part if isinstance(part, str) else _key_value(arguments, part))
        return "".join(out)


def _key_value(arguments: Mapping[str, Any], path: tuple[str, ...]) -> str:
    value: Any = arguments
    for name in path:
        if isinstance(value, dict):
            value = value.get(name)
        elif isinstance(value, list) and name.isdigit() and int(name) < len(value):
            value = value[int(name)]
        else:
            return ""
    if value is None:
        return ""
    text = (
        value
        if isinstance(value, str)
        else orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    )
    if len(text) > _MAX_KEY_VALUE:
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    return text


def allows(allowed: frozenset[str] | None, tool: CatalogTool | ListedTool) -> bool:
    """Whether a profile's ``tools`` list (None: every tool) allows ``tool``."""
    return allowed is None or tool.name in allowed or tool.qualified_name in allowed


@dataclass(frozen=True, slots=True)
class ListedTool:
    """A tool a server offers that is not in the catalog: its name belongs to another."""

    name: str
    server: str
    descriptor: tool_pb2.ToolDescriptor
    owner: str
    """The server that owns the name."""

    @property
    def qualified_name(self) -> str:
        return f"{self.server}.{self.name}"


@dataclass(frozen=True, slots=True)
class CatalogTool:
    """A discovered tool with everything the hot path needs precomputed."""

    name: str
    """The name the model sees."""
    remote_name: str
    """The name on its server."""
    server: str
    descriptor: tool_pb2.ToolDescriptor
    read_only: bool
    idempotent: bool
    requires_approval: bool
    destructive: bool
    timeout: float | None
    read_keys: tuple[KeyTemplate, ...]
    write_keys: tuple[KeyTemplate, ...]
    definition: dict[str, Any]
    """The tool as sent to the model (OpenAI ``tools[]`` entry)."""
    _validate: Callable[[Any], Any]
    cache_ttl: float | None = None
    """Seconds a result may be reused (read-only tools only); None: never cached."""
    version: str = ""
    """The tool's declared version, part of its results' cache key."""
    result_fields: FieldTree = field(default_factory=dict)
    """The output fields the model needs (empty: all), as a tree of paths."""
    retry: RetryPolicy | None = None
    """Its own retry policy (an MCP tool's ``max_attempts``); None: its server's."""

    @property
    def qualified_name(self) -> str:
        """``server.name``, the form a profile uses to pin a tool to its server."""
        return f"{self.server}.{self.name}"

    def parse_arguments(self, text: str) -> dict[str, Any]:
        """Parse and validate the model's argument text.

        Raises:
            ArgumentsInvalid: the text is not a JSON object or violates the schema.
        """
        try:
            value = orjson.loads(text or "{}")
        except orjson.JSONDecodeError as exc:
            raise ArgumentsInvalid(
                f"arguments for {self.name} are not valid JSON ({exc}); "
                "send a JSON object matching the tool's parameters"
            ) from None
        if not isinstance(value, dict):
            raise ArgumentsInvalid(
                f"arguments for {self.name} must be a JSON object, got {type(value).__name__}"
            )
        try:
            self._validate(value)
        except fastjsonschema.JsonSchemaValueException as exc:
            # fastjsonschema names the failing path "data.field"; say "field" instead.
            path = exc.name or "data"
            where = path.removeprefix("data").lstrip(".") or "arguments"
            detail = (exc.message or "").replace(path, "").strip()
            raise ArgumentsInvalid(f"invalid arguments for {self.name}: {where} {detail}") from None
        return value

    def resource_keys(self, arguments: Mapping[str, Any]) -> tuple[frozenset[str], frozenset[str]]:
        """The (read, write) keys a call with these arguments holds."""
        reads = frozenset(t.resolve(arguments) for t in self.read_keys)
        writes = frozenset(t.resolve(arguments) for t in self.write_keys)
        return reads, writes


def _seconds(duration: Any) -> float | None:
    """A tool's declared Duration in seconds; None when it declares none (zero)."""
    if duration is None:
        return None
    nanoseconds = duration.ToNanoseconds()
    return nanoseconds / 1e9 if nanoseconds else None


_NAME_OK = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


MAX_SCHEMA_BYTES = 65_536
"""Largest ``input_schema`` a tool may declare; a larger one leaves the tool out."""


_COMPILED: dict[str, Callable[[Any], Any]] = {}  # validators by schema text, process-wide
_COMPILED_MAX = 2048


def compile_schema(text: str) -> tuple[dict[str, Any], Callable[[Any], Any]]:
    """A tool's input schema, checked (size, references) and compiled; the validator is
    cached by the schema's text, so a re-discovery compiles nothing again.

    Raises:
        ValueError: the schema is too large, not an object, refers to other documents,
            or cannot be compiled.
    """
    if len(text) > MAX_SCHEMA_BYTES:
        raise ValueError(f"input_schema is {len(text)} bytes; at most {MAX_SCHEMA_BYTES}")
    schema = orjson.loads(text or '{"type": "object"}')
    if not isinstance(schema, dict):
        raise ValueError("input_schema is not an object")
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    validate = _COMPILED.get(text)
    if validate is None:
        validate = compile_schema_safely(schema)
        if len(_COMPILED) >= _COMPILED_MAX:
            _COMPILED.pop(next(iter(_COMPILED)))
        _COMPILED[text] = validate
    return schema, validate


def _templates(texts: Sequence[str]) -> tuple[KeyTemplate, ...]:
    out = []
    for text in texts:
        try:
            out.append(KeyTemplate.parse(text))
        except ValueError as exc:
            raise ValueError(f"resource key template {text[:80]!r} is invalid: {exc}") from None
    return tuple(out)


def _build(
    name: str, server: str, descriptor: tool_pb2.ToolDescriptor, retry: RetryPolicy | None
) -> CatalogTool:
    try:
        schema, validate = compile_schema(descriptor.input_schema)
    except ValueError as exc:
        raise ValueError(f"its input schema is unusable: {exc}") from None
    definition = {
        "type": "function",
        "function": {"name": name, "description": descriptor.description, "parameters": schema},
    }
    return CatalogTool(
        name=name,
        remote_name=descriptor.name,
        server=server,
        descriptor=descriptor,
        read_only=descriptor.read_only,
        idempotent=descriptor.idempotent,
        requires_approval=descriptor.requires_approval,
        destructive=descriptor.destructive,
        timeout=_seconds(descriptor.default_timeout)
        if descriptor.HasField("default_timeout")
        else None,
        read_keys=_templates(descriptor.read_keys),
        write_keys=_templates(descriptor.write_keys),
        definition=definition,
        _validate=validate,
        cache_ttl=_seconds(descriptor.cache_ttl) if descriptor.HasField("cache_ttl") else None,
        version=descriptor.version,
        result_fields=field_tree(descriptor.result_fields),
        retry=retry,
    )


class ToolCatalog:
    """Every discovered tool by the name the model sees; rebuilt when discovery changes."""

    def __init__(self) -> None:
        self._by_server: dict[str, list[tool_pb2.ToolDescriptor]] = {}
        self._server_versions: dict[str, str] = {}
        self._retries: dict[str, Mapping[str, RetryPolicy]] = {}
        self._tools: dict[str, CatalogTool] = {}
        self._by_listed_name: dict[str, CatalogTool] = {}  # by NAME and by SERVER.NAME
        self.version = 0
        self._definitions: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        self._server_order: list[str] = []
        self.taken: list[ListedTool] = []
        """Tools not offered because another server owns their name."""
        self._reported_clashes: set[tuple[str, str]] = set()
        # Built tools by (server, its tool-set version, name seen by the model): a change
        # on one server never recompiles the schemas of another.
        self._built: dict[tuple[str, str, str], CatalogTool] = {}

    def set_server_order(self, names: Sequence[str]) -> None:
        """Fix the order servers' tools appear in (the configuration's order)."""
        self._server_order = list(names)

    def update(
        self,
        server: str,
        response: tool_pb2.ListToolsResponse,
        retries: Mapping[str, RetryPolicy] | None = None,
    ) -> bool:
        """Record one server's tool list (and its tools' own retry policies, by their
        names on the server); return True when the catalog changed."""
        version = response.tool_set_version or response.SerializeToString().hex()
        if self._server_versions.get(server) == version and server in self._by_server:
            return False
        self._by_server[server] = list(response.tools)
        self._server_versions[server] = version
        self._retries[server] = retries or {}
        self._rebuild()
        return True

    def _rebuild(self) -> None:
        servers = [s for s in self._server_order if s in self._by_server]
        servers += sorted(s for s in self._by_server if s not in servers)
        tools: dict[str, CatalogTool] = {}
        taken: list[ListedTool] = []
        for server in servers:
            for descriptor in self._by_server[server]:
                name = descriptor.name
                if not _NAME_OK.match(name):
                    log.warning(
                        "tool server %s: tool name %r is not valid for models; it is not offered",
                        server,
                        name[:80],
                    )
                    continue
                owner = tools.get(name)
                if owner is not None:
                    taken.append(ListedTool(name, server, descriptor, owner.server))
                    continue
                key = (server, self._server_versions[server], name)
                built = self._built.get(key)
                if built is None or built.descriptor != descriptor:
                    try:
                        retry = self._retries.get(server, {}).get(descriptor.name)
                        built = self._built[key] = _build(name, server, descriptor, retry)
                    except Exception as exc:
                        # However a third-party descriptor fails to parse or compile, one
                        # broken tool must not take the server's other tools down.
                        log.warning(
                            "tool server %s: tool %s is not offered: %s",
                            server,
                            descriptor.name,
                            exc
                            if isinstance(exc, ValueError)
                            else f"unusable input schema ({exc})",
                        )
                        continue
                tools[name] = built
        for clash in taken:
            if (clash.server, clash.name) not in self._reported_clashes:
                log.warning(
                    "tool server %s: tool %s is not offered: the name belongs to tool server "
                    "%s, configured first",
                    clash.server,
                    clash.name,
                    clash.owner,
                )
        self._reported_clashes = {(c.server, c.name) for c in taken}
        live = {(t.server, self._server_versions[t.server], t.name) for t in tools.values()}
        self._built = {k: v for k, v in self._built.items() if k in live}
        self._tools = tools
        self._by_listed_name = {**tools, **{t.qualified_name: t for t in tools.values()}}
        self.taken = taken
        self._definitions.clear()
        self.version += 1

    def get(self, name: str) -> CatalogTool | None:
        return self._tools.get(name)

    def unknown(self, names: Sequence[str]) -> list[str]:
        """The names of a profile's ``tools`` list that no tool offered now answers to,
        by name or as ``server.name``."""
        return [name for name in names if name not in self._by_listed_name]

    def spelt_like(self, name: str) -> str:
        """`` (did you mean 'slow_read'?)`` for a name close to a tool's, else ``""``."""
        close = difflib.get_close_matches(name, self._by_listed_name, n=1, cutoff=0.75)
        return f" (did you mean {close[0]!r}?)" if close else ""

    def listed(self, name: str) -> CatalogTool | None:
        """The tool a profile's ``tools`` list names, by its name or as ``server.name``."""
        return self._by_listed_name.get(name)

    def tools(self) -> list[CatalogTool]:
        return list(self._tools.values())

    def definitions(
        self,
        profile: str,
        allowed: frozenset[str] | None,
        unavailable_servers: frozenset[str],
    ) -> list[dict[str, Any]]:
        """The tool list the model sees: allowed by the profile, on an available server.

        Cached per (catalog version, allowed tools, unavailable servers): the same list
        object, so its serialization is byte-identical across turns (and a reloaded
        profile's new tool list is a new key).
        """
        key = (self.version, allowed, unavailable_servers)
        cached = self._definitions.get(key)
        if cached is None:
            cached = [
                t.definition
                for t in self._tools.values()
                if allows(allowed, t) and t.server not in unavailable_servers
            ]
            self._definitions[key] = cached
        return cached
