"""``agent-sidecar demo``: the whole product end to end, on this machine.

Starts the example tool servers and the sidecar as separate processes (the sidecar uses
the built-in LLM simulator unless a model key is set), runs the founding scenario and the
pre-sales scenario through the Python client, prints each answer with its timeline, and
shuts everything down.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import textwrap
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


_KEEP = "\u00a0"
"""Stands for a space no line may break at, while an answer is wrapped."""


def _members(value: Any) -> str:
    """JSON on one line with a space after each comma: a line may break between the members
    of an object or an array, at any depth, never inside a key or a value (their spaces
    are ``_KEEP``)."""
    if isinstance(value, dict):
        parts = [_members(key) + ":" + _KEEP + _members(member) for key, member in value.items()]
        return "{" + ", ".join(parts) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_members(item) for item in value) + "]"
    return json.dumps(value, ensure_ascii=False).replace(" ", _KEEP)


def _with_members(line: str) -> str:
    """``line`` with its first JSON object or array, if any, laid out by :func:`_members`."""
    for start, char in enumerate(line):
        if char not in "{[":
            continue
        try:
            value, end = json.JSONDecoder().raw_decode(line, start)
        except ValueError:
            continue
        if isinstance(value, dict | list):
            return line[:start] + _members(value) + line[end:]
    return line


def format_answer(answer: str, width: int = 100) -> str:
    """An answer, indented under its heading and wrapped at ``width``.

    A JSON answer (a structured run's) is pretty-printed. In text, lines are wrapped at
    spaces, never inside a word, and a JSON object or array in a line (the simulator
    quotes tool results so) breaks between its members only: no value is ever split.
    """
    try:
        document = json.loads(answer)
    except ValueError:
        document = None
    if isinstance(document, dict | list):
        return textwrap.indent(json.dumps(document, indent=2, ensure_ascii=False), "    ")
    out = []
    for line in answer.splitlines() or [""]:
        wrapped = textwrap.fill(
            _with_members(line),
            width,
            initial_indent="    ",
            subsequent_indent="      ",
            break_long_words=False,
            break_on_hyphens=False,
        )
        out.append(wrapped.replace(_KEEP, " ") or "    ")
    return "\n".join(out)


def format_timeline(timeline: agent_pb2.Timeline) -> str:
    """A fixed-width table of a run's stages."""
    lines = [f"    {'stage':<14}{'name':<26}{'step':>4}{'start ms':>10}{'took ms':>9}  detail"]
    for stage in timeline.stages:
        kind = agent_pb2.StageKind.Name(stage.kind).removeprefix("STAGE_KIND_").lower()
        detail = ""
        start = f"{_ms(stage.start_offset):>10.1f}"
        if stage.HasField("model_call"):
            m = stage.model_call
            if m.error_code:
                detail = f"failed: {m.error_code}"
            else:
                if m.HasField("time_to_first_token"):
                    detail = f"ttft {_ms(m.time_to_first_token):.1f} ms, "
                detail += f"{m.usage.prompt_tokens}+{m.usage.completion_tokens} tokens"
                if m.usage.reasoning_tokens:
                    detail += f" ({m.usage.reasoning_tokens} reasoning)"
            if m.service_tier and m.service_tier != "on_demand":  # the default: said in full
                detail += f", {m.service_tier} tier"
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
        elif stage.kind == agent_pb2.STAGE_KIND_OVERHEAD:
            # A sum over the whole run, not an interval: it has no start.
            start = f"{'':>10}"
            detail = "summed over the run"
        lines.append(
            f"    {kind:<14}{stage.name[:25]:<26}{stage.step:>4}"
            f"{start}{_ms(stage.duration):>9.1f}  {detail}".rstrip()
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
        if result.HasField("error"):
            error = result.error
            retry = ", retryable" if error.retryable else ""
            print(f"  run failed ({reason.lower()}): {error.code}{retry}")
            print(format_answer(error.message, _width()))
        if result.answer or not result.HasField("error"):
            print(f"  answer ({reason.lower()}):")
            print(format_answer(result.answer, _width()))
        print(format_timeline(result.timeline))
        if result.HasField("cost"):
            cost = result.cost
            label = (
                f"what these tokens would cost on {cost.priced_as} (a simulated run)"
                if cost.simulated
                else cost.priced_as
            )
            print(f"    cost ${cost.total_usd:.6f}: {label}")
        elif result.unpriced_models:
            names = ", ".join(result.unpriced_models)
            print(f"    cost unpriced: no list price for {names}")
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


def _width() -> int:
    """The terminal's width, at most 100 columns (100 when it is no terminal)."""
    return min(100, shutil.get_terminal_size((100, 24)).columns)


def _write_config(config: dict[str, Any], directory: str) -> str:
    """Write the sidecar's config, its session store beside it; return the file's path."""
    config = {**config, "sessions": {"sqlite": {"path": str(Path(directory) / "sessions.db")}}}
    path = Path(directory) / "sidecar.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)
