"""Reading a configuration: the YAML file, ``${NAME}`` from the environment, the messages a
person reads, and the secrets it names."""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ValidationError,
)

from sidecar.config.base import key_path
from sidecar.config.model import ModelConfig
from sidecar.config.sessions import PostgresConfig
from sidecar.config.tree import SidecarConfig
from sidecar.errors import ConfigError


def parse_config(data: Mapping[str, Any] | None, *, source: str = "config") -> SidecarConfig:
    """Validate a parsed configuration document.

    Raises:
        ConfigError: a key is unknown or a value is invalid; the message names the key.
    """
    try:
        return SidecarConfig.model_validate(data or {})
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            message = error["msg"]
            if error["type"] == "extra_forbidden":
                message = "unknown key" + _did_you_mean(error["loc"])
            problems.append(f"  {key_path(error['loc']) or '(root)'}: {message}")
        raise ConfigError(f"{source} is invalid:\n" + "\n".join(problems)) from None


def _did_you_mean(loc: Sequence[int | str]) -> str:
    """``; did you mean 'grace_period'?`` for an unknown key close to one its section has."""
    known = _keys_at(loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f" (its section takes {', '.join(sorted(known))})" if 0 < len(known) <= 12 else ""


def _keys_at(loc: Sequence[int | str]) -> list[str]:
    """The keys the section at ``loc`` takes; empty when the path leaves the models (a
    union, a list of plain values)."""
    kinds: list[Any] = [SidecarConfig]
    for part in loc:
        inner: list[Any] = []
        for kind in _unwrapped(kinds):
            if isinstance(part, int) or _is_collection(kind):
                inner.extend(typing.get_args(kind)[-1:])  # a list's items, a dict's values
            elif isinstance(kind, type) and issubclass(kind, BaseModel):
                field = kind.model_fields.get(part)
                if field is not None:
                    inner.append(field.annotation)
        kinds = inner
    models = [k for k in _unwrapped(kinds) if isinstance(k, type) and issubclass(k, BaseModel)]
    return sorted({name for model in models for name in model.model_fields})


def _unwrapped(kinds: Sequence[Any]) -> list[Any]:
    """Optional[X] and unions as their members, lists as themselves."""
    out: list[Any] = []
    for kind in kinds:
        origin = typing.get_origin(kind)
        if origin in (typing.Union, types.UnionType):
            out.extend(_unwrapped(typing.get_args(kind)))
        elif origin is typing.Annotated:
            out.extend(_unwrapped(typing.get_args(kind)[:1]))
        else:
            out.append(kind)
    return out


def _is_collection(kind: Any) -> bool:
    """A list, tuple or mapping type: its part of a key's path is an index or a name."""
    origin = typing.get_origin(kind)
    return origin in (list, tuple, dict) or (origin is not None and issubclass(origin, Mapping))


_REFERENCE = re.compile(r"\$\$\{|\$\{([^}]*)\}|\$\{")
"""``$${`` (a literal ``${``), ``${BODY}``, or an unterminated ``${``."""
_BODY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)
"""A reference's body: ``NAME`` or ``NAME:-DEFAULT``."""
_REDACT_FROM = 4
"""Substituted values this long or longer are replaced by their reference in error
messages: a variable may hold a secret; shorter values tell nothing and would garble them."""


def expand_variables(
    data: Any, environ: Mapping[str, str], *, source: str = "config"
) -> tuple[Any, dict[str, str]]:
    """``data`` (a parsed document) with ``${NAME}`` in its string values replaced.

    ``${NAME}`` is the variable's value; ``${NAME:-DEFAULT}`` is DEFAULT when the variable
    is unset or empty; ``$${`` is a literal ``${``. Keys are never expanded, and a value is
    never parsed again: a variable can fill a string, not add keys or change a type
    (pydantic then converts ``"8080"`` for an integer key as it would from the file).

    Returns:
        The expanded document, and each variable used with the value it gave.

    Raises:
        ConfigError: a variable is not set and has no default, or a ``${`` is no reference;
            the message names the key and the variable, never a value.
    """
    used: dict[str, str] = {}

    def expand(node: Any, where: str) -> Any:
        if isinstance(node, dict):
            return {k: expand(v, f"{where}.{k}" if where else str(k)) for k, v in node.items()}
        if isinstance(node, list):
            return [expand(v, f"{where}[{i}]") for i, v in enumerate(node)]
        if isinstance(node, str) and "${" in node:
            return _REFERENCE.sub(lambda m: substitute(m, where or "(root)"), node)
        return node

    def substitute(match: re.Match[str], where: str) -> str:
        if match[0] == "$${":
            return "${"
        body = _BODY.fullmatch(match[1] or "") if match[1] is not None else None
        if body is None:
            raise ConfigError(
                f"{source}: {where}: {match[0][:40]!r} is no variable reference: write "
                "${NAME} or ${NAME:-DEFAULT} (NAME: letters, digits and _), or $${ for a "
                "literal ${"
            )
        name, default = body[1], body[2]
        value = environ.get(name)
        if not value and default is not None:
            return default
        if value is None:
            raise ConfigError(
                f"{source}: {where}: the environment variable {name} is not set "
                f"(set it, or give a default: ${{{name}:-DEFAULT}})"
            )
        used[name] = value
        return value

    return expand(data, ""), used


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> SidecarConfig:
    """Read and validate a YAML configuration file.

    Args:
        path: The file.
        environ: The variables ``${NAME}`` in the file's strings are replaced with
            (:func:`expand_variables`); None: none are set, so a reference without a
            default is an error.

    Raises:
        ConfigError: the file cannot be read, is not YAML, names a variable that is not
            set, or is invalid.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = str(exc).replace('"<unicode string>"', f'"{path}"')
        raise ConfigError(f"{path} is not valid YAML: {where}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys")
    data, used = expand_variables(data, environ or {}, source=str(path))
    try:
        return parse_config(data, source=str(path))
    except ConfigError as exc:
        message = str(exc)
        # Longest first, so a value that contains another is replaced whole.
        for name, value in sorted(used.items(), key=lambda item: -len(item[1])):
            if len(value) >= _REDACT_FROM:
                message = message.replace(value, f"${{{name}}}")
        raise ConfigError(message) from None


def resolve_api_key(model: ModelConfig, environ: Mapping[str, str]) -> str | None:
    """The model API key from the environment, or None when it is unset or empty."""
    return environ.get(model.api_key_env) or None


def secret_environment(config: SidecarConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment variables the configuration names for secrets beyond the model
    key (``token_env`` of principals and tool servers, ``api_key_env`` of model variants,
    tiers and the replay's judge, the callback secrets' ``*_env``, the MCP endpoint's
    ``request_state_key_env``), with their values; unset
    or empty ones are left out."""
    names = {p.token_env for p in config.auth.principals if p.token_env}
    names |= {p.callback_secret_env for p in config.auth.principals if p.callback_secret_env}
    if config.background.callbacks.secret_env:
        names.add(config.background.callbacks.secret_env)
    names |= {s.token_env for s in config.tool_servers if s.token_env}
    for mcp in config.mcp_servers:
        names |= set(mcp.env_from.values()) | set(mcp.headers_from_env.values())
    for profile in config.profiles.values():
        overrides = [profile.tools_model, profile.context.memory_model]
        if profile.light is not None:
            overrides.append(profile.light.model)
        for variant in profile.variants:
            overrides += [variant.model, variant.tools_model]
        names |= {
            o["api_key_env"] for o in overrides if o and isinstance(o.get("api_key_env"), str)
        }
    if config.mcp.request_state_key_env:
        names.add(config.mcp.request_state_key_env)
    judge = config.replay.judge or {}
    if isinstance(judge.get("api_key_env"), str):
        names.add(judge["api_key_env"])
    return {name: environ[name] for name in sorted(names) if environ.get(name)}


def dsn_password(dsn: str | None) -> str | None:
    """The password in a PostgreSQL connection string (URL or ``key=value`` form)."""
    if not dsn:
        return None
    if "://" in dsn:
        return urlsplit(dsn).password
    match = re.search(r"(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", dsn)
    return match.group(1).strip("'") if match else None


def resolve_postgres_dsn(config: PostgresConfig, environ: Mapping[str, str]) -> str | None:
    """The PostgreSQL connection string: from ``dsn_env`` when set, else ``dsn``."""
    return environ.get(config.dsn_env) or config.dsn
