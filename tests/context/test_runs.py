"""The context window through the real sidecar: a 50-turn session, trimming, memory.

Simulator, scripted tool server and sidecar are real processes; what the model was sent
is read back from the simulator.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar.context.memory import INSTRUCTIONS
from sidecar.context.window import MEMORY_PREFIX
from sidecar.testing import ServerProcess
from tests.support.stack import (
    SimControl,
    eventually,
    finished_calls,
    run_events,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
)

BUDGET = 4_000
WINDOWED = {
    "system_prompt": "You are the windowed test agent.",
    "context": {
        "max_tokens": BUDGET,
        "keep_recent_turns": 2,
        "old_tool_result_chars": 200,
        "drop_batch_turns": 4,
        "tool_result_max_chars": 2_000,
    },
}
REMEMBERING = {
    "system_prompt": "You are the remembering test agent.",
    "context": {**WINDOWED["context"], "memory": True},
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            profiles={"default": {}, "windowed": WINDOWED, "remembering": REMEMBERING},
        )
        with sidecar(config, tmp_path_factory.mktemp("context")) as side:
            yield {"sim": sim, "sidecar": side}


@pytest.fixture
def sim(stack: dict[str, ServerProcess]) -> SimControl:
    return SimControl(stack["sim"].address)


def _last_step_prompt_tokens(result: agent_pb2.RunResult) -> int:
    calls = [s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_MODEL_CALL]
    return int(calls[-1].model_call.usage.prompt_tokens)


def _prefix(request: dict[str, Any]) -> bytes:
    """The bytes the provider's prompt cache keys on: tool schemas and system prompt."""
    return orjson.dumps([request["tools"], request["messages"][0]])


async def test_over_50_turns_the_prompt_stays_bounded_and_its_prefix_byte_identical(
    client: AgentClient, sim: SimControl
) -> None:
    session = await client.create_session("windowed")
    prompts = []
    prefixes = set()
    for i in range(50):
        response = await client.run(
            session.session_id, f"call big_read with tag=t{i} size=3000", timeout=30
        )
        assert response.result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
        prompts.append(_last_step_prompt_tokens(response.result))
        prefixes.add(_prefix((await sim.stats())["last_request"]))
    assert len(prefixes) == 1
    # Flat once the window is full: the budget, plus this turn's own (capped) tool result.
    assert max(prompts[10:]) <= BUDGET + 1_000
    assert max(prompts[40:]) <= max(prompts[10:20]) * 1.2

    sent = (await sim.stats())["last_request"]["messages"]
    users = [m["content"] for m in sent if m["role"] == "user"]
    assert users[-1] == "call big_read with tag=t49 size=3000"
    assert "call big_read with tag=t0 size=3000" not in users  # dropped long ago
    results = [m["content"] for m in sent if m["role"] == "tool"]
    # Older turns' results cut to 200 characters; the two recent turns' results whole
    # (each already capped at 2,000 when it entered the context); this turn's too.
    assert all(len(r) <= 200 and "…[trimmed " in r for r in results[:-3])
    assert all(1_900 <= len(r) <= 2_000 and "…[trimmed " in r for r in results[-3:])


async def test_without_a_window_the_prompt_grows_with_every_turn(client: AgentClient) -> None:
    session = await client.create_session("default")
    prompts = []
    for i in range(6):
        response = await client.run(
            session.session_id, f"call big_read with tag=g{i} size=3000", timeout=30
        )
        prompts.append(_last_step_prompt_tokens(response.result))
    assert prompts == sorted(prompts) and prompts[-1] > prompts[0] + 3_000


async def test_a_tool_result_keeps_only_the_fields_the_tool_declares(client: AgentClient) -> None:
    events, result = await run_events(client, "call cached_read with key=fields ms=1")
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    content = finished_calls(events)["cached_read"].content
    assert orjson.loads(content) == {"key": "fields", "value": "value of fields"}


async def test_dropped_turns_are_summarised_into_memory_which_follows_the_system_prompt(
    client: AgentClient, sim: SimControl
) -> None:
    session = await client.create_session("remembering")
    sid = session.session_id
    for i in range(12):
        await client.run(sid, f"call big_read with tag=m{i} size=3000", timeout=30)

    async def summarised() -> bool:
        return bool((await client.get_session(sid)).memory)

    await eventually(summarised)
    stored = await client.get_session(sid)
    assert stored.memory_turns > 0 and stored.memory_turns % 4 == 0
    recent = (await sim.stats())["recent_requests"]
    summaries = [r for r in recent if r["messages"][0]["content"].startswith(INSTRUCTIONS[:40])]
    assert summaries and not summaries[0].get("tools")  # one plain model call, no tools
    assert "call big_read with tag=m0 size=3000" in summaries[0]["messages"][1]["content"]

    await client.run(sid, "hello there", timeout=30)
    recent = (await sim.stats())["recent_requests"]
    turn = next(
        r
        for r in reversed(recent)
        if r["messages"][0]
        == {
            "role": "system",
            "content": REMEMBERING["system_prompt"],
        }
    )
    assert turn["messages"][1] == {"role": "system", "content": MEMORY_PREFIX + stored.memory}
    users = [m["content"] for m in turn["messages"] if m["role"] == "user"]
    # The summarised turns are carried by the memory, not sent again.
    assert users[0] == f"call big_read with tag=m{stored.memory_turns} size=3000"
    assert users[-1] == "hello there"


CJK = "请把订单二零二五零一零一的状态和包裹位置告诉我\uff0c谢谢\u3002" * 12  # ~350 characters


async def test_a_session_in_chinese_stays_under_the_models_limit_once_calibrated(
    tmp_path: Path,
) -> None:
    # The estimate (about 4 bytes a token) counts a Chinese character, 3 bytes, as 0.75
    # tokens; the provider counts about one. Calibrated by the provider's counts, the
    # window keeps what the provider sees under the budget.
    budget = 3000
    with simulator() as sim:
        config = sidecar_config(
            sim,
            [],
            profiles={"default": {"context": {"max_tokens": budget, "keep_recent_turns": 1}}},
        )
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                await client.wait_ready(10)
                session = await client.create_session()
                for _ in range(12):
                    await client.run(session.session_id, CJK)
                stored = await client.get_session(session.session_id)
    prompts = [t.usage.prompt_tokens for t in stored.turns]
    assert max(prompts[:3]) < budget  # the first turns fit anyway
    assert all(p <= budget * 1.15 for p in prompts[3:]), prompts  # never far over
    assert prompts[-1] > budget / 2  # and the window still carries history
