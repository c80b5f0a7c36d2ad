"""The MCP endpoint's 2025 sessions, through a real sidecar: each is used only by the
principal that opened it, a principal holds at most its quota, the process at most its
total (a full endpoint takes the biggest holder's least recently used session, so no
principal keeps the others out), idle ones close, the metrics count them and the logs
never name them. The bounds are property-tested against a model of the ledger."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.support.stack import eventually, sidecar, sidecar_config, simulator

TOKENS = {name: f"{name}-token-0123456789" for name in ("alice", "bob", "carol")}
VERSION = "2025-11-25"
MAX_SESSIONS, PER_PRINCIPAL, CAROLS = 5, 3, 1


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _config(sim: Any, idle_timeout: float) -> dict[str, Any]:
    principals: list[dict[str, Any]] = [
        {"name": name, "token_sha256": _sha(token)} for name, token in TOKENS.items()
    ]
    principals[2]["quota"] = {"mcp_sessions": CAROLS}
    return sidecar_config(
        sim,
        [],
        mcp={
            "port": 0,
            "sessions": {
                "max_sessions": MAX_SESSIONS,
                "max_per_principal": PER_PRINCIPAL,
                "idle_timeout": idle_timeout,
            },
        },
        auth={"principals": principals},
        telemetry={"metrics": {"enabled": True, "port": 0}},
    )


class Endpoint:
    def __init__(self, url: str, metrics: str, log: Path) -> None:
        self.url, self.metrics, self.log = url, metrics, log
        self.http = httpx2.Client(timeout=30)

    def _headers(self, principal: str, session: str | None = None) -> dict[str, str]:
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "Authorization": f"Bearer {TOKENS[principal]}",
            "MCP-Protocol-Version": VERSION,
        }
        if session is not None:
            headers["Mcp-Session-Id"] = session
        return headers

    def open(self, principal: str) -> httpx2.Response:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": VERSION,
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        return self.http.post(self.url, json=body, headers=self._headers(principal))

    def ping(self, principal: str, session: str) -> int:
        body = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        return self.http.post(
            self.url, json=body, headers=self._headers(principal, session)
        ).status_code

    def close(self, principal: str, session: str) -> int:
        return self.http.delete(self.url, headers=self._headers(principal, session)).status_code

    def counted(self) -> dict[str, float]:
        text = self.http.get(f"http://{self.metrics}/metrics").text
        found = re.findall(r'^agent_sidecar_mcp_sessions\{principal="([^"]*)"\} (\S+)$', text, re.M)
        return {name: float(value) for name, value in found if float(value)}


@contextlib.contextmanager
def _endpoint(tmp_path: Path, idle_timeout: float) -> Iterator[Endpoint]:
    log = tmp_path / "sidecar.log"
    with simulator() as sim, log.open("wb") as stderr:
        with sidecar(_config(sim, idle_timeout), tmp_path, stderr=stderr) as side:
            endpoint = Endpoint(side.announced("mcp on "), side.announced("metrics on "), log)
            yield endpoint
            endpoint.http.close()


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    with _endpoint(tmp_path_factory.mktemp("mcp-sessions"), idle_timeout=600) as endpoint:
        yield endpoint


def test_a_session_answers_only_the_principal_that_opened_it_and_its_id_stays_out_of_the_log(
    endpoint: Endpoint,
) -> None:
    opened = endpoint.open("alice")
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    assert endpoint.ping("bob", session) == 404
    assert endpoint.close("bob", session) == 404
    assert endpoint.ping("alice", session) == 200  # bob's DELETE did not end it
    assert endpoint.close("alice", session) == 200
    assert endpoint.ping("alice", session) == 404
    logged = endpoint.log.read_text()
    assert session not in logged and "<session>" in logged  # the refusals were logged


def test_a_principal_past_its_quota_is_refused_with_a_retry_delay(endpoint: Endpoint) -> None:
    mine = [endpoint.open("alice").headers["mcp-session-id"] for _ in range(PER_PRINCIPAL)]
    refused = endpoint.open("alice")
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "600"
    assert f"alice holds {PER_PRINCIPAL} MCP sessions, its limit ({PER_PRINCIPAL})" in refused.text
    assert endpoint.counted()["alice"] == PER_PRINCIPAL
    # Another principal is not affected; one session closed makes room again.
    bobs = endpoint.open("bob").headers["mcp-session-id"]
    assert endpoint.close("alice", mine.pop()) == 200
    mine.append(endpoint.open("alice").headers["mcp-session-id"])
    for session in mine:
        assert endpoint.close("alice", session) == 200
    assert endpoint.close("bob", bobs) == 200
    assert endpoint.counted() == {}  # a DELETE's answer comes after the count


def test_an_idle_session_closes(tmp_path: Path) -> None:
    with _endpoint(tmp_path, idle_timeout=0.5) as endpoint:
        session = endpoint.open("alice").headers["mcp-session-id"]
        assert endpoint.ping("alice", session) == 200

        async def closed() -> bool:
            return endpoint.counted() == {}

        asyncio.run(eventually(closed, timeout=20))
        assert endpoint.ping("alice", session) == 404


class SessionBounds(RuleBasedStateMachine):
    """Opens, uses and closes sessions as three principals; every answer and what is
    left open must be what the ledger's rules say."""

    endpoint: Endpoint

    def __init__(self) -> None:
        super().__init__()
        self.open_sessions: list[tuple[str, str]] = []  # (principal, id), least recently used first

    def _held(self, principal: str) -> int:
        return sum(1 for p, _ in self.open_sessions if p == principal)

    @staticmethod
    def _limit(principal: str) -> int:
        return CAROLS if principal == "carol" else PER_PRINCIPAL

    @rule(principal=st.sampled_from(sorted(TOKENS)))
    def open(self, principal: str) -> None:
        before = list(self.open_sessions)
        mine = self._held(principal)
        response = self.endpoint.open(principal)
        if mine >= self._limit(principal):
            assert response.status_code == 429, response.text
            return
        assert response.status_code == 200, response.text
        if len(before) < MAX_SESSIONS:
            self.open_sessions.append((principal, response.headers["mcp-session-id"]))
            return
        # Full: exactly one session was closed to make room. Probe them in their order
        # of use, so the probes keep that order (after the new one, used before them).
        alive = [(p, s) for p, s in before if self.endpoint.ping(p, s) == 200]
        self.open_sessions = [(principal, response.headers["mcp-session-id"]), *alive]
        [gone] = [pair for pair in before if pair not in alive]
        counts = {p: self._held_in(before, p) for p, _ in before}
        bigger = {p for p, n in counts.items() if n >= mine + 2}
        if bigger:
            assert counts[gone[0]] == max(counts.values()), (gone, counts)
        else:
            assert gone[0] == principal, (gone, counts)
        first_of_holder = next(pair for pair in before if pair[0] == gone[0])
        assert gone == first_of_holder, "not the holder's least recently used session"

    @staticmethod
    def _held_in(sessions: list[tuple[str, str]], principal: str) -> int:
        return sum(1 for p, _ in sessions if p == principal)

    @precondition(lambda self: self.open_sessions)
    @rule(data=st.data())
    def use(self, data: st.DataObject) -> None:
        pair = data.draw(st.sampled_from(self.open_sessions))
        assert self.endpoint.ping(*pair) == 200
        self.open_sessions.remove(pair)
        self.open_sessions.append(pair)

    @precondition(lambda self: self.open_sessions)
    @rule(data=st.data(), other=st.sampled_from(sorted(TOKENS)))
    def use_anothers(self, data: st.DataObject, other: str) -> None:
        owner, session = data.draw(st.sampled_from(self.open_sessions))
        if other != owner:
            assert self.endpoint.ping(other, session) == 404
            assert self.endpoint.close(other, session) == 404

    @precondition(lambda self: self.open_sessions)
    @rule(data=st.data())
    def close(self, data: st.DataObject) -> None:
        pair = data.draw(st.sampled_from(self.open_sessions))
        assert self.endpoint.close(*pair) == 200
        self.open_sessions.remove(pair)

    @invariant()
    def counted_as_held(self) -> None:
        held = {p: float(self._held(p)) for p in TOKENS if self._held(p)}
        assert self.endpoint.counted() == held

    def teardown(self) -> None:
        for pair in self.open_sessions:
            self.endpoint.close(*pair)


def test_the_bounds_hold_whatever_the_principals_do(endpoint: Endpoint) -> None:
    SessionBounds.endpoint = endpoint
    test = SessionBounds.TestCase
    test.settings = settings(
        max_examples=15,
        stateful_step_count=12,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    test().runTest()
