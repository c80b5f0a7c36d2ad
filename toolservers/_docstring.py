"""Read a tool's description and per-argument descriptions from its docstring.

Only the Google style is understood: prose first, then sections such as
``Args:`` and ``Returns:``, each entry in ``Args:`` being ``name: text`` or
``name (type): text`` with continuation lines indented further.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters|"
    r"Returns|Return|Yields|Yield|Raises|Examples?|Notes?|Attributes|See Also|Warnings?|"
    r"Todo|References):\s*$"
)
_ARG_SECTIONS = frozenset({"Args", "Arguments", "Parameters", "Params"})
_ENTRY = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


@dataclass(frozen=True)
class Docstring:
    """What a docstring says about a tool.

    Attributes:
        description: The prose before the first section, paragraphs separated by
            one blank line, lines within a paragraph joined by spaces. Empty when
            there is no docstring.
        args: Argument name to its description, in the order documented.
    """

    description: str = ""
    args: dict[str, str] = field(default_factory=dict)


def parse_docstring(doc: str | None) -> Docstring:
    """Split a cleaned docstring (as ``inspect.getdoc`` returns it) into its parts."""
    if not doc:
        return Docstring()
    prose: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    entry_indent: int | None = None
    for line in doc.splitlines():
        header = _SECTION.match(line)
        if header:
            section, current, entry_indent = header.group(1), None, None
            continue
        if section is None:
            prose.append(line.strip())
            continue
        if section not in _ARG_SECTIONS or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if entry_indent is None:
            entry_indent = indent
        entry = _ENTRY.match(line.strip()) if indent == entry_indent else None
        if entry:
            current = entry.group(1).lstrip("*")
            args[current] = entry.group(2).strip()
        elif current is not None and indent > entry_indent:
            args[current] = f"{args[current]} {line.strip()}".strip()
    return Docstring(description=_paragraphs(prose), args=args)


def _paragraphs(lines: list[str]) -> str:
    paragraphs: list[str] = []
    current: list[str] = []
    for line in [*lines, ""]:
        if line:
            current.append(line)
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    return "\n\n".join(paragraphs)
