"""The agent card through a real sidecar: its skills, the bindings actually served, how
callers authenticate, its signature when a key is configured; and a sidecar that does not
serve A2A loads none of it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from a2a.types import a2a_pb2
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from google.protobuf import json_format

from tests.support.a2a import (
    A2A_SKILLS,
    ALICE,
    BOB,
    ENV,
    a2a_client,
    collect,
    public_card,
    user_message,
)
from tests.support.stack import sidecar, sidecar_config, simulator


def _key(tmp_path: Path) -> tuple[Path, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / "card-key.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return path, public


async def test_the_card_lists_skills_and_served_bindings_and_is_signed(tmp_path: Path) -> None:
    key_file, public = _key(tmp_path)
    skills = [
        *A2A_SKILLS,
        {"profile": "restricted", "id": "restricted", "description": "only for alice"},
    ]
    auth = {
        "principals": [
            {"name": "alice", "token_env": "ALICE_TOKEN"},
            {"name": "bob", "token_env": "BOB_TOKEN", "profiles": ["default"]},
        ]
    }
    a2a = {
        "skills": skills,
        "name": "orders-agent",
        "http": {"port": 0, "rest": False},
        "signing": {"key_file": str(key_file), "key_id": "card-1"},
    }
    with simulator() as sim:
        config = sidecar_config(
            sim,
            [],
            profiles={"default": {}, "restricted": {"tools": ["lookup"]}},
            auth=auth,
            a2a=a2a,
        )
        with sidecar(config, tmp_path, env=ENV) as side:
            base = "http://" + side.announced("a2a http on ")
            card = await public_card(base)
            assert card.name == "orders-agent"
            assert [s.id for s in card.skills] == ["assistant", "restricted"]
            bindings = {i.protocol_binding: i.url for i in card.supported_interfaces}
            assert bindings == {"JSONRPC": base + "/a2a/jsonrpc", "GRPC": side.address}
            assert card.capabilities.streaming and card.capabilities.extended_agent_card
            assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"

            def key(kid: str | None, jku: str | None) -> bytes:
                assert kid == "card-1"
                return public

            create_signature_verifier(key, ["ES256"])(card)
            tampered = a2a_pb2.AgentCard()
            tampered.CopyFrom(card)
            tampered.name = "someone-else"
            with pytest.raises(InvalidSignaturesError):
                create_signature_verifier(key, ["ES256"])(tampered)
            # The extended card lists what the caller may use, signed too.
            for token, expected in ((ALICE, ["assistant", "restricted"]), (BOB, ["assistant"])):
                async with a2a_client(card, "GRPC", token, streaming=False) as client:
                    extended = await client.get_extended_agent_card(
                        a2a_pb2.GetExtendedAgentCardRequest()
                    )
                assert [s.id for s in extended.skills] == expected
                create_signature_verifier(key, ["ES256"])(extended)
            # A task's metadata names the tools its skill's profile lists and no server
            # offers (here, no tool server at all).
            async with a2a_client(card, "JSONRPC", ALICE, streaming=False) as client:
                request = user_message("hello there")
                request.message.metadata["skill"] = "restricted"
                (response,) = await collect(client.send_message(request))
            metadata = json_format.MessageToDict(response.task.metadata)
            assert metadata["unavailableTools"] == [
                {"name": "lookup", "availability": "not_offered"}
            ]


def test_a_sidecar_without_a2a_loads_none_of_it() -> None:
    code = (
        "import sys\n"
        "import sidecar.commands.serve, sidecar.api.server, sidecar.commands.cli\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('a2a', 'uvicorn', 'starlette') or m.startswith('sidecar.a2a'))\n"
        "print(loaded)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
