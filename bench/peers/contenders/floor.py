"""The floor: a minimal hand-written asyncio loop, raw aiohttp, in-process tools."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson

from bench.workload import MODEL, PROMPT, SYSTEM, Mode, openai_tools, run_tool_async

TOOLS = openai_tools()


class Contender:
    def __init__(self) -> None:
        self._http: aiohttp.ClientSession | None = None

    async def _post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._http is None:
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), json_serialize=lambda o: o
            )
        async with self._http.post(
            url, data=orjson.dumps(body), headers={"content-type": "application/json"}
        ) as response:
            response.raise_for_status()
            result: dict[str, Any] = orjson.loads(await response.read())
            return result

    async def run_once(self, mode: Mode, target: str) -> None:
        url = f"{target}/chat/completions"
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": PROMPT},
        ]
        for _ in range(4):
            reply = await self._post(url, {"model": MODEL, "messages": messages, "tools": TOOLS})
            message = reply["choices"][0]["message"]
            calls = message.get("tool_calls") or []
            if not calls:
                return
            messages.append(message)
            results = await asyncio.gather(
                *(
                    run_tool_async(
                        mode, c["function"]["name"], orjson.loads(c["function"]["arguments"])["sku"]
                    )
                    for c in calls
                )
            )
            for call, result in zip(calls, results, strict=True):
                content = orjson.dumps(result).decode()
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        raise RuntimeError("no answer after 4 model calls")
