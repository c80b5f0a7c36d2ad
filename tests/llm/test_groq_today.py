"""The model client against the simulator as today's Groq answers, over both transports:
reasoning models and their parameters, the tool cap, retired models, service tiers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from sidecar.config import RetryPolicy
from sidecar.errors import ModelRequestRejected, ModelUnavailable
from sidecar.llm.model import ModelRequest
from sidecar.llm.openai_model import OpenAICompatibleModel
from sidecar.testing import ServerProcess
from tests.support.stack import SimControl, simulator

ASK = [{"role": "user", "content": "What is the capital of France?"}]


def tool(n: int) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": f"tool_{n}", "description": "a tool", "parameters": {}},
    }


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerProcess]:
    with simulator() as proc:
        yield proc


@pytest.fixture(params=["direct", "sdk"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def clients(sim: ServerProcess) -> AsyncIterator[list[OpenAICompatibleModel]]:
    made: list[OpenAICompatibleModel] = []
    await SimControl(sim.address).reset()
    yield made
    for client in made:
        await client.close()


def client(
    sim: ServerProcess,
    made: list[OpenAICompatibleModel],
    transport: str,
    model: str = "openai/gpt-oss-20b",
    **options: Any,
) -> OpenAICompatibleModel:
    made.append(
        OpenAICompatibleModel(
            base_url=f"http://{sim.address}/openai/v1",
            api_key="test",
            model=model,
            retry=RetryPolicy(max_attempts=2, initial_backoff=0.01, max_backoff=0.02),
            timeout=10,
            transport=transport,
            **options,
        )
    )
    return made[-1]


async def last_request(sim: ServerProcess) -> dict[str, Any]:
    stats = await SimControl(sim.address).stats()
    body: dict[str, Any] = stats["last_request"]
    return body


@pytest.mark.parametrize("stream", [False, True])
async def test_reasoning_is_kept_apart_from_the_answer_and_counted(
    sim: ServerProcess, clients: list[OpenAICompatibleModel], transport: str, stream: bool
) -> None:
    model = client(sim, clients, transport)
    pieces: list[str] = []
    request = ModelRequest(ASK, [], stream, 10, keep_reasoning=not stream)
    if stream:
        request.on_reasoning = pieces.append
    response = await model.complete(request, lambda _: None)
    assert response.reasoning and response.reasoning.startswith("[simulated reasoning]")
    assert "[simulated reasoning]" not in response.text
    assert 0 < response.usage.reasoning_tokens < response.usage.completion_tokens
    if stream:
        assert "".join(pieces) == response.reasoning and len(pieces) > 1
    sent = await last_request(sim)
    assert "include_reasoning" not in sent and "reasoning_format" not in sent


async def test_reasoning_nobody_takes_is_left_out_of_the_response_but_still_counted(
    sim: ServerProcess, clients: list[OpenAICompatibleModel], transport: str
) -> None:
    model = client(sim, clients, transport)
    response = await model.complete(ModelRequest(ASK, [], True, 10), lambda _: None)
    assert response.reasoning is None and response.usage.reasoning_tokens > 0
    assert (await last_request(sim))["include_reasoning"] is False


async def test_more_effort_spends_more_reasoning_tokens(
    sim: ServerProcess, clients: list[OpenAICompatibleModel], transport: str
) -> None:
    spent = []
    for effort in ("low", "medium", "high"):
        model = client(sim, clients, transport, reasoning_effort=effort)
        response = await model.complete(ModelRequest(ASK, [], False, 10))
        assert (await last_request(sim))["reasoning_effort"] == effort
        spent.append(response.usage.reasoning_tokens)
    assert spent[0] < spent[1] < spent[2]


async def test_a_model_that_does_not_reason_gets_no_reasoning_parameters(
    sim: ServerProcess, clients: list[OpenAICompatibleModel], transport: str
) -> None:
    # Groq answers 400 to reasoning parameters on such a model: none may be sent.
    model = client(sim, clients, transport, model="llm-simulator")
    response = await model.complete(ModelRequest(ASK, [], True, 10), lambda _: None)
    assert response.usage.reasoning_tokens == 0 and response.reasoning is None
    sent = await last_request(sim)
    assert not {"include_reasoning", "reasoning_format", "reasoning_effort"} & set(sent)


async def test_a_request_over_the_tool_cap_fails_before_it_is_sent(
    sim: ServerProcess, clients: list[OpenAICompatibleModel], transport: str
) -> None:
    model = client(sim, clients, transport)
    fits = await model.complete(ModelRequest(ASK, [tool(n) for n in range(128)], False, 10))
    assert fits.finish_reason in ("stop", "tool_calls")
    with pytest.raises(ModelRequestRejected) as refused:
        await model.complete(ModelRequest(ASK, [tool(n) for n in range(129)], False, 10))
    assert refused.value.code == "model_too_many_tools" and "129" in refused.value.message
    assert (await SimControl(sim.address).stats())["requests"] == 1


async def test_the_simulator_refuses_what_groq_refuses_past_the_cap(sim: ServerProcess) -> None:
    body = {"model": "openai/gpt-oss-20b", "messages": ASK, "tools": [tool(n) for n in range(129)]}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://{sim.address}/openai/v1/chat/completions", json=body) as response,
    ):
        assert response.status == 400
        assert "maximum number of items is 128" in (await response.json())["error"]["message"]


async def test_a_retired_model_is_model_not_found_and_never_retried(
    sim: ServerProcess, clients: list[OpenAICompatibleModel], transport: str
) -> None:
    model = client(sim, clients, transport, model="llama-3.3-70b-versatile")
    with pytest.raises(ModelRequestRejected) as refused:
        await model.complete(ModelRequest(ASK, [], False, 10))
    assert (refused.value.code, refused.value.status) == ("model_not_found", 404)
    assert not refused.value.retryable
    assert (await SimControl(sim.address).stats())["requests"] == 1


async def test_the_model_list_names_what_is_served_and_not_what_is_retired(
    sim: ServerProcess, clients: list[OpenAICompatibleModel], transport: str
) -> None:
    served = await client(sim, clients, transport).served()
    assert served.ids is not None
    assert {"openai/gpt-oss-120b", "openai/gpt-oss-20b"} <= served.ids
    assert "llama-3.3-70b-versatile" not in served.ids


async def test_a_full_flex_tier_falls_back_to_the_configured_tier(
    sim: ServerProcess, clients: list[OpenAICompatibleModel], transport: str
) -> None:
    control = SimControl(sim.address)
    await control.flex_full(True)
    try:
        flex = client(sim, clients, transport, service_tier="flex")
        with pytest.raises(ModelUnavailable) as full:
            await flex.complete(ModelRequest(ASK, [], False, 10))
        assert (full.value.status, full.value.attempts) == (498, 2)
        fallback = client(sim, clients, transport, service_tier="flex", flex_fallback="on_demand")
        response = await fallback.complete(ModelRequest(ASK, [], True, 10), lambda _: None)
        assert response.service_tier == "on_demand"
        assert (await last_request(sim))["service_tier"] == "on_demand"
    finally:
        await control.flex_full(False)
    answered = await client(sim, clients, transport, service_tier="flex").complete(
        ModelRequest(ASK, [], False, 10)
    )
    assert answered.service_tier == "flex"
