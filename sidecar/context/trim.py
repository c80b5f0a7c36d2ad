"""Tool results cut to what the model needs before they enter its context.

Two steps, in order:

1. **Fields.** A tool may declare the fields of its JSON output the model needs
   (``ToolDescriptor.result_fields``: names or dotted paths such as ``parcel.eta``; a path
   through an array applies to each element). Only those are kept. Output that is not
   JSON, or not an object or array, is left as it is.
2. **Size cap.** The profile's ``tool_result_max_chars`` caps what is left, with a marker
   saying how much was cut: ``…[trimmed 12,345 chars]``.

Both are cheap when they don't apply: no parse without declared fields, no copy under the
cap. Errors are never trimmed by fields (they are written for the model already), only
capped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

FieldTree = dict[str, "FieldTree"]
"""Declared paths as a tree: ``{"parcel": {"eta": {}}}``; an empty tree keeps all."""


def field_tree(paths: Sequence[str]) -> FieldTree:
    """The tree of declared field paths; built once per tool, at discovery."""
    tree: FieldTree = {}
    split = (tuple(part for part in path.split(".") if part) for path in paths)
    # Shortest first: a path that keeps a whole subtree is never narrowed by a longer one.
    for parts in sorted((p for p in split if p), key=len):
        node = tree
        for part in parts[:-1]:
            child = node.get(part)
            if child is not None and not child:
                break  # already kept whole
            node = node.setdefault(part, {})
        else:
            node[parts[-1]] = {}
    return tree


def project(value: Any, tree: FieldTree) -> Any:
    """``value`` with only the fields ``tree`` names (applied to each array element)."""
    if not tree:
        return value
    if isinstance(value, dict):
        return {k: project(v, tree[k]) for k, v in value.items() if k in tree}
    if isinstance(value, list):
        return [project(item, tree) for item in value]
    return value


def marker(cut: int) -> str:
    """What replaces the end of a cut text."""
    return f"…[trimmed {cut:,} chars]"


def cap(text: str, limit: int) -> str:
    """``text`` cut to at most about ``limit`` characters, with a marker saying how much
    was cut; unchanged when it fits."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(marker(len(text))))
    return text[:keep] + marker(len(text) - keep)


def keep_fields(text: str, tree: FieldTree) -> str:
    """JSON output reduced to the declared fields; other text unchanged."""
    if not tree or not text or text[0] not in "{[":
        return text
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    return orjson.dumps(project(value, tree)).decode()


class ResultTrimmer:
    """Applies a tool's declared fields and a profile's size cap to its results.

    Args:
        max_chars: the cap on one result; None: no cap.
    """

    __slots__ = ("max_chars",)

    def __init__(self, max_chars: int | None) -> None:
        self.max_chars = max_chars

    def trim(self, text: str, fields: FieldTree, *, is_error: bool = False) -> str:
        """A tool result as it enters the context."""
        if fields and not is_error:
            text = keep_fields(text, fields)
        if self.max_chars is not None:
            text = cap(text, self.max_chars)
        return text
