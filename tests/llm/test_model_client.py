"""The model client against the real LLM simulator, over both transports."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agentsidecar.client import AgentClient
from sidecar.config import RetryPolicy
from sidecar.errors import ModelError, ModelRequestRejected, ModelUnavailable, ToolUseFailed
from sidecar.llm.model import ModelRequest
from sidecar.llm.openai_model import OpenAICompatibleModel
from sidecar.testing import ServerProcess
from tests.support.stack import SimControl, simulator

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": name,
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    }
    for name in ("get_order_status", "track_parcel")
]
ASK = [{"role": "user", "content": "What is the status of order 20250101, and its parcel?"}]


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerProcess]:
    with simulator() as proc:
        yield proc


@pytest.fixture(params=["direct", "sdk"])
async def model(
    request: pytest.FixtureRequest, sim: ServerProcess
) -> AsyncIterator[OpenAICompatibleModel]:
    await SimControl(sim.address).reset()
    client = OpenAICompatibleModel(
        base_url=f"http://{sim.address}/openai/v1",
        api_key="test",
        model="llm-simulator",
        retry=RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.1),
        timeout=10,
        transport=request.param,
    )
    yield client
    await client.close()


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_calls_are_parsed_the_same_streamed_or_not(
    model: OpenAICompatibleModel, stream: bool
) -> None:
    texts: list[str] = []
    response = await model.complete(ModelRequest(ASK, TOOLS, stream, 10), texts.append)
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("get_order_status", '{"order_id":"20250101"}'),
        ("track_parcel", '{"order_id":"20250101"}'),
    ]
    assert all(c.id.startswith("call_") for c in response.tool_calls)
    assert response.finish_reason == "tool_calls"
    assert response.usage.prompt_tokens > 0 and response.usage.completion_tokens > 0
    assert response.provider.queue_time is not None
    assert (response.time_to_first_token is not None) == stream


async def test_streamed_text_reaches_the_sink_piece_by_piece(
    model: OpenAICompatibleModel,
) -> None:
    texts: list[str] = []
    request = ModelRequest([{"role": "user", "content": "tell me a story"}], [], True, 10)
    response = await model.complete(request, texts.append)
    assert len(texts) > 1 and "".join(texts) == response.text
    assert response.text.startswith("[simulated]")


async def test_a_429_is_retried_after_retry_after(
    model: OpenAICompatibleModel, sim: ServerProcess
) -> None:
    await SimControl(sim.address).faults({"kind": "status", "status": 429, "retry_after": 0.05})
    response = await model.complete(ModelRequest(ASK, TOOLS, False, 10))
    assert response.attempts == 2


async def test_retries_stop_at_max_attempts_with_the_last_error(
    model: OpenAICompatibleModel, sim: ServerProcess
) -> None:
    await SimControl(sim.address).faults({"kind": "status", "status": 503, "times": 5})
    with pytest.raises(ModelUnavailable) as info:
        await model.complete(ModelRequest(ASK, TOOLS, True, 10))
    assert info.value.status == 503 and info.value.code == "model_unavailable"
    assert (await SimControl(sim.address).stats())["requests"] == 3
    assert info.value.attempts == 3


async def test_the_retry_log_names_only_retries_that_happen(
    model: OpenAICompatibleModel, sim: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    await SimControl(sim.address).faults({"kind": "status", "status": 503, "times": 5})
    with (
        caplog.at_level("WARNING", logger="sidecar.llm.openai_model"),
        pytest.raises(ModelUnavailable),
    ):
        await model.complete(ModelRequest(ASK, TOOLS, False, 10))
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    sent = (await SimControl(sim.address).stats())["requests"]
    assert sent == 3 and len(retries) == sent - 1
    assert ["retry 1 of 2" in retries[0], "retry 2 of 2" in retries[1]] == [True, True]


async def test_a_rejected_request_is_not_retried(
    model: OpenAICompatibleModel, sim: ServerProcess
) -> None:
    await SimControl(sim.address).faults({"kind": "status", "status": 401})
    with pytest.raises(ModelRequestRejected) as info:
        await model.complete(ModelRequest(ASK, TOOLS, False, 10))
    assert info.value.code == "model_unauthenticated" and not info.value.retryable


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_use_failed_carries_the_failed_generation(
    model: OpenAICompatibleModel, sim: ServerProcess, stream: bool
) -> None:
    await SimControl(sim.address).faults({"kind": "tool_use_failed"})
    with pytest.raises(ToolUseFailed) as info:
        await model.complete(ModelRequest(ASK, TOOLS, stream, 10))
    assert info.value.failed_generation


async def test_a_hanging_endpoint_is_cut_off_at_the_runs_deadline(
    model: OpenAICompatibleModel, sim: ServerProcess
) -> None:
    await SimControl(sim.address).faults({"kind": "hang", "times": 5})
    with pytest.raises(ModelError) as info:
        await model.complete(ModelRequest(ASK, TOOLS, False, 0.5))
    assert info.value.code == "deadline_exceeded" and not info.value.retryable


@pytest.mark.parametrize("transport", ["direct", "sdk"])
async def test_a_hanging_request_is_abandoned_after_the_request_timeout_and_retried(
    sim: ServerProcess, transport: str
) -> None:
    control = SimControl(sim.address)
    await control.reset()
    await control.faults({"kind": "hang"})
    client = OpenAICompatibleModel(
        base_url=f"http://{sim.address}/openai/v1",
        api_key="test",
        model="llm-simulator",
        retry=RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.1),
        timeout=0.3,
        transport=transport,
    )
    try:
        response = await client.complete(ModelRequest(ASK, TOOLS, False, 10))
    finally:
        await client.close()
    assert response.attempts == 2 and response.tool_calls


@pytest.mark.parametrize("transport", ["direct", "sdk"])
async def test_an_unreachable_endpoint_is_reported_as_unreachable(transport: str) -> None:
    client = OpenAICompatibleModel(
        base_url="http://127.0.0.1:9/v1",
        api_key="test",
        model="llm-simulator",
        retry=RetryPolicy(max_attempts=2, initial_backoff=0.01, max_backoff=0.01),
        timeout=5,
        transport=transport,
    )
    try:
        with pytest.raises(ModelUnavailable) as info:
            await client.complete(ModelRequest(ASK, TOOLS, False, 5))
        assert info.value.code == "model_unreachable"
        assert info.value.retryable
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("transport", "says"), [("direct", "(direct transport)"), ("sdk", "openai-python/")]
)
async def test_the_user_agent_says_what_sends_the_request(
    sim: ServerProcess, tmp_path: Path, transport: str, says: str
) -> None:
    from sidecar import testing

    config = testing.sidecar_config(sim.address, {})
    config["model"]["transport"] = transport
    with testing.sidecar(config, tmp_path) as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            await client.run(session.session_id, "hello")
    headers = (await SimControl(sim.address).stats())["last_headers"]
    agent = headers["user-agent"]
    assert agent.startswith("agent-sidecar/") and says in agent
    assert transport == "sdk" or "openai-python" not in agent
    assert headers["authorization"] == ""  # keyless: no header at all
