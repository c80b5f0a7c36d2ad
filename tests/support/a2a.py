"""A2A clients no one here wrote (the ``a2a-sdk`` client from PyPI) on a test sidecar: over
gRPC with a bearer token in each call's metadata, or over JSON-RPC with it in a header."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import httpx
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types import a2a_pb2
from google.protobuf import json_format

ALICE = "alice-token"
BOB = "bob-token"
ALICE_SECRET = "alice-callback-secret"
A2A_SKILLS = [
    {
        "profile": "default",
        "id": "assistant",
        "name": "Assistant",
        "description": "Answers and uses the scripted tools",
        "examples": ["three slow reads please"],
    }
]


def principals() -> dict[str, Any]:
    return {
        "principals": [
            {"name": "alice", "token_env": "ALICE_TOKEN", "callback_secret_env": "ALICE_SECRET"},
            {"name": "bob", "token_env": "BOB_TOKEN"},
        ]
    }


ENV = {"ALICE_TOKEN": ALICE, "BOB_TOKEN": BOB, "ALICE_SECRET": ALICE_SECRET}


def _with_token(details: Any, token: str) -> Any:
    metadata = grpc.aio.Metadata(*(details.metadata or ()))
    metadata.add("authorization", f"Bearer {token}")
    return grpc.aio.ClientCallDetails(
        details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
    )


# grpc.aio files an interceptor under the first kind it is: one object per kind.
class _UnaryBearer(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, token: str) -> None:
        self._token = token

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_with_token(details, self._token), request)


class _StreamBearer(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self._token = token

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_with_token(details, self._token), request)


async def public_card(http_base: str) -> a2a_pb2.AgentCard:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{http_base}/.well-known/agent-card.json", timeout=10)
        response.raise_for_status()
        return json_format.ParseDict(
            response.json(), a2a_pb2.AgentCard(), ignore_unknown_fields=True
        )


@asynccontextmanager
async def a2a_client(
    card: a2a_pb2.AgentCard,
    binding: str,
    token: str | None,
    *,
    streaming: bool = True,
    polling: bool = False,
) -> AsyncIterator[Client]:
    """The SDK's client of ``card`` over ``binding`` (``GRPC`` or ``JSONRPC``)."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    http = httpx.AsyncClient(headers=headers, timeout=30)
    channels: list[grpc.aio.Channel] = []

    def channel(url: str) -> grpc.aio.Channel:
        interceptors: list[Any] = [_UnaryBearer(token), _StreamBearer(token)] if token else []
        made = grpc.aio.insecure_channel(url, interceptors=interceptors)
        channels.append(made)
        return made

    config = ClientConfig(
        streaming=streaming,
        polling=polling,
        httpx_client=http,
        grpc_channel_factory=channel,
        supported_protocol_bindings=[binding],
    )
    client = ClientFactory(config).create(card)
    try:
        yield client
    finally:
        await client.close()
        for made in channels:
            await made.close()
        await http.aclose()


def user_message(text: str, **fields: Any) -> a2a_pb2.SendMessageRequest:
    message = a2a_pb2.Message(
        message_id=fields.pop("message_id", uuid.uuid4().hex),
        role=a2a_pb2.ROLE_USER,
        parts=[a2a_pb2.Part(text=text)],
        **fields,
    )
    return a2a_pb2.SendMessageRequest(message=message)


async def collect(stream: AsyncIterator[a2a_pb2.StreamResponse]) -> list[a2a_pb2.StreamResponse]:
    return [event async for event in stream]
