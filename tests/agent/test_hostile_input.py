"""Hostile or broken input from the model and from callers, through real processes.

Whatever the model endpoint sends, a run ends with a result (never UNKNOWN, never stored
as cancelled) and the session stays readable, also after a restart; whatever a caller
sends, a bad field is INVALID_ARGUMENT naming it, and the sidecar keeps serving.
Property-based (hypothesis): ``make test`` runs a fixed, bounded set of examples,
``make fuzz`` many random ones.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentsidecar.errors import error_details
from agentsidecar.v1 import agent_pb2, agent_pb2_grpc
from sidecar.agent.limits import ID_PATTERN
from sidecar.testing import ServerProcess
from tests.llm.test_wire import CHUNK, COMPLETION
from tests.support.stack import scripted_toolserver, sidecar, sidecar_config, simulator

ATTEMPTS = 2  # the model retries a bad response once: every fault is queued for both


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile")


@pytest.fixture(scope="module")
def processes(workdir: Path) -> Iterator[dict[str, Any]]:
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(sim, [{"name": "scripted", "address": tools.address}])
        config["model"]["retry"] = {"max_attempts": ATTEMPTS, "initial_backoff": 0.0}
        yield {"sim": sim, "config": config}


@pytest.fixture(scope="module")
def stub(processes: dict[str, Any], workdir: Path) -> Iterator[agent_pb2_grpc.AgentServiceStub]:
    with sidecar(processes["config"], workdir) as side, grpc.insecure_channel(side.address) as ch:
        yield agent_pb2_grpc.AgentServiceStub(ch)


def control(sim: ServerProcess, path: str, body: Any = None) -> None:
    data = json.dumps(body).encode() if body is not None else b""
    request = urllib.request.Request(f"http://{sim.address}/sim{path}", data=data, method="POST")
    request.add_header("content-type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def session(stub: agent_pb2_grpc.AgentServiceStub) -> str:
    response = stub.CreateSession(agent_pb2.CreateSessionRequest(), timeout=10)
    return str(response.session.session_id)


def stored(stub: agent_pb2_grpc.AgentServiceStub, session_id: str) -> agent_pb2.Session:
    response = stub.GetSession(agent_pb2.GetSessionRequest(session_id=session_id), timeout=10)
    return response.session


def check_result(result: agent_pb2.RunResult) -> None:
    reason = agent_pb2.StopReason.Name(result.stop_reason)
    if result.stop_reason == agent_pb2.STOP_REASON_MODEL_ERROR:
        # One documented reason per class of failure, never the parser's own exception.
        assert result.error.code in ("model_bad_response", "model_stream_error"), result.error
        assert "Traceback" not in result.error.message
    else:
        assert reason in ("STOP_REASON_ANSWERED", "STOP_REASON_REFUSED", "STOP_REASON_MAX_STEPS")


@given(st.lists(CHUNK, min_size=1, max_size=5))
def test_any_streamed_answer_ends_the_run_with_a_result_that_is_stored_as_such(
    processes: dict[str, Any], stub: agent_pb2_grpc.AgentServiceStub, chunks: list[Any]
) -> None:
    frames = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
    control(processes["sim"], "/reset")
    control(
        processes["sim"], "/faults", {"faults": [{"kind": "raw", "frames": frames, "times": 4}]}
    )
    sid = session(stub)

    events = list(
        stub.StreamRun(agent_pb2.StreamRunRequest(session_id=sid, input="hello there"), timeout=20)
    )

    assert events[-1].WhichOneof("event") == "run_finished"
    result = events[-1].run_finished
    check_result(result)
    turns = stored(stub, sid).turns
    assert [t.stop_reason for t in turns] == [result.stop_reason]  # never CANCELLED


@given(COMPLETION)
def test_any_unary_answer_ends_the_run_with_a_result_that_is_stored_as_such(
    processes: dict[str, Any], stub: agent_pb2_grpc.AgentServiceStub, body: Any
) -> None:
    control(processes["sim"], "/reset")
    control(
        processes["sim"],
        "/faults",
        {"faults": [{"kind": "raw", "body": json.dumps(body), "times": 4}]},
    )
    sid = session(stub)

    response = stub.Run(agent_pb2.RunRequest(session_id=sid, input="hello there"), timeout=20)

    check_result(response.result)
    assert [t.stop_reason for t in stored(stub, sid).turns] == [response.result.stop_reason]


ODD_USAGE = [
    {"prompt_tokens": -1, "completion_tokens": 5},
    {"prompt_tokens": 12.5, "completion_tokens": "7"},
    {"prompt_tokens": 2**40, "prompt_tokens_details": {"cached_tokens": -3}},
]


def test_odd_model_responses_leave_every_session_readable_across_a_restart(
    processes: dict[str, Any], workdir: Path
) -> None:
    odd = [
        {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "usage": usage}
        for usage in ODD_USAGE
    ] + [
        {"choices": [{"message": {"content": [{"type": "text", "text": "in parts"}]}}]},
        {"choices": [{"message": {"content": ["a", {"x": 1}]}}]},  # a part that is not text
    ]
    sessions = []
    restart_dir = workdir / "restart"
    with (
        sidecar(processes["config"], restart_dir) as side,
        grpc.insecure_channel(side.address) as ch,
    ):
        first = agent_pb2_grpc.AgentServiceStub(ch)
        for body in odd:
            control(processes["sim"], "/reset")
            control(
                processes["sim"],
                "/faults",
                {"faults": [{"kind": "raw", "body": json.dumps(body), "times": ATTEMPTS}]},
            )
            sid = session(first)
            first.Run(agent_pb2.RunRequest(session_id=sid, input="hi"), timeout=20)
            sessions.append(sid)
    with (
        sidecar(processes["config"], restart_dir) as side,
        grpc.insecure_channel(side.address) as ch,
    ):
        again = agent_pb2_grpc.AgentServiceStub(ch)
        turns = [stored(again, sid).turns[0] for sid in sessions]
    assert [t.stop_reason for t in turns] == [agent_pb2.STOP_REASON_ANSWERED] * 4 + [
        agent_pb2.STOP_REASON_MODEL_ERROR
    ]
    assert all(t.usage.prompt_tokens == 0 for t in turns[:3])  # invalid counts count as 0
    assert turns[3].answer == "in parts"


def test_a_long_session_is_read_page_by_page_with_long_fields_cut(
    processes: dict[str, Any], stub: agent_pb2_grpc.AgentServiceStub
) -> None:
    control(processes["sim"], "/reset")
    sid = session(stub)
    long_input = "x" * 100_000
    for _ in range(3):
        stub.Run(agent_pb2.RunRequest(session_id=sid, input=long_input), timeout=20)

    first = stub.GetSession(agent_pb2.GetSessionRequest(session_id=sid, page_size=2), timeout=10)
    rest = stub.GetSession(
        agent_pb2.GetSessionRequest(session_id=sid, page_size=2, page_token=first.next_page_token),
        timeout=10,
    )

    assert (len(first.session.turns), len(rest.session.turns), rest.next_page_token) == (2, 1, "")
    assert first.total_turns == 3
    cut = first.session.turns[0].input
    assert len(cut) < len(long_input) and cut.endswith("more characters not shown]")
    with pytest.raises(grpc.RpcError) as info:
        stub.GetSession(
            agent_pb2.GetSessionRequest(session_id=session(stub), page_token=first.next_page_token),
            timeout=10,
        )
    assert error_details(info.value).violations[0][0] == "page_token"


IDS = st.one_of(
    st.from_regex(ID_PATTERN, fullmatch=True),
    st.text(max_size=200),
    st.text(alphabet="ab/\x00 \t.", max_size=10),
    st.just("x" * 5000),
)


@given(session_id=IDS)
def test_any_session_id_is_accepted_only_in_the_documented_syntax(
    stub: agent_pb2_grpc.AgentServiceStub, session_id: str
) -> None:
    valid = ID_PATTERN.fullmatch(session_id) is not None
    try:
        stub.CreateSession(agent_pb2.CreateSessionRequest(session_id=session_id), timeout=10)
        stub.GetSession(agent_pb2.GetSessionRequest(session_id=session_id), timeout=10)
        assert valid
    except grpc.RpcError as exc:
        details = error_details(exc)
        if valid:
            assert details.reason == "SESSION_EXISTS"  # an id an earlier example created
        else:
            assert (details.code, details.reason) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                "INVALID_REQUEST",
            )
            assert details.violations[0][0] == "session_id"


@given(
    text=st.one_of(st.text(max_size=30), st.sampled_from(["", " ", "\n\t ", "\u3000"])),
    mode=st.integers(min_value=-3, max_value=50),
)
def test_any_input_and_output_mode_get_a_result_or_a_named_violation(
    processes: dict[str, Any], stub: agent_pb2_grpc.AgentServiceStub, text: str, mode: int
) -> None:
    control(processes["sim"], "/reset")
    sid = session(stub)
    request = agent_pb2.StreamRunRequest(session_id=sid, input=text, output_mode=mode)  # type: ignore[arg-type]
    try:
        events = list(stub.StreamRun(request, timeout=20))
    except grpc.RpcError as exc:
        details = error_details(exc)
        assert (details.code, details.reason) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_REQUEST",
        )
        field = details.violations[0][0]
        assert field in ("input", "output_mode")
        assert field != "input" or not text.strip()
        assert field != "output_mode" or mode not in (0, 1, 2)
        return
    assert text.strip() and mode in (0, 1, 2)
    assert events[-1].WhichOneof("event") == "run_finished"


@pytest.mark.parametrize("retry_after", ["nan", "inf", "-1", "soon", "1e400"])
def test_an_unusable_retry_after_is_ignored_and_the_run_ends_with_its_error(
    processes: dict[str, Any], stub: agent_pb2_grpc.AgentServiceStub, retry_after: str
) -> None:
    control(processes["sim"], "/reset")
    body = json.dumps({"error": {"message": "slow down", "type": "rate_limit"}})
    fault = {"kind": "raw", "status": 429, "body": body, "headers": {"retry-after": retry_after}}
    control(processes["sim"], "/faults", {"faults": [{**fault, "times": ATTEMPTS}]})
    sid = session(stub)

    result = stub.Run(agent_pb2.RunRequest(session_id=sid, input="hi"), timeout=20).result

    assert result.stop_reason == agent_pb2.STOP_REASON_MODEL_ERROR
    assert result.error.code == "model_rate_limited"
    assert [t.stop_reason for t in stored(stub, sid).turns] == [result.stop_reason]
