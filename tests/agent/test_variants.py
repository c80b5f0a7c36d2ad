"""Model variants and tiering, through real processes against the LLM simulator.

Variants of a profile share its new sessions by weight and a session stays on its
variant; a canary that fails more, or is slower, than the stable variant is rolled back
automatically. Tiering sends the tool-choosing steps to a small model and the answer to
the profile's own, and the timeline and the cost say which model did what.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar.agent.variants import RunModels, Variant, VariantRouter, judged
from sidecar.config import RollbackConfig
from sidecar.testing import ServerProcess
from sidecar.types import StopReason
from tests.support.stack import (
    SimControl,
    eventually,
    scrape,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
    tool_stats,
)

MODEL_CALL = agent_pb2.STAGE_KIND_MODEL_CALL


def _models(result: agent_pb2.RunResult) -> list[str]:
    return [s.name for s in result.timeline.stages if s.kind == MODEL_CALL]


def _variant(name: str, weight: float, model: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "weight": weight, "model": {"model": model, **extra}}


@pytest.fixture(scope="module")
def tools() -> Iterator[ServerProcess]:
    with scripted_toolserver() as server:
        yield server


# -- the split and stickiness ---------------------------------------------------------------


async def test_sessions_split_between_variants_and_each_stays_on_its_own(
    tools: ServerProcess, tmp_path: Path
) -> None:
    with simulator() as sim:
        profiles = {
            "default": {
                "variants": [
                    _variant("stable", 1, "stable-model"),
                    {**_variant("canary", 1, "canary-model"), "system_prompt": "Be brief."},
                ]
            }
        }
        config = sidecar_config(
            sim, [{"name": "scripted", "address": tools.address}], profiles=profiles
        )
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                first: dict[str, str] = {}
                for _ in range(30):
                    session = await client.create_session()
                    events = [e async for e in client.stream(session.session_id, "two reads")]
                    started, finished = events[0].run_started, events[-1].run_finished
                    assert started.variant == finished.variant
                    model = f"{finished.variant}-model"
                    assert started.model == model and set(_models(finished)) == {model}
                    first[session.session_id] = finished.variant
                counts = collections.Counter(first.values())
                # 30 fair coin flips: each side at least 5 with probability 1 - 3e-4.
                assert counts["stable"] >= 5 and counts["canary"] >= 5, counts
                for session_id, variant in list(first.items())[:10]:
                    result = await client.run(session_id, "two reads", timeout=20)
                    assert result.result.variant == variant
                    stored = await client.get_session(session_id)
                    assert [t.variant for t in stored.turns] == [variant, variant]
            stats = await SimControl(sim.address).stats()
            prompts = {r["model"]: r["messages"][0]["content"] for r in stats["recent_requests"]}
            assert prompts["canary-model"] == "Be brief."
            assert prompts["stable-model"] != "Be brief."


def _router(weights: list[float]) -> VariantRouter:
    variants = [
        Variant(f"v{i}", w, RunModels(answer=None), {})  # type: ignore[arg-type]
        for i, w in enumerate(weights)
    ]
    return VariantRouter("p", variants, RollbackConfig(), rng=random.Random(7))


@given(st.lists(st.integers(0, 9), min_size=2, max_size=4).filter(lambda ws: sum(ws) > 0))
def test_new_sessions_follow_the_weights(weights: list[int]) -> None:
    router = _router([float(w) for w in weights])
    picks = collections.Counter(router.choose(None).name for _ in range(2000))
    total = sum(weights)
    for i, weight in enumerate(weights):
        share = picks[f"v{i}"] / 2000
        if weight == 0:
            assert share == 0
        else:
            assert abs(share - weight / total) < 0.06, (weights, picks)


@given(st.lists(st.integers(1, 9), min_size=2, max_size=4), st.data())
def test_a_pinned_session_keeps_its_variant_whatever_the_weights(
    weights: list[int], data: st.DataObject
) -> None:
    router = _router([float(w) for w in weights])
    pinned = f"v{data.draw(st.integers(0, len(weights) - 1))}"
    for variant in router.variants.values():
        variant.weight = float(data.draw(st.integers(0, 9)))  # promotion or demotion
    assert router.choose(pinned).name == pinned


# -- rollback -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("canary_flags", "why"),
    [(("--fault-rate-500", "1"), "error rate"), (("--ttft-ms", "120"), "P95 latency")],
)
async def test_a_canary_that_breaches_its_objective_is_rolled_back(
    tools: ServerProcess, tmp_path: Path, canary_flags: tuple[str, ...], why: str
) -> None:
    with simulator() as sim, simulator(*canary_flags) as slow:
        audit = tmp_path / "audit.jsonl"
        profiles = {
            "default": {
                "variants": [
                    _variant("stable", 1, "stable-model"),
                    _variant(
                        "canary",
                        1,
                        "canary-model",
                        base_url=f"http://{slow.address}/openai/v1",
                        retry={"max_attempts": 1},
                    ),
                ],
                "rollback": {"min_runs": 5, "window": 120, "min_p95_increase": 0.1},
            }
        }
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            profiles=profiles,
            telemetry={"metrics": {"enabled": True, "port": 0}},
            auth={"audit": {"path": str(audit)}},
        )
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                canary_sessions = []
                for _ in range(60):
                    session = await client.create_session()
                    result = await client.run(session.session_id, "two reads", timeout=20)
                    if result.result.variant == "canary":
                        canary_sessions.append(session.session_id)
                    metrics = await scrape(side)
                    if not metrics.get(
                        "agent_sidecar_variant_in_rotation", profile="default", variant="canary"
                    ):
                        break
                else:
                    pytest.fail("the canary was never rolled back")
                assert (
                    metrics.get(
                        "agent_sidecar_variant_rollbacks_total", profile="default", variant="canary"
                    )
                    == 1
                )
                # New sessions go to the stable variant only; the canary's sessions move
                # there on their next turn.
                for _ in range(8):
                    session = await client.create_session()
                    result = await client.run(session.session_id, "two reads", timeout=20)
                    assert result.result.variant == "stable"
                moved = await client.run(canary_sessions[-1], "two reads", timeout=20)
                assert moved.result.variant == "stable"
                assert moved.result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
        lines = [orjson.loads(line) for line in audit.read_bytes().splitlines()]
        rolled = [ln for ln in lines if ln["event"] == "variant_rolled_back"]
        assert len(rolled) == 1 and rolled[0]["variant"] == "canary"
        assert rolled[0]["why"].startswith(why)


def test_a_canary_within_its_objective_stays() -> None:
    router = _router([1.0, 1.0])
    for _ in range(50):
        router.record("v0", 0.100, False)
        router.record("v1", 0.120, False)  # 1.2x, under 1.5x
    router.record("v1", 0.1, True)  # one failure in 51: 2%, under 5 points more
    assert router.variants["v1"].rolled_back is None


def _twin_rollbacks(seeds: range, scale: float) -> int:
    """How many of ``seeds`` roll back a canary identical to the stable variant."""
    rolled = 0
    for seed in seeds:
        rng = random.Random(seed)
        router = VariantRouter(
            "p",
            [Variant(f"v{i}", 1.0, RunModels(answer=None), {}) for i in range(2)],  # type: ignore[arg-type]
            RollbackConfig(),
        )
        for _ in range(300):
            for name in ("v0", "v1"):
                router.record(name, rng.lognormvariate(0, 0.8) * scale, rng.random() < 0.05)
        rolled += router.variants["v1"].rolled_back is not None
    return rolled


def test_an_identical_twin_is_not_rolled_back_for_noise() -> None:
    # Milliseconds apart at P95 is never a regression (the absolute threshold); seconds
    # apart by chance rarely passes the test of significance, looked at after every run.
    assert _twin_rollbacks(range(100), scale=0.003) == 0
    assert _twin_rollbacks(range(100), scale=1.0) <= 1


@pytest.mark.parametrize(
    "reason",
    [
        StopReason.REFUSED,
        StopReason.MAX_STEPS,
        StopReason.MAX_TOOL_CALLS,
        StopReason.MODEL_ERROR,
        StopReason.INVALID_ANSWER,
        StopReason.BUDGET_STOPPED,
        StopReason.BUDGET_EXHAUSTED,
    ],
)
def test_a_canary_that_ends_its_runs_as_a_sound_model_would_not_is_rolled_back(
    reason: StopReason,
) -> None:
    router = _router([1.0, 1.0])
    failed = judged(reason)
    assert failed is True
    for _ in range(40):
        router.record("v0", 0.1, judged(StopReason.ANSWERED) is True)
        router.record("v1", 0.1, failed)
    assert router.variants["v1"].rolled_back is not None


def test_runs_the_caller_or_the_sidecar_stopped_say_nothing_of_the_model() -> None:
    assert judged(StopReason.CANCELLED) is None and judged(StopReason.INTERRUPTED) is None
    assert judged(StopReason.ANSWERED) is False and judged(StopReason.BUDGET_ANSWERED) is False


async def test_a_canary_that_always_refuses_is_rolled_back(
    tools: ServerProcess, tmp_path: Path
) -> None:
    with simulator() as sim:
        profiles = {
            "default": {
                "variants": [
                    _variant("stable", 1, "stable-model"),
                    _variant("canary", 1, "canary-model"),
                ],
                "rollback": {"min_runs": 5, "window": 120},
            }
        }
        config = sidecar_config(
            sim, [{"name": "scripted", "address": tools.address}], profiles=profiles
        )
        control = SimControl(sim.address)
        refusal = _raw({"role": "assistant", "content": None, "refusal": "I will not."})
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                sessions = {"stable": [], "canary": []}  # type: dict[str, list[str]]
                while min(len(v) for v in sessions.values()) < 2:
                    session = await client.create_session()
                    result = await client.run(session.session_id, "hello", timeout=20)
                    sessions[result.result.variant].append(session.session_id)
                rolled_back = False
                for _ in range(40):
                    for name in ("stable", "canary"):
                        if name == "canary":
                            await control.faults(refusal)  # the canary's next answer
                        run = await client.run(sessions[name][0], "hello", timeout=20)
                        if run.result.variant != name:
                            rolled_back = True  # its session moved to the stable variant
                            await control.reset()
                            break
                        expected = (
                            "STOP_REASON_REFUSED" if name == "canary" else "STOP_REASON_ANSWERED"
                        )
                        assert agent_pb2.StopReason.Name(run.result.stop_reason) == expected
                    if rolled_back:
                        break
                assert rolled_back


# -- tiering --------------------------------------------------------------------------------


async def test_tiering_chooses_tools_with_the_small_model_and_answers_with_the_big_one(
    tools: ServerProcess, tmp_path: Path
) -> None:
    with simulator() as sim:
        profiles = {
            "tiered": {"tools_model": {"model": "small-model"}},
            "single": {},
        }
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            profiles=profiles,
            prices={
                "simulated-model": {"prompt": 1.0, "completion": 2.0},
                "small-model": {"prompt": 0.1, "completion": 0.2},
            },
        )
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                tiered = await client.create_session("tiered")
                events = [e async for e in client.stream(tiered.session_id, "two reads")]
                result = events[-1].run_finished
                assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
                assert result.answer.endswith("done") and result.tool_calls == 2
                # Step 1: the small model calls the tools. Step 2: it needs none, so the
                # big model answers.
                calls = [(s.step, s.name) for s in result.timeline.stages if s.kind == MODEL_CALL]
                assert calls == [(1, "small-model"), (2, "small-model"), (2, "simulated-model")]
                deltas = "".join(e.text_delta.text for e in events if e.HasField("text_delta"))
                assert deltas == result.answer  # only the answer model's text is shown
                costs = {m.model: m.total_usd for m in result.cost.models}
                assert set(costs) == {"small-model", "simulated-model"}
                assert abs(sum(costs.values()) - result.cost.total_usd) < 1e-12
                assert costs["small-model"] > 0 and result.cost.priced_as == ""

                single = await client.create_session("single")
                plain = await client.run(single.session_id, "two reads", timeout=20)
                assert _models(plain.result) == ["simulated-model", "simulated-model"]
                assert not plain.result.cost.models
            stats = await SimControl(sim.address).stats()
            answer = next(
                r for r in reversed(stats["recent_requests"]) if r["model"] == "simulated-model"
            )
            assert answer.get("tool_choice") is None  # the single-model run's last call
            tiered_answer = [r for r in stats["recent_requests"] if r.get("tool_choice") == "none"]
            assert tiered_answer and tiered_answer[0]["model"] == "simulated-model"
            assert tiered_answer[0]["tools"]  # the tools stay in the prompt


async def test_memory_summaries_use_the_profiles_memory_model(
    tools: ServerProcess, tmp_path: Path
) -> None:
    with simulator() as sim:
        profiles = {
            "default": {
                "context": {
                    "memory": True,
                    "memory_model": {"model": "summary-model"},
                    "max_tokens": 600,
                    "keep_recent_turns": 1,
                    "drop_batch_turns": 1,
                }
            }
        }
        config = sidecar_config(
            sim, [{"name": "scripted", "address": tools.address}], profiles=profiles
        )
        with sidecar(config, tmp_path) as side:
            async with AgentClient(side.address) as client:
                session = await client.create_session()
                for i in range(6):
                    await client.run(session.session_id, f"turn {i} " + "words " * 150, timeout=20)

                async def summarised() -> bool:
                    stored = await client.get_session(session.session_id)
                    return bool(stored.memory)

                await eventually(summarised, timeout=15)
        stats = await SimControl(sim.address).stats()
        models = {r["model"] for r in stats["recent_requests"]}
        assert "summary-model" in models and "simulated-model" in models


def _completion(message: dict[str, Any], finish: str = "stop") -> str:
    return orjson.dumps(
        {
            "id": "chatcmpl-raw",
            "object": "chat.completion",
            "model": "raw",
            "choices": [{"index": 0, "finish_reason": finish, "message": message}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    ).decode()


def _raw(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {"kind": "raw", "status": 200, "body": _completion(message, finish)}


_CALLS = [
    {
        "id": "call_x1",
        "type": "function",
        "function": {"name": "read_a", "arguments": "{}"},
    }
]


@pytest.mark.parametrize("with_text", [True, False])
async def test_an_answer_model_that_calls_tools_though_told_not_to_runs_none(
    tools: ServerProcess, tmp_path: Path, with_text: bool
) -> None:
    with simulator() as sim:
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            profiles={"tiered": {"tools_model": {"model": "small-model"}}},
        )
        with sidecar(config, tmp_path) as side:
            before = {k: v for k, v in (await tool_stats(tools.address))["calls"].items()}
            before.pop("stats", None)
            control = SimControl(sim.address)
            answer = {"role": "assistant", "content": "All done." if with_text else None}
            await control.faults(
                # The tools model needs no tools; the answer model calls one anyway.
                _raw({"role": "assistant", "content": "[simulated] no tools needed"}),
                _raw({**answer, "tool_calls": _CALLS}, "tool_calls"),
            )
            async with AgentClient(side.address) as client:
                session = await client.create_session("tiered")
                result = (await client.run(session.session_id, "hello", timeout=20)).result
            after = dict((await tool_stats(tools.address))["calls"])
            after.pop("stats", None)
            assert after == before  # nothing ran
            assert result.tool_calls == 0 and result.steps == 1
            if with_text:
                assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
                assert result.answer == "All done."
            else:
                assert result.stop_reason == agent_pb2.STOP_REASON_MODEL_ERROR
                assert result.error.code == "model_ignored_tool_choice" and result.error.retryable


async def test_a_refusal_by_the_tools_model_is_never_shown_the_answer_model_answers(
    tools: ServerProcess, tmp_path: Path
) -> None:
    with simulator() as sim:
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            profiles={"tiered": {"tools_model": {"model": "small-model"}}},
        )
        with sidecar(config, tmp_path) as side:
            await SimControl(sim.address).faults(
                _raw({"role": "assistant", "content": None, "refusal": "Small model says no."})
            )
            async with AgentClient(side.address) as client:
                session = await client.create_session("tiered")
                events = [e async for e in client.stream(session.session_id, "hello")]
            result = events[-1].run_finished
            assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
            assert "Small model says no." not in result.answer
            assert result.answer.startswith("[simulated]")
            deltas = "".join(e.text_delta.text for e in events if e.HasField("text_delta"))
            assert deltas == result.answer
            calls = [s.name for s in result.timeline.stages if s.kind == MODEL_CALL]
            assert calls == ["small-model", "simulated-model"]
