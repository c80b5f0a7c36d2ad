"""Both transports through real processes: kept-alive connections, a real forward proxy,
an endpoint of a private CA that asks for a client certificate, compressed bodies nobody
asked for, and what the response headers say (request id, rate limits).

The endpoint is the LLM simulator (over TLS where a test says so), the proxy is proxy.py
(``tests/llm/forward_proxy.py``), each its own process on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import selectors
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from agentsidecar.client import AgentClient
from agentsidecar.v1 import agent_pb2
from sidecar import testing
from sidecar.config import RetryPolicy
from sidecar.errors import ModelError, ModelUnavailable, StartupError
from sidecar.llm import transport as transport_module
from sidecar.llm.model import ModelRequest
from sidecar.llm.openai_model import OpenAICompatibleModel
from sidecar.llm.pacing import Pacers
from sidecar.llm.transport import proxy_for
from sidecar.testing import ServerProcess
from sidecar.testing.certs import TestCA
from tests.support import SCRIPTED_TOOLSERVER
from tests.support.stack import simulator as scripted_simulator

HERE = Path(__file__).parent
TRANSPORTS = ["direct", "sdk"]
HELLO = [{"role": "user", "content": "hello"}]


class Proxy:
    """The forward proxy's process and the requests it reports."""

    def __init__(self, process: ServerProcess) -> None:
        self.process = process
        self.url = f"http://{process.address}"
        self._pending = b""

    def seen(self) -> list[str]:
        """The requests it forwarded since the last call. A request that went through it
        was printed before it went upstream, so it is in the pipe once its answer is in."""
        stdout = self.process.popen.stdout
        assert stdout is not None
        lines = []
        with selectors.DefaultSelector() as selector:
            selector.register(stdout.fileno(), selectors.EVENT_READ)
            while selector.select(0):
                chunk = os.read(stdout.fileno(), 65536)
                if not chunk:
                    break
                self._pending += chunk
        *whole, self._pending = self._pending.split(b"\n")
        lines += [line.decode() for line in whole]
        return lines


@dataclass(frozen=True)
class Pki:
    """A private CA's files: nothing of the system's trust store trusts them."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    """A client certificate of the same CA, common name ``model-client``."""
    client_key: Path
    client_combined: Path
    """The client certificate and its key in one file."""
    other_ca: Path
    """A CA that signed nothing here."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = TestCA(directory / "ca", "model-endpoint-ca")
    server = ca.issue("model-endpoint")
    client = ca.issue("model-client", client=True)
    combined = directory / "client-combined.pem"
    combined.write_bytes(Path(client.cert_file).read_bytes() + Path(client.key_file).read_bytes())
    return Pki(
        ca=Path(ca.ca_file),
        server_cert=Path(server.cert_file),
        server_key=Path(server.key_file),
        client_cert=Path(client.cert_file),
        client_key=Path(client.key_file),
        client_combined=combined,
        other_ca=Path(TestCA(directory / "other", "a-ca-that-signed-nothing-here").ca_file),
    )


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerProcess]:
    with testing.simulator() as process:
        yield process


@pytest.fixture(scope="module")
def tls_sim(pki: Pki) -> Iterator[ServerProcess]:
    flags = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    with testing.simulator(*flags, "--tls-client-ca", str(pki.ca)) as process:
        yield process


@pytest.fixture(scope="module")
def proxy() -> Iterator[Proxy]:
    with testing.start_process([str(HERE / "forward_proxy.py")]) as process:
        yield Proxy(process)


def client_tls(pki: Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(pki.client_cert, pki.client_key)
    return context


async def control(
    address: str, method: str, path: str, body: Any = None, tls: ssl.SSLContext | None = None
) -> Any:
    scheme = "https" if tls is not None else "http"
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, f"{scheme}://{address}/sim{path}", json=body, ssl=tls or True) as r,
    ):
        r.raise_for_status()
        return await r.json()


def model(
    base_url: str, transport: str, *, attempts: int = 1, **options: Any
) -> OpenAICompatibleModel:
    options.setdefault("environ", {})
    return OpenAICompatibleModel(
        base_url=base_url,
        api_key="test-key",
        model="llm-simulator",
        retry=RetryPolicy(max_attempts=attempts, initial_backoff=0.01, max_backoff=0.05),
        timeout=10,
        transport=transport,
        pacers=Pacers(),
        **options,
    )


@pytest.fixture
async def plain(sim: ServerProcess) -> AsyncIterator[str]:
    await control(sim.address, "POST", "/reset")
    yield f"http://{sim.address}/openai/v1"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_requests_share_one_kept_alive_connection(
    plain: str, sim: ServerProcess, transport: str
) -> None:
    client = model(plain, transport)
    try:
        for stream in (False, True) * 3:
            response = await client.complete(ModelRequest(HELLO, [], stream, 10))
            assert response.text.startswith("[simulated]")
            # Between two model calls a run does other work (its tools): a stream's end,
            # read in the background, is in by then.
            await control(sim.address, "GET", "/stats")
    finally:
        await client.close()
    stats = await control(sim.address, "GET", "/stats")
    assert (stats["requests"], stats["connections"]) == (6, 1)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_requests_go_through_the_proxy_that_http_proxy_names(
    plain: str, sim: ServerProcess, proxy: Proxy, transport: str
) -> None:
    proxy.seen()
    client = model(plain, transport, environ={"HTTP_PROXY": proxy.url})
    try:
        for stream in (False, True):
            await client.complete(ModelRequest(HELLO, [], stream, 10))
    finally:
        await client.close()
    assert proxy.seen() == [f"proxied POST {sim.address} /openai/v1/chat/completions"] * 2


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_proxy_gets_the_credentials_of_its_url_and_never_the_endpoints_key(
    plain: str, sim: ServerProcess, proxy: Proxy, transport: str
) -> None:
    proxy.seen()
    url = proxy.url.replace("http://", "http://egress:secret@")
    client = model(plain, transport, environ={"HTTP_PROXY": url})
    try:
        await client.complete(ModelRequest(HELLO, [], False, 10))
    finally:
        await client.close()
    basic = "Basic " + base64.b64encode(b"egress:secret").decode()
    line = f"proxied POST {sim.address} /openai/v1/chat/completions with proxy-authorization"
    assert proxy.seen() == [f"{line} {basic}"]  # its own, not the endpoint's key
    assert (await control(sim.address, "GET", "/stats"))["last_headers"]["authorization"]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_proxy_named_without_a_scheme_is_an_http_one(
    plain: str, sim: ServerProcess, proxy: Proxy, transport: str
) -> None:
    proxy.seen()
    client = model(plain, transport, environ={"HTTP_PROXY": proxy.process.address})
    try:
        await client.complete(ModelRequest(HELLO, [], False, 10))
    finally:
        await client.close()
    assert proxy.seen() == [f"proxied POST {sim.address} /openai/v1/chat/completions"]


@pytest.mark.parametrize("scheme", ["socks5", "socks5h", "socks4", "ftp"])
def test_a_proxy_of_another_kind_stops_the_model_client_at_start(scheme: str) -> None:
    with pytest.raises(StartupError, match="only http and https proxies") as raised:
        model("http://llm.example/v1", "direct", environ={"ALL_PROXY": f"{scheme}://u:pw@p:1080"})
    assert "pw" not in str(raised.value)  # the URL's credentials stay out of the message
    assert (
        proxy_for("https://llm.example/v1", {"HTTPS_PROXY": "p.corp:3128"}) == "http://p.corp:3128"
    )


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_proxy_that_asks_for_credentials_is_the_proxys_error_not_the_endpoints(
    plain: str, transport: str
) -> None:
    flags = [str(HERE / "forward_proxy.py"), "--basic-auth", "egress:secret"]
    with testing.start_process(flags) as process:
        client = model(
            plain, transport, attempts=3, environ={"HTTP_PROXY": f"http://{process.address}"}
        )
        try:
            with pytest.raises(ModelUnavailable) as raised:
                await client.complete(ModelRequest(HELLO, [], False, 10))
        finally:
            await client.close()
    assert raised.value.code == "model_unreachable"
    assert raised.value.retryable is False  # the same request would be refused the same way
    assert "proxy asked for credentials (407)" in raised.value.message


@pytest.mark.parametrize(
    ("base_url", "environ", "warned"),
    [
        ("http://llm.internal.example/v1", {}, "to llm.internal.example: use an https"),
        ("http://127.0.0.1:8000/v1", {"HTTP_PROXY": "http://proxy:3128"}, "through the proxy"),
        ("http://127.0.0.1:8000/v1", {}, None),
        ("http://localhost:8000/v1", {}, None),
        ("https://llm.internal.example/v1", {"HTTPS_PROXY": "http://proxy:3128"}, None),
    ],
)
def test_a_key_sent_in_plaintext_beyond_loopback_is_warned_about_at_start(
    base_url: str, environ: dict[str, str], warned: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="sidecar.llm.openai_model"):
        model(base_url, "direct", environ=environ)
    lines = [r.getMessage() for r in caplog.records if "plaintext" in r.getMessage()]
    if warned is None:
        assert lines == []
    else:
        assert len(lines) == 1 and warned in lines[0], lines
        assert "test-key" not in lines[0]


async def _garbage_server() -> tuple[asyncio.Server, str]:
    """Answers every connection with bytes that are no HTTP response."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    return server, f"{host}:{port}"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("through", ["endpoint", "proxy"])
async def test_an_exchange_that_fails_below_the_status_line_names_no_secret(
    transport: str, through: str
) -> None:
    # aiohttp's errors carry the request's headers in their repr: the endpoint's key, the
    # proxy's credentials.
    server, address = await _garbage_server()
    try:
        key = "gsk_" + "k" * 48
        environ = {"HTTP_PROXY": f"http://egress:proxy-secret@{address}"}
        base_url = "http://llm.example/v1" if through == "proxy" else f"http://{address}/v1"
        client = OpenAICompatibleModel(
            base_url=base_url,
            api_key=key,
            model="llm-simulator",
            retry=RetryPolicy(max_attempts=1),
            timeout=5,
            transport=transport,
            environ=environ if through == "proxy" else {},
            pacers=Pacers(),
        )
        try:
            with pytest.raises(ModelUnavailable) as raised:
                await client.complete(ModelRequest(HELLO, [], False, 10))
        finally:
            await client.close()
    finally:
        server.close()
        await server.wait_closed()
    message = raised.value.message
    basic = base64.b64encode(b"egress:proxy-secret").decode()
    for secret in (key, "proxy-secret", basic, "Authorization"):
        assert secret not in message, message


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_error_status_leaves_its_connection_kept_alive(
    plain: str, sim: ServerProcess, transport: str
) -> None:
    faults = [{"kind": "status", "status": 500}, {"kind": "status", "status": 400}]
    await control(sim.address, "POST", "/faults", {"faults": faults})
    client = model(plain, transport)
    try:
        for _ in faults:
            with pytest.raises(ModelError):
                await client.complete(ModelRequest(HELLO, [], False, 10))
        await client.complete(ModelRequest(HELLO, [], True, 10))
    finally:
        await client.close()
    stats = await control(sim.address, "GET", "/stats")
    assert (stats["requests"], stats["connections"]) == (3, 1)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_time_to_the_first_token_counts_the_wait_for_the_headers(transport: str) -> None:
    # The simulator holds its status line and headers until the first token is due, as a
    # server (or gateway) that flushes them with the first chunk does.
    with testing.simulator("--ttft-ms", "300") as slow:
        client = model(f"http://{slow.address}/openai/v1", transport)
        try:
            response = await client.complete(ModelRequest(HELLO, [], True, 10))
        finally:
            await client.close()
    assert response.time_to_first_token is not None
    assert response.time_to_first_token >= 0.25


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("no_proxy", ["127.0.0.1", "localhost,.internal,127.0.0.1", "*"])
async def test_a_host_no_proxy_lists_is_reached_directly(
    plain: str, sim: ServerProcess, proxy: Proxy, transport: str, no_proxy: str
) -> None:
    proxy.seen()
    environ = {"http_proxy": proxy.url, "no_proxy": no_proxy}
    client = model(plain, transport, environ=environ)
    try:
        await client.complete(ModelRequest(HELLO, [], False, 10))
    finally:
        await client.close()
    assert proxy.seen() == []
    assert (await control(sim.address, "GET", "/stats"))["requests"] == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_endpoint_of_a_private_ca_is_trusted_through_ca_file_with_the_client_certificate(
    tls_sim: ServerProcess, pki: Pki, transport: str
) -> None:
    tls = client_tls(pki)
    await control(tls_sim.address, "POST", "/reset", tls=tls)
    client = model(
        f"https://{tls_sim.address}/openai/v1",
        transport,
        ca_file=str(pki.ca),
        cert_file=str(pki.client_cert),
        key_file=str(pki.client_key),
    )
    try:
        response = await client.complete(ModelRequest(HELLO, [], True, 10))
    finally:
        await client.close()
    assert response.text.startswith("[simulated]")
    stats = await control(tls_sim.address, "GET", "/stats", tls=tls)
    assert stats["last_client_cert"] == "model-client"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("trusted", ["system", "other"])
async def test_an_endpoint_of_a_ca_not_trusted_is_refused_and_not_retried(
    tls_sim: ServerProcess, pki: Pki, transport: str, trusted: str
) -> None:
    tls = client_tls(pki)
    await control(tls_sim.address, "POST", "/reset", tls=tls)
    client = model(
        f"https://{tls_sim.address}/openai/v1",
        transport,
        attempts=3,
        ca_file=None if trusted == "system" else str(pki.other_ca),
        cert_file=str(pki.client_combined),
    )
    try:
        with pytest.raises(ModelUnavailable) as info:
            await client.complete(ModelRequest(HELLO, [], False, 10))
    finally:
        await client.close()
    assert info.value.code == "model_unreachable" and not info.value.retryable
    assert "certificate is not trusted" in info.value.message
    assert (await control(tls_sim.address, "GET", "/stats", tls=tls))["requests"] == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_without_a_client_certificate_the_mutual_tls_endpoint_cannot_be_reached(
    tls_sim: ServerProcess, pki: Pki, transport: str
) -> None:
    client = model(f"https://{tls_sim.address}/openai/v1", transport, ca_file=str(pki.ca))
    try:
        with pytest.raises(ModelUnavailable) as info:
            await client.complete(ModelRequest(HELLO, [], False, 10))
    finally:
        await client.close()
    assert info.value.code == "model_unreachable"


@pytest.mark.parametrize(
    ("files", "names"),
    [
        ({"ca_file": "missing.pem"}, "model.ca_file"),
        ({"cert_file": "missing.pem"}, "model.cert_file"),
        ({"cert_file": "CA", "key_file": "missing.pem"}, "model.key_file"),
    ],
)
async def test_a_tls_file_that_cannot_be_loaded_stops_the_model_client_at_start(
    pki: Pki, tmp_path: Path, files: dict[str, str], names: str
) -> None:
    paths: dict[str, Any] = {
        k: str(pki.ca) if v == "CA" else str(tmp_path / v) for k, v in files.items()
    }
    with pytest.raises(StartupError) as info:
        model("https://127.0.0.1:1/v1", "direct", **paths)
    assert names in str(info.value)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_sidecar_reaches_a_private_ca_endpoint_through_https_proxy(
    tls_sim: ServerProcess, pki: Pki, proxy: Proxy, tmp_path: Path, transport: str
) -> None:
    tls = client_tls(pki)
    await control(tls_sim.address, "POST", "/reset", tls=tls)
    proxy.seen()
    config = testing.sidecar_config(tls_sim.address, {})
    config["model"].update(
        base_url=f"https://{tls_sim.address}/openai/v1",
        transport=transport,
        ca_file=str(pki.ca),
        cert_file=str(pki.client_cert),
        key_file=str(pki.client_key),
    )
    env = {"HTTPS_PROXY": proxy.url, "NO_PROXY": ""}
    with testing.sidecar(config, tmp_path, env=env) as side:
        async with AgentClient(side.address) as client:
            session = await client.create_session()
            result = (await client.run(session.session_id, "hello", timeout=20)).result
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED, result.error
    assert result.answer.startswith("[simulated]")
    assert proxy.seen() == [f"proxied CONNECT {tls_sim.address} "]
    stats = await control(tls_sim.address, "GET", "/stats", tls=tls)
    assert stats["last_client_cert"] == "model-client" and stats["requests"] == 1


def _frames(*chunks: dict[str, Any]) -> list[str]:
    return [f"data: {orjson.dumps(c).decode()}\n\n" for c in chunks] + ["data: [DONE]\n\n"]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_gzip_body_nobody_asked_for_is_decoded(
    plain: str, sim: ServerProcess, transport: str, stream: bool
) -> None:
    body = {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "compressed"}}],
    }
    frames = _frames(
        {"id": "c", "choices": [{"index": 0, "delta": {"content": "compr"}}]},
        {"id": "c", "choices": [{"index": 0, "delta": {"content": "essed"}}]},
    )
    fault = {"kind": "raw", "encoding": "gzip", "body": orjson.dumps(body).decode()}
    await control(sim.address, "POST", "/faults", {"faults": [{**fault, "frames": frames}]})
    client = model(plain, transport)
    try:
        response = await client.complete(ModelRequest(HELLO, [], stream, 10))
    finally:
        await client.close()
    assert response.text == "compressed"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("encoding", [None, "gzip"])
async def test_a_body_over_the_size_limit_is_refused_decoded_size_counted(
    plain: str,
    sim: ServerProcess,
    transport: str,
    stream: bool,
    encoding: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An endpoint gone wrong, not a model: the cap holds for the decoded size, so a small
    # compressed body cannot expand past it.
    monkeypatch.setattr(transport_module, "MAX_BODY_BYTES", 4096)
    text = "x" * 8192
    body = {"id": "c", "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
    frames = _frames({"id": "c", "choices": [{"index": 0, "delta": {"content": text}}]})
    fault = {"kind": "raw", "body": orjson.dumps(body).decode(), "frames": frames}
    if encoding is not None:
        fault["encoding"] = encoding
    await control(
        plain.split("/openai")[0].removeprefix("http://"), "POST", "/faults", {"faults": [fault]}
    )
    client = model(plain, transport)
    try:
        with pytest.raises(ModelUnavailable, match="larger than 4096 bytes") as raised:
            await client.complete(ModelRequest(HELLO, [], stream, 10))
    finally:
        await client.close()
    assert raised.value.code == "model_unreachable"


GROQ_HEADERS = {
    "x-request-id": "req_01jqx8d5kzf4m9v2w7c3b6n1aa",
    "x-ratelimit-limit-requests": "14400",
    "x-ratelimit-remaining-requests": "14370",
    "x-ratelimit-reset-requests": "2m59.56s",
    "x-ratelimit-limit-tokens": "6000",
    "x-ratelimit-remaining-tokens": "5997",
    "x-ratelimit-reset-tokens": "7.66s",
}
GROQ_USAGE = {
    "queue_time": 0.037,
    "prompt_tokens": 18,
    "prompt_time": 0.000680,
    "completion_tokens": 556,
    "completion_time": 0.463,
    "total_tokens": 574,
    "total_time": 0.464,
}
# A Groq chat.completion as its API reference documents it.
GROQ_COMPLETION = {
    "id": "chatcmpl-f51b2cd2-bef7-417e-964e-a08f0b513c22",
    "object": "chat.completion",
    "created": 1730241104,
    "model": "openai/gpt-oss-120b",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Fast language models ..."},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": GROQ_USAGE,
    "system_fingerprint": "fp_179b0f92c9",
    "x_groq": {"id": "req_01jbd6g2qdfw2adyrt2az8hz4w"},
}
GROQ_FRAMES = _frames(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
        "x_groq": {"id": "req_01jbd6g2qdfw2adyrt2az8hz4w"},
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "Fast language models ..."}}],
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "x_groq": {"id": "req_01jbd6g2qdfw2adyrt2az8hz4w", "usage": GROQ_USAGE},
    },
)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("stream", [False, True])
async def test_groqs_request_id_total_time_and_rate_limits_reach_the_response(
    plain: str, sim: ServerProcess, transport: str, stream: bool
) -> None:
    fault = {
        "kind": "raw",
        "body": orjson.dumps(GROQ_COMPLETION).decode(),
        "frames": GROQ_FRAMES,
        "headers": GROQ_HEADERS,
    }
    await control(sim.address, "POST", "/faults", {"faults": [fault]})
    client = model(plain, transport)
    try:
        response = await client.complete(ModelRequest(HELLO, [], stream, 10))
    finally:
        await client.close()
    assert response.request_id == "req_01jbd6g2qdfw2adyrt2az8hz4w"
    assert response.total_time == 0.464 and response.provider.queue_time == 0.037
    limits = response.rate_limits
    assert limits is not None
    assert (limits.limit_requests, limits.remaining_requests) == (14400, 14370)
    assert (limits.limit_tokens, limits.remaining_tokens) == (6000, 5997)
    assert limits.reset_requests == pytest.approx(179.56)
    assert limits.reset_tokens == pytest.approx(7.66)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_without_x_groq_the_request_id_is_the_x_request_id_header(
    plain: str, sim: ServerProcess, transport: str
) -> None:
    body = {**GROQ_COMPLETION}
    del body["x_groq"]
    fault = {"kind": "raw", "body": orjson.dumps(body).decode(), "headers": GROQ_HEADERS}
    await control(sim.address, "POST", "/faults", {"faults": [fault]})
    client = model(plain, transport)
    try:
        response = await client.complete(ModelRequest(HELLO, [], False, 10))
    finally:
        await client.close()
    assert response.request_id == GROQ_HEADERS["x-request-id"]
    assert response.completion_id == body["id"]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    ("fault", "status", "code"),
    [
        (
            {
                "kind": "raw",
                "status": 429,
                "body": '{"error": {"message": "Rate limit reached", "type": "tokens"}}',
                "headers": {"retry-after": "0.05", "x-request-id": "req_limited"},
            },
            "429",
            "model_rate_limited",
        ),
        (
            {
                "kind": "raw",
                "frames": [
                    "event: error\n",
                    'data: {"error": {"message": "Internal Server Error", "type": "internal"}}\n\n',
                ],
                "headers": {"x-request-id": "req_limited"},
            },
            "None",
            "model_stream_error",
        ),
        (
            {"kind": "status", "status": 498, "retry_after": 0.05, "message": "capacity"},
            "498",
            "model_unavailable",
        ),
    ],
)
async def test_a_retry_writes_a_log_line_with_the_request_id_status_and_delay(
    plain: str,
    sim: ServerProcess,
    caplog: pytest.LogCaptureFixture,
    transport: str,
    fault: dict[str, Any],
    status: str,
    code: str,
) -> None:
    await control(sim.address, "POST", "/faults", {"faults": [fault]})
    client = model(plain, transport, attempts=2)
    try:
        with caplog.at_level(logging.WARNING, logger="sidecar.llm.openai_model"):
            response = await client.complete(ModelRequest(HELLO, [], True, 10))
    finally:
        await client.close()
    assert response.attempts == 2
    [line] = [r.getMessage() for r in caplog.records if "retry 1 of 1" in r.getMessage()]
    assert f"({code}, status {status}, request id " in line
    if fault["kind"] == "raw":
        assert "request id req_limited" in line
    else:
        assert "request id req_" in line  # the simulator's own id of the failed request
    if status != "None":
        assert line.endswith("in 0.05 s")


@pytest.mark.parametrize(
    "names", [("https_proxy", "http_proxy"), ("grpc_proxy",), ("HTTPS_PROXY",)]
)
async def test_tool_server_links_never_go_through_the_model_proxy(
    proxy: Proxy, tmp_path: Path, names: tuple[str, ...]
) -> None:
    # The proxy variables route model requests; gRPC would read some of them (the lower
    # case ones, grpc_proxy) for the links to tool servers too, and carry a tool server's
    # token through the proxy's tunnel. It never does.
    proxy.seen()
    with scripted_simulator() as sim, testing.tool_server(str(SCRIPTED_TOOLSERVER)) as tools:
        config = testing.sidecar_config(sim.address, {"scripted": tools.address})
        config["tool_servers"][0].update(token_env="TOOL_TOKEN")
        env = {name: proxy.url for name in names} | {"no_proxy": "", "NO_PROXY": ""}
        env["TOOL_TOKEN"] = "tool-token-secret"
        with testing.sidecar(config, tmp_path, env=env) as side:
            async with AgentClient(side.address) as client:
                await client.wait_ready(20)
                session = await client.create_session()
                result = (await client.run(session.session_id, "two reads", timeout=20)).result
    assert result.stop_reason == agent_pb2.STOP_REASON_ANSWERED, result.error
    assert result.tool_calls == 2
    assert [line for line in proxy.seen() if tools.address in line] == []


async def _demanding_proxy() -> tuple[asyncio.Server, str, list[bytes]]:
    """A forward proxy that answers every request (a CONNECT or a forwarded one) 407:
    it wants credentials. It records each request line it got."""
    seen: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                seen.append(head.split(b"\r\n", 1)[0])
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                writer.write(
                    b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                    b'Proxy-Authenticate: Basic realm="egress"\r\n'
                    b"Content-Length: 0\r\n\r\n"
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    return server, f"http://{host}:{port}", seen


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_a_proxy_asking_for_credentials_is_asked_once_never_again(
    transport: str, scheme: str
) -> None:
    # A 407 says the request lacks the proxy's credentials: sent again, it is refused
    # again. The retry policy allows four attempts; one request reaches the proxy.
    server, url, seen = await _demanding_proxy()
    try:
        client = OpenAICompatibleModel(
            base_url=f"{scheme}://model.example/v1",
            api_key="test-key",
            model="llm-simulator",
            retry=RetryPolicy(max_attempts=4, initial_backoff=0.01, max_backoff=0.02),
            timeout=10,
            transport=transport,
            pacers=Pacers(),
            environ={f"{scheme.upper()}_PROXY": url},
        )
        try:
            with pytest.raises(ModelUnavailable) as raised:
                await client.complete(ModelRequest(HELLO, [], False, 10))
        finally:
            await client.close()
    finally:
        server.close()
        await server.wait_closed()
    assert raised.value.retryable is False and raised.value.attempts == 1
    assert "407" in raised.value.message
    assert len(seen) == 1, seen
    assert seen[0].startswith(b"CONNECT " if scheme == "https" else b"POST http://model.example")
