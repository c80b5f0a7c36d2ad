"""Messages written for the model when its arguments are wrong.

The model reads these and tries again, so each names the offending argument,
says what was expected and shows what was sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import ValidationError

_MAX_SHOWN = 80


def invalid_arguments(tool_name: str, exc: ValidationError, expected: Mapping[str, str]) -> str:
    """Describe every validation error of one call's arguments.

    Args:
        tool_name: The tool that was called.
        exc: The arguments model's validation error.
        expected: Top-level argument name to what it expects, e.g. ``"integer"``.
    """
    lines = [f"Invalid arguments for {tool_name}:"]
    for error in exc.errors(include_url=False):
        loc = error["loc"]
        where = _path(loc)
        top = str(loc[0]) if loc else ""
        kind = error["type"]
        if kind == "missing" and len(loc) == 1:
            lines.append(f"- {where}: required argument is missing; expected {expected.get(top)}")
        elif kind == "extra_forbidden" and len(loc) == 1:
            allowed = ", ".join(expected) or "no arguments"
            lines.append(f"- {where}: unknown argument; {tool_name} takes: {allowed}")
        else:
            lines.append(f"- {where}: {error['msg']}; got {_shown(error.get('input'))}")
    lines.append(f"Call {tool_name} again with corrected arguments.")
    return "\n".join(lines)


def not_a_json_object(exc: ValidationError) -> str | None:
    """Why the arguments text is not a JSON object, or None when it is one.

    Text that is not even a JSON object is a malformed request (a protocol
    failure), not a schema violation the model could correct.
    """
    for error in exc.errors(include_url=False):
        if not error["loc"] and error["type"] in ("json_invalid", "model_type", "json_type"):
            return f"arguments must be a JSON object: {error['msg']}"
    return None


def _path(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(arguments)"


def _shown(value: Any) -> str:
    try:
        text = orjson.dumps(value, default=str).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."
