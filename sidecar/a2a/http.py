"""The A2A front's HTTP side: the agent card, the JSON-RPC binding and the HTTP+JSON
binding as one ASGI application, behind the shared :class:`~sidecar.http.Door`.

- **Every route but the card is authenticated**, by construction: the door wraps the whole
  application and names only the card's path public, so a route the SDK adds (such as its
  ``/{tenant}/...`` mount) cannot slip past it.
- **Tenants are not served**: the SDK's tenant mount is left out, and any path that is no
  route answers 404 in the binding's error shape, saying so.
- **A body is checked before the SDK reads it** (:class:`_Bodies`): at most
  ``limits.max_body_bytes``, UTF-8 JSON nested at most :data:`MAX_DEPTH` deep, a JSON-RPC
  request an object whose ``params`` is one; HTTP+JSON takes only JSON (415 otherwise).
  A bad body is -32700/-32600/-32602 on JSON-RPC and 400 on HTTP+JSON, with a message
  that says what is wrong and never Python text.
- **No Python text reaches a caller**: an error the SDK would send with an exception's
  text is logged under an error id, and the caller gets the id.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from email.utils import formatdate, parsedate_to_datetime
from typing import Any

import orjson
from a2a.server.jsonrpc_models import InternalError as JsonRpcInternal
from a2a.server.jsonrpc_models import JSONRPCError
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.routes import create_agent_card_routes, create_rest_routes
from a2a.server.routes.common import ServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types import a2a_pb2
from a2a.utils.constants import A2A_JSON_MEDIA_TYPE, AGENT_CARD_WELL_KNOWN_PATH
from a2a.utils.errors import A2AError, InternalError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from sidecar.a2a.errors import DOMAIN

__all__ = ["CARD_PATH", "MAX_DEPTH", "application", "refusal_body"]

log = logging.getLogger(__name__)

CARD_PATH = AGENT_CARD_WELL_KNOWN_PATH
MAX_DEPTH = 64
"""Deepest nesting of a request body's JSON (A2A's messages nest a few levels; metadata
and data parts rarely more than ten)."""
CARD_CACHE = "public, max-age=300"
"""The card changes only with a restart: callers may keep it five minutes."""
_JSON_TYPES = frozenset({"application/json", A2A_JSON_MEDIA_TYPE})
_JSON_BYTES = frozenset(t.encode() for t in _JSON_TYPES)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    413: "RESOURCE_EXHAUSTED",
    415: "INVALID_ARGUMENT",
    421: "PERMISSION_DENIED",
}


def refusal_body(status: int, reason: str, message: str) -> bytes:
    """An HTTP refusal as the HTTP+JSON binding writes errors (``google.rpc.Status`` in
    JSON, an ``ErrorInfo`` with the sidecar's reason)."""
    return orjson.dumps(
        {
            "error": {
                "code": status,
                "status": _STATUS.get(status, "FAILED_PRECONDITION"),
                "message": message,
                "details": [
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": reason,
                        "domain": DOMAIN,
                    }
                ],
            }
        }
    )


def _jsonrpc_body(code: int, message: str) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}})


def _depth(value: Any, limit: int) -> bool:
    """Whether ``value`` nests at most ``limit`` deep (iterative: no recursion to exhaust)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return False
        stack.extend((child, depth + 1) for child in children)
    return True


class _Bodies:
    """Checks the body of every request to a binding before the SDK reads it, and hands
    the SDK the same bytes."""

    def __init__(self, app: App, *, jsonrpc: frozenset[str], rest: str | None, limit: int) -> None:
        self._app = app
        self._jsonrpc = jsonrpc
        self._rest = rest
        self._limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        rpc = path in self._jsonrpc
        rest = self._rest is not None and path.startswith(self._rest + "/")
        if scope["type"] != "http" or not (rpc or rest):
            await self._app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if rest:
            send = _answering_in(_media_wanted(media, headers.get("accept", "")), send)
        if scope["method"] != "POST":
            await self._app(scope, receive, send)
            return
        if rpc and media and media not in _JSON_TYPES:
            text = f"the body is {media!r}; send application/json"
            await _send(send, 200, _jsonrpc_body(-32005, text))  # ContentTypeNotSupported
            return
        if rest and media and media not in _JSON_TYPES:
            await _send(
                send,
                415,
                refusal_body(
                    415,
                    "CONTENT_TYPE_NOT_SUPPORTED",
                    f"the body is {media!r}; send application/json",
                ),
            )
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._limit:
                text = f"the body is larger than {self._limit} bytes"
                if rpc:
                    await _send(send, 200, _jsonrpc_body(-32600, text))
                else:
                    await _send(send, 413, refusal_body(413, "BODY_TOO_LARGE", text))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if rest and not body.strip():
            body = b"{}"  # an operation whose request is all in its path; or a clear refusal
        problem = _problem(body, rpc=rpc)
        if problem is not None:
            code, text = problem
            if rpc:
                await _send(send, 200, _jsonrpc_body(code, text))
            else:
                await _send(send, 400, refusal_body(400, "INVALID_REQUEST", text))
            return
        sent = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self._app(scope, replay, send)


def _media_wanted(media: str, accept: str) -> bytes:
    """The media type of an HTTP+JSON answer. The spec says both: its binding's table
    ``application/json`` (11.1), its registration and examples ``application/a2a+json``
    (14.1), which the SDK sends. A caller that names ``application/a2a+json`` (in
    ``Accept`` or as its body's type) gets it; every other caller ``application/json``."""
    named = media == A2A_JSON_MEDIA_TYPE or A2A_JSON_MEDIA_TYPE in accept.lower()
    return (A2A_JSON_MEDIA_TYPE if named else "application/json").encode()


def _answering_in(wanted: bytes, send: Send) -> Send:
    """``send`` with a JSON answer's ``content-type`` set to ``wanted`` (an event stream,
    or any other type, passes as it is)."""

    async def sending(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [
                (k, wanted if k.lower() == b"content-type" and _is_json(v) else v)
                for k, v in message.get("headers", [])
            ]
        await send(message)

    return sending


def _is_json(value: bytes) -> bool:
    return value.split(b";", 1)[0].strip().lower() in _JSON_BYTES


def _problem(body: bytes, *, rpc: bool) -> tuple[int, str] | None:
    """``(JSON-RPC code, message)`` of what is wrong with a body, or None."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return -32700, f"the body is not UTF-8 (byte {exc.start})"
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc).lower():
            return -32600, f"the body nests deeper than {MAX_DEPTH} levels"
        return -32700, f"the body is not JSON (at character {exc.pos})"
    if not _depth(value, MAX_DEPTH):
        return -32600, f"the body nests deeper than {MAX_DEPTH} levels"
    if rpc:
        if isinstance(value, list):
            return -32600, "batch requests are not supported: send one request object"
        if not isinstance(value, dict):
            return -32600, "a JSON-RPC request is a JSON object"
        if "params" in value and not isinstance(value["params"], dict):
            return -32602, "params must be a JSON object"
    elif not isinstance(value, dict):
        return -32600, "the body must be a JSON object"
    return None


async def _send(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _Dispatcher(JsonRpcDispatcher):
    """The SDK's JSON-RPC dispatcher, whose errors never carry Python text: an error it
    would send with an exception's text is logged under an id, and the caller gets that."""

    def _generate_error_response(
        self, request_id: str | int | None, error: Exception | JSONRPCError | A2AError
    ) -> JSONResponse:
        return super()._generate_error_response(request_id, _clean(error))


def _clean(error: Exception | JSONRPCError | A2AError) -> JSONRPCError | A2AError:
    if isinstance(error, InternalError) and str(error).startswith("internal error "):
        return error  # the handler's own: it has its id
    if isinstance(error, InternalError | JsonRpcInternal) or not isinstance(
        error, A2AError | JSONRPCError
    ):
        error_id = uuid.uuid4().hex[:16]
        log.error("internal error %s: %s", error_id, error)
        return InternalError(f"internal error {error_id}; the sidecar's log has the details")
    if (
        isinstance(error, JSONRPCError)
        and isinstance(error.data, dict)
        and "parseError" in (error.data)
    ):
        # The SDK puts the parser's text there, which quotes Python's own words.
        return type(error)(
            code=error.code,
            message=f"{error.message}: params do not decode as the method's request "
            "message (the A2A spec's JSON form, camelCase field names)",
        )
    return error


async def _not_found(request: Request, exc: Exception) -> Response:
    return Response(
        refusal_body(
            404,
            "ROUTE_NOT_FOUND",
            f"no A2A route {request.url.path!r}; tenants are not served, so no path "
            "carries one (the agent card lists the bindings' URLs)",
        ),
        status_code=404,
        media_type="application/json",
    )


async def _not_allowed(request: Request, exc: Exception) -> Response:
    return Response(
        refusal_body(405, "METHOD_NOT_ALLOWED", f"{request.method} is not served here"),
        status_code=405,
        media_type="application/json",
    )


def _dated(routes: list[Route]) -> list[Route]:
    """The card's routes with ``Last-Modified``: the card is made once, when the listener
    starts, so that is when it last changed. ``If-Modified-Since`` gets a 304 as an
    ``If-None-Match`` that hits does (which, when sent, decides alone: RFC 9110, 13.2.2)."""
    made = int(time.time())
    stamp = formatdate(made, usegmt=True)

    def dated(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[..., Any]:
        async def serve(request: Request) -> Response:
            response = await endpoint(request)
            response.headers["Last-Modified"] = stamp
            since = request.headers.get("if-modified-since")
            if response.status_code == 200 and since and "if-none-match" not in request.headers:
                try:
                    unchanged = parsedate_to_datetime(since).timestamp() >= made
                except (TypeError, ValueError):
                    unchanged = False  # an unreadable date is ignored, as RFC 9110 says
                if unchanged:
                    return Response(status_code=304, headers=_validators(response))
            return response

        return serve

    return [
        Route(r.path, endpoint=dated(r.endpoint), methods=list(r.methods or ())) for r in routes
    ]


def _validators(response: Response) -> dict[str, str]:
    keep = ("etag", "cache-control", "last-modified")
    return {k: v for k, v in response.headers.items() if k in keep}


def application(
    handler: RequestHandler,
    card: a2a_pb2.AgentCard,
    *,
    jsonrpc_path: str,
    rest_prefix: str | None,
    context_builder: ServerCallContextBuilder,
    max_body_bytes: int,
) -> App:
    """The card, JSON-RPC (at ``jsonrpc_path``, with or without a trailing ``/``) and,
    with ``rest_prefix``, HTTP+JSON; bodies checked. The caller wraps it in the door."""
    dispatcher = _Dispatcher(request_handler=handler, context_builder=context_builder)
    routes: list[BaseRoute] = [
        *_dated(create_agent_card_routes(card, cache_control=CARD_CACHE)),
        Route(jsonrpc_path, endpoint=dispatcher.handle_requests, methods=["POST"]),
        Route(jsonrpc_path + "/", endpoint=dispatcher.handle_requests, methods=["POST"]),
    ]
    if rest_prefix is not None:
        routes += [
            r
            for r in create_rest_routes(
                handler, context_builder=context_builder, path_prefix=rest_prefix
            )
            if not isinstance(r, Mount)  # the /{tenant} mount: tenants are not served
        ]
    app = Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_allowed})
    return _Bodies(
        app,
        jsonrpc=frozenset({jsonrpc_path, jsonrpc_path + "/"}),
        rest=rest_prefix,
        limit=max_body_bytes,
    )
