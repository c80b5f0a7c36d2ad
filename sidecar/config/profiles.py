"""``profiles``: what each agent profile runs (prompt, tools, budget, context, variants, the
light path)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    field_validator,
)

from sidecar.config.base import _Strict, _unique
from sidecar.schemas import compile_schema_safely


class BudgetConfig(_Strict):
    """A profile's latency budget: for the whole run and for each kind of stage.

    Every budget is optional; a profile that sets none has no budget. Overruns are seen
    at stage boundaries (after each model call and each step's tool calls) and reported
    once per stage and run; ``policy`` decides what happens next.
    """

    total: float | None = Field(None, gt=0)
    """Seconds the whole run may take, from the moment the sidecar received the request."""
    model: float | None = Field(None, gt=0)
    """Seconds of model calls per run, summed (retries and backoff included)."""
    tools: float | None = Field(None, gt=0)
    """Seconds of tool calls per run: each step's wall time of tool calls, summed."""
    other: float | None = Field(None, gt=0)
    """Seconds of everything else per run: queueing, context building, the sidecar's own
    overhead."""
    policy: Literal["continue", "answer", "stop"] = "continue"
    """What an overrun does. ``continue``: report it and go on (only the caller's deadline
    bounds calls). ``answer``: one last model call with tool calls turned off, then stop
    with STOP_REASON_BUDGET_ANSWERED. ``stop``: stop with STOP_REASON_BUDGET_STOPPED.
    Under ``answer`` and ``stop`` each model request and tool call gets at most what is
    left of the total budget and of its stage's budget as its timeout."""

    @property
    def declared(self) -> bool:
        """Whether any budget is set."""
        return any(b is not None for b in (self.total, self.model, self.tools, self.other))


class CostConfig(_Strict):
    """What one run of a profile may spend (the cost guard). A model call that would take
    the run past a limit is not made: the run stops with STOP_REASON_COST_LIMIT, between
    calls, never during a tool call."""

    per_run: float | None = Field(None, gt=0)
    """The most a run may cost, in the price table's currency (``prices``: US dollars),
    counting the calls to models the table prices. Unset: no limit."""
    tokens_per_run: int | None = Field(None, ge=1)
    """The most tokens (prompt and completion) a run may use on models the price table
    has no price for, which ``per_run`` cannot count. Unset: no limit."""


class ContextConfig(_Strict):
    """How a profile's model input is kept small: the window, tool-result trimming, memory.

    Token counts are estimates (about 4 bytes per token), calibrated by the prompt tokens
    the provider reports for each request, per model and per session: a session in
    Chinese or Japanese, whose characters count about one token each, gets a smaller
    window after its first call. Leave the provider's limit some headroom.
    """

    max_tokens: int | None = Field(32_000, ge=256)
    """Token budget of the model input at the start of a turn: system prompt, tool
    schemas, memory, history and the user's input. Older turns' tool results are trimmed,
    then the oldest turns dropped, to stay under it. ``null`` turns the window off and
    sends the whole history every turn."""
    keep_recent_turns: int = Field(2, ge=0)
    """The most recent turns, always sent whole, even above the budget."""
    old_tool_result_chars: int = Field(400, ge=0)
    """When the history is over budget, each tool result of an older turn is cut to this
    many characters (with a marker saying how much was cut) before any turn is dropped."""
    drop_batch_turns: int = Field(4, ge=1)
    """Turns are dropped from the window this many at a time, so the history the provider
    sees stays the same for several turns (its prompt cache keeps hitting) and memory is
    summarised once per batch, not once per turn."""
    tool_result_max_chars: int | None = Field(16_000, ge=64)
    """Cap on one tool result as it enters the context, after the tool's ``result_fields``
    are applied; the rest is cut with a marker saying how much. ``null``: no cap."""
    memory: bool = False
    """Summarise turns the window drops into the session's memory (one model call per
    batch of dropped turns, after the turn that dropped them), and send that memory instead
    of the turns. Off: dropped turns are simply not sent."""
    memory_max_chars: int = Field(2_000, ge=100)
    """Longest memory kept; the model is asked to stay under it and longer text is cut."""
    memory_model: dict[str, Any] | None = None
    """The model that writes memory summaries, as keys of the top-level ``model`` section
    that differ (``{model: openai/gpt-oss-20b}``); unset: the top-level model."""


_VARIANT_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class VariantConfig(_Strict):
    """One variant of a profile: a model (and optionally a prompt) with a share of sessions."""

    name: str = Field(pattern=_VARIANT_NAME)
    """Its name, on every turn, in the timeline, metrics and the audit record."""
    weight: float = Field(ge=0)
    """Its share of new sessions, relative to the other variants' (90 and 10: 90%)."""
    model: dict[str, Any] = Field(default_factory=dict)
    """Keys of the top-level ``model`` section that differ for this variant (``model``,
    ``base_url``, ``temperature`` ...); empty: the top-level model as it is."""
    system_prompt: str | None = None
    """Its system prompt; unset: the profile's."""
    tools_model: dict[str, Any] | None = None
    """Tiering for this variant; unset: the profile's ``tools_model``."""
    shadow: float | None = Field(None, gt=0, le=1)
    """Shadow mode: the share of the profile's live turns this variant runs a copy of,
    with tool calls answered from the live run's results, its answer never shown and its
    cost counted apart; it takes no sessions (``weight`` counts again once the key is
    removed: promotion to canary). Unset: a variant that serves its share of sessions."""


class RollbackConfig(_Strict):
    """When a canary variant is taken out of rotation: it breaches its objective against
    the stable variant (the first one listed) over a window with enough runs of both."""

    enabled: bool = True
    window: float = Field(300.0, gt=0)
    """Seconds of the latest runs compared."""
    min_runs: int = Field(20, ge=1)
    """Runs of the canary and of the stable variant the window needs before judging."""
    max_error_rate_increase: float = Field(0.05, ge=0, le=1)
    """How far the canary's share of failed runs may exceed the stable variant's. A run
    fails that ends in a way a sound model would not end it: a model error, an invalid
    answer, a refusal, the step or tool-call limit, the budget stopping it; cancelled and
    interrupted runs are not counted."""
    max_p95_ratio: float = Field(1.5, ge=1)
    """How many times the stable variant's P95 run latency the canary's may be."""
    min_p95_increase: float = Field(0.25, ge=0)
    """Seconds the canary's P95 run latency may exceed the stable variant's whatever the
    ratio: a canary is slower only by both measures. Default 0.25: below it, a ratio of
    two fast P95s is noise (4 ms against 2 ms), not a regression users feel."""
    significance: float = Field(0.001, gt=0, lt=1)
    """How unlikely by chance a difference must be before it counts (the p-value of a
    one-sided test: two proportions for failures, Mann-Whitney U for latency). Default
    0.001: the canary is judged again after each run, and each look is a chance to be
    fooled; at this level an identical twin was rolled back in 2 of 300 simulated windows
    of 300 runs, while a canary twice as slow, or failing 25% of runs against 2%, was
    caught in every one, after 50 runs at the median."""


class SpeculationConfig(_Strict):
    """Speculative prefetch: the first step's read-only, idempotent calls the model is very
    likely to ask for start while it thinks, predicted by rules learned from the profile's
    stored turns (an order number in the input, say, followed by a status lookup of it)."""

    enabled: bool = False
    """Start predicted calls before the model asks for them. Off by default: a call the
    model does not ask for is extra load on its tool server."""
    min_precision: float = Field(0.9, gt=0, le=1)
    """A rule is used once, over the turns it was learned from, this share of the calls it
    predicted were the model's own (the rest would have been waste). Default 0.9: at most
    about one speculated call in ten is wasted."""
    min_support: int = Field(20, ge=1)
    """A rule is used once it predicted a call for at least this many of the stored turns:
    a precision over fewer is luck. Default 20."""
    history_turns: int = Field(500, ge=10, le=10_000)
    """The latest turns of the profile's sessions the rules are learned from."""
    relearn_interval: float = Field(60.0, gt=0)
    """Seconds between learnings from the session store (every replica's turns, when the
    store is shared)."""
    max_calls: int = Field(3, ge=1, le=16)
    """Calls speculated per run at most, the most precise rules' first."""


class LightContextConfig(_Strict):
    """The light path's context window: keys of the profile's ``context`` that differ."""

    max_tokens: int | None = Field(None, ge=256)
    """Token budget of the model input on the light path; unset: the profile's."""
    keep_recent_turns: int | None = Field(None, ge=0)
    """The most recent turns always sent whole on the light path; unset: the profile's."""


class LightConfig(_Strict):
    """A profile's light variant: what a run does instead of being refused when the sidecar
    is overloaded (``server.light_path``). Every key left unset is the profile's own; the
    light path never tiers, never writes memory summaries (it reads the memory there is),
    and its runs are not judged against the session's variant."""

    model: dict[str, Any] = Field(default_factory=dict)
    """The light path's model, as keys of the top-level ``model`` section that differ (a
    smaller, faster model: ``{model: openai/gpt-oss-20b}``); empty: the top-level model."""
    system_prompt: str | None = None
    """Its system prompt (a shorter one); unset: the profile's."""
    max_steps: int | None = Field(None, ge=1, le=256)
    """Model calls per light run; unset: the profile's."""
    max_tool_calls: int | None = Field(None, ge=0, le=4096)
    """Tool calls per light run; unset: the profile's."""
    context: LightContextConfig = LightContextConfig()
    """A shorter context window."""


class ReasoningPolicy(_Strict):
    """What becomes of a reasoning model's reasoning text on a profile's runs. It is
    never the answer and never sent back to the model; its tokens are counted (usage,
    cost, the timeline, the cost guard) whatever this says."""

    stream: bool = False
    """Stream it to the caller as ``reasoning_delta`` events (StreamRun). Off: the model
    is asked to leave it out of its responses, which then carry less."""
    record: bool = False
    """Keep it in recordings (``recording.path``) and the audit record. Off: they hold
    its token count only."""


class ServiceTiers(_Strict):
    """The provider's service tier by run class, over ``model.service_tier``."""

    caller: Literal["auto", "on_demand", "flex", "performance"] | None = None
    """Runs a caller waits for (Run, StreamRun, A2A, MCP)."""
    background: Literal["auto", "on_demand", "flex", "performance"] | None = None
    """Background runs (StartRun, A2A tasks run in the background): ``flex`` suits them."""
    shadow: Literal["auto", "on_demand", "flex", "performance"] | None = None
    """Shadow variants' runs, whose answers nobody waits for."""


class ProfileConfig(_Strict):
    """An agent profile: what the agent is told, which tools it may use, its limits."""

    reasoning: ReasoningPolicy = ReasoningPolicy()
    """What becomes of a reasoning model's reasoning (docs/models.md#reasoning)."""
    service_tiers: ServiceTiers = ServiceTiers()
    """The provider's service tier per run class; unset ones: ``model.service_tier``."""

    system_prompt: str = "You are a helpful assistant. Use the tools when they help."
    """The system prompt, sent first and byte-identical on every call."""
    tools: list[str] | None = None
    """Tools the profile may use, by name (``get_x``) or by server and name
    (``orders.get_x``, allowed only while that server owns the name); unset allows every
    tool."""
    max_steps: int = Field(8, ge=1, le=256)
    """Model calls per run before it stops with STOP_REASON_MAX_STEPS."""
    max_tool_calls: int = Field(32, ge=0, le=4096)
    """Tool calls per run before it stops with STOP_REASON_MAX_TOOL_CALLS."""
    answer_schema: dict[str, Any] | None = None
    """JSON Schema the final answer must match in structured mode; unset: free text."""
    max_input_chars: int = Field(200_000, ge=1, le=10_000_000)
    """Longest user input a run accepts, in characters (about 50,000 tokens at the
    default); a longer one fails with INPUT_TOO_LARGE before anything runs or is stored."""
    approval_timeout: float = Field(300.0, gt=0)
    """Seconds a call waits for ApproveToolCall before it counts as denied."""
    early_dispatch: bool = True
    """Start read-only calls while the model is still streaming the rest of its answer."""
    budget: BudgetConfig = BudgetConfig()
    """The profile's latency budget; unset budgets are not checked."""
    cost: CostConfig = CostConfig()
    """What a run may spend; unset limits are not checked."""
    context: ContextConfig = ContextConfig()
    """The context window, tool-result trimming and memory of the profile's sessions."""
    tools_model: dict[str, Any] | None = None
    """Tiering: the model for the steps that choose tools, as keys of the top-level
    ``model`` section that differ (a small fast model); the answer comes from the
    profile's own model, asked once the small one needs no more tools. Unset: one model
    for every step."""
    variants: list[VariantConfig] = Field(default_factory=list)
    """Model variants sharing the profile's new sessions by weight; the first is the
    stable one, the others canaries. A session stays on the variant it started on. Empty:
    the top-level model alone."""
    rollback: RollbackConfig = RollbackConfig()
    """When a canary is taken out of rotation automatically."""
    speculation: SpeculationConfig = SpeculationConfig()
    """Speculative prefetch of the first step's likely calls; off by default."""
    light: LightConfig | None = None
    """The light variant new runs take while the sidecar is overloaded
    (``server.light_path``), instead of being refused; unset: runs always take the full
    path."""

    def light_profile(self) -> ProfileConfig | None:
        """The profile as its light path runs it; None when it has none."""
        light = self.light
        if light is None:
            return None
        context = self.context.model_copy(
            update={k: v for k, v in light.context.model_dump().items() if v is not None}
        )
        return self.model_copy(
            update={
                "system_prompt": light.system_prompt or self.system_prompt,
                "max_steps": light.max_steps or self.max_steps,
                "max_tool_calls": self.max_tool_calls
                if light.max_tool_calls is None
                else light.max_tool_calls,
                "context": context,
                "tools_model": None,
                "variants": [],
                "light": None,
            }
        )

    record: float = Field(0.0, ge=0, le=1)
    """The share of the profile's turns recorded into ``recording.path`` (0.05: one in
    twenty, drawn at random per turn). Default 0: none, and a turn not recorded costs
    nothing."""

    @field_validator("answer_schema")
    @classmethod
    def _answer_schema_compiles(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is None:
            return None
        # Structured outputs (Groq's, OpenAI's) ask for a JSON object: a schema whose root
        # is anything else could never be met.
        if schema.get("type") != "object":
            raise ValueError('the root must be an object schema ("type": "object")')
        try:
            compile_schema_safely(schema)
        except ValueError as exc:
            raise ValueError(f"not a JSON Schema answers can be checked with: {exc}") from None
        return schema

    @field_validator("variants")
    @classmethod
    def _variants(cls, variants: list[VariantConfig]) -> list[VariantConfig]:
        _unique("variant", [v.name for v in variants])
        if variants and variants[0].shadow is not None:
            raise ValueError("the first variant is the stable one and cannot be a shadow")
        if variants and not any(v.weight > 0 for v in variants if v.shadow is None):
            raise ValueError("at least one variant that is not a shadow needs a weight above 0")
        return variants
