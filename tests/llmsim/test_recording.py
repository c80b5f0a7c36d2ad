"""The simulator serving a recording's model side: each recorded input answered, step by
step, as the model answered it, over real HTTP with the official ``openai`` client."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from llmsim import LLMSimulator, Scenario, ScenarioError, SimulatorOptions
from sidecar.testing import start_process

pytestmark = pytest.mark.timeout(30)

TOOL = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
}


def _turn(text: str, steps: list[dict[str, Any]], **more: Any) -> bytes:
    exchanges = [
        {"step": i + 1, "response": response, "error": None} for i, response in enumerate(steps)
    ]
    document = {
        "format": "agent-sidecar-recording",
        "version": 1,
        "input": text,
        "exchanges": exchanges,
        **more,
    }
    return orjson.dumps(document) + b"\n"


def _recording(path: Path) -> Path:
    path.write_bytes(
        _turn(
            "where is order 7?",
            [
                {"text": "", "tool_calls": [{"id": "c", "name": "lookup", "arguments": '{"o":7}'}]},
                {"text": "Order 7 ships tomorrow.", "tool_calls": []},
            ],
        )
        + _turn("where is order 7?", [{"text": "a later turn, not served", "tool_calls": []}])
        + _turn("hi", [{"text": "shadow", "tool_calls": []}], shadow_of="r1")
    )
    return path


async def test_a_recorded_turn_is_answered_as_the_model_answered_it(tmp_path: Path) -> None:
    scenario = Scenario.from_recording(_recording(tmp_path / "r.jsonl"))
    async with LLMSimulator(SimulatorOptions(scenario=scenario)) as sim:
        client = openai.AsyncOpenAI(base_url=sim.base_url, api_key="sim")
        user = {"role": "user", "content": "where is order 7?"}
        first = await client.chat.completions.create(
            model="llm-simulator",
            messages=[user],
            tools=[TOOL],  # type: ignore[list-item]
        )
        (call,) = first.choices[0].message.tool_calls or []
        assert call.function.name == "lookup" and call.function.arguments == '{"o":7}'
        messages: list[Any] = [
            user,
            {"role": "assistant", "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "tomorrow"},
        ]
        second = await client.chat.completions.create(model="llm-simulator", messages=messages)
        assert second.choices[0].message.content == "Order 7 ships tomorrow."
        assert second.system_fingerprint == "agent-sidecar-llm-simulator"
        # An input no turn had (and a shadow run's): planned as usual.
        other = await client.chat.completions.create(
            model="llm-simulator", messages=[{"role": "user", "content": "hi"}]
        )
        assert (other.choices[0].message.content or "").startswith("[simulated]")
        await client.close()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"{oops\n", "not JSON"),
        (b'{"format": "other"}\n', "not an agent-sidecar recording"),
        (_turn("x", [], version=2), "recording version 2; the simulator reads up to 1"),
    ],
)
def test_a_recording_the_simulator_cannot_read_stops_it_at_start(
    tmp_path: Path, line: bytes, message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(line)
    with pytest.raises(ScenarioError, match=message):
        Scenario.from_recording(path)
    started = subprocess.run(
        [sys.executable, "-m", "llmsim", "--port", "0", "--recording", str(path)],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert started.returncode != 0 and message in started.stderr
    assert "Traceback" not in started.stderr


def test_the_simulator_takes_a_recording_on_its_command_line(tmp_path: Path) -> None:
    process = start_process(
        ["-m", "llmsim", "--port", "0", "--recording", str(_recording(tmp_path / "r.jsonl"))]
    )
    assert process.stop() == 0
