"""Speculative prefetch: the first step's likely calls start while the model thinks.

Through real processes: the LLM simulator (its planner calls the tool the text names, with
the arguments the text assigns, after 150 ms of "thinking"), the scripted tool server and
a sidecar whose ``spec`` profile learns every 0.3 s from its stored turns. ``call slow_read
tag=S-7 ms=1`` teaches it that a run whose input has a tag after "tag" and a number after
"ms" asks for ``slow_read`` with them.
"""

from __future__ import annotations

import itertools
import random
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar.agent.speculation.prediction import Predictor, tokens
from sidecar.config import parse_config
from sidecar.errors import ConfigError
from sidecar.testing import ServerProcess
from sidecar.types import StopReason, Turn
from tests.support.stack import (
    eventually,
    ms,
    scrape,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
    tool_stats,
)

SPECULATE = {
    "enabled": True,
    "min_support": 5,
    "min_precision": 0.9,
    "relearn_interval": 0.3,
    "history_turns": 200,
}
_tags = itertools.count()


def _tag(kind: str) -> str:
    return f"{kind}-{next(_tags)}{random.randrange(10**6)}"


def _config(sim: ServerProcess, tools: ServerProcess, audit: Path) -> dict[str, Any]:
    return sidecar_config(
        sim,
        [{"name": "scripted", "address": tools.address}],
        profiles={
            "spec": {"speculation": SPECULATE},
            "writes": {"speculation": SPECULATE},
            "reads": {"speculation": SPECULATE},
            "plain": {},
        },
        server={"port": 0, "grace_period": 2, "config_watch_interval": None},
        telemetry={"metrics": {"enabled": True, "port": 0}},
        auth={"audit": {"path": str(audit)}},
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("speculation")
    with simulator("--ttft-ms", "150") as sim, scripted_toolserver() as tools:
        with sidecar(_config(sim, tools, tmp / "audit.jsonl"), tmp) as side:
            yield {"sim": sim, "tools": tools, "sidecar": side, "audit": tmp / "audit.jsonl"}


async def _run(client: AgentClient, profile: str, text: str) -> agent_pb2.RunResult:
    session = await client.create_session(profile)
    return (await client.run(session.session_id, text, timeout=30)).result


def _tool_stages(result: agent_pb2.RunResult) -> list[agent_pb2.Stage]:
    return [s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_TOOL_CALL]


async def _learned(side: ServerProcess, profile: str) -> None:
    """Wait until the profile's last learning kept a rule."""

    async def has_rules() -> bool:
        scraped = await scrape(side)
        return scraped.get("agent_sidecar_speculation_rules", 0, profile=profile) > 0

    await eventually(has_rules)


async def _teach(client: AgentClient, side: ServerProcess, profile: str, tool: str) -> None:
    """Runs that show the profile what follows a tag and a number, until it has learned."""
    for _ in range(8):
        arguments = "token={} failures=0" if tool == "flaky_write" else "tag={} ms=1"
        await _run(client, profile, f"call {tool} " + arguments.format(_tag("L")))
    await _learned(side, profile)


async def test_a_predicted_call_starts_while_the_model_thinks_and_answers_the_model(
    stack: dict[str, Any],
) -> None:
    side, tools = stack["sidecar"], stack["tools"]
    async with AgentClient(side.address) as client:
        await client.wait_ready(20)
        await _teach(client, side, "spec", "slow_read")
        before = await scrape(side)
        calls = (await tool_stats(tools.address))["calls"]["slow_read"]
        session = await client.create_session("spec")
        text = f"call slow_read tag={_tag('S')} ms=100"
        events = [e async for e in client.stream(session.session_id, text, timeout=30)]
        result = events[-1].run_finished
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    (stage,) = _tool_stages(result)
    assert stage.tool_call.speculated and stage.tool_call.status == agent_pb2.TOOL_CALL_STATUS_OK
    # It started before the model's 150 ms first call ended: the overlap is time saved.
    model = next(s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_MODEL_CALL)
    assert ms(stage.start_offset) < ms(model.start_offset) + ms(model.duration) - 100
    # The tool ran once: the model's call was answered from the speculation, under its id.
    assert (await tool_stats(tools.address))["calls"]["slow_read"] == calls + 1
    started = [e.tool_call_started for e in events if e.HasField("tool_call_started")]
    finished = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
    assert (
        [s.call_id for s in started] == [f.call_id for f in finished] == [stage.tool_call.call_id]
    )
    assert not stage.tool_call.call_id.startswith("speculative-")
    after = await scrape(side)
    used = {"profile": "spec", "result": "used"}
    name = "agent_sidecar_speculated_calls_total"
    assert after.get(name, **used) - before.get(name, 0, **used) == 1


async def test_a_run_that_is_not_streamed_is_answered_from_the_speculation_too(
    stack: dict[str, Any],
) -> None:
    side, tools = stack["sidecar"], stack["tools"]
    async with AgentClient(side.address) as client:
        await client.wait_ready(20)
        await _teach(client, side, "spec", "slow_read")
        calls = (await tool_stats(tools.address))["calls"]["slow_read"]
        result = await _run(client, "spec", f"call slow_read tag={_tag('U')} ms=100")
    (stage,) = _tool_stages(result)
    assert stage.tool_call.speculated
    assert (await tool_stats(tools.address))["calls"]["slow_read"] == calls + 1


async def test_a_speculated_call_the_model_does_not_ask_for_is_counted_as_waste(
    stack: dict[str, Any],
) -> None:
    side = stack["sidecar"]
    async with AgentClient(side.address) as client:
        await client.wait_ready(20)
        await _teach(client, side, "spec", "slow_read")
        before = await scrape(side)
        # The input holds a tag and a number, but asks for no tool: the model answers.
        tag = _tag("W")
        result = await _run(client, "spec", f"tag={tag} ms=1 and please just say hello")
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED and not _tool_stages(result)
    after = await scrape(side)
    wasted = {"profile": "spec", "result": "wasted"}
    name = "agent_sidecar_speculated_calls_total"
    assert after.get(name, **wasted) - before.get(name, 0, **wasted) == 1
    # The audit record holds the call the tool server got, as not used.
    lines = [orjson.loads(line) for line in stack["audit"].read_bytes().splitlines()]
    wasted_calls = [
        line
        for line in lines
        if line.get("event") == "tool_call" and tag in str(line.get("arguments", ""))
    ]
    assert [line["status"] for line in wasted_calls] == ["CANCELLED"]
    assert wasted_calls[0]["call_id"].startswith("speculative-")


async def test_a_tool_that_may_write_is_never_speculated(stack: dict[str, Any]) -> None:
    side, tools = stack["sidecar"], stack["tools"]
    async with AgentClient(side.address) as client:
        await client.wait_ready(20)
        await _teach(client, side, "writes", "flaky_write")
        calls = (await tool_stats(tools.address))["calls"]["flaky_write"]
        result = await _run(client, "writes", f"call flaky_write token={_tag('F')} failures=0")
    (stage,) = _tool_stages(result)
    assert not stage.tool_call.speculated
    assert (await tool_stats(tools.address))["calls"]["flaky_write"] == calls + 1


async def test_a_read_only_tool_that_is_not_idempotent_is_never_speculated(
    stack: dict[str, Any],
) -> None:
    # A call the model never makes must be harmless to make: reading is not enough, a
    # second call must change nothing either (stock is read-only, not idempotent).
    side, tools = stack["sidecar"], stack["tools"]
    async with AgentClient(side.address) as client:
        await client.wait_ready(20)
        for _ in range(8):
            await _run(client, "reads", f"call stock sku={_tag('K')} ms=1")
        await _learned(side, "reads")
        calls = (await tool_stats(tools.address))["calls"]["stock"]
        result = await _run(client, "reads", f"call stock sku={_tag('K')} ms=1")
    (stage,) = _tool_stages(result)
    assert stage.name == "stock" and not stage.tool_call.speculated
    assert (await tool_stats(tools.address))["calls"]["stock"] == calls + 1


async def test_a_profile_speculates_only_when_it_says_so(stack: dict[str, Any]) -> None:
    side = stack["sidecar"]
    async with AgentClient(side.address) as client:
        await client.wait_ready(20)
        for _ in range(8):
            result = await _run(client, "plain", f"call slow_read tag={_tag('P')} ms=1")
            assert not any(s.tool_call.speculated for s in _tool_stages(result))
        scraped = await scrape(side)
    assert scraped.get("agent_sidecar_speculation_rules", -1, profile="plain") == -1


async def test_a_tool_the_profile_no_longer_allows_is_never_speculated(tmp_path: Path) -> None:
    with simulator("--ttft-ms", "150") as sim, scripted_toolserver() as tools:
        log = tmp_path / "stderr.log"
        config = _config(sim, tools, tmp_path / "audit.jsonl")
        with log.open("wb") as stderr, sidecar(config, tmp_path, stderr=stderr) as side:
            async with AgentClient(side.address) as client:
                await client.wait_ready(20)
                await _teach(client, side, "spec", "slow_read")
                path = tmp_path / "sidecar.yaml"
                changed = yaml.safe_load(path.read_text())
                changed["profiles"]["spec"]["tools"] = ["stock"]
                path.write_text(yaml.safe_dump(changed, sort_keys=False))
                side.send_signal(signal.SIGHUP)

                async def reloaded() -> bool:
                    return "configuration reloaded (SIGHUP): profiles" in log.read_text()

                await eventually(reloaded)
                calls = (await tool_stats(tools.address))["calls"]["slow_read"]
                # The rules still predict slow_read, but the profile no longer has it.
                result = await _run(client, "spec", f"call slow_read tag={_tag('R')} ms=1")
                assert not _tool_stages(result)
                assert (await tool_stats(tools.address))["calls"]["slow_read"] == calls


def _turn(text: str, calls: list[tuple[str, dict[str, Any]]]) -> Turn:
    first: dict[str, Any] = {"role": "assistant", "content": None}
    if calls:
        first["tool_calls"] = [
            {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": n, "arguments": orjson.dumps(a).decode()},
            }
            for i, (n, a) in enumerate(calls)
        ]
    else:
        first["content"] = "an answer"
    return Turn(
        run_id="r",
        input=text,
        answer="",
        stop_reason=StopReason.ANSWERED,
        start_time=0.0,
        end_time=0.0,
        messages=[{"role": "user", "content": text}, first],
    )


_WORDS = st.text(alphabet="abcdefgh XYZ-0123456789#?,.", max_size=60)


@given(
    st.lists(
        st.tuples(_WORDS, st.text(alphabet="XYZ-0123456789ab", min_size=1, max_size=12)),
        min_size=1,
        max_size=30,
    ),
    _WORDS,
)
def test_every_string_a_prediction_holds_is_a_token_of_the_input_it_was_made_for(
    history: list[tuple[str, str]], text: str
) -> None:
    # Whatever the history taught (order ids from other principals' messages included),
    # a predicted call carries no string that is not in this input.
    turns = [
        _turn(f"{words} order {value}", [("get_order", {"order_id": value})])
        for words, value in history
    ]
    predictor = Predictor.learn(turns, min_precision=0.01, min_support=1)
    found = {word for word, _, _ in tokens(text)}
    for _, arguments in predictor.predict(text, limit=16):
        for value in arguments.values():
            if isinstance(value, str):
                assert value in found


@given(st.lists(st.booleans(), min_size=1, max_size=60), st.floats(0.5, 1), st.integers(1, 30))
def test_a_rule_is_kept_exactly_when_its_precision_and_support_reach_the_thresholds(
    asked: list[bool], min_precision: float, min_support: int
) -> None:
    # Every input names an order; the model looks it up in some turns, not in others.
    turns = [
        _turn(
            f"where is order {1000 + i}", [("get_order", {"order_id": str(1000 + i)})] if a else []
        )
        for i, a in enumerate(asked)
    ]
    predictor = Predictor.learn(turns, min_precision=min_precision, min_support=min_support)
    precision, support = sum(asked) / len(asked), len(asked)
    kept = precision >= min_precision and support >= min_support
    assert bool(predictor.rules) is kept
    if kept:
        assert predictor.predict("and order 4242?", limit=1) == [
            ("get_order", {"order_id": "4242"})
        ]


@pytest.mark.parametrize(
    ("speculation", "key"),
    [
        ({"min_precision": 0}, "min_precision"),
        ({"min_precision": 1.5}, "min_precision"),
        ({"min_support": 0}, "min_support"),
        ({"history_turns": 5}, "history_turns"),
        ({"relearn_interval": 0}, "relearn_interval"),
        ({"max_calls": 0}, "max_calls"),
        ({"enabld": True}, "enabld"),
    ],
)
def test_an_invalid_speculation_setting_is_refused_naming_its_key(
    speculation: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({"profiles": {"p": {"speculation": speculation}}})
    assert f"profiles.p.speculation.{key}" in str(refused.value)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(st.lists(_JSON, max_size=8), st.text(max_size=40))
def test_learning_from_stored_turns_of_any_shape_never_fails(
    first_steps: list[Any], text: str
) -> None:
    # Stored messages come from models and older sidecars: whatever a first step holds,
    # learning skips what it cannot read and predicting still works.
    turns = [
        Turn(
            run_id="r",
            input=text,
            answer="",
            stop_reason=StopReason.ANSWERED,
            start_time=0.0,
            end_time=0.0,
            messages=[
                {"role": "user", "content": text},
                {"role": "assistant", "tool_calls": calls},
            ],
        )
        for calls in first_steps
    ]
    predictor = Predictor.learn(turns, min_precision=0.5, min_support=1)
    predictor.predict(text, limit=3)
