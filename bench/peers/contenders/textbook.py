"""The textbook loop: the synchronous ``openai`` client, tool calls one after another."""

from __future__ import annotations

import json
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletionFunctionToolParam

from bench.workload import MODEL, PROMPT, SYSTEM, Mode, openai_tools, run_tool_sync

TOOLS = cast(list[ChatCompletionFunctionToolParam], openai_tools())


class Contender:
    parallel_tools = False

    def __init__(self) -> None:
        self._clients: dict[str, openai.OpenAI] = {}

    def _client(self, target: str) -> openai.OpenAI:
        client = self._clients.get(target)
        if client is None:
            client = self._clients[target] = openai.OpenAI(
                base_url=target, api_key="bench", max_retries=0
            )
        return client

    def _run_tools(self, mode: Mode, calls: list[Any]) -> list[str]:
        return [
            json.dumps(
                run_tool_sync(mode, c.function.name, json.loads(c.function.arguments)["sku"])
            )
            for c in calls
        ]

    def run_once(self, mode: Mode, target: str) -> None:
        client = self._client(target)
        messages: list[Any] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": PROMPT},
        ]
        for _ in range(4):
            reply = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
            message = reply.choices[0].message
            if not message.tool_calls:
                return
            messages.append(message.model_dump(exclude_none=True))
            for call, content in zip(
                message.tool_calls, self._run_tools(mode, message.tool_calls), strict=True
            ):
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        raise RuntimeError("no answer after 4 model calls")
