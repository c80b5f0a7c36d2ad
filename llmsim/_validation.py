"""Which chat-completions requests the simulator rejects, as Groq would (HTTP 400)."""

from __future__ import annotations

from typing import Any

MAX_TOOLS = 128
"""Groq accepts at most this many tools per request."""

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_FORMATS = frozenset({"text", "json_object", "json_schema"})


def request_problem(body: Any) -> str | None:
    """Why Groq would reject this body with a 400, or ``None``."""
    if not isinstance(body, dict):
        return "The request body must be a JSON object."
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return "'model' : property 'model' is missing"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' : minimum number of items is 1"
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            return f"'messages.{index}' : discriminator property 'role' has invalid value"
    n = body.get("n")
    if n is not None and n != 1:
        return "'n' : number must be at most 1"
    tools = body.get("tools")
    names: set[str] = set()
    if tools is not None:
        if not isinstance(tools, list):
            return "'tools' : value must be an array"
        if len(tools) > MAX_TOOLS:
            return f"'tools' : maximum number of items is {MAX_TOOLS}"
        for index, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                return f"'tools.{index}.function.name' : property 'name' is missing"
            names.add(function["name"])
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if name not in names:
            return f"Tool choice is function {name!r}, but it is not in the list of tools."
    fmt = body.get("response_format")
    if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") not in _FORMATS):
        return "'response_format.type' : value must be one of text, json_object, json_schema"
    return None
