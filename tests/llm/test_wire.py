"""The model boundary: whatever a server sends is a valid response or model_bad_response.

Property-based over arbitrary JSON (hypothesis), and example-based over the shapes real
servers send (OpenAI, Groq, vLLM, llama.cpp server, Ollama), as their users report them.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.errors import ModelError, ModelUnavailable, ToolUseFailed
from sidecar.llm.model import ModelResponse
from sidecar.llm.wire import BAD_RESPONSE, StreamReader, parse_completion
from sidecar.types import ToolCall

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=25,
)
# Values near the real shapes, so the parser's deeper branches are reached too.
USAGE = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {},
        optional={
            "prompt_tokens": JSON,
            "completion_tokens": JSON,
            "prompt_tokens_details": st.one_of(
                JSON, st.fixed_dictionaries({"cached_tokens": JSON})
            ),
            "queue_time": JSON,
        },
    ),
)
FUNCTION = st.fixed_dictionaries(
    {}, optional={"name": JSON | st.text(max_size=8), "arguments": JSON}
)
TOOL_CALL = st.fixed_dictionaries(
    {}, optional={"id": JSON, "index": JSON | st.integers(0, 3), "type": JSON, "function": FUNCTION}
)
MESSAGE = st.fixed_dictionaries(
    {},
    optional={
        "content": JSON,
        "refusal": JSON,
        "tool_calls": st.one_of(JSON, st.lists(TOOL_CALL, max_size=3)),
    },
)
COMPLETION = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {},
        optional={
            "choices": st.one_of(
                JSON, st.lists(st.fixed_dictionaries({}, optional={"message": MESSAGE}), max_size=2)
            ),
            "usage": USAGE,
        },
    ),
)
DELTA = st.fixed_dictionaries(
    {},
    optional={
        "content": JSON,
        "refusal": JSON,
        "tool_calls": JSON | st.lists(TOOL_CALL, max_size=2),
    },
)
CHUNK = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {},
        optional={
            "choices": JSON
            | st.lists(
                st.fixed_dictionaries({}, optional={"delta": DELTA, "finish_reason": JSON}),
                max_size=1,
            ),
            "usage": USAGE,
            "error": JSON,
        },
    ),
)


def assert_valid(response: ModelResponse) -> None:
    """Everything the loop and the stores rely on."""
    assert isinstance(response.text, str)
    for count in (
        response.usage.prompt_tokens,
        response.usage.completion_tokens,
        response.usage.cached_prompt_tokens,
    ):
        assert isinstance(count, int) and 0 <= count <= 2**31 - 1
    assert response.usage.cached_prompt_tokens <= response.usage.prompt_tokens
    for timing in (response.provider.queue_time, response.provider.prompt_time):
        assert timing is None or (isinstance(timing, float) and timing >= 0)
    ids = [c.id for c in response.tool_calls]
    assert len(set(ids)) == len(ids)
    for call in response.tool_calls:
        assert call.id.startswith("call_") and len(call.id) == 29
        assert isinstance(call.name, str) and call.name
        assert isinstance(call.arguments, str)
    orjson.dumps(
        {
            "text": response.text,
            "refusal": response.refusal,
            "calls": [c.arguments for c in response.tool_calls],
        }
    )


@given(COMPLETION)
def test_any_completion_body_is_a_valid_response_or_a_bad_response(body: Any) -> None:
    try:
        response = parse_completion(json.dumps(body).encode())
    except ModelUnavailable as exc:
        assert exc.code == BAD_RESPONSE
        return
    assert_valid(response)


def read(lines: list[bytes], on_tool_call: list[ToolCall] | None = None) -> ModelResponse:
    text: list[str] = []
    reader = StreamReader(text.append, on_tool_call.append if on_tool_call is not None else None)
    for line in lines:
        reader.feed(line)
        if reader.done:
            break
    response = reader.response()
    assert "".join(text) == response.text
    return response


def frames(*chunks: Any) -> list[bytes]:
    return [b"data: " + orjson.dumps(c) for c in chunks] + [b"data: [DONE]"]


@given(st.lists(CHUNK, max_size=6))
def test_any_stream_is_a_valid_response_or_a_model_error(chunks: list[Any]) -> None:
    lines = [b"data: " + json.dumps(c).encode() for c in chunks]
    announced: list[ToolCall] = []
    try:
        response = read(lines, announced)
    except ToolUseFailed:
        return
    except ModelError as exc:
        assert exc.code in (BAD_RESPONSE, "model_stream_error")
        return
    assert_valid(response)
    final = {c.id: c for c in response.tool_calls}
    for call in announced:  # announced calls are the final ones, whole
        assert final[call.id] == call


@given(st.binary(max_size=40))
def test_any_bytes_after_data_are_a_chunk_or_a_bad_response(raw: bytes) -> None:
    try:
        read([b"data: " + raw])
    except ModelError as exc:
        assert exc.code in (BAD_RESPONSE, "model_stream_error")


# -- shapes real servers send -----------------------------------------------------------


def _completion(message: dict[str, Any], **extra: Any) -> bytes:
    return orjson.dumps({"choices": [{"message": message, "finish_reason": "stop"}], **extra})


def test_two_streamed_calls_without_an_index_stay_two_calls() -> None:
    # Ollama and some proxies: no index at all, each call's first fragment has an id.
    response = read(
        frames(
            {
                "choices": [
                    {
                        "delta": {
                            "tool_calls": [
                                {
                                    "id": "a",
                                    "function": {
                                        "name": "get_current_weather",
                                        "arguments": '{"city":',
                                    },
                                }
                            ]
                        }
                    }
                ]
            },
            {"choices": [{"delta": {"tool_calls": [{"function": {"arguments": '"Paris"}'}}]}}]},
            {
                "choices": [
                    {
                        "delta": {
                            "tool_calls": [
                                {
                                    "id": "b",
                                    "function": {
                                        "name": "get_current_weather",
                                        "arguments": '{"city":"Rome"}',
                                    },
                                }
                            ]
                        }
                    }
                ]
            },
        )
    )
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("get_current_weather", '{"city":"Paris"}'),
        ("get_current_weather", '{"city":"Rome"}'),
    ]


def test_index_zero_for_every_call_with_new_ids_starts_new_calls() -> None:
    # Servers that number every call 0: a new id is a new call.
    response = read(
        frames(
            {
                "choices": [
                    {
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "c1",
                                    "function": {"name": "add", "arguments": ""},
                                }
                            ]
                        }
                    }
                ]
            },
            {
                "choices": [
                    {
                        "delta": {
                            "tool_calls": [{"index": 0, "function": {"arguments": '{"a":2,"b":3}'}}]
                        }
                    }
                ]
            },
            {
                "choices": [
                    {
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "c2",
                                    "function": {"name": "multiply", "arguments": ""},
                                }
                            ]
                        }
                    }
                ]
            },
            {
                "choices": [
                    {
                        "delta": {
                            "tool_calls": [{"index": 0, "function": {"arguments": '{"a":2,"b":3}'}}]
                        }
                    }
                ]
            },
        )
    )
    assert [c.name for c in response.tool_calls] == ["add", "multiply"]
    assert all(c.arguments == '{"a":2,"b":3}' for c in response.tool_calls)


def test_calls_without_ids_and_the_same_index_split_on_a_new_name_after_whole_arguments() -> None:
    response = read(
        frames(
            {
                "choices": [
                    {
                        "delta": {
                            "tool_calls": [
                                {"index": 0, "function": {"name": "add", "arguments": '{"a":1}'}}
                            ]
                        }
                    }
                ]
            },
            {
                "choices": [
                    {
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "function": {"name": "multiply", "arguments": '{"a":2}'},
                                }
                            ]
                        }
                    }
                ]
            },
        )
    )
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("add", '{"a":1}'),
        ("multiply", '{"a":2}'),
    ]


def test_a_repeated_name_on_unfinished_arguments_continues_the_call() -> None:
    response = read(
        frames(
            {
                "choices": [
                    {
                        "delta": {
                            "tool_calls": [
                                {"index": 0, "function": {"name": "add", "arguments": '{"a":'}}
                            ]
                        }
                    }
                ]
            },
            {
                "choices": [
                    {
                        "delta": {
                            "tool_calls": [
                                {"index": 0, "function": {"name": "add", "arguments": "1}"}}
                            ]
                        }
                    }
                ]
            },
        )
    )
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("add", '{"a":1}')]


def test_calls_without_ids_get_distinct_ids_of_the_sidecars_own() -> None:
    body = _completion(
        {
            "content": None,
            "tool_calls": [
                {"type": "function", "function": {"name": "add", "arguments": '{"a":2}'}},
                {"id": "", "type": "function", "function": {"name": "multiply", "arguments": "{}"}},
                {"id": "same", "function": {"name": "add", "arguments": "{}"}},
                {"id": "same", "function": {"name": "add", "arguments": "{}"}},
            ],
        }
    )
    response = parse_completion(body)
    assert len({c.id for c in response.tool_calls}) == 4
    assert all(c.id.startswith("call_") for c in response.tool_calls)


def test_arguments_sent_as_an_object_are_read_as_their_json_text() -> None:
    # llama.cpp server sends function.arguments as a JSON object.
    body = _completion(
        {"tool_calls": [{"id": "x", "function": {"name": "f", "arguments": {"q": 1}}}]}
    )
    assert parse_completion(body).tool_calls[0].arguments == '{"q":1}'
    streamed = read(
        frames(
            {
                "choices": [
                    {
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "x",
                                    "function": {"name": "f", "arguments": {"q": 1}},
                                }
                            ]
                        }
                    }
                ]
            }
        )
    )
    assert streamed.tool_calls[0].arguments == '{"q":1}'


def test_content_parts_are_read_as_text() -> None:
    body = _completion({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})
    assert parse_completion(body).text == "ab"


def test_a_refusal_is_kept_as_a_refusal() -> None:
    # OpenAI: message.refusal, delta.refusal.
    assert (
        parse_completion(_completion({"content": None, "refusal": "I can't"})).refusal == "I can't"
    )
    streamed = read(
        frames(
            {"choices": [{"delta": {"refusal": "I "}}]},
            {"choices": [{"delta": {"refusal": "can't"}}]},
        )
    )
    assert streamed.refusal == "I can't" and streamed.text == ""


def test_groqs_tool_use_failed_inside_a_stream_is_tool_use_failed() -> None:
    lines = [
        b"event: error",
        b"data: "
        + orjson.dumps(
            {
                "error": {
                    "message": "Failed to call a function.",
                    "type": "invalid_request_error",
                    "code": "tool_use_failed",
                    "failed_generation": '<function=add{"a": 1}</function>',
                }
            }
        ),
    ]
    with pytest.raises(ToolUseFailed) as info:
        read(lines)
    assert info.value.failed_generation == '<function=add{"a": 1}</function>'


def test_groqs_usage_and_request_id_under_x_groq_are_read() -> None:
    response = read(
        frames(
            {
                "id": "chatcmpl-1",
                "x_groq": {"id": "req_01abc"},
                "choices": [{"delta": {"content": "hi"}}],
            },
            {
                "choices": [],
                "x_groq": {
                    "usage": {"prompt_tokens": 10, "completion_tokens": 2, "queue_time": 0.01}
                },
            },
        )
    )
    assert response.request_id == "req_01abc"
    assert (response.usage.prompt_tokens, response.provider.queue_time) == (10, 0.01)


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": -1},
        {"prompt_tokens": 1.5},
        {"prompt_tokens": [3]},
        {"prompt_tokens": 2**40},
    ],
)
def test_odd_token_counts_count_as_zero(usage: dict[str, Any]) -> None:
    response = parse_completion(_completion({"content": "ok"}, usage=usage))
    assert response.usage.prompt_tokens == 0 and response.text == "ok"


@pytest.mark.parametrize(
    "lines",
    [
        [b"data: 5"],
        [b"data: null"],
        frames({"choices": [{"delta": "text"}]}),
        frames(
            {
                "choices": [
                    {"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}
                ]
            }
        ),
        frames({"choices": [{"delta": {"content": "a"}}], "usage": "lots"}),
        frames({"choices": []}),
        [b"data: [DONE]"],
    ],
    ids=[
        "a number",
        "null",
        "a string delta",
        "no function name",
        "string usage",
        "no choices",
        "empty",
    ],
)
def test_malformed_streams_are_one_error(lines: list[bytes]) -> None:
    with pytest.raises(ModelUnavailable) as info:
        read(lines)
    assert info.value.code == BAD_RESPONSE


def test_two_calls_under_one_id_stay_two_calls() -> None:
    # A model (or a server) reusing an id: the index, or a name after whole arguments,
    # says a new call began.
    by_index = read(
        frames(
            {
                "choices": [
                    {
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "same",
                                    "function": {"name": "refund", "arguments": '{"order":"a"}'},
                                },
                                {
                                    "index": 1,
                                    "id": "same",
                                    "function": {"name": "refund", "arguments": '{"order":"b"}'},
                                },
                            ]
                        }
                    }
                ]
            }
        )
    )
    by_name = read(
        frames(
            {
                "choices": [
                    {
                        "delta": {
                            "tool_calls": [
                                {
                                    "id": "same",
                                    "function": {"name": "refund", "arguments": '{"order":"a"}'},
                                }
                            ]
                        }
                    }
                ]
            },
            {
                "choices": [
                    {
                        "delta": {
                            "tool_calls": [
                                {
                                    "id": "same",
                                    "function": {"name": "refund", "arguments": '{"order":"b"}'},
                                }
                            ]
                        }
                    }
                ]
            },
        )
    )
    for response in (by_index, by_name):
        assert [c.arguments for c in response.tool_calls] == ['{"order":"a"}', '{"order":"b"}']
        assert len({c.id for c in response.tool_calls}) == 2
