"""A replay whose answers are compared by a judge model, through real processes.

A sidecar on the LLM simulator and the scripted tool server records two turns, each in a
session of its own. A candidate model (a second simulator) makes the same tool calls and
answers in other words: one answer means what the recorded one meant, the other does
not. ``agent-sidecar replay`` runs with ``replay.answers: judge`` and a third simulator
as the ``replay.judge`` model, scripted to read the request and both answers as the
judge sends them and to reply ``same`` or ``different``. The judge's verdicts decide the
answers' measure and, with ``replay.fail.min_same_answers``, the exit code.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentsidecar.client import AgentClient
from sidecar import testing
from sidecar.agent.replay.judge import JUDGE_PROMPT
from sidecar.testing import ServerProcess
from tests.support.stack import (
    MODEL,
    TEST_MODELS,
    SimControl,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
)

PRICES = {MODEL: {"prompt": 1.0, "completion": 2.0}}
JUDGE_MODEL = "judge-model"

# As recorded on the sidecar tests' scenario (tests/support/sidecar_scenario.yaml).
READS, RESERVATIONS = "two reads", "conflicting reservations"
READS_ANSWER, RESERVATIONS_ANSWER = "[simulated] done", "[simulated] reserved"

# The candidate: the recorded tool calls, other answers (the simulator adds its prefix).
REWORDED, WRONG = "[simulated] both reads are done", "[simulated] nothing could be reserved"
CANDIDATE_SCENARIO = [
    {
        "match": f"^{READS}$",
        "steps": [
            {
                "tool_calls": [
                    {"name": "slow_read", "arguments": {"tag": "x", "ms": 1}},
                    {"name": "slow_read", "arguments": {"tag": "y", "ms": 1}},
                ]
            },
            {"text": "both reads are done"},
        ],
    },
    {
        "match": f"^{RESERVATIONS}$",
        "steps": [
            {
                "tool_calls": [
                    {"name": "reserve", "arguments": {"sku": "A-1", "ms": 150}},
                    {"name": "reserve", "arguments": {"sku": "A-1", "ms": 150}},
                    {"name": "reserve", "arguments": {"sku": "B-2", "ms": 150}},
                ]
            },
            {"text": "nothing could be reserved"},
        ],
    },
]


def _judge_question(request: str, recorded: str, replayed: str) -> str:
    """The user message the judge is sent (``sidecar.agent.replay.judge``)."""
    return f"Request:\n{request}\n\nAnswer A:\n{recorded}\n\nAnswer B:\n{replayed}"


# The judge: its verdict for each question it is meant to be asked, matched whole; any
# other question is left to the simulator's planner (no verdict the test expects).
JUDGE_SCENARIO = [
    {
        "match": f"^{re.escape(_judge_question(READS, READS_ANSWER, REWORDED))}$",
        "steps": [{"text": "same"}],
    },
    {
        "match": f"^{re.escape(_judge_question(RESERVATIONS, RESERVATIONS_ANSWER, WRONG))}$",
        "steps": [{"text": "different"}],
    },
]


@pytest.fixture(scope="module")
def tools() -> Iterator[ServerProcess]:
    with scripted_toolserver() as server:
        yield server


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sidecar", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "GROQ_API_KEY": ""},
        check=False,
    )


def _write(data: Any, path: Path) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


async def _record(tools: ServerProcess, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """Each input in a session of its own on a recording sidecar; the recordings'
    directory and each input's session."""
    recordings = tmp_path / "recordings"
    with simulator() as sim:
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            profiles={"default": {"record": 1.0}},
            recording={"path": str(recordings)},
            prices=PRICES,
        )
        sessions = {}
        with sidecar(config, tmp_path / "live") as side:
            async with AgentClient(side.address) as client:
                for text, answer in ((READS, READS_ANSWER), (RESERVATIONS, RESERVATIONS_ANSWER)):
                    session = await client.create_session()
                    result = await client.run(session.session_id, text, timeout=20)
                    assert result.result.answer == answer
                    sessions[text] = session.session_id
    return recordings, sessions


def _replay(
    recording: Path, config: Path, report: Path, cwd: Path
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    replayed = _cli(
        "replay", str(recording), "--config", str(config), "--json", str(report), cwd=cwd
    )
    assert replayed.returncode in (0, 1), replayed.stdout + replayed.stderr
    return replayed, json.loads(report.read_text())


def _judge_questions(stats: dict[str, Any]) -> list[str]:
    """The questions the judge simulator was asked, checking each request's form."""
    questions = []
    for body in stats["recent_requests"]:
        assert body["model"] == JUDGE_MODEL
        assert not body.get("tools")
        system, user = body["messages"]
        assert system == {"role": "system", "content": JUDGE_PROMPT}
        assert user["role"] == "user"
        questions.append(user["content"])
    return questions


async def test_a_judge_model_decides_whether_replayed_answers_mean_the_recorded_ones(
    tools: ServerProcess, tmp_path: Path
) -> None:
    recordings, sessions = await _record(tools, tmp_path)
    exports = {}
    for text, session_id in sessions.items():
        exports[text] = tmp_path / f"{text.replace(' ', '-')}.jsonl"
        exported = _cli(
            "record", "export", "--dir", str(recordings), "--session", session_id,
            "-o", str(exports[text]), cwd=tmp_path,
        )  # fmt: skip
        assert exported.returncode == 0, exported.stderr
    candidate_scenario = _write(CANDIDATE_SCENARIO, tmp_path / "candidate-scenario.yaml")
    judge_scenario = _write(JUDGE_SCENARIO, tmp_path / "judge-scenario.yaml")

    with (
        testing.simulator(scenario=candidate_scenario, models=TEST_MODELS) as candidate,
        testing.simulator(scenario=judge_scenario, models=TEST_MODELS) as judge,
    ):
        judging = SimControl(judge.address)

        def config(name: str, **fail: float) -> Path:
            replay: dict[str, Any] = {
                "answers": "judge",
                "judge": {
                    "base_url": f"http://{judge.address}/openai/v1",
                    "model": JUDGE_MODEL,
                    "keyless": True,
                },
            }
            if fail:
                replay["fail"] = fail
            data = sidecar_config(
                candidate,
                [{"name": "scripted", "address": tools.address}],
                prices=PRICES,
                replay=replay,
            )
            return _write(data, tmp_path / name)

        judged = config("judged.yaml")

        # The reworded answer: the judge says it means the same; the replay passes.
        replayed, document = _replay(exports[READS], judged, tmp_path / "same.json", tmp_path)
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert "verdict: pass" in replayed.stdout
        (turn,) = document["turns"]
        assert turn["same_tool_calls"] is True and turn["same_answer"] is True
        assert document["summary"]["same_answers"] == 1.0
        assert _judge_questions(await judging.stats()) == [
            _judge_question(READS, READS_ANSWER, REWORDED)
        ]

        # Both turns: the judge says the second answer differs, and the report counts it.
        await judging.reset()
        replayed, document = _replay(recordings, judged, tmp_path / "both.json", tmp_path)
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert [t["input"] for t in document["turns"]] == [READS, RESERVATIONS]
        assert [t["same_tool_calls"] for t in document["turns"]] == [True, True]
        assert [t["same_answer"] for t in document["turns"]] == [True, False]
        assert document["summary"]["same_answers"] == 0.5
        assert "same answers: 50%" in replayed.stdout
        assert _judge_questions(await judging.stats()) == [
            _judge_question(READS, READS_ANSWER, REWORDED),
            _judge_question(RESERVATIONS, RESERVATIONS_ANSWER, WRONG),
        ]

        # The same replay, with same answers required in 90% of turns: it fails.
        strict = config("strict.yaml", min_same_answers=0.9)
        replayed, document = _replay(recordings, strict, tmp_path / "strict.json", tmp_path)
        assert replayed.returncode == 1, replayed.stdout + replayed.stderr
        assert "REGRESSIONS" in replayed.stdout and "verdict: FAIL" in replayed.stdout
        assert (
            "same answers in 50% of turns, below 90% (replay.fail.min_same_answers)"
            in replayed.stdout
        )
        assert document["summary"]["passed"] is False
        assert [t["same_answer"] for t in document["turns"]] == [True, False]
