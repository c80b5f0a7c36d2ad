"""Secrets never leave the process: the redactor, and a real sidecar's errors, events and log."""

from __future__ import annotations

import base64
import json
import logging
import string
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentsidecar.client import AgentClient
from sidecar import testing
from sidecar.config import dsn_password
from sidecar.llm.transport import proxy_secrets
from sidecar.redaction import MARK, LogRedaction, Redactor
from sidecar.testing import wait_serving
from tests.support import SUPPORT
from tests.support.stack import SimControl, sidecar, sidecar_config, simulator

SECRETS = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=6, max_size=48
)
TEXT = st.text(max_size=60)


@given(secret=SECRETS, before=TEXT, after=TEXT, form=st.sampled_from(["plain", "json", "url"]))
def test_a_secret_never_survives_redaction_in_any_of_its_forms(
    secret: str, before: str, after: str, form: str
) -> None:
    shown = {"plain": secret, "json": json.dumps(secret)[1:-1], "url": quote(secret, safe="")}[form]
    redacted = Redactor([secret])(before + shown + after)
    assert shown not in redacted
    assert MARK in redacted


@given(text=st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=80))
def test_text_without_a_secret_is_left_as_it_is(text: str) -> None:
    redact = Redactor(["correct horse battery staple"])
    if "gsk_" in text or "sk-" in text or "earer" in text.lower() or "authoriz" in text.lower():
        return
    assert redact(text) is text


def test_provider_keys_and_bearer_tokens_are_redacted_without_configuration() -> None:
    redact = Redactor()
    text = "key gsk_" + "a" * 40 + " and sk-proj-" + "b" * 30 + " and Bearer abcdefghijklmnop"
    assert redact(text) == f"key {MARK} and {MARK} and {MARK}"


_USERINFO = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1)


@given(
    user=_USERINFO,
    password=_USERINFO,
    header=st.sampled_from(["Proxy-Authorization", "Authorization", "proxy-authorization"]),
    shape=st.sampled_from(["'{h}': 'Basic {v}'", "{h}: Basic {v}", '"{h}":"basic {v}"']),
)
def test_basic_credentials_in_an_echoed_header_are_redacted_without_configuration(
    user: str, password: str, header: str, shape: str
) -> None:
    # As aiohttp's and httpx's errors print the headers of the request they failed.
    value = base64.b64encode(f"{user}:{password}".encode()).decode()
    text = "request failed: {" + shape.format(h=header, v=value) + ", 'Accept': '*/*'}"
    redacted = Redactor()(text)
    assert value not in redacted
    assert "'Accept': '*/*'" in redacted


def test_the_credentials_of_the_proxies_the_environment_names_are_redacted() -> None:
    environ = {
        "HTTPS_PROXY": "http://egress:pr0xy-pass@proxy.corp:3128",
        "http_proxy": "proxy.corp:3128",  # no credentials: nothing to redact
        "ALL_PROXY": "user2:an0ther-pass@proxy.corp:3128",  # no scheme
        "NO_PROXY": "user@host",  # not a proxy
    }
    redact = Redactor(proxy_secrets(environ))
    basic = base64.b64encode(b"egress:pr0xy-pass").decode()
    text = f"pr0xy-pass {basic} an0ther-pass user@host proxy.corp"
    assert redact(text) == f"{MARK} {MARK} {MARK} user@host proxy.corp"


def test_configured_patterns_and_the_stores_password_are_redacted() -> None:
    redact = Redactor([dsn_password("postgresql://app:s3cr3t-pw@db/x")], [r"acct-\d{6}"])
    assert redact("login s3cr3t-pw for acct-123456") == f"login {MARK} for {MARK}"
    assert dsn_password("host=db user=app password='p w!x' dbname=x") == "p w!x"


def test_a_log_record_and_its_traceback_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    secret = "hunter2-secret"
    handler = logging.StreamHandler()
    handler.addFilter(LogRedaction(Redactor([secret])))
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "key %s", (secret,), None)
    try:
        raise RuntimeError(f"failed with {secret}")
    except RuntimeError:
        import sys

        record.exc_info = sys.exc_info()
    handler.filter(record)
    assert secret not in handler.format(record)


async def test_a_providers_error_body_echoing_the_key_never_reaches_the_caller_or_the_log(
    tmp_path: Path,
) -> None:
    key = "gsk_live_" + "Z9" * 16  # the shape of a Groq key
    log = tmp_path / "sidecar.log"
    with simulator() as sim:
        config = sidecar_config(sim, [])
        config["model"]["api_key_env"] = "TEST_MODEL_KEY"
        config["model"]["retry"] = {"max_attempts": 1}
        with (
            open(log, "w") as stderr,  # noqa: ASYNC230 - the child process writes it
            testing.sidecar(
                config,
                tmp_path,
                env={"TEST_MODEL_KEY": key},
                stderr=stderr,
                flags=["--log-level", "INFO"],
            ) as side,
        ):
            wait_serving(side.address)
            body = {
                "error": {"message": f"Invalid API Key: {key}", "type": "invalid_request_error"}
            }
            await SimControl(sim.address).faults(
                {"kind": "raw", "status": 401, "body": json.dumps(body)}
            )
            async with AgentClient(side.address) as client:
                session = await client.create_session()
                result = (await client.run(session.session_id, "hi")).result
    assert result.error.code == "model_unauthenticated"
    assert key not in result.error.message and MARK in result.error.message
    assert key not in log.read_text()


async def test_a_tool_result_carrying_a_secret_reaches_no_one_with_it(tmp_path: Path) -> None:
    token = "gsk_" + "t" * 32
    with simulator() as sim:
        with testing.tool_server(
            str(SUPPORT / "named_toolserver.py"), "--label", token, "--tools", "leaky"
        ) as tools:
            config = sidecar_config(sim, [{"name": "tools", "address": tools.address}])
            with sidecar(config, tmp_path) as side:
                async with AgentClient(side.address) as client:
                    await client.wait_ready(10)
                    session = await client.create_session()
                    events = [e async for e in client.stream(session.session_id, "use leaky")]
                    stored = await client.get_session(session.session_id)
    finished = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
    assert finished and all(token not in f.content and MARK in f.content for f in finished)
    assert token not in str(events) and token not in str(stored)


_B64TOKEN = st.text(
    alphabet=st.sampled_from(string.ascii_letters + string.digits + "-._~+/"),
    min_size=12,
    max_size=60,
).map(lambda t: t + "=" * (len(t) % 3))


@given(
    token=_B64TOKEN,
    scheme=st.sampled_from(["Bearer", "bearer", "BEARER"]),
    around=st.sampled_from(["{s} {t}", "'Authorization': '{s} {t}'", "{s}  {t}\n"]),
)
def test_a_bearer_token_of_any_b64token_characters_is_redacted_whole(
    token: str, scheme: str, around: str
) -> None:
    # RFC 6750's b64token: letters, digits and -._~+/ then any '=': every one of them.
    text = "upstream said: " + around.format(s=scheme, t=token) + " (end)"
    before, after = around.split("{s}")[0], around.split("{t}")[1]
    assert Redactor()(text) == "upstream said: " + before + MARK + after + " (end)"
