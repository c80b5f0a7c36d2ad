"""Exceptions of the tool-author SDK.

One tree, rooted at ``ToolServerError``::

    ToolServerError             anything this package raises on purpose
    ├── ToolDefinitionError     a tool is declared wrongly; raised at decoration time
    └── ToolFailure             raised by a tool to fail with a message for the model

A tool may raise any exception: the model then sees ``ExceptionType: message``.
``ToolFailure`` is for failures the author anticipated (an order that does not
exist, stock that ran out): the model sees exactly the message given, nothing
else, and can act on it.
"""

from __future__ import annotations


class ToolServerError(Exception):
    """Base class of every exception this package raises on purpose."""


class ToolDefinitionError(ToolServerError, TypeError):
    """A tool's function or decorator arguments cannot make a valid tool.

    Raised when the decorator runs, so a mistake stops the server from starting
    instead of surfacing on the first call. It is also a ``TypeError``, which is
    what a wrong signature would raise anyway.
    """


class ToolFailure(ToolServerError):
    """Raised by a tool to fail the call with a message written for the model.

    The call's result carries a ``TOOL_ERROR_KIND_EXECUTION_FAILED`` error whose
    message is exactly ``message``, without the exception type or a traceback.

    Args:
        message: What went wrong and, ideally, what the model could do instead.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
