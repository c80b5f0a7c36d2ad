"""What waits for what in a step, and which failures are retried, through real processes.

Calls whose resource keys conflict (one writes a key the other reads or writes) run in the
model's order; the rest never wait. Idempotent calls are retried on UNAVAILABLE and
RESOURCE_EXHAUSTED only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar.testing import ServerProcess
from tests.support.stack import (
    SimControl,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
    tool_stats,
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with simulator() as sim, scripted_toolserver() as tools:
        server = {
            "name": "scripted",
            "address": tools.address,
            "retry": {"max_attempts": 3, "initial_backoff": 0.0},
            "breaker": {"failure_threshold": 100},
        }
        # Unary runs: nothing starts early from a stream, so the step alone orders calls.
        config = sidecar_config(sim, [server])
        with sidecar(config, tmp_path_factory.mktemp("order")) as side:
            yield {"sim": sim, "tools": tools, "sidecar": side}


def model_calls(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """A raw fault: the model's answer asks for these calls, in this order."""
    tool_calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, (n, a) in enumerate(calls)
    ]
    body = {"choices": [{"message": {"tool_calls": tool_calls}, "finish_reason": "tool_calls"}]}
    return {"kind": "raw", "body": json.dumps(body)}


async def run_calls(
    stack: dict[str, ServerProcess], client: AgentClient, *calls: tuple[str, dict[str, Any]]
) -> list[str]:
    """Run one turn making ``calls``; return what the tool server saw, in order (each entry
    ``start`` or ``end``, the tool and the key)."""
    before = len((await tool_stats(stack["tools"].address))["order"])
    await SimControl(stack["sim"].address).faults(model_calls(*calls))
    session = await client.create_session()
    result = (await client.run(session.session_id, "go")).result
    assert result.tool_calls == len(calls)
    order = (await tool_stats(stack["tools"].address))["order"][before:]
    return [_event(o) for o in order]


def _event(entry: str) -> str:
    what = entry.split(":")[0]
    if what.startswith("reserved "):
        return f"end write {what.removeprefix('reserved ')}"
    if what.startswith("stocked "):
        return f"end read {what.removeprefix('stocked ')}"
    if what.startswith("stock "):
        return f"start read {what.removeprefix('stock ')}"
    return f"start write {what}"


async def test_a_writer_waits_for_an_earlier_reader_of_its_key(
    stack: dict[str, ServerProcess], client: AgentClient
) -> None:
    seen = await run_calls(
        stack, client, ("stock", {"sku": "K", "ms": 150}), ("reserve", {"sku": "K", "ms": 1})
    )
    assert seen == ["start read K", "end read K", "start write K", "end write K"]


async def test_write_read_write_of_one_key_run_one_after_another(
    stack: dict[str, ServerProcess], client: AgentClient
) -> None:
    seen = await run_calls(
        stack,
        client,
        ("reserve", {"sku": "K", "ms": 100}),
        ("stock", {"sku": "K", "ms": 100}),
        ("reserve", {"sku": "K", "ms": 1}),
    )
    assert seen == [
        "start write K",
        "end write K",
        "start read K",
        "end read K",
        "start write K",
        "end write K",
    ]


async def test_readers_of_one_key_and_calls_on_other_keys_never_wait(
    stack: dict[str, ServerProcess], client: AgentClient
) -> None:
    seen = await run_calls(
        stack,
        client,
        ("stock", {"sku": "K", "ms": 150}),
        ("stock", {"sku": "K", "ms": 150}),
        ("reserve", {"sku": "L", "ms": 150}),
    )
    starts = [e for e in seen[:3]]
    assert sorted(starts) == ["start read K", "start read K", "start write L"]  # all at once


RETRIED = ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]
FINAL = [
    "DEADLINE_EXCEEDED",
    "INTERNAL",
    "INVALID_ARGUMENT",
    "UNKNOWN",
    "NOT_FOUND",
    "PERMISSION_DENIED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "UNIMPLEMENTED",
    "DATA_LOSS",
    "OUT_OF_RANGE",
    "ALREADY_EXISTS",
    "UNAUTHENTICATED",
]


@pytest.mark.parametrize("code", RETRIED + FINAL)
async def test_an_idempotent_call_is_retried_on_exactly_the_retryable_codes(
    stack: dict[str, ServerProcess], client: AgentClient, code: str
) -> None:
    token = f"t-{code}"
    await SimControl(stack["sim"].address).faults(
        model_calls(("fail_with", {"code": code, "token": token}))
    )
    session = await client.create_session()
    result = (await client.run(session.session_id, "go")).result
    call = next(s.tool_call for s in result.timeline.stages if s.HasField("tool_call"))
    if code in RETRIED:
        assert (call.attempts, call.status) == (2, agent_pb2.TOOL_CALL_STATUS_OK)
    else:
        assert call.attempts == 1 and call.status != agent_pb2.TOOL_CALL_STATUS_OK
    assert getattr(grpc.StatusCode, code)  # a real code name
