"""The built-in LLM simulator, driven over real HTTP with the official ``openai`` client.

Most tests share one simulator process (reset before each test through its control API);
tests of start-up options run their own process or an in-process ``LLMSimulator``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import fastjsonschema
import openai
import orjson
import pytest

from llmsim import LLMSimulator, SimulatorOptions
from sidecar.testing import ServerProcess, start_process

pytestmark = pytest.mark.timeout(30)

FINGERPRINT = "agent-sidecar-llm-simulator"
ORDER_QUESTION = "what is the status of order 20250101, and where is its parcel?"
PRESALES_QUESTION = "Is SKU X-100 in inventory, what is its price, and is there a discount?"


def _tool(name: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name.replace('_', ' ')} tool.",
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


SKU = {"sku": {"type": "string"}}
ORDER = {"order_id": {"type": "string"}}
TOOLS = [
    _tool("get_order_status", ORDER, ["order_id"]),
    _tool("track_parcel", ORDER, ["order_id"]),
    _tool("check_inventory", SKU, ["sku"]),
    _tool("get_price", {**SKU, "currency": {"type": "string", "enum": ["EUR", "USD"]}}, ["sku"]),
    _tool("get_discount", SKU, ["sku"]),
    _tool("reserve_stock", {**SKU, "quantity": {"type": "integer", "minimum": 1}}, ["sku"]),
    _tool("refund_order", {**ORDER, "reason": {"type": "string"}}, ["order_id", "reason"]),
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


@pytest.fixture(scope="module")
def sim_process() -> Iterator[ServerProcess]:
    process = start_process(["-m", "llmsim", "--port", "0"])
    yield process
    assert process.stop() == 0


@pytest.fixture
async def root(sim_process: ServerProcess) -> AsyncIterator[str]:
    """The shared simulator's root URL, with stats and faults reset."""
    url = f"http://{sim_process.address}"
    async with aiohttp.ClientSession() as http, http.post(f"{url}/sim/reset") as response:
        assert response.status == 200
    yield url


@pytest.fixture
async def client(root: str) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=f"{root}/openai/v1", api_key="sim", max_retries=0
    ) as client:
        yield client


async def _control(root: str, method: str, path: str, body: Any = None) -> Any:
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, f"{root}{path}", json=body) as response,
    ):
        document = await response.json()
        if response.status != 200:
            return response.status, document
        return document


async def _faults(root: str, *faults: dict[str, Any]) -> None:
    reply = await _control(root, "POST", "/sim/faults", {"faults": list(faults)})
    assert reply["queued"] == len(faults)


async def _ask(client: openai.AsyncOpenAI, text: str, **kwargs: Any) -> Any:
    return await client.chat.completions.create(
        model="llm-simulator",
        messages=[{"role": "user", "content": text}],
        **kwargs,
    )


async def _stream(client: openai.AsyncOpenAI, text: str, **kwargs: Any) -> list[Any]:
    stream = await _ask(client, text, stream=True, **kwargs)
    return [chunk async for chunk in stream]


def _calls(response: Any) -> list[tuple[str, Any]]:
    message = response.choices[0].message
    return [(c.function.name, orjson.loads(c.function.arguments)) for c in message.tool_calls]


def _reassemble(chunks: list[Any]) -> dict[int, dict[str, Any]]:
    calls: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            for fragment in choice.delta.tool_calls or ():
                entry = calls.setdefault(fragment.index, {"fragments": 0, "arguments": ""})
                entry["fragments"] += 1
                if fragment.id:
                    entry["id"] = fragment.id
                    entry["name"] = fragment.function.name
                    assert fragment.type == "function"
                    assert fragment.function.arguments == ""
                else:
                    entry["arguments"] += fragment.function.arguments
    return calls


# -- answers ---------------------------------------------------------------------------


async def test_plain_question_gets_a_text_answer_marked_as_simulated(
    client: openai.AsyncOpenAI,
) -> None:
    response = await _ask(client, "Tell me a joke about latency.", tools=TOOLS)

    choice = response.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.content.startswith("[simulated] ")
    assert "joke about latency" in choice.message.content
    assert response.model == "llm-simulator"
    assert response.system_fingerprint == FINGERPRINT
    usage = response.usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens > 0
    assert usage.prompt_tokens_details.cached_tokens >= 0
    for field in ("queue_time", "prompt_time", "completion_time", "total_time"):
        assert isinstance(getattr(usage, field), float)


async def test_streamed_text_arrives_in_several_deltas_that_join_to_the_plain_answer(
    client: openai.AsyncOpenAI,
) -> None:
    plain = await _ask(client, "Tell me a joke about latency.")
    chunks = await _stream(client, "Tell me a joke about latency.")

    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(pieces) > 3
    assert "".join(pieces) == plain.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.system_fingerprint == FINGERPRINT for c in chunks)


async def test_order_question_plans_status_and_parcel_calls_with_the_order_id(
    client: openai.AsyncOpenAI,
) -> None:
    response = await _ask(client, ORDER_QUESTION, tools=TOOLS)

    assert response.choices[0].finish_reason == "tool_calls"
    assert response.choices[0].message.content is None
    assert _calls(response) == [
        ("get_order_status", {"order_id": "20250101"}),
        ("track_parcel", {"order_id": "20250101"}),
    ]
    ids = [c.id for c in response.choices[0].message.tool_calls]
    assert all(i.startswith("call_") for i in ids) and len(set(ids)) == 2


async def test_presales_question_plans_three_parallel_calls_in_one_response(
    client: openai.AsyncOpenAI,
) -> None:
    response = await _ask(client, PRESALES_QUESTION, tools=TOOLS)

    assert _calls(response) == [
        ("check_inventory", {"sku": "X-100"}),
        ("get_price", {"sku": "X-100"}),
        ("get_discount", {"sku": "X-100"}),
    ]


async def test_parallel_tool_calls_false_limits_a_response_to_one_call(
    client: openai.AsyncOpenAI,
) -> None:
    response = await _ask(client, PRESALES_QUESTION, tools=TOOLS, parallel_tool_calls=False)

    assert _calls(response) == [("check_inventory", {"sku": "X-100"})]


async def test_namespaced_tool_names_match_and_a_named_tool_is_chosen_alone(
    client: openai.AsyncOpenAI,
) -> None:
    namespaced = [
        _tool("orders__get_order_status", ORDER, ["order_id"]),
        _tool("orders__refund_order", ORDER, ["order_id"]),
        _tool("shipping.track_parcel", ORDER, ["order_id"]),
    ]
    planned = await _ask(client, ORDER_QUESTION, tools=namespaced)
    named = await _ask(client, "please call get_price for X-7", tools=TOOLS)

    assert [name for name, _ in _calls(planned)] == [
        "orders__get_order_status",
        "shipping.track_parcel",
    ]
    assert _calls(named) == [("get_price", {"sku": "X-7"})]


async def test_tool_choice_none_answers_with_text_even_when_tools_match(
    client: openai.AsyncOpenAI,
) -> None:
    response = await _ask(client, ORDER_QUESTION, tools=TOOLS, tool_choice="none")

    assert response.choices[0].message.tool_calls is None
    assert response.choices[0].message.content.startswith("[simulated] ")


async def test_streamed_tool_call_fragments_reassemble_to_the_non_streamed_calls(
    client: openai.AsyncOpenAI,
) -> None:
    plain = await _ask(client, PRESALES_QUESTION, tools=TOOLS)
    chunks = await _stream(client, PRESALES_QUESTION, tools=TOOLS)

    streamed = _reassemble(chunks)
    assert sorted(streamed) == [0, 1, 2]
    assert [(streamed[i]["name"], orjson.loads(streamed[i]["arguments"])) for i in range(3)] == (
        _calls(plain)
    )
    assert all(entry["fragments"] >= 3 for entry in streamed.values())  # id + 2+ pieces
    assert all(entry["id"].startswith("call_") for entry in streamed.values())
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


async def test_include_usage_adds_a_final_chunk_with_usage_and_no_choices(
    client: openai.AsyncOpenAI,
) -> None:
    with_usage = await _stream(client, "hello", stream_options={"include_usage": True})
    without = await _stream(client, "hello")

    last = with_usage[-1]
    assert last.choices == []
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    assert last.usage.completion_time >= 0
    assert all(chunk.usage is None for chunk in with_usage[:-1])
    assert all(chunk.usage is None for chunk in without)


async def test_tool_results_are_summarised_in_a_text_answer(client: openai.AsyncOpenAI) -> None:
    calls = await _ask(client, ORDER_QUESTION, tools=TOOLS)
    tool_calls = calls.choices[0].message.tool_calls
    results = ['{"status":"shipped"}', "x" * 500]
    messages: list[Any] = [
        {"role": "user", "content": ORDER_QUESTION},
        calls.choices[0].message.model_dump(exclude_none=True),
        *(
            {"role": "tool", "tool_call_id": call.id, "content": result}
            for call, result in zip(tool_calls, results, strict=True)
        ),
    ]
    response = await client.chat.completions.create(
        model="llm-simulator", messages=messages, tools=TOOLS
    )

    answer = response.choices[0].message.content
    assert response.choices[0].finish_reason == "stop"
    assert answer.startswith("[simulated] ")
    assert 'get_order_status: {"status":"shipped"}' in answer
    assert "track_parcel: xxx" in answer
    assert "x" * 300 not in answer  # long results are truncated


async def test_long_json_results_are_quoted_with_whole_members_and_name_what_is_left_out(
    client: openai.AsyncOpenAI,
) -> None:
    calls = await _ask(client, ORDER_QUESTION, tools=TOOLS)
    tool_calls = calls.choices[0].message.tool_calls
    order = {
        "order_id": "20250101",
        "items": [{"sku": f"SKU-{n:03}", "note": "a long line of text " * 3} for n in range(5)],
        "status": "shipped",
        "carrier": "Sample Express",
    }
    results = [orjson.dumps(order).decode(), orjson.dumps(list(range(200))).decode()]
    messages: list[Any] = [
        {"role": "user", "content": ORDER_QUESTION},
        calls.choices[0].message.model_dump(exclude_none=True),
        *(
            {"role": "tool", "tool_call_id": call.id, "content": result}
            for call, result in zip(tool_calls, results, strict=True)
        ),
    ]
    response = await client.chat.completions.create(
        model="llm-simulator", messages=messages, tools=TOOLS
    )
    answer = response.choices[0].message.content
    lines = dict(line.removeprefix("- ").split(": ", 1) for line in answer.splitlines()[1:])
    # The object: the members that fit, whole (the long one skipped), then what is left out.
    quoted, left_out = lines["get_order_status"].split(" (left out: ")
    assert orjson.loads(quoted) == {k: order[k] for k in ("order_id", "status", "carrier")}
    assert left_out == "items)"
    # The array: the first items, whole, and a count of the rest.
    quoted, rest = lines["track_parcel"].split(" (and ")
    kept = orjson.loads(quoted)
    assert kept == list(range(len(kept))) and rest == f"{200 - len(kept)} more)"
    assert "…" not in answer


async def test_json_schema_response_format_yields_a_document_that_fits_the_schema(
    client: openai.AsyncOpenAI,
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "order_id": {"type": "string"},
            "status": {"type": "string", "enum": ["pending", "shipped", "delivered"]},
            "items": {"type": "integer", "minimum": 1, "maximum": 9},
            "express": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "address": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
            "summary": {"type": "string"},
        },
        "required": ["order_id", "status", "items", "express", "tags", "address", "summary"],
        "additionalProperties": False,
    }
    response = await _ask(
        client,
        "Summarise order 20250101",
        response_format={"type": "json_schema", "json_schema": {"name": "o", "schema": schema}},
    )

    document = orjson.loads(response.choices[0].message.content)
    fastjsonschema.compile(schema)(document)
    assert document["order_id"] == "20250101"
    assert document["summary"].startswith("[simulated] ")


async def test_json_object_response_format_yields_a_json_object(
    client: openai.AsyncOpenAI,
) -> None:
    response = await _ask(client, "hello", response_format={"type": "json_object"})

    document = orjson.loads(response.choices[0].message.content)
    assert document["simulated"] is True


async def test_more_than_one_choice_is_rejected_like_groq(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await _ask(client, "hello", n=2)

    assert "'n'" in caught.value.message


async def test_models_are_listed_under_both_prefixes(root: str) -> None:
    for prefix in ("/openai/v1", "/v1"):
        listing = await _control(root, "GET", f"{prefix}/models")
        assert listing["object"] == "list" and listing["data"]


# -- headers and stats -----------------------------------------------------------------


async def test_rate_limit_headers_count_remaining_requests_down(
    client: openai.AsyncOpenAI,
) -> None:
    first = await client.chat.completions.with_raw_response.create(
        model="llm-simulator", messages=[{"role": "user", "content": "one"}]
    )
    second = await client.chat.completions.with_raw_response.create(
        model="llm-simulator", messages=[{"role": "user", "content": "two"}]
    )

    for name in ("requests", "tokens"):
        for kind in ("limit", "remaining", "reset"):
            assert f"x-ratelimit-{kind}-{name}" in first.headers
    remaining = [int(r.headers["x-ratelimit-remaining-requests"]) for r in (first, second)]
    assert remaining[1] == remaining[0] - 1
    assert first.headers["x-request-id"] != second.headers["x-request-id"]


async def test_stats_count_requests_statuses_and_streams_and_keep_the_last_body(
    root: str, client: openai.AsyncOpenAI
) -> None:
    await _ask(client, "one")
    await _stream(client, "two")
    await _faults(root, {"kind": "status", "status": 503})
    with pytest.raises(openai.InternalServerError):
        await _ask(client, "three", tools=TOOLS)

    stats = await _control(root, "GET", "/sim/stats")
    assert stats["requests"] == 3
    assert stats["streamed"] == 1
    assert stats["by_status"] == {"200": 2, "503": 1}
    assert stats["last_request"]["messages"] == [{"role": "user", "content": "three"}]
    assert [t["function"]["name"] for t in stats["last_request"]["tools"]] == list(SCHEMAS)

    await _control(root, "POST", "/sim/reset")
    assert (await _control(root, "GET", "/sim/stats"))["requests"] == 0


# -- faults ----------------------------------------------------------------------------


async def test_429_fault_raises_rate_limit_error_with_retry_after_header(
    root: str, client: openai.AsyncOpenAI
) -> None:
    await _faults(root, {"kind": "status", "status": 429, "retry_after": 7})

    with pytest.raises(openai.RateLimitError) as caught:
        await _ask(client, "hello")

    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.code == "rate_limit_exceeded"
    assert "x-ratelimit-remaining-requests" in caught.value.response.headers


async def test_500_fault_raises_internal_server_error(
    root: str, client: openai.AsyncOpenAI
) -> None:
    await _faults(root, {"kind": "status", "status": 500})

    with pytest.raises(openai.InternalServerError) as caught:
        await _ask(client, "hello")

    assert caught.value.status_code == 500
    assert caught.value.message.endswith("[simulated] Internal Server Error")


async def test_hang_fault_holds_the_request_until_the_client_timeout_fires(
    root: str, client: openai.AsyncOpenAI
) -> None:
    await _faults(root, {"kind": "hang"})

    with pytest.raises(openai.APITimeoutError):
        await _ask(client, "hello", timeout=0.3)

    answer = await _ask(client, "hello again")  # the hang consumed its one unit
    assert answer.choices[0].message.content.startswith("[simulated] ")


async def test_malformed_arguments_fault_sends_arguments_that_are_not_json(
    root: str, client: openai.AsyncOpenAI
) -> None:
    await _faults(root, {"kind": "malformed_arguments"})

    response = await _ask(client, ORDER_QUESTION, tools=TOOLS)

    calls = response.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_order_status", "track_parcel"]
    for call in calls:
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(call.function.arguments)


async def test_invalid_arguments_fault_sends_json_that_breaks_the_tool_schema(
    root: str, client: openai.AsyncOpenAI
) -> None:
    await _faults(root, {"kind": "invalid_arguments"})

    response = await _ask(client, "reserve stock of X-100, quantity: 2", tools=TOOLS)

    [call] = response.choices[0].message.tool_calls
    arguments = orjson.loads(call.function.arguments)
    assert call.function.name == "reserve_stock"
    with pytest.raises(fastjsonschema.JsonSchemaValueException):
        fastjsonschema.compile(SCHEMAS["reserve_stock"])(arguments)


async def test_tool_use_failed_fault_answers_400_with_the_failed_generation(
    root: str, client: openai.AsyncOpenAI
) -> None:
    await _faults(root, {"kind": "tool_use_failed"})

    with pytest.raises(openai.BadRequestError) as caught:
        await _ask(client, ORDER_QUESTION, tools=TOOLS)

    error = caught.value.body
    assert caught.value.code == "tool_use_failed"
    assert isinstance(error, dict)
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("Failed to call a function. Please adjust your prompt.")
    assert error["failed_generation"].startswith("<function=get_order_status>")


async def test_unknown_tool_fault_calls_a_tool_that_was_not_offered(
    root: str, client: openai.AsyncOpenAI
) -> None:
    await _faults(root, {"kind": "unknown_tool"})

    response = await _ask(client, ORDER_QUESTION, tools=TOOLS)

    [call] = response.choices[0].message.tool_calls
    assert call.function.name not in SCHEMAS


async def test_disconnect_fault_drops_a_plain_request_before_any_response(
    root: str, client: openai.AsyncOpenAI
) -> None:
    await _faults(root, {"kind": "disconnect"})

    with pytest.raises(openai.APIConnectionError):
        await _ask(client, "hello")


async def test_disconnect_fault_cuts_a_stream_midway(root: str, client: openai.AsyncOpenAI) -> None:
    await _faults(root, {"kind": "disconnect"})
    received: list[Any] = []

    with pytest.raises(openai.APIConnectionError):
        stream = await _ask(client, "a long enough question to stream", stream=True)
        async for chunk in stream:
            received.append(chunk)

    assert received  # some chunks arrived before the cut
    assert all(chunk.choices[0].finish_reason is None for chunk in received)


async def test_queued_faults_are_consumed_in_order_then_normal_service_resumes(
    root: str, client: openai.AsyncOpenAI
) -> None:
    await _faults(
        root,
        {"kind": "status", "status": 503, "times": 2},
        {"kind": "status", "status": 429},
        {"kind": "unknown_tool"},
    )
    statuses = []
    for _ in range(3):
        with pytest.raises(openai.APIStatusError) as caught:
            await _ask(client, ORDER_QUESTION, tools=TOOLS)
        statuses.append(caught.value.status_code)
    odd = await _ask(client, ORDER_QUESTION, tools=TOOLS)
    normal = await _ask(client, ORDER_QUESTION, tools=TOOLS)

    assert statuses == [503, 503, 429]
    assert odd.choices[0].message.tool_calls[0].function.name not in SCHEMAS
    assert [name for name, _ in _calls(normal)] == ["get_order_status", "track_parcel"]


async def test_fault_queue_can_be_cleared_and_rejects_malformed_specs(
    root: str, client: openai.AsyncOpenAI
) -> None:
    await _faults(root, {"kind": "status", "status": 500, "times": 3})

    cleared = await _control(root, "DELETE", "/sim/faults")
    status, error = await _control(root, "POST", "/sim/faults", {"faults": [{"kind": "boom"}]})
    answer = await _ask(client, "hello")

    assert cleared == {"cleared": 3}
    assert status == 400 and "kind" in error["error"]["message"]
    assert answer.choices[0].finish_reason == "stop"


# -- start-up options ------------------------------------------------------------------


SCENARIO = """
- match: "refund"
  steps:
    - tool_calls:
        - name: refund_order
          arguments: {order_id: "A-1", reason: "damaged"}
        - name: get_order_status
    - text: "Your refund is on its way."
      latency_ms: 0
- match: "flaky"
  steps:
    - fault: {kind: status, status: 503}
"""


async def test_scenario_file_scripts_each_step_then_falls_back_to_planning(
    tmp_path: Path,
) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    process = start_process(["-m", "llmsim", "--port", "0", "--scenario", str(scenario)])
    try:
        async with openai.AsyncOpenAI(
            base_url=f"http://{process.address}/v1", api_key="sim", max_retries=0
        ) as client:
            question = {"role": "user", "content": "I want a REFUND for order 20250101"}
            step0 = await client.chat.completions.create(
                model="llm-simulator", messages=[question], tools=TOOLS
            )
            calls = step0.choices[0].message.tool_calls
            history: list[Any] = [
                question,
                step0.choices[0].message.model_dump(exclude_none=True),
                *({"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in calls),
            ]
            step1 = await client.chat.completions.create(model="llm-simulator", messages=history)
            history += [{"role": "assistant", "content": "..."}, {"role": "user", "content": "?"}]
            unmatched = await client.chat.completions.create(
                model="llm-simulator", messages=history
            )
            with pytest.raises(openai.InternalServerError):
                await _ask(client, "a flaky question")
            retried = await _ask(client, "a flaky question")
    finally:
        assert process.stop() == 0

    assert _calls(step0) == [
        ("refund_order", {"order_id": "A-1", "reason": "damaged"}),
        ("get_order_status", {"order_id": "20250101"}),
    ]
    assert step1.choices[0].message.content == "[simulated] Your refund is on its way."
    assert unmatched.choices[0].message.content == "[simulated] You said: ?"
    assert retried.choices[0].message.content.startswith("[simulated] You said:")


async def test_ttft_and_token_latency_options_delay_answers() -> None:
    options = SimulatorOptions(ttft_ms=200, token_ms=40)
    async with (
        LLMSimulator(options) as simulator,
        openai.AsyncOpenAI(base_url=simulator.base_url, api_key="sim", max_retries=0) as client,
    ):
        started = time.perf_counter()
        await _ask(client, "hello")
        plain = time.perf_counter() - started
        started = time.perf_counter()
        stream = await _ask(client, "one two three four five six", stream=True)
        first_token = None
        async for chunk in stream:
            if first_token is None and chunk.choices[0].delta.content:
                first_token = time.perf_counter() - started
        streamed = time.perf_counter() - started

    assert plain >= 0.15
    assert first_token is not None and first_token >= 0.15
    assert streamed >= first_token + 0.15  # six-plus chunks at 40 ms each


async def test_prefill_latency_grows_with_the_uncached_prompt_and_requests_are_kept() -> None:
    options = SimulatorOptions(prefill_ms_per_1k=100)
    async with (
        LLMSimulator(options) as simulator,
        openai.AsyncOpenAI(base_url=simulator.base_url, api_key="sim", max_retries=0) as client,
    ):
        long_text = "word " * 4_000  # about 5,000 tokens: 500 ms of simulated prefill
        response = await _ask(client, long_text)
        await _ask(client, "short")
        stats = simulator.stats()

    # The delay counts from the request's arrival: the simulator's own work is inside it.
    usage = response.usage
    assert usage.queue_time + usage.prompt_time >= 0.45
    assert [r["messages"][0]["content"] for r in stats["recent_requests"]] == [long_text, "short"]


async def test_in_process_simulator_serves_on_its_base_url_and_stops() -> None:
    simulator = LLMSimulator(SimulatorOptions())
    port = await simulator.start()
    try:
        assert simulator.base_url == f"http://127.0.0.1:{port}/openai/v1"
        async with openai.AsyncOpenAI(
            base_url=simulator.base_url, api_key="sim", max_retries=0
        ) as client:
            response = await _ask(client, ORDER_QUESTION, tools=TOOLS)
        assert [name for name, _ in _calls(response)] == ["get_order_status", "track_parcel"]
        assert simulator.stats()["by_status"] == {"200": 1}
    finally:
        await simulator.stop()

    async with openai.AsyncOpenAI(
        base_url=simulator.base_url, api_key="sim", max_retries=0
    ) as client:
        with pytest.raises(openai.APIConnectionError):
            await _ask(client, "anyone there?")


async def test_chaos_rate_and_enforced_rate_limits_fail_requests_in_process() -> None:
    chaos = SimulatorOptions(fault_rate_500=1.0, seed=1)
    limited = SimulatorOptions(ratelimit_requests=1, enforce_ratelimits=True)
    async with LLMSimulator(chaos) as flaky, LLMSimulator(limited) as strict:
        async with openai.AsyncOpenAI(
            base_url=flaky.base_url, api_key="sim", max_retries=0
        ) as client:
            with pytest.raises(openai.InternalServerError):
                await _ask(client, "hello")
        async with openai.AsyncOpenAI(
            base_url=strict.base_url, api_key="sim", max_retries=0
        ) as client:
            await _ask(client, "first")
            with pytest.raises(openai.RateLimitError) as caught:
                await _ask(client, "second")

    assert int(caught.value.response.headers["retry-after"]) >= 1
    assert caught.value.response.headers["x-ratelimit-remaining-requests"] == "0"
