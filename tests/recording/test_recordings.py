"""Recordings: what is written (never a secret, never past its bound), the files they are
kept in, the recorded results a new run's tool calls get, and how runs compare."""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.agent.loop import AgentLoop
from sidecar.agent.replay.capture import RunCapture
from sidecar.agent.replay.recorder import Recorder
from sidecar.config import RecordingConfig, ReplayConfig, ReplayThresholds
from sidecar.errors import ModelError
from sidecar.llm.model import ModelRequest, ModelResponse
from sidecar.recording import (
    RecordedAnswers,
    RecordedTurn,
    RecordingFiles,
    compare_turn,
    read_lines,
    read_turns,
    same_answer,
    summarize,
)
from sidecar.redaction import Redactor
from sidecar.telemetry import Telemetry
from sidecar.tools.catalog import ToolCatalog
from sidecar.types import (
    Clock,
    RunOutcome,
    StopReason,
    ToolCall,
    ToolCallStatus,
    ToolOutcome,
    Usage,
)

KEY = st.text(alphabet=string.ascii_letters + string.digits + "-_.", min_size=12, max_size=40)
PATTERNED = st.from_regex(r"gsk_[A-Za-z0-9]{20,30}|tok-[0-9a-f]{8}", fullmatch=True)
TEXT = st.text(max_size=40)
FIELDS = (
    "input",
    "history",
    "system",
    "arguments",
    "result",
    "error",
    "answer",
    "argument_key",
)


def _recorder(directory: Path, redactor: Redactor, max_turn_bytes: int) -> Recorder:
    config = RecordingConfig(path=str(directory), max_turn_bytes=max_turn_bytes)
    loop = AgentLoop(ToolCatalog(), {})
    return Recorder(
        config,
        redact=redactor,
        loop=loop,
        telemetry=Telemetry(label="test"),
        replay=ReplayConfig(),
    )


def _captured(texts: dict[str, str]) -> dict[str, Any]:
    """A run's recording as the capture makes it, with ``texts`` in every field."""
    capture = RunCapture(Clock(), lambda name: None)
    system = {"role": "system", "content": texts["system"]}
    history = [{"role": "user", "content": texts["history"]}]
    user = {"role": "user", "content": texts["input"]}
    capture.history = 2
    arguments = json.dumps({texts["argument_key"]: texts["arguments"]})
    call = ToolCall("c1", "lookup", arguments)
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {}}}
    first = ModelRequest([system, *history, user], [tool], False, 10.0)
    capture.exchange(
        "m", first, 0.0, ModelResponse(texts["answer"], [call], "tool_calls", Usage()), None
    )
    capture.tool_finished(
        call,
        "server",
        ToolOutcome(
            call_id="c1",
            tool_name="lookup",
            status=ToolCallStatus.OK,
            content=texts["result"],
            start=0.0,
            duration=0.001,
        ),
    )
    assistant = {"role": "assistant", "content": None, "tool_calls": [arguments]}
    result = {"role": "tool", "tool_call_id": "c1", "content": texts["result"]}
    second = ModelRequest([system, *history, user, assistant, result], [tool], False, 10.0)
    capture.exchange(
        "m", second, 0.0, None, ModelError("model_bad", texts["error"], retryable=False)
    )
    outcome = RunOutcome(
        answer=texts["answer"],
        stop_reason=StopReason.ANSWERED,
        usage=Usage(),
        stages=[],
        total=0.01,
        steps=2,
        tool_calls=1,
    )
    return capture.document(
        run_id="r",
        session_id="s",
        profile="p",
        variant="",
        principal="",
        started_at=1.0,
        user_input=texts["input"],
        outcome=outcome,
    )


def _strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (k, *_strings(v))]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return []


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(
    key=KEY,
    patterned=PATTERNED,
    where=st.lists(st.sampled_from(FIELDS), min_size=1, max_size=4),
    around=st.tuples(TEXT, TEXT),
    small=st.booleans(),
)
def test_no_secret_is_ever_written_to_a_recording(
    tmp_path: Path,
    key: str,
    patterned: str,
    where: list[str],
    around: tuple[str, str],
    small: bool,
) -> None:
    redactor = Redactor([key], ["tok-[0-9a-f]{8}"])
    texts = {name: "plain text" for name in FIELDS}
    for i, name in enumerate(where):
        secret = key if i % 2 == 0 else patterned
        texts[name] = around[0] + secret + around[1] + " " * (3000 if small else 0)
    directory = tmp_path / f"rec-{len(list(tmp_path.iterdir()))}"
    recorder = _recorder(directory, redactor, 4096 if small else 256 * 1024)
    recorder.write(_captured(texts))
    recorder._files.close()
    (written,) = directory.iterdir()
    raw = written.read_bytes()
    assert key.encode() not in raw and patterned.encode() not in raw
    for text in _strings(orjson.loads(raw)):
        assert key not in text and patterned not in text
    assert len(raw) <= (4096 if small else 256 * 1024)
    (turn,) = read_turns([written])  # still a recording a reader takes
    assert turn.run_id == "r"


def test_a_turn_past_its_bound_is_cut_and_says_so(tmp_path: Path) -> None:
    texts = {name: "short" for name in FIELDS}
    texts["result"] = "r" * 50_000
    recorder = _recorder(tmp_path, Redactor(), 8192)
    recorder.write(_captured(texts))
    recorder._files.close()
    (written,) = tmp_path.iterdir()
    assert len(written.read_bytes()) <= 8192
    ((_, turn),) = list(read_lines(written))
    assert turn.document["truncated"] is True
    (call,) = turn.calls
    assert call.content.startswith("r" * 256) and "[cut " in call.content
    assert turn.input == "short"


def test_recording_files_roll_over_and_keep_at_most_max_files(tmp_path: Path) -> None:
    files = RecordingFiles(tmp_path, max_file_bytes=64 * 1024, max_files=2)
    line = b'{"x": "' + b"y" * 40_000 + b'"}\n'
    for _ in range(7):
        assert files.write(line)
    files.close()
    kept = sorted(tmp_path.glob("*.jsonl"))
    assert len(kept) == 2
    assert all(len(p.read_bytes()) <= 2 * len(line) for p in kept)


def test_recording_files_that_cannot_be_written_lose_the_turn_not_the_run(
    tmp_path: Path,
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    files = RecordingFiles(blocked / "recordings", max_file_bytes=65536, max_files=2)
    assert files.write(b"{}\n") is False


def _turn(calls: list[tuple[str, str, str]], answer: str = "ok", **more: Any) -> RecordedTurn:
    document = {
        "run_id": "r",
        "profile": "p",
        "input": "q",
        "answer": answer,
        "stop_reason": "ANSWERED",
        "duration": 1.0,
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        "tool_calls": [
            {
                "step": 1,
                "id": f"c{i}",
                "name": name,
                "arguments": arguments,
                "status": "OK",
                "content": content,
            }
            for i, (name, arguments, content) in enumerate(calls)
        ],
        **more,
    }
    return RecordedTurn(document, "test")


def test_recorded_results_answer_the_same_call_whatever_its_key_order() -> None:
    answers = RecordedAnswers(
        _turn([("get", '{"a": 1, "b": 2}', "first"), ("get", '{"a":1,"b":2}', "second")])
    )
    again = ToolCall("n1", "get", '{"b":2,"a":1}')
    assert answers.answer(again, 0.0).content == "first"
    assert answers.answer(again, 0.0).content == "second"
    assert answers.answer(again, 0.0).content == "second"  # then the last, again
    missed = answers.answer(ToolCall("n2", "get", '{"a": 3}'), 0.0)
    assert missed.status is ToolCallStatus.ERROR and missed.content.startswith("not run:")
    assert missed.call_id == "n2" and answers.missed == 1


def test_structured_answers_compare_by_value_or_by_the_fields_named() -> None:
    assert same_answer('{"a": 1, "b": [1]}', '{"b":[1],"a":1}', "structured")
    assert not same_answer('{"a": 1}', '{"a": 1}  ', "exact")
    assert same_answer(
        '{"o": {"s": "x"}, "t": 1}', '{"o": {"s": "x"}, "t": 2}', "structured", ["o.s"]
    )
    assert not same_answer('{"o": {"s": "x"}}', '{"o": {"s": "y"}}', "structured", ["o.s"])
    assert not same_answer("not json", "not json either", "structured")


def test_a_summary_fails_on_each_threshold_it_breaches() -> None:
    recorded = _turn([("get", "{}", "r")], cost={"total_usd": 1.0})
    slower = _turn(
        [("other", "{}", "r")],
        answer="no",
        stop_reason="MODEL_ERROR",
        duration=3.0,
        usage={"prompt_tokens": 30, "completion_tokens": 15},
        cost={"total_usd": 3.0},
    )
    comparison = compare_turn(recorded, slower)
    assert not comparison.same_tool_calls and comparison.new_failure
    fail = ReplayThresholds(
        min_same_answers=0.5, max_latency_ratio=2, max_token_ratio=2, max_cost_ratio=2
    )
    summary = summarize([comparison], fail)
    reasons = " ".join(summary.breaches)
    for threshold in (
        "min_same_tool_calls",
        "min_same_answers",
        "max_new_failures",
        "max_latency_ratio",
        "max_token_ratio",
        "max_cost_ratio",
    ):
        assert threshold in reasons
    assert summarize([compare_turn(recorded, recorded)], fail).passed


def test_a_recording_from_elsewhere_is_refused_naming_its_line(tmp_path: Path) -> None:
    path = tmp_path / "other.jsonl"
    path.write_text('{"format": "something-else", "version": 1}\n')
    from sidecar.errors import RecordingError

    with pytest.raises(RecordingError, match=r"other\.jsonl:1: not an agent-sidecar recording"):
        read_turns([path])


def test_a_reader_beside_a_writer_skips_the_line_still_being_written(tmp_path: Path) -> None:
    recorder = _recorder(tmp_path, Redactor(), 256 * 1024)
    recorder.write(_captured({name: "text" for name in FIELDS}))
    recorder._files.close()
    (written,) = tmp_path.iterdir()
    whole = written.read_bytes()
    with written.open("ab") as file:
        file.write(whole[: len(whole) // 2])  # a second turn, half written
    assert [t.run_id for t in read_turns([written])] == ["r"]


class _Judge:
    """A judging model that says what it is told to, or fails."""

    name = "judge"

    def __init__(self, says: str | None) -> None:
        self.says = says
        self.asked: list[ModelRequest] = []

    async def complete(self, request: ModelRequest, *_: Any) -> ModelResponse:
        self.asked.append(request)
        if self.says is None:
            raise ModelError("model_unreachable", "down", retryable=True)
        return ModelResponse(self.says, [], "stop", Usage())

    async def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("says", "verdict"),
    [("Same.", True), ("different", False), ("I cannot tell", None), (None, None)],
)
async def test_a_judge_gives_a_verdict_only_when_it_says_one(
    says: str | None, verdict: bool | None
) -> None:
    from sidecar.agent.replay.judge import judge

    model = _Judge(says)
    assert await judge(model, "where is it?", "in Paris", "Paris", timeout=5) is verdict
    (request,) = model.asked
    assert "Answer A:\nin Paris" in request.messages[1]["content"]
