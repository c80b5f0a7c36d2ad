"""A tool server connection's breaker: its transitions logged and reported."""

from __future__ import annotations

import asyncio
import logging

import pytest

from sidecar.config import (
    parse_config,
)
from sidecar.tools.connection import ToolServerConnection
from sidecar.types import (
    BreakerState,
)


async def test_a_breaker_that_opens_or_closes_is_logged_and_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    breaker = {"failure_threshold": 3, "reset_timeout": 0.001}
    config = parse_config({"tool_servers": [{"name": "a", "address": "x:1", "breaker": breaker}]})
    changes: list[tuple[str, BreakerState, BreakerState]] = []
    connection = ToolServerConnection(
        config.tool_servers[0],
        on_discovered=lambda *_: None,
        on_breaker_change=lambda *change: changes.append(change),
    )
    caplog.set_level(logging.INFO, logger="sidecar.tools.connection")
    for _ in range(3):
        connection.breaker.record_failure(connection.breaker.admit())
    await asyncio.sleep(0.01)
    connection.breaker.record_failure(connection.breaker.admit())  # a failed trial
    await asyncio.sleep(0.01)
    connection.breaker.record_success(connection.breaker.admit())  # the next trial
    await connection.channel.close()
    assert [(old, new) for _, old, new in changes] == [
        (BreakerState.CLOSED, BreakerState.OPEN),
        (BreakerState.OPEN, BreakerState.HALF_OPEN),
        (BreakerState.HALF_OPEN, BreakerState.OPEN),
        (BreakerState.OPEN, BreakerState.HALF_OPEN),
        (BreakerState.HALF_OPEN, BreakerState.CLOSED),
    ]
    opened = [r for r in caplog.records if r.levelno == logging.WARNING]
    hidden = "its tools are hidden from the model for 0.001 s"
    assert [r.getMessage() for r in opened] == [
        f"tool server a: circuit breaker open (3 consecutive failures); {hidden}",
        f"tool server a: circuit breaker open (its trial call failed); {hidden}",
    ]
    assert "tool server a: circuit breaker closed" in caplog.messages
