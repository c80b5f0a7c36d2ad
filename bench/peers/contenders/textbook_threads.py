"""The textbook loop with its tool calls on a thread pool (the usual first fix)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.peers.contenders import textbook
from bench.workload import Mode, run_tool_sync


class Contender(textbook.Contender):
    def __init__(self) -> None:
        super().__init__()
        self._pool = ThreadPoolExecutor(64)

    def _run_tools(self, mode: Mode, calls: list[Any]) -> list[str]:
        def one(call: Any) -> str:
            sku = json.loads(call.function.arguments)["sku"]
            return json.dumps(run_tool_sync(mode, call.function.name, sku))

        return list(self._pool.map(one, calls))
