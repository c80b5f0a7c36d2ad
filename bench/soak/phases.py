"""The soak's phases: what each one breaks, and when, while the load runs.

A phase runs the full load for its duration; its chaos coroutine runs alongside, acting
at fractions of the duration (``await ctx.at(1 / 3)``) and noting what it did on the
phase's timeline. The load then stops, the runs in flight finish, and the cleanup (if
any) undoes the chaos before the next phase starts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bench.soak.load import Load
from bench.soak.stack import SoakStack, until

TOOL_DOWN_S = 2.0
"""How long a killed tool server stays down before it is restarted."""
FEED_INTERVAL_S = 0.25


@dataclass
class PhaseContext:
    """What a phase's chaos works with, and the timeline it writes."""

    stack: SoakStack
    load: Load
    seconds: float
    started: float = field(default_factory=time.perf_counter)
    events: list[tuple[float, str]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def note(self, text: str) -> None:
        self.events.append((round(self.elapsed(), 1), text))

    async def at(self, fraction: float) -> None:
        """Wait until ``fraction`` of the phase's duration has passed."""
        await asyncio.sleep(max(0.0, fraction * self.seconds - self.elapsed()))


Chaos = Callable[[PhaseContext], Awaitable[None]]


@dataclass(frozen=True)
class Phase:
    name: str
    summary: str
    """What happens, for the report."""
    tools: str = "shop"
    """The tool server the phase runs against: ``shop`` or ``chaos`` (the double)."""
    chaos: Chaos | None = None
    cleanup: Chaos | None = None


async def _tools_back(ctx: PhaseContext) -> None:
    await until(ctx.stack.tools_available, timeout=60)
    ctx.note("the sidecar offers the tools to the model again")


async def kill_tool_server(ctx: PhaseContext) -> None:
    await ctx.at(1 / 3)
    ctx.stack.kill_tools()
    ctx.note("tool server killed with SIGKILL")
    await asyncio.sleep(TOOL_DOWN_S)  # down for a moment, as a crashed pod would be
    await asyncio.to_thread(ctx.stack.start_tools)
    ctx.note("tool server restarted on the same port and listening")
    await _tools_back(ctx)


async def hang_tool_server(ctx: PhaseContext) -> None:
    ctx.extra["before"] = await ctx.stack.chaos_stats()
    await ctx.at(1 / 3)
    await ctx.stack.set_chaos(hang_rate=1.0)
    ctx.note("every tool call hangs from now on")
    await ctx.at(2 / 3)
    await ctx.stack.set_chaos()
    ctx.note("tool calls answer again")
    await _tools_back(ctx)


async def fail_half_the_tool_calls(ctx: PhaseContext) -> None:
    ctx.extra["before"] = await ctx.stack.chaos_stats()
    await ctx.stack.set_chaos(fail_rate=0.5)
    ctx.note("half of the tool calls fail: half of those UNAVAILABLE, half raise")


async def clear_tool_chaos(ctx: PhaseContext) -> None:
    await ctx.stack.set_chaos()
    before = ctx.extra.pop("before", {})
    after = await ctx.stack.chaos_stats()
    ctx.extra["tool_server"] = {
        key: after.get(key, 0) - before.get(key, 0)
        for key in ("calls", "hung", "unavailable", "raised")
    }


def model_faults(rate: float, *faults: dict[str, Any]) -> Chaos:
    """Give ``rate`` of the model requests one of ``faults`` (in turn), through the
    simulator's fault queue: every quarter second, as many faults as that share of the
    requests the simulator saw in the last quarter."""

    async def inject(ctx: PhaseContext) -> None:
        stats = await ctx.stack.sim_control("GET", "/stats")
        ctx.extra["sim_before"] = stats["by_status"]
        seen = stats["requests"]
        kinds = ", ".join(_fault_name(f) for f in faults)
        ctx.note(f"{rate:.0%} of model requests get: {kinds}")
        queued = 0
        while ctx.elapsed() < ctx.seconds - FEED_INTERVAL_S:
            await asyncio.sleep(FEED_INTERVAL_S)
            now = (await ctx.stack.sim_control("GET", "/stats"))["requests"]
            count = round(rate * (now - seen))
            seen = now
            if count:
                batch = [faults[(queued + i) % len(faults)] for i in range(count)]
                await ctx.stack.sim_control("POST", "/faults", {"faults": batch})
                queued += count
        ctx.extra["faults_queued"] = queued

    return inject


async def clear_model_faults(ctx: PhaseContext) -> None:
    cleared = await ctx.stack.sim_control("DELETE", "/faults")
    ctx.extra["faults_unused"] = cleared["cleared"]
    before = ctx.extra.pop("sim_before", {})
    after = (await ctx.stack.sim_control("GET", "/stats"))["by_status"]
    ctx.extra["model_responses_by_status"] = {
        status: count - before.get(status, 0)
        for status, count in sorted(after.items())
        if count - before.get(status, 0)
    }


async def sigterm_sidecar(ctx: PhaseContext) -> None:
    await ctx.at(1 / 3)
    ctx.note("SIGTERM to the sidecar")
    code, drain = await ctx.stack.sigterm_sidecar()
    ctx.extra.update(exit_code=code, drain_s=round(drain, 2))
    ctx.note(f"the sidecar exited with code {code} after draining {drain:.1f} s")
    await asyncio.to_thread(ctx.stack.start_sidecar)
    ctx.load.generation += 1
    ctx.note("sidecar restarted on the same port and listening")
    await ctx.stack.ready()
    ctx.note("sidecar SERVING, and a run completes again")


def _fault_name(fault: dict[str, Any]) -> str:
    if fault["kind"] == "status":
        after = f" (retry-after {fault['retry_after']:g} s)" if fault.get("retry_after") else ""
        return f"HTTP {fault['status']}{after}"
    return str(fault["kind"]).replace("_", " ")


PHASES = (
    Phase("baseline", "no faults: the example shop tool server, the simulator at 50 ms"),
    Phase(
        "tool-kill",
        f"at 1/3 the tool server is killed with SIGKILL; {TOOL_DOWN_S:g} s later it is "
        "restarted on the same port",
        chaos=kill_tool_server,
    ),
    Phase(
        "tool-hang",
        "from 1/3 to 2/3 every tool call hangs (the chaos double; the sidecar's tool "
        "timeout is 5 s)",
        tools="chaos",
        chaos=hang_tool_server,
        cleanup=clear_tool_chaos,
    ),
    Phase(
        "tool-half-fail",
        "the whole phase, half of the tool calls fail: half of those with UNAVAILABLE "
        "(retried: the tools are idempotent), half by raising (an error result)",
        tools="chaos",
        chaos=fail_half_the_tool_calls,
        cleanup=clear_tool_chaos,
    ),
    Phase(
        "model-429",
        "20% of model requests answered 429 with retry-after 1 s",
        chaos=model_faults(0.2, {"kind": "status", "status": 429, "retry_after": 1}),
        cleanup=clear_model_faults,
    ),
    Phase(
        "model-500",
        "20% of model requests answered 500",
        chaos=model_faults(0.2, {"kind": "status", "status": 500}),
        cleanup=clear_model_faults,
    ),
    Phase(
        "model-hang",
        "5% of model requests hang, answering nothing (the sidecar gives a model request "
        "5 s, then retries)",
        chaos=model_faults(0.05, {"kind": "hang"}),
        cleanup=clear_model_faults,
    ),
    Phase(
        "model-malformed",
        "20% of model responses are broken tool calls: truncated JSON arguments, or "
        "Groq's 400 tool_use_failed, in turn",
        chaos=model_faults(0.2, {"kind": "malformed_arguments"}, {"kind": "tool_use_failed"}),
        cleanup=clear_model_faults,
    ),
    Phase(
        "sidecar-sigterm",
        "at 1/3 the sidecar gets SIGTERM (in-flight runs drain, new ones are refused); "
        "once it has exited it is restarted on the same port",
        chaos=sigterm_sidecar,
    ),
)
