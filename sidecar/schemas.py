"""JSON Schemas from outside the process, compiled safely.

Tool servers declare input schemas and configuration files declare answer schemas; both
are compiled by fastjsonschema into validators. A schema is data, never a reason to act:
no ``$ref`` to another document is followed (fastjsonschema's fallback would fetch it
with ``urllib``: a request forgery, and a blocked event loop), the node count is bounded,
and any way compilation fails (a bad keyword, a pattern that is no regular expression,
nesting deep enough to exhaust the stack) is one :class:`ValueError` with a reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import fastjsonschema

__all__ = ["MAX_SCHEMA_NODES", "compile_schema_safely"]

MAX_SCHEMA_NODES = 20_000
"""Nodes (objects, lists, values) a schema may hold."""


class _NoRemoteReferences(Mapping[str, Callable[[str], Any]]):
    """fastjsonschema's handlers by URI scheme: every scheme refuses, so no ``$ref`` ever
    reaches its fallback, ``urllib.request.urlopen``."""

    def __getitem__(self, scheme: str) -> Callable[[str], Any]:
        def refuse(uri: str) -> Any:
            raise ValueError(f"the schema refers to {uri[:200]!r}; only local $refs are followed")

        return refuse

    def __contains__(self, scheme: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


_NO_REMOTE = _NoRemoteReferences()


def _check_references(schema: Any) -> None:
    """Refuse a schema with a ``$ref`` to anything but this document, or too many nodes."""
    pending, seen = [schema], 0
    while pending:
        node = pending.pop()
        seen += 1
        if seen > MAX_SCHEMA_NODES:
            raise ValueError(f"the schema has more than {MAX_SCHEMA_NODES} nodes")
        if isinstance(node, dict):
            for key in ("$ref", "$dynamicRef", "$recursiveRef"):
                ref = node.get(key)
                if ref is not None and (not isinstance(ref, str) or not ref.startswith("#")):
                    raise ValueError(f"{key} {str(ref)[:200]!r} is not local; it is not followed")
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)


def compile_schema_safely(schema: Mapping[str, Any]) -> Callable[[Any], Any]:
    """A validator for ``schema``: it raises ``fastjsonschema.JsonSchemaValueException``
    for a value that does not match.

    Raises:
        ValueError: the schema refers to another document, is too large, or cannot be
            compiled (the message says why).
    """
    _check_references(schema)
    try:
        return fastjsonschema.compile(dict(schema), handlers=_NO_REMOTE)
    except ValueError:
        raise
    except RecursionError:
        raise ValueError("the schema is nested too deeply") from None
    except Exception as exc:  # fastjsonschema's own errors, re.error, TypeError ...
        raise ValueError(f"{type(exc).__name__}: {str(exc)[:300]}") from None
