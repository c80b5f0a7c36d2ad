"""The audit record through a real sidecar: a call that reached its tool server is in it
whatever happens after, its lines survive line-based readers, and refused callers cannot
grow it without bound."""

from __future__ import annotations

import asyncio
import hashlib
import signal
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentsidecar.client import AgentClient
from sidecar.security.audit import AuditLog
from tests.support.stack import (
    eventually,
    scripted_toolserver,
    sidecar,
    sidecar_config,
    simulator,
    tool_stats,
)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line]


async def _hang_reached(tools_address: str, before: int) -> None:
    async def reached() -> bool:
        return int((await tool_stats(tools_address))["calls"].get("hang", 0)) > before

    await eventually(reached)


@pytest.mark.parametrize("how", ["the caller leaves", "the session is deleted", "a drain"])
async def test_a_call_cut_off_after_it_reached_its_server_is_in_the_record(
    tmp_path: Path, how: str
) -> None:
    audit = tmp_path / "audit.jsonl"
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            server={"port": 0, "grace_period": 0.3},
            auth={"audit": {"path": str(audit)}},
        )
        with sidecar(config, tmp_path) as side:
            before = int((await tool_stats(tools.address))["calls"].get("hang", 0))
            async with AgentClient(side.address) as client:
                session = await client.create_session()
                stream = client.stream(session.session_id, "hang please", timeout=30)
                async for event in stream:
                    if event.HasField("tool_call_started"):
                        call_id = event.tool_call_started.call_id
                        break
                await _hang_reached(tools.address, before)
                if how == "the caller leaves":
                    await stream.aclose()  # type: ignore[attr-defined]
                elif how == "the session is deleted":
                    assert await client.delete_session(session.session_id)
                else:
                    side.popen.send_signal(signal.SIGTERM)
                    assert side.popen.wait(timeout=20) == 0

            def cut_off() -> list[dict[str, Any]]:
                return [
                    line
                    for line in _lines(audit)
                    if line["event"] == "tool_call" and line.get("call_id") == call_id
                ]

            async def recorded() -> bool:
                return bool(cut_off())

            await eventually(recorded)
    (line,) = cut_off()
    assert line["status"] == "CANCELLED" and line["tool"] == "hang"
    assert line["server"] == "scripted"


@pytest.mark.property
@given(
    st.text(max_size=200), st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=4)
)
def test_every_line_is_one_line_to_any_reader(arguments: str, extra: dict[str, str]) -> None:
    # JSON allows U+2028, U+2029 and U+0085 raw; str.splitlines (and many log shippers)
    # break lines on them, and on the other separators Python knows.
    path = Path(f"/tmp/audit-{hashlib.sha256(repr((arguments, extra)).encode()).hexdigest()}")
    log = AuditLog(str(path))
    try:
        fields = {f"x_{k}": v for k, v in extra.items()}
        log.record("tool_call", "p\u2028q", **log.arguments(arguments), **fields)
        log.close()
        text = path.read_bytes().decode()
        (line,) = text.splitlines()
        parsed = orjson.loads(line)
        assert parsed["principal"] == "p\u2028q"
        assert parsed["arguments"] == arguments[:4096] + ("…" if len(arguments) > 4096 else "")
        assert {k: parsed[k] for k in fields} == fields
    finally:
        path.unlink(missing_ok=True)


async def test_refused_callers_cannot_grow_the_record_without_bound(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    token = "alice-audit-token"
    principals = [{"name": "alice", "token_sha256": hashlib.sha256(token.encode()).hexdigest()}]
    with simulator() as sim, scripted_toolserver() as tools:
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            auth={"principals": principals, "audit": {"path": str(audit)}},
        )
        with sidecar(config, tmp_path) as side:
            refused = 0
            async with AgentClient(side.address) as anonymous:

                async def knock() -> None:
                    nonlocal refused
                    for _ in range(250):
                        with pytest.raises(grpc.aio.AioRpcError) as info:
                            await anonymous.get_session("s")
                        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
                        refused += 1

                await asyncio.gather(*(knock() for _ in range(8)))
            async with AgentClient(side.address, token=token) as alice:
                await alice.create_session()  # the record still takes what matters
    lines = _lines(audit)  # the sidecar has stopped: the last summary is written
    written = [ln for ln in lines if ln["event"] == "auth_failed"]
    summaries = [ln for ln in lines if ln["event"] == "refusals_suppressed"]
    assert refused == 2000
    assert len(written) + sum(s["events"].get("auth_failed", 0) for s in summaries) == refused
    assert len(written) < 200 and audit.stat().st_size < 100_000
    assert any(ln["event"] == "session_created" for ln in lines)
