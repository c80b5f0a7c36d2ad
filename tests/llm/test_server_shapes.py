"""Responses in the shapes OpenAI-compatible servers send, through a real sidecar, on both
transports.

Each payload is written the way a server sends it, as its users reported it or its
documentation shows it (Ollama, vLLM, llama.cpp server, OpenAI, Groq); the LLM simulator
plays it back byte for byte as a ``raw`` fault, to a sidecar that calls a real tool server
(``tests/llm/shapes_toolserver.py``). After the tools ran, the simulator answers the
follow-up request itself: that request shows what the sidecar made of the shape (which
calls it ran, whose result went to which call).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar import testing
from sidecar.testing import ServerProcess
from tests.support.stack import run_events

HERE = Path(__file__).parent
ASK = "What is the weather in Paris and in Tokyo?"


def frames(*chunks: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[str]:
    """Server-sent events: each chunk as ``data: {json}``, then ``[DONE]``."""
    return [*prefix, *(f"data: {json.dumps(c)}\n\n" for c in chunks), "data: [DONE]\n\n"]


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-476",
        "object": "chat.completion.chunk",
        "created": 1733000000,
        "model": "llama3.1",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def completion(message: dict[str, Any], finish: str = "stop") -> str:
    return json.dumps(
        {
            "id": "chatcmpl-8",
            "object": "chat.completion",
            "created": 1733000000,
            "model": "llama3.1",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 80, "completion_tokens": 20, "total_tokens": 100},
        }
    )


def call(name: str, arguments: Any, **fields: Any) -> dict[str, Any]:
    return {**fields, "type": "function", "function": {"name": name, "arguments": arguments}}


PARIS = '{"location": "Paris"}'
TOKYO = '{"location": "Tokyo"}'

# Ollama's OpenAI-compatible stream: each call whole in a chunk of its own, no index.
NO_INDEX = frames(
    chunk(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("get_current_weather", PARIS, id="call_s5sivbzm")],
        }
    ),
    chunk(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("get_current_weather", TOKYO, id="call_mn0ti4px")],
        }
    ),
    chunk({"role": "assistant", "content": ""}, "tool_calls"),
)
# Servers that send index 0 for every call, a new id starting each.
INDEX_ZERO = frames(
    chunk({"role": "assistant", "content": None}),
    chunk({"tool_calls": [{"index": 0, **call("get_current_weather", "", id="chatcmpl-tool-a1")}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": PARIS}}]}),
    chunk({"tool_calls": [{"index": 0, **call("get_current_weather", "", id="chatcmpl-tool-b2")}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": TOKYO}}]}),
    chunk({}, "tool_calls"),
)
# llama.cpp server: arguments as a JSON object, not its text.
OBJECT_ARGUMENTS_STREAM = frames(
    chunk({"role": "assistant", "content": None}),
    chunk(
        {
            "tool_calls": [
                {"index": 0, **call("get_current_weather", {"location": "Paris"}, id="9RhGXvVn")}
            ]
        }
    ),
    chunk(
        {
            "tool_calls": [
                {"index": 1, **call("get_current_weather", {"location": "Tokyo"}, id="mGbcLp7s")}
            ]
        }
    ),
    chunk({}, "tool_calls"),
)
OBJECT_ARGUMENTS = completion(
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            call("get_current_weather", {"location": "Paris"}, id="9RhGXvVn"),
            call("get_current_weather", {"location": "Tokyo"}, id="mGbcLp7s"),
        ],
    },
    "tool_calls",
)
# Calls with no id at all (and, streamed, only their index to tell them apart).
NO_IDS = completion(
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [call("add", '{"a": 2, "b": 3}'), call("multiply", '{"a": 2, "b": 3}')],
    },
    "tool_calls",
)
NO_IDS_STREAM = frames(
    chunk({"role": "assistant", "content": ""}),
    chunk({"tool_calls": [{"index": 0, **call("add", '{"a": 2, ')}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"b": 3}'}}]}),
    chunk({"tool_calls": [{"index": 1, **call("multiply", '{"a": 2, "b": 3}')}]}),
    chunk({}, "tool_calls"),
)
REFUSAL_TEXT = "I'm sorry, I can't help with that."
REFUSAL = completion({"role": "assistant", "content": None, "refusal": REFUSAL_TEXT})
REFUSAL_STREAM = frames(
    chunk({"role": "assistant", "content": None, "refusal": ""}),
    chunk({"refusal": "I'm sorry, "}),
    chunk({"refusal": "I can't help with that."}),
    chunk({}, "stop"),
)
FAILED_GENERATION = '<function=get_current_weather{"location": "Paris"}</function>'
# Groq: a malformed tool call reported inside a 200 stream.
GROQ_TOOL_USE_FAILED = [
    "event: error\n",
    "data: "
    + json.dumps(
        {
            "error": {
                "message": "Failed to call a function. Please adjust your prompt. "
                "See 'failed_generation' for more details.",
                "type": "invalid_request_error",
                "code": "tool_use_failed",
                "failed_generation": FAILED_GENERATION,
            }
        }
    )
    + "\n\n",
]
GROQ_USAGE = {
    "queue_time": 0.021,
    "prompt_tokens": 220,
    "prompt_time": 0.0104,
    "completion_tokens": 12,
    "completion_time": 0.0436,
    "total_tokens": 232,
    "total_time": 0.054,
}
GROQ_STREAM = frames(
    chunk({"role": "assistant", "content": ""}, x_groq={"id": "req_01jbd6g2qdfw2adyrt2az8hz4w"}),
    chunk({"content": "It is sunny."}),
    chunk({}, "stop", x_groq={"id": "req_01jbd6g2qdfw2adyrt2az8hz4w", "usage": GROQ_USAGE}),
)


@pytest.fixture(scope="module")
def backends() -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with (
        testing.simulator() as sim,
        testing.tool_server(str(HERE / "shapes_toolserver.py")) as tools,
    ):
        yield sim, tools


@pytest.fixture(scope="module", params=["direct", "sdk"])
def stack(
    request: pytest.FixtureRequest,
    backends: tuple[ServerProcess, ServerProcess],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Any]]:
    sim, tools = backends
    workdir = tmp_path_factory.mktemp(f"shapes-{request.param}")
    log = workdir / "sidecar.log"
    config = testing.sidecar_config(sim.address, {"shapes": tools.address})
    config["model"].update(
        transport=request.param,
        retry={"max_attempts": 2, "initial_backoff": 0.01, "max_backoff": 0.05},
    )
    with log.open("wb") as stderr, testing.sidecar(config, workdir, stderr=stderr) as side:
        testing.wait_serving(side.address)
        yield {"sidecar": side.address, "sim": sim.address, "log": log}


async def control(stack: dict[str, Any], method: str, path: str, body: Any = None) -> Any:
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, f"http://{stack['sim']}/sim{path}", json=body) as response,
    ):
        response.raise_for_status()
        return await response.json()


async def play(stack: dict[str, Any], **fault: Any) -> None:
    await control(stack, "POST", "/reset")
    await control(stack, "POST", "/faults", {"faults": [{"kind": "raw", **fault}]})


async def unary(stack: dict[str, Any], text: str = ASK) -> agent_pb2.RunResult:
    async with AgentClient(stack["sidecar"]) as client:
        session = await client.create_session()
        return (await client.run(session.session_id, text, timeout=30)).result


async def streamed(
    stack: dict[str, Any], text: str = ASK
) -> tuple[list[agent_pb2.StreamRunResponse], agent_pb2.RunResult]:
    async with AgentClient(stack["sidecar"]) as client:
        return await run_events(client, text)


async def follow_up(stack: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages of the request after the tools ran (the simulator's second)."""
    stats = await control(stack, "GET", "/stats")
    assert stats["requests"] == 2, "the shape was not read at the first attempt"
    messages: list[dict[str, Any]] = stats["recent_requests"][1]["messages"]
    return messages


def results(messages: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
    """(tool name, arguments, result) of each call, paired by the tool_call_id sent back."""
    [assistant] = [m for m in messages if m["role"] == "assistant" and m.get("tool_calls")]
    ids = [c["id"] for c in assistant["tool_calls"]]
    assert all(ids) and len(set(ids)) == len(ids)
    by_id = {m["tool_call_id"]: orjson.loads(m["content"]) for m in messages if m["role"] == "tool"}
    assert set(by_id) == set(ids)
    return [
        (c["function"]["name"], c["function"]["arguments"], by_id[c["id"]])
        for c in assistant["tool_calls"]
    ]


def weather(result: Any) -> tuple[str, int]:
    return result["location"], result["temperature"]


@pytest.mark.parametrize("shape", [NO_INDEX, INDEX_ZERO, OBJECT_ARGUMENTS_STREAM])
async def test_two_streamed_calls_stay_two_calls_with_their_own_results(
    stack: dict[str, Any], shape: list[str]
) -> None:
    await play(stack, frames=shape)
    events, result = await streamed(stack)
    started = [e.tool_call_started for e in events if e.HasField("tool_call_started")]
    assert [(s.tool_name, orjson.loads(s.arguments)) for s in started] == [
        ("get_current_weather", {"location": "Paris"}),
        ("get_current_weather", {"location": "Tokyo"}),
    ]
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    paired = results(await follow_up(stack))
    assert [(n, orjson.loads(a)["location"], weather(r)) for n, a, r in paired] == [
        ("get_current_weather", "Paris", ("Paris", 15)),
        ("get_current_weather", "Tokyo", ("Tokyo", 15)),
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_calls_without_ids_each_get_their_own_result(
    stack: dict[str, Any], stream: bool
) -> None:
    if stream:
        await play(stack, frames=NO_IDS_STREAM)
        _, result = await streamed(stack, "Add 2 and 3, and multiply them.")
    else:
        await play(stack, body=NO_IDS)
        result = await unary(stack, "Add 2 and 3, and multiply them.")
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    paired = results(await follow_up(stack))
    assert [(n, orjson.loads(a), r) for n, a, r in paired] == [
        ("add", {"a": 2, "b": 3}, {"sum": 5}),
        ("multiply", {"a": 2, "b": 3}, {"product": 6}),
    ]


async def test_unary_calls_with_arguments_as_objects_run_with_them(
    stack: dict[str, Any],
) -> None:
    await play(stack, body=OBJECT_ARGUMENTS)
    result = await unary(stack)
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    paired = results(await follow_up(stack))
    assert [(orjson.loads(a), weather(r)) for _, a, r in paired] == [
        ({"location": "Paris"}, ("Paris", 15)),
        ({"location": "Tokyo"}, ("Tokyo", 15)),
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_an_unrequested_gzip_answer_is_read(stack: dict[str, Any], stream: bool) -> None:
    text = "It is sunny in Paris."
    await play(
        stack,
        encoding="gzip",
        body=completion({"role": "assistant", "content": text}),
        frames=frames(chunk({"role": "assistant", "content": text}), chunk({}, "stop")),
    )
    result = (await streamed(stack))[1] if stream else await unary(stack)
    assert (result.stop_reason, result.answer) == (agent_pb2.STOP_REASON_ANSWERED, text)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_refusal_ends_the_run_refused_with_its_text(
    stack: dict[str, Any], stream: bool
) -> None:
    if stream:
        await play(stack, frames=REFUSAL_STREAM)
        _, result = await streamed(stack)
    else:
        await play(stack, body=REFUSAL)
        result = await unary(stack)
    assert (result.stop_reason, result.answer) == (agent_pb2.STOP_REASON_REFUSED, REFUSAL_TEXT)


async def test_groqs_tool_use_failed_inside_a_stream_gets_the_repair_round(
    stack: dict[str, Any],
) -> None:
    await play(stack, frames=GROQ_TOOL_USE_FAILED)
    _, result = await streamed(stack)
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED, result.error
    stats = await control(stack, "GET", "/stats")
    repair = stats["recent_requests"][1]["messages"][-1]
    # Not the same request again: the model is shown what it sent.
    assert repair["role"] == "user" and FAILED_GENERATION in repair["content"]


async def test_groqs_timing_under_x_groq_reaches_the_timeline(stack: dict[str, Any]) -> None:
    await play(stack, frames=GROQ_STREAM)
    _, result = await streamed(stack, "hello")
    assert result.answer == "It is sunny."
    [stage] = [s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_MODEL_CALL]
    timing = stage.model_call
    assert timing.provider_queue_time.ToTimedelta().total_seconds() == pytest.approx(0.021)
    assert timing.provider_completion_time.ToTimedelta().total_seconds() == pytest.approx(0.0436)
    assert (timing.usage.prompt_tokens, timing.usage.completion_tokens) == (220, 12)


async def test_a_retry_after_groqs_429_is_logged_with_its_request_id(
    stack: dict[str, Any],
) -> None:
    request_id = f"req_01jbd6{len(stack['log'].read_bytes()):014d}"
    await play(
        stack,
        status=429,
        body=json.dumps(
            {
                "error": {
                    "message": "Rate limit reached for model `openai/gpt-oss-120b` in "
                    "organization `org_01` on tokens per minute (TPM): Limit 6000, Used 5990, "
                    "Requested 120. Please try again in 1.1s.",
                    "type": "tokens",
                    "code": "rate_limit_exceeded",
                }
            }
        ),
        headers={
            "retry-after": "0.01",
            "x-request-id": request_id,
            "x-ratelimit-limit-tokens": "6000",
            "x-ratelimit-remaining-tokens": "10",
            "x-ratelimit-reset-tokens": "10ms",
        },
    )
    result = await unary(stack, "hello")
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED, result.error.message
    lines = [
        line for line in stack["log"].read_text().splitlines() if f"request id {request_id}" in line
    ]
    assert len(lines) == 1
    assert "model_rate_limited, status 429" in lines[0] and "in 0.01 s" in lines[0]


# Groq's gpt-oss (a reasoning model), as Groq sends it and as users of other clients
# reported what tripped them: the reasoning streams first in `delta.reasoning`, and holds
# call-like JSON and the answer's words; the calls come whole, one chunk each; usage says
# how many completion tokens were reasoning (billed, never shown).
GPT_OSS_REASONING = (
    'The user asks for two cities. I should call get_current_weather with {"location": '
    '"Paris"} and then {"location": "Tokyo"}. The answer: it is sunny.'
)
GPT_OSS_USAGE = {
    **GROQ_USAGE,
    "completion_tokens": 150,
    "total_tokens": 370,
    "completion_tokens_details": {"reasoning_tokens": 118},
}


def gpt_oss_chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        **chunk(delta, finish, **extra),
        "model": "openai/gpt-oss-120b",
        "service_tier": "on_demand",
    }


def gpt_oss_call(index: int, call_id: str, city: str) -> dict[str, Any]:
    arguments = json.dumps({"location": city})
    return {"index": index, **call("get_current_weather", arguments), "id": call_id}


GPT_OSS_TOOL_CALLS_STREAM = frames(
    gpt_oss_chunk({"role": "assistant", "content": None}, x_groq={"id": "req_01gptoss"}),
    *(gpt_oss_chunk({"reasoning": piece}) for piece in GPT_OSS_REASONING.split(". ")),
    gpt_oss_chunk({"tool_calls": [gpt_oss_call(0, "fc_7b1d", "Paris")]}),
    gpt_oss_chunk({"tool_calls": [gpt_oss_call(1, "fc_9e42", "Tokyo")]}),
    gpt_oss_chunk({}, "tool_calls", x_groq={"id": "req_01gptoss", "usage": GPT_OSS_USAGE}),
)
GPT_OSS_ANSWER = json.dumps(
    {
        "id": "chatcmpl-oss",
        "object": "chat.completion",
        "created": 1733000000,
        "model": "openai/gpt-oss-120b",
        "service_tier": "on_demand",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "reasoning": GPT_OSS_REASONING,
                    "content": "It is sunny in Paris.",
                },
                "finish_reason": "stop",
            }
        ],
        "usage": GPT_OSS_USAGE,
        "x_groq": {"id": "req_01gptoss"},
    }
)
# gpt-oss writes its calls in its own channel format; when Groq cannot parse one it
# answers 400 tool_use_failed with that text as the failed generation.
GPT_OSS_FAILED_GENERATION = (
    "<|channel|>commentary to=functions.get_current_weather <|constrain|>json"
    '<|message|>{"location": '
)
GPT_OSS_TOOL_USE_FAILED = json.dumps(
    {
        "error": {
            "message": "Failed to parse tool call arguments as JSON",
            "type": "invalid_request_error",
            "code": "tool_use_failed",
            "failed_generation": GPT_OSS_FAILED_GENERATION,
        }
    }
)


async def test_gpt_oss_reasoning_never_becomes_a_call_the_answer_or_a_message_sent_back(
    stack: dict[str, Any],
) -> None:
    await play(stack, frames=GPT_OSS_TOOL_CALLS_STREAM)
    events, result = await streamed(stack)
    started = [e.tool_call_started for e in events if e.HasField("tool_call_started")]
    # The JSON inside the reasoning named the same calls: still only the two real ones.
    assert [orjson.loads(s.arguments)["location"] for s in started] == ["Paris", "Tokyo"]
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED, result.error
    assert "I should call" not in result.answer
    # The profile streams no reasoning: no event carries it.
    assert not [e for e in events if e.HasField("reasoning_delta")]
    messages = await follow_up(stack)
    assert [weather(r) for _, _, r in results(messages)] == [("Paris", 15), ("Tokyo", 15)]
    for message in messages:
        # Groq refuses an assistant message carrying its reasoning (a 400).
        assert "reasoning" not in message and "reasoning_content" not in message
        assert "I should call" not in str(message.get("content") or "")
    [first, _] = [s for s in result.timeline.stages if s.kind == agent_pb2.STAGE_KIND_MODEL_CALL]
    usage = first.model_call.usage
    assert (usage.completion_tokens, usage.reasoning_tokens) == (150, 118)
    assert first.model_call.service_tier == "on_demand"


async def test_gpt_oss_unary_answer_is_its_content_and_its_reasoning_is_counted(
    stack: dict[str, Any],
) -> None:
    await play(stack, body=GPT_OSS_ANSWER)
    result = await unary(stack, "hello")
    assert (result.stop_reason, result.answer) == (
        agent_pb2.STOP_REASON_ANSWERED,
        "It is sunny in Paris.",
    )
    assert result.usage.reasoning_tokens == 118 and result.usage.completion_tokens == 150


async def test_gpt_oss_tool_use_failed_in_its_channel_format_gets_the_repair_round(
    stack: dict[str, Any],
) -> None:
    await play(stack, status=400, body=GPT_OSS_TOOL_USE_FAILED)
    result = await unary(stack)
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED, result.error
    stats = await control(stack, "GET", "/stats")
    repair = stats["recent_requests"][1]["messages"][-1]
    assert repair["role"] == "user" and GPT_OSS_FAILED_GENERATION in repair["content"]
