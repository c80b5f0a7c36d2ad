"""The A2A HTTP listener from outside, over real HTTP: every route but the card is
authenticated (tenant paths included, which are refused on purpose), the Host and Origin
rule every HTTP listener shares, the spec's HTTP details (card caching, a trailing '/' on
the JSON-RPC URL, 415), and bad bodies answered with clear JSON-RPC and HTTP errors
while the listener keeps serving."""

from __future__ import annotations

from email.utils import formatdate, parsedate_to_datetime
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.testing import ServerProcess
from tests.support.a2a import ALICE

JSON = {"content-type": "application/json", "a2a-version": "1.0"}
AUTH = {"authorization": f"Bearer {ALICE}"}
# What a caller must never read: Python's and pydantic's own words.
PYTHON_TEXT = (
    "Traceback",
    "validation error",
    "codec can't",
    "recursion",
    "object has no attribute",
    "Expecting value",
    "unknown exception",
    "KeyError",
)


@pytest.fixture
def base(stack: dict[str, Any]) -> str:
    side: ServerProcess = stack["sidecar"]
    return "http://" + side.announced("a2a http on ")


def _rpc(method: str, params: Any, request_id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def test_every_route_but_the_card_needs_credentials_and_tenant_paths_are_refused(
    base: str,
) -> None:
    with httpx.Client(base_url=base, timeout=30) as http:
        for method, path in [
            ("GET", "/acme/a2a/rest/tasks"),
            ("GET", "/acme/a2a/rest/tasks/x"),
            ("POST", "/acme/a2a/rest/message:send"),
            ("GET", "/a2a/rest/tasks"),
            ("POST", "/a2a/jsonrpc/"),
            ("GET", "/no/such/route"),
        ]:
            refused = http.request(method, path, headers=JSON, content=b"{}")
            assert refused.status_code == 401, (method, path, refused.text)
            assert refused.headers["www-authenticate"] == "Bearer"
            (info,) = refused.json()["error"]["details"]
            assert info["reason"] == "UNAUTHENTICATED"
        card = http.get("/.well-known/agent-card.json")
        assert card.status_code == 200
        assert card.headers["cache-control"] == "public, max-age=300"
        # A caller with credentials gets a clear refusal of a tenant path, not a traceback.
        tenant = http.get("/acme/a2a/rest/tasks", headers={**JSON, **AUTH})
        assert tenant.status_code == 404
        error = tenant.json()["error"]
        assert error["details"][0]["reason"] == "ROUTE_NOT_FOUND"
        assert "tenants are not served" in error["message"]
        # A tenant in a request's body is refused alike.
        named = http.post(
            "/a2a/jsonrpc",
            headers={**JSON, **AUTH},
            json=_rpc("ListTasks", {"tenant": "acme"}),
        )
        assert named.json()["error"]["code"] == -32602


def test_the_card_can_be_revalidated_by_its_etag_or_its_date(base: str) -> None:
    with httpx.Client(base_url=base, timeout=30) as http:
        card = http.get("/.well-known/agent-card.json")
        assert card.status_code == 200
        made = parsedate_to_datetime(card.headers["last-modified"])
        assert card.headers["etag"]
        stamp = card.headers["last-modified"]
        for validators in (
            {"if-none-match": card.headers["etag"]},
            {"if-modified-since": stamp},
            {"if-modified-since": formatdate(made.timestamp() + 60, usegmt=True)},
        ):
            unchanged = http.get("/.well-known/agent-card.json", headers=validators)
            assert unchanged.status_code == 304, validators
            assert unchanged.content == b""
            assert unchanged.headers["last-modified"] == stamp
            assert unchanged.headers["etag"] == card.headers["etag"]
        for validators in (
            {"if-modified-since": formatdate(made.timestamp() - 60, usegmt=True)},
            {"if-modified-since": "not a date"},
            # An ETag that misses decides alone, whatever the date says.
            {"if-none-match": '"other"', "if-modified-since": stamp},
        ):
            again = http.get("/.well-known/agent-card.json", headers=validators)
            assert again.status_code == 200, validators
            assert again.json() == card.json()


def test_a_rebound_host_or_a_foreign_origin_is_refused_on_a_loopback_listener(
    base: str,
) -> None:
    body = _rpc("ListTasks", {})
    with httpx.Client(base_url=base, timeout=30) as http:
        rebound = http.post(
            "/a2a/jsonrpc", headers={**JSON, **AUTH, "host": "evil.example"}, json=body
        )
        assert rebound.status_code == 421
        page = http.post(
            "/a2a/jsonrpc",
            headers={**JSON, **AUTH, "origin": "http://evil.example"},
            json=body,
        )
        assert page.status_code == 403
        card = http.get("/.well-known/agent-card.json", headers={"host": "evil.example"})
        assert card.status_code == 421  # the card too: a rebound page learns nothing
        local = http.post(
            "/a2a/jsonrpc",
            headers={**JSON, **AUTH, "origin": "http://localhost:3000"},
            json=body,
        )
        assert local.status_code == 200 and "result" in local.json()


def test_json_rpc_takes_the_cards_url_with_a_trailing_slash_and_http_json_wants_json(
    base: str,
) -> None:
    with httpx.Client(base_url=base, timeout=30, headers={**JSON, **AUTH}) as http:
        slashed = http.post("/a2a/jsonrpc/", json=_rpc("ListTasks", {}))
        assert slashed.status_code == 200 and "result" in slashed.json()
        text = http.post(
            "/a2a/rest/message:send", content=b"hello", headers={"content-type": "text/plain"}
        )
        assert text.status_code == 415
        assert text.json()["error"]["details"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
        # JSON-RPC says it in its own terms: ContentTypeNotSupportedError, whatever the body.
        for body in (b"hello", b'{"jsonrpc": "2.0", "id": 1, "method": "ListTasks"}'):
            rpc = http.post("/a2a/jsonrpc", content=body, headers={"content-type": "text/plain"})
            assert rpc.status_code == 200
            assert rpc.json()["error"]["code"] == -32005, rpc.text


def test_http_json_answers_in_the_media_type_the_caller_named(base: str) -> None:
    """application/json unless the caller names application/a2a+json (the spec names
    both): by Accept, or as its body's type; refusals too, and an event stream stays one."""
    a2a = "application/a2a+json"
    with httpx.Client(base_url=base, timeout=30, headers={**AUTH, "a2a-version": "1.0"}) as http:
        for headers, wanted in [
            ({}, "application/json"),
            ({"accept": "application/json"}, "application/json"),
            ({"accept": a2a}, a2a),
            ({"accept": f"{a2a}, application/json;q=0.5"}, a2a),
        ]:
            listed = http.get("/a2a/rest/tasks", headers=headers)
            assert listed.status_code == 200, listed.text
            assert listed.headers["content-type"].split(";")[0] == wanted, headers
            missing = http.get("/a2a/rest/tasks/no-such-task", headers=headers)
            assert missing.status_code == 404
            assert missing.headers["content-type"].split(";")[0] == wanted, headers
        for media in ("application/json", a2a):
            bad = http.post("/a2a/rest/message:send", content=b"{", headers={"content-type": media})
            assert bad.status_code == 400
            assert bad.headers["content-type"].split(";")[0] == media


def test_a_context_with_no_tasks_lists_an_empty_page_and_a_negative_page_size_is_invalid(
    base: str,
) -> None:
    with httpx.Client(base_url=base, timeout=30, headers={**JSON, **AUTH}) as http:
        empty = http.post("/a2a/jsonrpc", json=_rpc("ListTasks", {"contextId": "never-used"}))
        assert empty.json()["result"].get("tasks", []) == []
        rest = http.get("/a2a/rest/tasks", params={"contextId": "never-used"})
        assert rest.status_code == 200 and rest.json().get("tasks", []) == []
        negative = http.post("/a2a/jsonrpc", json=_rpc("ListTasks", {"pageSize": -1}))
        error = negative.json()["error"]
        assert error["code"] == -32602
        assert error["data"][1]["fieldViolations"][0]["field"] == "page_size"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"\xff\xfe", -32700),
        (b"{", -32700),
        (b"[" * 5000 + b"]" * 5000, -32600),
        (b'{"a":' * 100 + b"1" + b"}" * 100, -32600),
        (b"[]", -32600),
        (b"7", -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": [1]}', -32602),
    ],
)
def test_a_body_that_is_not_a_json_rpc_request_gets_a_clear_parse_or_request_error(
    base: str, body: bytes, code: int
) -> None:
    with httpx.Client(base_url=base, timeout=30, headers={**JSON, **AUTH}) as http:
        answer = http.post("/a2a/jsonrpc", content=body)
        rest = http.post("/a2a/rest/message:stream", content=body)
    assert answer.status_code == 200
    assert answer.json()["error"]["code"] == code
    assert not any(t in answer.text for t in PYTHON_TEXT), answer.text
    assert rest.status_code == 400, rest.text
    assert not any(t in rest.text for t in PYTHON_TEXT), rest.text


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
_methods = st.sampled_from(
    [
        "SendMessage",
        "GetTask",
        "ListTasks",
        "CancelTask",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
        "CreateTaskPushNotificationConfig",
        "GetExtendedAgentCard",
        "NoSuchMethod",
    ]
)
_params = st.fixed_dictionaries(
    {},
    optional={
        "id": _json,
        "pageSize": st.integers(-(2**40), 2**40) | _json,
        "contextId": _json,
        "historyLength": st.integers(-5, 5) | _json,
        "pageToken": _json,
        "taskId": _json,
        "message": _json,
        "status": _json,
    },
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    garbage=st.binary(max_size=64) | st.builds(lambda d: b"[" * d + b"]" * d, st.integers(1, 3000)),
    method=_methods,
    params=_params,
)
def test_no_body_or_params_yield_an_internal_error_or_python_text(
    base: str, garbage: bytes, method: str, params: dict[str, Any]
) -> None:
    with httpx.Client(base_url=base, timeout=30, headers={**JSON, **AUTH}) as http:
        for answer in (
            http.post("/a2a/jsonrpc", content=garbage),
            http.post("/a2a/jsonrpc", json=_rpc(method, params)),
        ):
            assert answer.status_code == 200
            error = answer.json().get("error")
            assert error is None or error["code"] != -32603, answer.text
            assert not any(t in answer.text for t in PYTHON_TEXT), answer.text
        for path in ("/a2a/rest/message:send", "/a2a/rest/message:stream"):
            rest = http.post(path, content=garbage)
            assert rest.status_code < 500, rest.text
            assert not any(t in rest.text for t in PYTHON_TEXT), rest.text
        listed = http.get("/a2a/rest/tasks", params={"pageSize": str(params.get("pageSize"))})
        assert listed.status_code < 500, listed.text
        # The listener keeps serving.
        ok = http.post("/a2a/jsonrpc", json=_rpc("ListTasks", {}))
        assert "result" in ok.json()
