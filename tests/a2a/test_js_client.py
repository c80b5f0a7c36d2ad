"""The A2A JavaScript SDK's client (``@a2a-js/sdk`` from npm, which ``make a2a-tools``
installs into .tools/a2a; ``make pytest`` does that first) drives a real sidecar over
JSON-RPC, its default binding: the agent card, a blocking message, a streamed one, a task
fetched by id and cancelled, an approval as input-required answered by a follow-up
message, a background task watched after reconnecting, a push notification delivered,
another principal's task and bad input answered with the spec's errors, a wrong token
refused. ``js_client.mjs`` reports what the client saw, one
JSON line a step."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from a2a.types import a2a_pb2
from google.protobuf import json_format

from sidecar.testing import ServerProcess
from tests.support import ROOT
from tests.support.a2a import ALICE, BOB
from tests.support.runs import receiver

A2A_TOOLS = ROOT / ".tools" / "a2a"
SDK = A2A_TOOLS / "node_modules" / "@a2a-js" / "sdk"
SCRIPT = Path(__file__).with_name("js_client.mjs")
INVALID_PARAMS = -32602


def _drive(base: str, push_url: str) -> dict[str, dict[str, Any]]:
    assert SDK.exists(), "@a2a-js/sdk is missing: run 'make pytest' or 'make a2a-tools'"
    node = shutil.which("node")
    assert node is not None, "Node.js is missing (make prereqs)"
    env = {
        **os.environ,
        "A2A_TOOLS": str(A2A_TOOLS),
        "ALICE_TOKEN": ALICE,
        "BOB_TOKEN": BOB,
        "PUSH_URL": push_url,
    }
    done = subprocess.run(
        [node, str(SCRIPT), base], env=env, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, f"js_client.mjs failed:\n{done.stdout}\n{done.stderr}"
    steps = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {step.pop("step"): step for step in steps}


async def test_the_javascript_sdk_client_drives_the_sidecar_over_json_rpc(
    stack: dict[str, Any],
) -> None:
    side: ServerProcess = stack["sidecar"]
    async with receiver() as hook:
        # The receiver answers in this loop while the script runs in a thread.
        seen = await asyncio.to_thread(_drive, "http://" + side.announced("a2a http on "), hook.url)
        (delivery,) = await hook.wait(1)

    card = seen["card"]
    assert card["skills"] == ["assistant"]
    assert "JSONRPC" in card["bindings"] and "GRPC" in card["bindings"]
    assert set(card["version"]) == {"1.0"}

    blocking = seen["blocking"]
    assert blocking["state"] == "TASK_STATE_COMPLETED"
    assert blocking["answer"].endswith("all three were read")
    assert blocking["toolCalls"] == 3
    assert blocking["history"] == "three slow reads please"

    streamed = seen["streamed"]
    assert streamed["first"] == "task" and len(streamed["taskIds"]) == 1
    assert streamed["progress"].count("toolCall") == 3
    assert streamed["progress"].count("toolResult") == 3
    assert streamed["lastChunk"] and streamed["answer"].endswith("all three were read")
    assert streamed["final"] == "TASK_STATE_COMPLETED"

    cancel = seen["cancel"]
    assert cancel["started"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert cancel["fetched"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert cancel["cancelled"] == cancel["after"] == "TASK_STATE_CANCELED"
    assert cancel["again"]["notCancelable"]
    assert cancel["again"]["reason"] == "TASK_NOT_CANCELABLE"

    errors = seen["errors"]
    for name in ("othersGet", "othersCancel", "unknownTask"):
        assert errors[name]["notFound"], (name, errors[name])
        assert errors[name]["reason"] == "TASK_NOT_FOUND"
    for name in ("emptyMessage", "badContext"):
        assert errors[name]["code"] == INVALID_PARAMS, (name, errors[name])
        assert errors[name]["reason"] == "INVALID_PARAMS"
    assert errors["stillServing"] == "TASK_STATE_COMPLETED"

    approval = seen["approval"]
    assert approval["waiting"] == "TASK_STATE_INPUT_REQUIRED"
    assert approval["sameTask"] and approval["done"] == "TASK_STATE_COMPLETED"

    reconnected = seen["reconnected"]
    assert reconnected["started"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert reconnected["first"] == "task" and reconnected["final"] == "TASK_STATE_COMPLETED"

    push = seen["push"]
    assert push["state"] == "TASK_STATE_COMPLETED"
    assert delivery.headers["x-a2a-notification-token"] == "js-token"
    assert delivery.headers["authorization"] == "Bearer js-receiver-secret"
    body = json_format.Parse(delivery.body, a2a_pb2.StreamResponse())
    assert body.task.id == push["id"] and body.task.status.state == a2a_pb2.TASK_STATE_COMPLETED

    unauthenticated = seen["unauthenticated"]
    assert not unauthenticated["a2aError"] and "401" in unauthenticated["message"]
