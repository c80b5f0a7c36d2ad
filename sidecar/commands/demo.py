"""``agent-sidecar demo``: the whole product end to end, on this machine.

Starts the example tool servers and the sidecar as separate processes (the sidecar uses
the built-in LLM simulator unless a model key is set), runs the founding scenario and the
pre-sales scenario through the Python client, prints each answer with its timeline, and
shuts everything down.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

import yaml
from google.protobuf import json_format

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar import testing

SCENARIOS = (
    ("founding", "What is the status of order 20250101, and where is its parcel?"),
    ("pre-sales", "Is SKU X-100 in inventory, what is its price, and is there a discount?"),
)
# Simulated handler latency of each example server, in milliseconds.
TOOL_SERVERS = (("orders", 30), ("logistics", 20), ("shop", 10))


def _ms(duration: object) -> float:
    return duration.seconds * 1000 + duration.nanos / 1e6  # type: ignore[attr-defined, no-any-return]


def format_timeline(timeline: agent_pb2.Timeline) -> str:
    """A fixed-width table of a run's stages."""
    lines = [f"    {'stage':<14}{'name':<26}{'step':>4}{'start ms':>10}{'took ms':>9}  detail"]
    for stage in timeline.stages:
        kind = agent_pb2.StageKind.Name(stage.kind).removeprefix("STAGE_KIND_").lower()
        detail = ""
        if stage.HasField("model_call"):
            m = stage.model_call
            if m.error_code:
                detail = f"failed: {m.error_code}"
            else:
                if m.HasField("time_to_first_token"):
                    detail = f"ttft {_ms(m.time_to_first_token):.1f} ms, "
                detail += f"{m.usage.prompt_tokens}+{m.usage.completion_tokens} tokens"
            if m.attempts > 1:
                detail += f", {m.attempts} attempts"
        elif stage.HasField("tool_call"):
            t = stage.tool_call
            status = agent_pb2.ToolCallStatus.Name(t.status).removeprefix("TOOL_CALL_STATUS_")
            detail = status.lower()
            if t.HasField("handler_duration"):
                detail += f", handler {_ms(t.handler_duration):.1f} ms"
            if t.attempts > 1:
                detail += f", {t.attempts} attempts, backoff {_ms(t.retry_backoff):.1f} ms"
            if t.breaker_rejected:
                detail += ", refused by the breaker"
        lines.append(
            f"    {kind:<14}{stage.name[:25]:<26}{stage.step:>4}"
            f"{_ms(stage.start_offset):>10.1f}{_ms(stage.duration):>9.1f}  {detail}"
        )
    lines.append(f"    total {_ms(timeline.total):.1f} ms")
    return "\n".join(lines)


async def _scenario(client: AgentClient, title: str, text: str, json_output: bool) -> bool:
    session = await client.create_session("default")
    if not json_output:
        print(f"\n== {title}: {text}")
    result: agent_pb2.RunResult | None = None
    async for event in client.stream(session.session_id, text, timeout=60):
        kind = event.WhichOneof("event")
        if kind == "run_finished":
            result = event.run_finished
        elif json_output:
            continue
        elif kind == "tool_call_started":
            e = event.tool_call_started
            print(f"  -> {e.tool_name}({e.arguments})")
        elif kind == "tool_call_finished":
            f = event.tool_call_finished
            status = agent_pb2.ToolCallStatus.Name(f.status).removeprefix("TOOL_CALL_STATUS_")
            print(f"  <- {f.tool_name}: {status.lower()} in {_ms(f.duration):.1f} ms")
    if result is None:
        print(f"{title}: the run ended without a result", file=sys.stderr)
        return False
    if json_output:
        print(json_format.MessageToJson(result, indent=None))
    else:
        reason = agent_pb2.StopReason.Name(result.stop_reason).removeprefix("STOP_REASON_")
        print(f"  answer ({reason.lower()}): {result.answer}")
        print(format_timeline(result.timeline))
        if result.HasField("cost"):
            cost = result.cost
            label = (
                f"what these tokens would cost on {cost.priced_as} (a simulated run)"
                if cost.simulated
                else cost.priced_as
            )
            print(f"    cost ${cost.total_usd:.6f}: {label}")
    return result.stop_reason == agent_pb2.STOP_REASON_ANSWERED


async def run_demo(*, json_output: bool = False) -> int:
    """Run the demo; return a process exit code."""
    # The processes' logs go to a file, named when something fails.
    with tempfile.NamedTemporaryFile(prefix="agent-sidecar-demo-", suffix=".log") as log:
        try:
            return await _demo(log, json_output)
        except Exception:
            log.seek(0)
            print(f"demo failed; process logs follow:\n{log.read().decode()}", file=sys.stderr)
            raise


async def _demo(log: IO[bytes], json_output: bool) -> int:
    with contextlib.ExitStack() as stack:
        servers = {}
        for name, latency in TOOL_SERVERS:
            server = testing.tool_server(
                f"toolservers.examples.{name}", "--latency-ms", str(latency), stderr=log
            )
            servers[name] = stack.enter_context(server).address
        config_dir = stack.enter_context(tempfile.TemporaryDirectory())
        config = {
            "server": {"port": 0},
            "tool_servers": [{"name": n, "address": a} for n, a in servers.items()],
        }
        # The model key, if any, reaches the sidecar from this process's environment.
        side = stack.enter_context(
            testing.start_process(
                ["-m", "sidecar", "serve", "--config", _write_config(config, config_dir)],
                stderr=log,
            )
        )
        if not json_output:
            model = "Groq" if os.environ.get("GROQ_API_KEY") else "the built-in LLM simulator"
            print(
                f"sidecar at {side.address}, model: {model}; tool servers: "
                + ", ".join(f"{n} at {a}" for n, a in servers.items())
            )
        async with AgentClient(side.address) as client:
            await client.wait_ready(30)
            ok = True
            for title, text in SCENARIOS:
                ok = await _scenario(client, title, text, json_output) and ok
    return 0 if ok else 1


def _write_config(config: dict[str, Any], directory: str) -> str:
    """Write the sidecar's config, its session store beside it; return the file's path."""
    config = {**config, "sessions": {"sqlite": {"path": str(Path(directory) / "sessions.db")}}}
    path = Path(directory) / "sidecar.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)
