"""Limits: a slow reader costs bounded memory; runs and sessions have a ceiling."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentsidecar.client import AgentClient
from agentsidecar.errors import error_details
from agentsidecar.v1 import agent_pb2
from sidecar import testing
from sidecar.api.stream import StreamSink
from sidecar.types import ToolCallStatus, ToolOutcome
from tests.support.stack import (
    TEST_MODELS,
    SimControl,
    eventually,
    run_events,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
)

BIG_ANSWER_MB = 40
READERS = 4


def big_answer(megabytes: int) -> dict[str, object]:
    """A raw fault streaming ``megabytes`` of answer text, 100 kB per chunk."""
    chunk = json.dumps({"choices": [{"delta": {"content": "x" * 100_000}}]})
    return {
        "kind": "raw",
        "frames": [f"data: {chunk}\n\n"],
        "repeat": megabytes * 10,
        "then": [
            'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n',
            "data: [DONE]\n\n",
        ],
    }


async def test_callers_that_never_read_a_huge_answer_cost_bounded_memory(tmp_path: Path) -> None:
    with simulator() as sim:
        config = sidecar_config(sim, [])
        config["server"] = {"port": 0, "stream_buffer_bytes": 2 * 1024 * 1024}
        with sidecar(config, tmp_path) as side:
            control = SimControl(sim.address)
            await control.faults({**big_answer(BIG_ANSWER_MB), "times": READERS})
            async with AgentClient(side.address) as client:
                await client.wait_ready(10)
                before = side.current_rss_mib()
                sessions = [(await client.create_session()).session_id for _ in range(READERS)]
                streams = [
                    client.stub.StreamRun(
                        agent_pb2.StreamRunRequest(session_id=s, input="tell me everything"),
                        timeout=60,
                    )
                    for s in sessions
                ]
                for stream in streams:
                    await stream.read()  # run_started; then nobody reads

                async def all_cancelled() -> bool:
                    turns = [(await client.get_session(s)).turns for s in sessions]
                    return all(
                        t and t[0].stop_reason == agent_pb2.STOP_REASON_CANCELLED for t in turns
                    )

                await eventually(all_cancelled, timeout=60)
                grown = side.rss_mib() - before
                reasons = []
                for stream in streams:
                    with pytest.raises(grpc.aio.AioRpcError) as ended:
                        while True:
                            await stream.read()
                    reasons.append(error_details(ended.value).reason)
                await client.wait_ready(5)  # still serving
    assert reasons == ["STREAM_BACKLOG"] * READERS
    assert grown < 120, f"grew {grown:.0f} MiB for {READERS} readers of {BIG_ANSWER_MB} MB each"


async def test_runs_beyond_the_limit_are_refused_with_a_retry_delay(tmp_path: Path) -> None:
    with testing.simulator(
        scenario=testing.SCENARIO, models=TEST_MODELS
    ) as sim:  # "slow answer": 3 s
        config = sidecar_config(sim, [])
        config["server"] = {"port": 0, "max_concurrent_runs": 2}
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                await client.wait_ready(10)
                sessions = [(await client.create_session()).session_id for _ in range(3)]
                slow = [
                    client.stub.StreamRun(
                        agent_pb2.StreamRunRequest(session_id=s, input="slow answer"), timeout=30
                    )
                    for s in sessions[:2]
                ]
                for stream in slow:
                    await stream.read()  # both running
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await client.run(sessions[2], "hi")
                for stream in slow:
                    stream.cancel()
    details = error_details(refused.value)
    assert (details.code, details.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "OVERLOADED")
    assert details.retry_delay is not None and details.retry_delay > 0


async def test_sessions_beyond_the_limit_are_refused(tmp_path: Path) -> None:
    with simulator() as sim:
        config = sidecar_config(sim, [], sessions={"store": "memory", "max_sessions": 3})
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                for _ in range(3):
                    await client.create_session()
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await client.create_session()
                created = await asyncio.gather(
                    *(client.create_session() for _ in range(3)), return_exceptions=True
                )
    details = error_details(refused.value)
    assert (details.code, details.reason) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "TOO_MANY_SESSIONS",
    )
    assert all(isinstance(c, grpc.aio.AioRpcError) for c in created)


def _text_answer(text: str, pieces: int) -> dict[str, object]:
    """A raw fault streaming ``text`` as an answer, in ``pieces`` deltas at once."""
    size = -(-len(text) // pieces)
    frames = [
        "data: " + json.dumps({"choices": [{"delta": {"content": text[i : i + size]}}]}) + "\n\n"
        for i in range(0, len(text), size)
    ]
    frames += [
        'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n',
        "data: [DONE]\n\n",
    ]
    return {"kind": "raw", "frames": frames}


@pytest.mark.parametrize("pieces", [1, 700])
async def test_a_reader_that_keeps_up_gets_an_answer_larger_than_its_stream_buffer(
    tmp_path: Path, pieces: int
) -> None:
    # 210 kB at the smallest buffer (64 KiB), in one delta or in 700 sent at once: the
    # stream pauses the model while the caller catches up, and never cuts it off.
    answer = "".join(f"{i:06d} " for i in range(30_000))  # 210,000 characters
    with simulator() as sim:
        config = sidecar_config(sim, [])
        config["server"] = {"port": 0, "stream_buffer_bytes": 64 * 1024}
        with sidecar(config, tmp_path) as side:
            await SimControl(sim.address).faults(_text_answer(answer, pieces))
            async with AgentClient(side.address) as client:
                session = await client.create_session()
                events = [e async for e in client.stream(session.session_id, "hi", timeout=30)]
    result = events[-1].run_finished
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    deltas = "".join(e.text_delta.text for e in events if e.HasField("text_delta"))
    assert deltas == result.answer == answer


@pytest.mark.parametrize("streamed", [True, False])
async def test_an_answer_larger_than_a_caller_can_rely_on_ends_the_run_with_a_reason(
    tmp_path: Path, streamed: bool
) -> None:
    # At server.max_message_bytes 1 MiB, an answer may take 512 KiB: a 600 kB one ends
    # the run MODEL_ERROR answer_too_large, delivered like any result; the sidecar serves on.
    answer = "y" * 600_000
    with simulator() as sim:
        config = sidecar_config(sim, [])
        config["server"] = {"port": 0, "max_message_bytes": 1024 * 1024}
        with sidecar(config, tmp_path) as side:
            fault = _text_answer(answer, 6)
            if not streamed:
                body = {
                    "id": "c",
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": answer},
                        }
                    ],
                }
                fault = {"kind": "raw", "body": json.dumps(body)}
            await SimControl(sim.address).faults(fault)
            async with AgentClient(side.address) as client:
                session = await client.create_session()
                if streamed:
                    events = [e async for e in client.stream(session.session_id, "hi")]
                    result = events[-1].run_finished
                else:
                    result = (await client.run(session.session_id, "hi", timeout=30)).result
                assert result.stop_reason == agent_pb2.STOP_REASON_MODEL_ERROR
                assert result.error.code == "answer_too_large" and not result.answer
                again = await client.run(session.session_id, "hello", timeout=30)
                assert again.result.stop_reason == agent_pb2.STOP_REASON_ANSWERED


async def test_tool_text_beyond_what_a_caller_can_rely_on_is_cut_where_it_enters(
    tmp_path: Path,
) -> None:
    # At 1 MiB messages a tool call's arguments or result may take 256 KiB: a 600 kB
    # result is cut with a marker, 300 kB of arguments never reach the tool.
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            profiles={"default": {"context": {"tool_result_max_chars": None}}},
        )
        config["server"] = {"port": 0, "max_message_bytes": 1024 * 1024}
        calls = [
            {"id": "big", "name": "big_read", "arguments": {"tag": "b", "size": 600_000}},
            {
                "id": "huge-args",
                "name": "slow_read",
                "arguments": json.dumps({"tag": "t" * 300_000, "ms": 1}),
            },
        ]
        with sidecar(config, tmp_path) as side:
            chunk = {
                "choices": [
                    {
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": i,
                                    "id": c["id"],
                                    "type": "function",
                                    "function": {
                                        "name": c["name"],
                                        "arguments": c["arguments"]
                                        if isinstance(c["arguments"], str)
                                        else json.dumps(c["arguments"]),
                                    },
                                }
                                for i, c in enumerate(calls)
                            ]
                        },
                        "finish_reason": "tool_calls",
                    }
                ]
            }
            frames = [f"data: {json.dumps(chunk)}\n\n", "data: [DONE]\n\n"]
            await SimControl(sim.address).faults({"kind": "raw", "frames": frames})
            async with AgentClient(side.address) as client:
                session = await client.create_session()
                events = [e async for e in client.stream(session.session_id, "hi", timeout=30)]
    finished = {
        e.tool_call_finished.tool_name: e.tool_call_finished
        for e in events
        if e.HasField("tool_call_finished")
    }
    big = finished["big_read"]
    assert big.status == agent_pb2.TOOL_CALL_STATUS_OK
    assert len(big.content.encode()) <= 256 * 1024 and "more bytes cut" in big.content
    refused = finished["slow_read"]
    assert refused.status == agent_pb2.TOOL_CALL_STATUS_ERROR and refused.attempts == 0
    assert "at most 262144 are passed to a tool" in refused.content
    assert events[-1].run_finished.stop_reason == agent_pb2.STOP_REASON_ANSWERED


def _waiting_bytes(sink: StreamSink) -> int:
    """Bytes of the events queued for the caller, counted from the messages themselves."""
    entries = list(sink._queue._queue)  # type: ignore[attr-defined]
    return sum(m.ByteSize() for m, _ in entries if m is not None)


def _take(sink: StreamSink) -> None:
    """The caller takes the next event."""
    message, size = sink._queue.get_nowait()
    assert message is not None
    sink._taken(size)


@pytest.mark.property
@given(
    sizes=st.lists(st.integers(1, 300_000), min_size=1, max_size=120),
    limit=st.integers(64 * 1024, 2 * 1024 * 1024),
)
def test_a_reader_that_takes_nothing_holds_at_most_twice_the_buffer_in_bytes(
    sizes: list[int], limit: int
) -> None:
    # What a slow reader costs is bounded in bytes: twice the buffer, or one event alone
    # (a reader that keeps up takes any one event, however large).
    stopped: list[bool] = []
    sink = StreamSink("run", limit, on_backlog=lambda: stopped.append(True))
    largest = 0
    for i, size in enumerate(sizes):
        outcome = ToolOutcome(
            call_id=f"c{i}",
            tool_name="t",
            status=ToolCallStatus.OK,
            content="x" * size,
            start=0.0,
            duration=0.0,
        )
        sink.tool_call_finished(1, outcome)
        waiting = _waiting_bytes(sink)
        largest = max(largest, waiting if sink._queue.qsize() == 1 else 0)
        assert waiting <= max(2 * limit, largest)
        if stopped:
            assert sink.backlogged and waiting == 0  # the memory is freed at once
            break
    if not stopped:
        assert _waiting_bytes(sink) == sink.queued


async def test_the_models_text_waits_for_a_reader_that_falls_behind() -> None:
    stopped: list[bool] = []
    limit = 64 * 1024
    sink = StreamSink("run", limit, on_backlog=lambda: stopped.append(True))
    while sink.queued <= limit:
        assert sink.backlog() is None
        sink.text_delta(1, "z" * 4096)
    behind = sink.backlog()
    assert behind is not None and _waiting_bytes(sink) <= limit + 4096 + 64
    waiting = asyncio.ensure_future(behind)
    await asyncio.sleep(0)
    assert not waiting.done()
    while _waiting_bytes(sink) > limit // 2:  # the reader catches up
        _take(sink)
    async with asyncio.timeout(1):
        await waiting
    assert not stopped and sink.backlog() is None


async def test_callers_that_leave_within_milliseconds_leave_no_traceback(tmp_path: Path) -> None:
    # Deadlines of a few milliseconds end streams at every point of a run, the handler's
    # very last message included: a caller gone is no error of the sidecar's.
    log = tmp_path / "sidecar.log"
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(sim, [{"name": "scripted", "address": tools.address}])
        with log.open("wb") as stderr, sidecar(config, tmp_path, stderr=stderr) as side:
            async with AgentClient(side.address) as client:
                await client.wait_ready(20)
                sessions = [(await client.create_session()).session_id for _ in range(30)]

                async def leave(session: str) -> None:
                    for i in range(12):
                        request = agent_pb2.StreamRunRequest(session_id=session, input="hello")
                        call = client.stub.StreamRun(request, timeout=0.004 + i * 0.004)
                        with contextlib.suppress(grpc.aio.AioRpcError):
                            async for _ in call:
                                pass

                await asyncio.gather(*(leave(s) for s in sessions))
                # And it goes on serving.
                _, result = await run_events(client, "hello")
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    logged = log.read_text()
    assert "Traceback" not in logged and "ExecuteBatchError" not in logged
