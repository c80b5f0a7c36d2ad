"""How a chat-completions request reaches the endpoint: two transports, one contract.

- :class:`SdkTransport` sends through ``openai.AsyncOpenAI`` itself (its aiohttp
  transport, ``max_retries=0``), but with the body serialized once by orjson and the raw
  response returned unparsed: the SDK's request transform and response models stay off
  the hot path.
- :class:`DirectTransport` (the default) sends the same bytes with the same headers
  straight over kept-alive connections of :mod:`sidecar.llm.http`. The SDK's request
  plumbing (URL and header building, its httpx layer, aiohttp's client) costs several
  times the CPU of the exchange itself; this transport skips it.

Both return the HTTP status, headers and body (or the body's lines, when streaming), and
turn a failed exchange into a :class:`~sidecar.llm.model.ModelError` the same way.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncGenerator, Mapping
from importlib import metadata
from typing import Any, Protocol

import httpx2
import openai
import orjson

from sidecar.errors import (
    HttpError,
    ModelError,
    ModelRequestRejected,
    ModelUnavailable,
    ToolUseFailed,
)
from sidecar.llm.http import HttpClient, Response


def _version() -> str:
    try:
        return metadata.version("agent-sidecar")
    except metadata.PackageNotFoundError:
        return "unknown"


USER_AGENT = f"agent-sidecar/{_version()}"
"""What sends model requests: this sidecar (each transport adds how)."""
_RETRYABLE_STATUS = frozenset({408, 409, 429, 498, 500, 502, 503, 504})
_REJECTED_CODES = {
    401: "model_unauthenticated",
    403: "model_permission_denied",
    404: "model_not_found",
}


class Transport(Protocol):
    """Sends one chat-completions request body."""

    async def complete(self, body: bytes, timeout: float) -> bytes:
        """POST ``body``; return the response body.

        Raises:
            ModelError: the endpoint failed or could not be reached.
        """
        ...

    def stream(self, body: bytes, timeout: float) -> AsyncGenerator[bytes, None]:
        """POST ``body``; yield the response's lines as they arrive.

        Raises:
            ModelError: the endpoint failed or could not be reached.
        """
        ...

    async def close(self) -> None: ...


class SdkTransport:
    """Through ``openai.AsyncOpenAI``: raw bytes in, raw response out."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float) -> None:
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or "keyless",
            max_retries=0,
            timeout=timeout,
            http_client=openai.DefaultAioHttpClient(),
            default_headers={"User-Agent": f"{USER_AGENT} openai-python/{openai.__version__}"},
        )
        self._headers: dict[str, Any] = {"Content-Type": "application/json"}
        if api_key is None:
            self._headers["Authorization"] = openai.Omit()  # a keyless endpoint gets none

    async def _post(self, body: bytes, timeout: float, stream: bool) -> httpx2.Response:
        try:
            return await self._client.post(
                "/chat/completions",
                cast_to=httpx2.Response,
                content=body,
                options={"headers": self._headers, "timeout": timeout},
                stream=stream,
            )
        except openai.APIStatusError as exc:
            raise status_error(exc.status_code, exc.response.headers, exc.body) from exc
        except openai.APITimeoutError as exc:
            raise ModelUnavailable(
                "model_timeout", "the model request timed out", retryable=True
            ) from exc
        except openai.APIConnectionError as exc:
            raise ModelUnavailable(
                "model_unreachable", f"cannot reach the model endpoint: {exc}", retryable=True
            ) from exc

    async def complete(self, body: bytes, timeout: float) -> bytes:
        response = await self._post(body, timeout, stream=False)
        return response.content

    async def stream(self, body: bytes, timeout: float) -> AsyncGenerator[bytes, None]:
        response = await self._post(body, timeout, stream=True)
        try:
            async for line in response.aiter_lines():
                yield line.encode()
        except httpx2.TransportError as exc:
            raise ModelUnavailable(
                "model_unreachable", f"the model stream broke off: {exc}", retryable=True
            ) from None
        finally:
            await response.aclose()

    async def close(self) -> None:
        await self._client.close()


class DirectTransport:
    """Straight over :class:`~sidecar.llm.http.HttpClient`, with the headers the SDK sends."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float) -> None:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": f"{USER_AGENT} (direct transport)",
        }
        if api_key is not None:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = HttpClient(base_url.rstrip("/") + "/chat/completions", headers)

    @contextlib.asynccontextmanager
    async def _exchange(self, body: bytes, timeout: float) -> AsyncGenerator[Response, None]:
        """POST and yield a successful response; map every failure to a ModelError."""
        try:
            async with self._client.post(body, timeout) as response:
                if response.status >= 400:
                    content = await response.read()
                    raise status_error(response.status, response.headers, _json(content))
                yield response
        except TimeoutError as exc:
            raise ModelUnavailable(
                "model_timeout", "the model request timed out", retryable=True
            ) from exc
        except HttpError as exc:
            raise ModelUnavailable(
                "model_unreachable", f"the model exchange failed: {exc}", retryable=True
            ) from exc

    async def complete(self, body: bytes, timeout: float) -> bytes:
        async with self._exchange(body, timeout) as response:
            return await response.read()

    async def stream(self, body: bytes, timeout: float) -> AsyncGenerator[bytes, None]:
        async with self._exchange(body, timeout) as response:
            async for line in response.lines():
                yield line

    async def close(self) -> None:
        await self._client.close()


def _json(content: bytes) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return content.decode(errors="replace")


def _retry_after(headers: Mapping[str, str]) -> float | None:
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
    if status == 400 and error.get("code") == "tool_use_failed":
        return ToolUseFailed(message, str(error.get("failed_generation") or ""))
    if status in _RETRYABLE_STATUS:
        return ModelUnavailable(
            "model_rate_limited" if status == 429 else "model_unavailable",
            f"model endpoint answered {status}: {message}",
            retryable=True,
            status=status,
            retry_after=_retry_after(headers),
        )
    return ModelRequestRejected(
        _REJECTED_CODES.get(status, "model_bad_request"),
        f"model endpoint rejected the request ({status}): {message}",
        retryable=False,
        status=status,
    )
