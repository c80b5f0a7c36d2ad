"""The README's main job, as a newcomer runs it: the demo, end to end."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentsidecar.client import AgentClient
from sidecar import testing
from sidecar.commands import demo
from sidecar.commands.demo import format_answer
from sidecar.testing import start_process
from tests.support import ROOT

SCENARIO = "What is the status of order 20250101?"


def test_the_demo_answers_both_scenarios_with_their_tool_calls() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sidecar", "demo", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "GROQ_API_KEY": ""},
    )
    assert proc.returncode == 0, proc.stderr
    founding, presales = (json.loads(line) for line in proc.stdout.splitlines())
    for result, calls in ((founding, 2), (presales, 3)):
        assert result["stopReason"] == "STOP_REASON_ANSWERED"
        assert result["toolCalls"] == calls
        assert result["answer"].startswith("[simulated]")
    assert "20250101" in founding["answer"]
    for result in (founding, presales):  # Groq's prices ship with the sidecar: no config
        cost = result["cost"]
        assert cost["simulated"] is True and cost["pricedAs"] == "openai/gpt-oss-120b"
        assert cost["totalUsd"] > 0
    stages = presales["timeline"]["stages"]
    tools = [s["name"] for s in stages if s["kind"] == "STAGE_KIND_TOOL_CALL"]
    assert sorted(tools) == ["check_inventory", "get_discount", "get_price"]


def test_the_llm_sim_command_serves_the_simulator() -> None:
    proc = start_process(["-m", "sidecar", "llm-sim", "--port", "0"])
    try:
        assert proc.port > 0
    finally:
        assert proc.stop() == 0


# -- what the demo prints, as a newcomer reads it --------------------------------------------

FOUNDING_ANSWER = (
    "[simulated] 2 tool results:\n"
    '- get_order_status: {"order_id":"20250101","status":"delivered","placed":"2025-01-01",'
    '"items":[{"sku":"SKU-GREEN-CHAIR","quantity":2},{"sku":"SKU-TEA-SET","quantity":1},'
    '{"sku":"SKU-DESK-FAN","quantity":3}]} (left out: carrier, source)\n'
    '- track_parcel: {"order_id":"20250101","tracking_number":"FAKE1240261096",'
    '"carrier":"Sample Express","state":"out_for_delivery","location":"Testville hub",'
    '"eta":"2025-01-04","source":"example data (fake)"}'
)


def strings_of(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in [k, *strings_of(v)]]
    if isinstance(node, list):
        return [s for v in node for s in strings_of(v)]
    return [json.dumps(node)]


def test_a_text_answer_is_indented_and_wrapped_between_json_members_only() -> None:
    out = format_answer(FOUNDING_ANSWER, width=80)
    lines = out.splitlines()
    assert lines[0] == "    [simulated] 2 tool results:"
    assert all(line.startswith("    ") and len(line) <= 80 for line in lines), out
    # Every key and value of the quoted results is whole on one line: nothing is cut.
    for line in FOUNDING_ANSWER.splitlines()[1:]:
        start = line.index("{")
        document, _ = json.JSONDecoder().raw_decode(line, start)
        for piece in strings_of(document):
            assert any(piece.replace(",", ", ") in shown for shown in lines), piece
    assert "(left out: carrier, source)" in out
    # A line that holds no JSON wraps at spaces, never inside a word.
    words = "word " * 40 + "unbreakable-" * 10
    wrapped = format_answer(words, width=60).splitlines()
    assert len(wrapped) > 2 and "unbreakable-" * 10 in wrapped[-1]


def test_a_json_answer_is_pretty_printed() -> None:
    out = format_answer('{"answer": "Shipped.", "order": {"id": "20250101"}}')
    assert out.splitlines() == [
        "    {",
        '      "answer": "Shipped.",',
        '      "order": {',
        '        "id": "20250101"',
        "      }",
        "    }",
    ]


@pytest.fixture(scope="module")
def printed() -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "sidecar", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "GROQ_API_KEY": "", "COLUMNS": "100"},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_demo_prints_each_runs_cost_and_an_overhead_row_without_a_start(printed: str) -> None:
    blocks = printed.split("\n== ")[1:]
    assert len(blocks) == 2
    for block in blocks:
        lines = block.splitlines()
        (overhead,) = [line for line in lines if line.lstrip().startswith("overhead ")]
        # One number after the step: its duration, no start.
        assert re.fullmatch(r" {4}overhead +sidecar +0 +\d+\.\d  summed over the run", overhead)
        assert re.fullmatch(r" {4}cost \$\d+\.\d{6}: what these tokens would cost on .+", lines[-1])
        assert all(len(line) <= 100 for line in lines), block


def normalized(lines: list[str]) -> list[str]:
    """Lines with every number a 0 and runs of spaces one, so two runs' outputs compare."""
    return sorted(re.sub(r" +", " ", re.sub(r"\d+(\.\d+)?", "0", line)).strip() for line in lines)


def test_the_readmes_sample_is_what_the_demo_prints(printed: str) -> None:
    readme = (ROOT / "README.md").read_text()
    sample = re.search(r"```\n(== pre-sales:.*?)```", readme, re.S)
    assert sample is not None, "the README's sample of the demo's output"
    presales = "== " + printed.split("\n== ")[2]
    # The same lines, numbers aside: the events and stages, the answer, the cost line.
    assert normalized(sample[1].splitlines()) == normalized(presales.splitlines())


def test_a_failed_run_prints_its_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def scenario() -> bool:
        with testing.example_stack(
            tmp_path, simulator_flags=["--fault-rate-500", "1"], scenario=None
        ) as stack:
            async with AgentClient(stack.sidecar.address) as client:
                await client.wait_ready(30)
                return await demo._scenario(client, "founding", SCENARIO, False)

    assert asyncio.run(scenario()) is False
    out = capsys.readouterr().out
    assert "  run failed (model_error): model_unavailable, retryable\n" in out
    assert "    model endpoint answered 500: [simulated] chaos: internal error\n" in out
    assert "answer (" not in out  # no empty answer to read
    assert "failed: model_unavailable" in out  # the timeline's model row
