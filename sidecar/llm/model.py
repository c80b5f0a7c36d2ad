"""The seam in front of the model: what the loop asks for and what it gets back.

The loop knows only :class:`Model`; the OpenAI-compatible client sits behind it. A
failed call raises the :class:`~sidecar.errors.ModelError` tree (``sidecar.errors``)::

    ModelError                    the model could not produce a response
    ├── ModelRequestRejected      a 4xx other than 429: retrying the same request won't help
    │   └── ToolUseFailed         the model emitted a malformed tool call (Groq 400 tool_use_failed)
    └── ModelUnavailable          429 / 498 / 5xx / connection / timeout, after retries
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sidecar.types import ProviderTiming, ToolCall, Usage

if TYPE_CHECKING:
    from sidecar.llm.pacing import RateLimits


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
    refusal: str | None = None
    """The model's refusal, when it declined to answer (``message.refusal``)."""
    request_id: str | None = None
    """The provider's id of the request, to ask the provider about it: Groq's ``x_groq.id``,
    else the ``x-request-id`` header, else the completion's ``id``."""
    completion_id: str | None = None
    """The completion's ``id`` (``chatcmpl-…``)."""
    total_time: float | None = None
    """The provider's own total for the request, in seconds (Groq's ``usage.total_time``)."""
    rate_limits: RateLimits | None = None
    """What the response's ``x-ratelimit-*`` headers said; None when it sent none."""
    paced: float = 0.0
    """Seconds the request waited for room in the endpoint's rate limits before it was
    sent (every attempt's wait), inside the call's time."""
    request_bytes: int = 0
    """Size of the request body sent (the attempt that answered)."""
    reasoning: str | None = None
    """A reasoning model's reasoning, when the request kept it: never the answer, never
    sent back to the model."""
    service_tier: str | None = None
    """The provider's tier that answered (``service_tier`` of the response)."""


@dataclass(slots=True)
class ModelRequest:
    """One model call. ``messages`` and ``tools`` are sent as they are (OpenAI wire shape)."""

    messages: Sequence[dict[str, Any]]
    tools: Sequence[dict[str, Any]]
    stream: bool
    timeout: float
    """Seconds the call may take, retries included."""
    _: KW_ONLY
    response_schema: dict[str, Any] | None = None
    """When set, ask for a JSON answer matching this schema (structured outputs)."""
    tool_choice: str | None = None
    """When set, sent as ``tool_choice`` (``"none"``: the tools stay in the prompt, so its
    prefix stays cacheable, but the model may not call them)."""
    backlog: Callable[[], Awaitable[None] | None] | None = None
    """Asked after each piece of a streamed response: an awaitable means whoever takes the
    text has fallen behind, and reading pauses until it completes (backpressure)."""
    on_reasoning: Callable[[str], None] | None = None
    """Called with each piece of a reasoning model's streamed reasoning; None: the model
    is asked to leave its reasoning out of the response."""
    keep_reasoning: bool = False
    """Ask for the reasoning text even when nothing streams it (recorded, audited)."""
    service_tier: str | None = None
    """The provider's tier for this call (Groq's ``service_tier``); None: the model's."""


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
