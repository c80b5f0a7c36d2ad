"""How a chat-completions request reaches the endpoint: two transports, one contract.

- :class:`DirectTransport` (the default) posts the body, serialized once by orjson, over
  one ``aiohttp.ClientSession`` per endpoint: kept-alive connections, the proxy from the
  environment, a CA bundle and a client certificate of the configuration's choosing, and
  compressed bodies decoded whether or not they were asked for.
- :class:`SdkTransport` (``model.transport: sdk``) sends the same bytes through
  ``openai.AsyncOpenAI`` on the SDK's aiohttp client, with its retries off (ours decide)
  and the same proxy, CA bundle and client certificate. The SDK's request transform and
  response models stay off the path: raw bytes in, raw response out.

Both answer :meth:`Transport.post` with a :class:`Response` once its status and headers
are in, whatever the status, so the caller sees the headers of a 429 as well as of a 200
(rate limits, ``retry-after``, ``x-request-id``). A failure below the status line is a
:class:`~sidecar.errors.ModelUnavailable`: ``model_timeout``, or ``model_unreachable``
(retryable, except a certificate the configured trust does not accept: the same
request would fail the same way).

Proxies come from ``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``NO_PROXY`` (either case), read
once when the transport is built: the endpoint is one origin, so its proxy is too.
(aiohttp's and httpx's ``trust_env`` would look it up again on every request, each time
in a worker thread.)
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import math
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
import httpx2
import orjson
from yarl import URL

from sidecar.errors import (
    MODEL_TIMEOUT,
    ModelError,
    ModelRequestRejected,
    ModelUnavailable,
    StartupError,
    ToolUseFailed,
)


def _version() -> str:
    try:
        return metadata.version("agent-sidecar")
    except metadata.PackageNotFoundError:
        return "unknown"


USER_AGENT = f"agent-sidecar/{_version()}"
"""What sends model requests: this sidecar (each transport adds how)."""
MAX_BODY_BYTES = 64 * 1024 * 1024
"""A response body larger than this (decoded) is refused: an endpoint gone wrong, not a
model."""
_KEEPALIVE_S = 15.0  # how long an idle connection is kept; servers close theirs after 5-75 s
_TAIL_S = 2.0  # how long the rest of a body read to its last event may take to arrive
_RETRYABLE_STATUS = frozenset({408, 409, 429, 498, 500, 502, 503, 504})
_REJECTED_CODES = {
    401: "model_unauthenticated",
    403: "model_permission_denied",
    404: "model_not_found",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """Where requests go and how the connection is made."""

    base_url: str
    """The OpenAI-compatible base URL; requests go to ``{base_url}/chat/completions``."""
    api_key: str | None = field(repr=False)
    """Sent as ``Authorization: Bearer``; None sends no ``Authorization`` header."""
    tls: ssl.SSLContext
    """Whom an ``https`` endpoint is trusted as, and the client certificate, if any."""
    proxy: str | None = field(default=None, repr=False)
    """The forward proxy's URL (credentials may be in it); None connects directly."""


class Response(Protocol):
    """A response whose status and headers have arrived; its body is read from it."""

    status: int
    headers: Mapping[str, str]
    """Looked up case-insensitively."""

    async def read(self) -> bytes:
        """The whole body, decoded."""
        ...

    def lines(self) -> AsyncIterator[bytes]:
        """The body's lines as they arrive."""
        ...


class Transport(Protocol):
    """Sends one chat-completions request body."""

    def post(self, body: bytes, timeout: float) -> contextlib.AbstractAsyncContextManager[Response]:
        """POST ``body``; enter with the response once its status and headers are in.

        ``timeout`` bounds the whole exchange, the body included.

        Raises:
            ModelUnavailable: the endpoint could not be reached, or did not answer in time.
        """
        ...

    async def get(self, path: str, timeout: float) -> tuple[int, bytes]:
        """GET ``{base_url}{path}`` (``/models``): its status and whole body.

        Raises:
            ModelUnavailable: the endpoint could not be reached, or did not answer in time.
        """
        ...

    async def close(self) -> None: ...


def tls_context(
    ca_file: str | None = None, cert_file: str | None = None, key_file: str | None = None
) -> ssl.SSLContext:
    """The TLS settings of model connections.

    Args:
        ca_file: PEM bundle of the certificates an endpoint (or an HTTPS proxy) is trusted
            by, instead of the system's; None trusts the system's (or ``SSL_CERT_FILE``).
        cert_file: PEM client certificate presented to the endpoint (with its key, unless
            ``key_file`` names the key).
        key_file: PEM private key of ``cert_file``.

    Raises:
        StartupError: a file cannot be read or does not hold what it should.
    """
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise StartupError(f"model.ca_file {ca_file}: cannot load it ({exc})") from None
    if cert_file is not None:
        try:
            context.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as exc:
            raise StartupError(
                f"model.cert_file {cert_file}"
                + (f" / model.key_file {key_file}" if key_file else "")
                + f": cannot load the client certificate ({exc})"
            ) from None
    return context


def proxy_for(url: str, environ: Mapping[str, str]) -> str | None:
    """The proxy ``environ`` names for ``url``: ``HTTPS_PROXY`` for https, ``HTTP_PROXY``
    for http (lower case wins, as curl and Python read them), none for a host ``NO_PROXY``
    lists (``*`` lists every host). A proxy without a scheme is ``http://``.

    Raises:
        StartupError: the proxy is not an http or https one (``socks5://``).
    """
    proxies: dict[str, str] = {}
    for lower_case_only in (False, True):  # a lower-case name wins over its upper case
        for name, value in environ.items():
            lower = name.lower()
            if value and lower.endswith("_proxy") and (name == lower or not lower_case_only):
                proxies[lower[:-6]] = value
    parts = urlsplit(url)
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if proxy is None or not parts.hostname:
        return None
    if "://" not in proxy:
        proxy = "http://" + proxy  # "proxy.corp:3128", as curl reads it
    scheme = urlsplit(proxy).scheme.lower()
    if scheme not in ("http", "https"):
        raise StartupError(
            f"the proxy for {parts.scheme} requests ({scheme}://..., from the environment's "
            "*_PROXY variables) is not supported: only http and https proxies are"
        )
    host = parts.hostname.lower()
    with_port = f"{host}:{parts.port}" if parts.port is not None else host
    for entry in proxies.get("no", "").split(","):
        # curl's and Python's reading: "*" is every host; "example.com" and ".example.com"
        # are that host and its subdomains; an entry with a port matches that port only.
        name = entry.strip().lstrip(".").lower()
        if name == "*":
            return None
        if name and any(h == name or h.endswith("." + name) for h in (host, with_port)):
            return None
    return proxy


def proxy_secrets(environ: Mapping[str, str]) -> list[str]:
    """The credentials in the proxy URLs ``environ`` names (``*_PROXY``): each password,
    its ``user:password`` and that pair as ``Proxy-Authorization`` sends it (base64), for
    the redactor."""
    secrets = []
    for name, value in environ.items():
        if not name.lower().endswith("_proxy") or name.lower() == "no_proxy" or "@" not in value:
            continue
        url = URL(value if "://" in value else "http://" + value)
        if url.password:
            pair = f"{url.user or ''}:{url.password}"
            secrets += [url.password, pair, base64.b64encode(pair.encode()).decode()]
    return secrets


class _Proxy:
    """How requests reach the endpoint through its proxy: the proxy's URL without its
    credentials, which go as ``Proxy-Authorization`` on the tunnel's CONNECT (an ``https``
    endpoint) or on each request (an ``http`` one, which the proxy forwards itself)."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.url: str | None = None
        self.connect_headers: dict[str, str] | None = None
        self.request_headers: dict[str, str] = {}
        if endpoint.proxy is None:
            return
        proxy = URL(endpoint.proxy)
        self.url = str(proxy.with_user(None))
        if proxy.user is None:
            return
        credentials = f"{proxy.user}:{proxy.password or ''}".encode()
        auth = {"Proxy-Authorization": "Basic " + base64.b64encode(credentials).decode()}
        if urlsplit(endpoint.base_url).scheme == "https":
            self.connect_headers = auth
        else:
            self.request_headers = auth


def _headers(api_key: str | None, agent: str) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    headers["User-Agent"] = agent
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _proxy_wants_credentials() -> ModelUnavailable:
    """A forward proxy answered 407, to a request or to a CONNECT: the same request would
    be refused the same way, so it is never retried."""
    return ModelUnavailable(
        "model_unreachable",
        "the proxy asked for credentials (407): the proxy's URL in HTTPS_PROXY or "
        "HTTP_PROXY needs user:password",
        retryable=False,
        status=407,
    )


def _too_large() -> ModelUnavailable:
    return ModelUnavailable(
        "model_unreachable",
        f"the model endpoint's response is larger than {MAX_BODY_BYTES} bytes",
        retryable=True,
    )


def _timed_out() -> ModelUnavailable:
    return ModelUnavailable(MODEL_TIMEOUT, "the model request timed out", retryable=True)


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what caused it, outermost first (the chain is short; never a loop)."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 8:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def _untrusted(exc: BaseException) -> ModelUnavailable | None:
    """The error for a certificate the configured trust refuses, if ``exc`` is one."""
    for cause in _causes(exc):
        if isinstance(
            cause, ssl.SSLCertVerificationError | aiohttp.ClientConnectorCertificateError
        ):
            return ModelUnavailable(
                "model_unreachable",
                f"the model endpoint's certificate is not trusted ({cause}): "
                "model.ca_file names the CAs trusted instead of the system's",
                retryable=False,
            )
    return None


def _unreachable(exc: BaseException) -> ModelUnavailable:
    # str(), never repr(): an aiohttp error's repr holds the request's headers, the
    # endpoint's key and the proxy's credentials among them.
    return _untrusted(exc) or ModelUnavailable(
        "model_unreachable",
        f"the model exchange failed: {type(exc).__name__}: {exc}",
        retryable=True,
    )


def _sdk_error(exc: BaseException) -> ModelUnavailable:
    """What an SDK connection error was. The SDK's aiohttp adapter reports every
    connection failure as a timeout (a refused connection too): the causes tell."""
    causes = _causes(exc)
    if any(isinstance(c, aiohttp.ClientHttpProxyError) and c.status == 407 for c in causes):
        return _proxy_wants_credentials()
    if any(isinstance(c, TimeoutError) for c in causes):
        return _timed_out()
    for cause in causes[1:]:
        if isinstance(cause, aiohttp.ClientError | OSError):
            return _unreachable(cause)
    import openai  # loaded already: only the SDK's transport gets here

    if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException):
        return _timed_out()
    return _unreachable(exc)


class _Tails:
    """The rest of bodies whose reader stopped at their last event: a stream's ``[DONE]``
    comes just before the body's end, which follows within microseconds. It is read in
    the background, so the connection goes back to the pool for the next request instead
    of being closed, and the call returns without waiting for it (nothing else of the run
    gets to run in between, as it would if the call waited)."""

    def __init__(self) -> None:
        self._tasks: dict[asyncio.Task[None], Callable[[], Awaitable[None]]] = {}

    def read(self, rest: Coroutine[Any, Any, None], abandon: Callable[[], Awaitable[None]]) -> None:
        """Run ``rest`` in the background; ``abandon`` closes the response if it cannot."""
        task = asyncio.get_running_loop().create_task(rest)
        self._tasks[task] = abandon
        task.add_done_callback(lambda done: self._tasks.pop(done, None))

    async def close(self) -> None:
        pending = dict(self._tasks)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for abandon in pending.values():
            await abandon()  # a task cancelled before it began never closed its response


async def _read_all(chunks: AsyncIterator[bytes], deadline: float) -> bytes:
    """A whole body, by ``deadline`` (the loop's clock), at most :data:`MAX_BODY_BYTES`."""
    parts = []
    total = 0
    async with asyncio.timeout_at(deadline):
        async for chunk in chunks:
            total += len(chunk)
            if total > MAX_BODY_BYTES:
                raise _too_large()
            parts.append(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _closer(response: aiohttp.ClientResponse) -> Callable[[], Awaitable[None]]:
    async def close() -> None:
        response.close()

    return close


async def _direct_tail(response: aiohttp.ClientResponse) -> None:
    try:
        async with asyncio.timeout(_TAIL_S):
            while await response.content.readany():
                pass
    except (TimeoutError, aiohttp.ClientError):
        response.close()
    except BaseException:
        response.close()
        raise
    else:
        response.release()


class _DirectResponse:
    __slots__ = ("_deadline", "_response", "headers", "status")

    def __init__(self, response: aiohttp.ClientResponse, deadline: float) -> None:
        self._response = response
        self._deadline = deadline
        self.status = response.status
        self.headers: Mapping[str, str] = response.headers

    async def read(self) -> bytes:
        return await _read_all(self._response.content.iter_any(), self._deadline)

    async def lines(self) -> AsyncGenerator[bytes, None]:
        content = self._response.content
        rest = b""
        total = 0
        while True:
            async with asyncio.timeout_at(self._deadline):
                chunk = await content.readany()
            if not chunk:
                break
            total += len(chunk)
            if total > MAX_BODY_BYTES:
                raise _too_large()
            data = rest + chunk if rest else chunk
            start = 0
            while (end := data.find(b"\n", start)) >= 0:
                yield data[start : end + 1]
                start = end + 1
            rest = data[start:]
        if rest:
            yield rest


class DirectTransport:
    """Over one ``aiohttp.ClientSession``, with the headers the SDK would send."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._base = endpoint.base_url.rstrip("/")
        self._url = URL(self._base + "/chat/completions", encoded=False)
        self._headers = _headers(endpoint.api_key, f"{USER_AGENT} (direct transport)")
        self._tls = endpoint.tls
        proxy = _Proxy(endpoint)
        self._proxy = URL(proxy.url) if proxy.url is not None else None
        self._proxy_headers = proxy.connect_headers
        self._headers.update(proxy.request_headers)
        self._session: aiohttp.ClientSession | None = None
        self._tails = _Tails()

    def _open(self) -> aiohttp.ClientSession:
        # Built on first use, inside the event loop that will use it.
        connector = aiohttp.TCPConnector(
            limit=0,  # as many connections as requests in flight: the run's deadline bounds them
            ssl=self._tls,
            keepalive_timeout=_KEEPALIVE_S,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            # No default headers: aiohttp sends a session's default headers to the proxy
            # as well, and turns an Authorization among them into Proxy-Authorization:
            # the endpoint's key would reach the proxy. They go with each request instead.
            timeout=aiohttp.ClientTimeout(total=None),  # each exchange runs under its own
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,  # the proxy was resolved once, at construction
        )
        return self._session

    @contextlib.asynccontextmanager
    async def post(self, body: bytes, timeout: float) -> AsyncIterator[Response]:
        session = self._session or self._open()
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            async with asyncio.timeout_at(deadline):
                response = await session.post(
                    self._url,
                    data=body,
                    headers=self._headers,
                    proxy=self._proxy,
                    proxy_headers=self._proxy_headers,
                )
            try:
                yield _DirectResponse(response, deadline)
            except BaseException:
                # Abandoned mid-body, the rest would arrive unread; read whole (an error
                # status's body), aiohttp has released the connection already: no-op.
                response.close()
                raise
            if response.content.is_eof():
                response.release()  # the connection goes back to the pool
            else:
                self._tails.read(_direct_tail(response), _closer(response))
        except TimeoutError:
            raise _timed_out() from None
        except aiohttp.ClientHttpProxyError as exc:
            if exc.status == 407:
                raise _proxy_wants_credentials() from None
            raise ModelUnavailable(
                "model_unreachable",
                f"the proxy {self._proxy} refused the connection: {exc.status} {exc.message}",
                retryable=True,
            ) from None
        except aiohttp.ClientError as exc:
            raise _unreachable(exc) from None

    async def get(self, path: str, timeout: float) -> tuple[int, bytes]:
        session = self._session or self._open()
        url = URL(self._base + path, encoded=False)
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            async with asyncio.timeout_at(deadline):
                async with session.get(
                    url,
                    headers=self._headers,
                    proxy=self._proxy,
                    proxy_headers=self._proxy_headers,
                ) as response:
                    body = await _read_all(response.content.iter_any(), deadline)
                    return response.status, body
        except TimeoutError:
            raise _timed_out() from None
        except aiohttp.ClientError as exc:
            raise _unreachable(exc) from None

    async def close(self) -> None:
        await self._tails.close()
        if self._session is not None:
            await self._session.close()
            self._session = None


class _SdkResponse:
    __slots__ = ("_deadline", "_lines", "_response", "headers", "status")

    def __init__(self, response: httpx2.Response, deadline: float) -> None:
        self._response = response
        self._deadline = deadline
        self._lines: AsyncIterator[str] | None = None
        self.status = response.status_code
        self.headers: Mapping[str, str] = response.headers

    async def read(self) -> bytes:
        return await _read_all(self._response.aiter_bytes(), self._deadline)

    async def lines(self) -> AsyncGenerator[bytes, None]:
        lines = self._lines = self._response.aiter_lines()
        total = 0
        while True:
            try:
                async with asyncio.timeout_at(self._deadline):
                    line = await anext(lines)
            except StopAsyncIteration:
                self._lines = None
                break
            total += len(line)
            if total > MAX_BODY_BYTES:
                raise _too_large()
            yield line.encode()

    @property
    def unfinished(self) -> bool:
        """Whether the body's lines were left before their end."""
        return self._lines is not None

    async def tail(self) -> None:
        """Read the rest of the lines, then release the response."""
        try:
            if self._lines is not None:
                async with asyncio.timeout(_TAIL_S):
                    async for _ in self._lines:
                        pass
        except (TimeoutError, httpx2.TransportError):
            pass
        finally:
            await self._response.aclose()


class SdkTransport:
    """Through ``openai.AsyncOpenAI``: raw bytes in, raw response out."""

    def __init__(self, endpoint: Endpoint) -> None:
        # Imported here: the SDK costs a quarter of a second of every start, and the
        # direct transport (the default) never needs it.
        import openai

        self._status_error = openai.APIStatusError
        self._failures = (openai.APIConnectionError, httpx2.TransportError, aiohttp.ClientError)
        proxy = _Proxy(endpoint)
        self._client = openai.AsyncOpenAI(
            base_url=endpoint.base_url,
            api_key=endpoint.api_key or "keyless",
            max_retries=0,
            http_client=openai.DefaultAioHttpClient(
                verify=endpoint.tls,
                # Credentials as headers: the SDK's adapter would pass them to aiohttp as a
                # BasicAuth, which aiohttp deprecates.
                proxy=None
                if proxy.url is None
                else httpx2.Proxy(proxy.url, headers=proxy.connect_headers),
                trust_env=False,  # the proxy was resolved once, at construction
            ),
            default_headers={"User-Agent": f"{USER_AGENT} openai-python/{openai.__version__}"},
        )
        self._headers: dict[str, Any] = {"Content-Type": "application/json"}
        self._headers.update(proxy.request_headers)
        if endpoint.api_key is None:
            self._headers["Authorization"] = openai.Omit()  # a keyless endpoint gets none
        self._tails = _Tails()

    @contextlib.asynccontextmanager
    async def post(self, body: bytes, timeout: float) -> AsyncIterator[Response]:
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            try:
                async with asyncio.timeout_at(deadline):
                    response: httpx2.Response = await self._client.post(
                        "/chat/completions",
                        cast_to=httpx2.Response,
                        content=body,
                        options={"headers": self._headers, "timeout": timeout},
                        stream=True,
                    )
            except self._status_error as exc:
                response = exc.response  # read already; its status is the caller's to judge
            wrapped = _SdkResponse(response, deadline)
            try:
                yield wrapped
            except BaseException:
                await response.aclose()
                raise
            if wrapped.unfinished:
                self._tails.read(wrapped.tail(), response.aclose)
            else:
                await response.aclose()
        except TimeoutError:
            raise _timed_out() from None
        except self._failures as exc:
            # The SDK's aiohttp adapter lets aiohttp's own errors through (a response that
            # is no HTTP): they are the exchange's failure all the same.
            raise _sdk_error(exc) from None

    async def get(self, path: str, timeout: float) -> tuple[int, bytes]:
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            try:
                async with asyncio.timeout_at(deadline):
                    response: httpx2.Response = await self._client.get(
                        path,
                        cast_to=httpx2.Response,
                        options={"headers": self._headers, "timeout": timeout},
                    )
            except self._status_error as exc:
                response = exc.response
            return response.status_code, await _read_all(response.aiter_bytes(), deadline)
        except TimeoutError:
            raise _timed_out() from None
        except self._failures as exc:
            raise _sdk_error(exc) from None

    async def close(self) -> None:
        await self._tails.close()
        await self._client.close()


def open_transport(kind: str, endpoint: Endpoint) -> Transport:
    """The transport ``model.transport`` names: ``direct`` or ``sdk``."""
    if kind == "sdk":
        return SdkTransport(endpoint)
    return DirectTransport(endpoint)


def body_json(content: bytes) -> Any:
    """An error body as JSON, or as text when it is not JSON."""
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return content.decode(errors="replace")


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds ``retry-after-ms`` or ``retry-after`` asks for; None when neither is usable."""
    for name in ("retry-after-ms", "retry-after"):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value)
        except ValueError:
            continue
        if not math.isfinite(seconds) or seconds < 0:
            continue  # "nan", "inf", "-1": no usable delay; the backoff decides
        return seconds / 1000 if name.endswith("-ms") else seconds
    return None


def status_error(status: int, headers: Mapping[str, str], body: Any) -> ModelError:
    """Map a failed HTTP exchange onto the seam's exception tree."""
    error = body.get("error", body) if isinstance(body, dict) else {}
    if not isinstance(error, dict):
        error = {}
    message = str(error.get("message") or body or f"HTTP {status}")
    if status == 407:
        # A forward proxy's answer (to an http endpoint's request), not the endpoint's.
        return _proxy_wants_credentials()
    if status == 400 and error.get("code") == "tool_use_failed":
        return ToolUseFailed(message, str(error.get("failed_generation") or ""))
    if error.get("code") in ("model_not_found", "model_decommissioned"):
        # Groq answers a retired model 404 model_not_found (or 400 model_decommissioned):
        # the model name is wrong, never the endpoint, so it is its own reason.
        return ModelRequestRejected(
            "model_not_found",
            f"the model endpoint does not serve this model ({status}): {message}",
            retryable=False,
            status=status,
        )
    if status in _RETRYABLE_STATUS:
        return ModelUnavailable(
            "model_rate_limited" if status == 429 else "model_unavailable",
            f"model endpoint answered {status}: {message}",
            retryable=True,
            status=status,
            retry_after=retry_after(headers),
        )
    return ModelRequestRejected(
        _REJECTED_CODES.get(status, "model_bad_request"),
        f"model endpoint rejected the request ({status}): {message}",
        retryable=False,
        status=status,
    )
