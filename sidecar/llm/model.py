"""The seam in front of the model: what the loop asks for and what it gets back.

The loop knows only :class:`Model`; the OpenAI-compatible client sits behind it.

Exceptions::

    ModelError                    the model could not produce a response
    ├── ModelRequestRejected      a 4xx other than 429: retrying the same request won't help
    │   └── ToolUseFailed         the model emitted a malformed tool call (Groq 400 tool_use_failed)
    └── ModelUnavailable          429 / 498 / 5xx / connection / timeout, after retries
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(slots=True)
class ToolCall:
    """One tool call the model asked for. ``arguments`` is the model's JSON text, untouched."""

    id: str
    name: str
    arguments: str


@dataclass(slots=True)
class Usage:
    """Token counts of one or more model calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached_prompt_tokens += other.cached_prompt_tokens


@dataclass(slots=True)
class ProviderTiming:
    """The provider's own account of a call, in seconds, when it reports one (Groq does)."""

    queue_time: float | None = None
    prompt_time: float | None = None
    completion_time: float | None = None


@dataclass(slots=True)
class ModelResponse:
    """What one model call produced."""

    text: str
    tool_calls: list[ToolCall]
    finish_reason: str
    usage: Usage
    provider: ProviderTiming = field(default_factory=ProviderTiming)
    time_to_first_token: float | None = None
    """Seconds from sending the request to the first streamed token; None when not streamed."""
    attempts: int = 1


@dataclass(slots=True)
class ModelRequest:
    """One model call. ``messages`` and ``tools`` are sent as they are (OpenAI wire shape)."""

    messages: Sequence[dict[str, Any]]
    tools: Sequence[dict[str, Any]]
    stream: bool
    timeout: float
    """Seconds the call may take, retries included."""
    response_schema: dict[str, Any] | None = None
    """When set, ask for a JSON answer matching this schema (structured outputs)."""
    tool_choice: str | None = None
    """When set, sent as ``tool_choice`` (``"none"``: the tools stay in the prompt, so its
    prefix stays cacheable, but the model may not call them)."""


class ModelError(Exception):
    """The model could not produce a response.

    Attributes:
        code: a stable machine-readable code (``model_rate_limited``, ``model_bad_request``…).
        retryable: whether the same request may succeed later.
        status: the HTTP status, when there was one.
        retry_after: seconds the provider asked us to wait before retrying, when it said.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after


class ModelRequestRejected(ModelError):
    """The provider rejected the request (4xx other than 429)."""


class ToolUseFailed(ModelRequestRejected):
    """The model produced a tool call the provider could not parse.

    Attributes:
        failed_generation: the model's raw output, for the repair round.
    """

    def __init__(self, message: str, failed_generation: str):
        super().__init__("model_tool_use_failed", message, retryable=False, status=400)
        self.failed_generation = failed_generation


class ModelUnavailable(ModelError):
    """The provider did not answer usefully within the retries and the time allowed."""


TextSink = Callable[[str], None]
ToolCallSink = Callable[[ToolCall], None]


class Model(Protocol):
    """A chat model the loop can call."""

    name: str

    async def complete(
        self,
        request: ModelRequest,
        on_text: TextSink | None = None,
        on_tool_call: ToolCallSink | None = None,
    ) -> ModelResponse:
        """Run one model call.

        Args:
            request: the messages, tools and options.
            on_text: called with each piece of answer text as it streams in.
            on_tool_call: when streaming, called with each tool call as soon as its
                arguments are complete (the stream moved on to the next call), before the
                response ends. The response still lists every call. A call announced by
                an attempt that then failed and was retried is not in the response.

        Raises:
            ModelError: the call failed; see the subclasses.
        """
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
