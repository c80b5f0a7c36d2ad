"""The provider's own timing reaches the timeline in the shapes providers send it.

Groq reports ``queue_time``, ``prompt_time`` and ``completion_time`` in the ``usage`` of a
completion; when streaming it also sends them under ``x_groq.usage`` in the last chunk,
which may be the only place they are. A small real HTTP server plays that endpoint here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web

from sidecar.config import RetryPolicy
from sidecar.llm.model import ModelRequest
from sidecar.llm.openai_model import OpenAICompatibleModel
from sidecar.types import ProviderTiming, Usage

_GROQ_USAGE = {
    "queue_time": 0.012,
    "prompt_tokens": 40,
    "prompt_time": 0.004,
    "completion_tokens": 2,
    "completion_time": 0.006,
    "total_tokens": 42,
    "total_time": 0.022,
}


def _chunk(**fields: object) -> bytes:
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "llm-simulator"}
    return b"data: " + orjson.dumps({**base, **fields}) + b"\n\n"


async def _stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    delta = {"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": None}
    await response.write(_chunk(choices=[delta], x_groq={"id": "req_1"}))
    done = {"index": 0, "delta": {}, "finish_reason": "stop"}
    await response.write(_chunk(choices=[done], x_groq={"id": "req_1", "usage": _GROQ_USAGE}))
    await response.write(b"data: [DONE]\n\n")
    return response


@pytest.fixture
async def endpoint() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


async def test_groq_timing_sent_only_under_x_groq_reaches_the_response(endpoint: str) -> None:
    model = OpenAICompatibleModel(
        base_url=endpoint,
        api_key="none",
        model="llm-simulator",
        retry=RetryPolicy(max_attempts=1),
        timeout=10,
    )
    try:
        request = ModelRequest([{"role": "user", "content": "hi"}], [], True, 10)
        response = await model.complete(request)
    finally:
        await model.close()
    assert response.text == "hi"
    assert response.provider == ProviderTiming(0.012, 0.004, 0.006)
    assert response.usage == Usage(prompt_tokens=40, completion_tokens=2)
