"""Helpers for the MCP tests: the project's edge-case MCP server, third-party servers from
the registries (installed by ``make mcp-tools``), and tool calls scripted into the
simulator."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from agentsidecar.client import AgentClient, ApprovalHandler
from agentsidecar.v1 import agent_pb2
from sidecar.testing import ServerProcess
from tests.support import ROOT, SUPPORT
from tests.support.stack import SimControl

EDGE_SERVER = SUPPORT / "mcp_edge_server.py"
"""Our own MCP server whose tools misbehave on request."""
MCP_TOOLS = ROOT / ".tools" / "mcp" / "node_modules"
"""Where ``make mcp-tools`` installs the npm packages (Node.js 22 among them)."""
NODE = MCP_TOOLS / ".bin" / "node"
EVERYTHING = MCP_TOOLS / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
INSPECTOR = (
    MCP_TOOLS
    / "@modelcontextprotocol"
    / "inspector"
    / "clients"
    / "launcher"
    / "build"
    / "index.js"
)
"""The MCP Inspector's launcher (``--cli`` runs its CLI)."""
CONFORMANCE = MCP_TOOLS / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
"""The conformance suite's 0.1 release: the 2025 revisions."""
CONFORMANCE_2026 = MCP_TOOLS / "conformance-2026" / "dist" / "index.js"
"""Its 0.2 line: 2026-07-28 and the tasks extension."""


def venv_script(name: str) -> str:
    """A console script installed beside this Python (``mcp-server-time`` ...)."""
    found = Path(sys.executable).parent / name
    if found.exists():
        return str(found)
    which = shutil.which(name)
    assert which is not None, f"{name} is not installed: make install"
    return which


def edge(name: str = "edge", *flags: str, **settings: Any) -> dict[str, Any]:
    """An ``mcp_servers`` entry starting the edge server on stdio. Its calls need no
    approval unless ``settings`` say so; restarts and probes are quick."""
    return {
        "name": name,
        "command": sys.executable,
        "args": [str(EDGE_SERVER), *flags],
        "approval": "never",
        "restart_backoff": 0.2,
        "max_restart_backoff": 1.0,
        "discovery_timeout": 10,
        **settings,
    }


async def script_calls(sim: ServerProcess, *calls: tuple[str, dict[str, Any]]) -> None:
    """The model's next answer asks for these tool calls, in one step."""
    tool_calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        for i, (name, arguments) in enumerate(calls)
    ]
    body = {"choices": [{"message": {"tool_calls": tool_calls}, "finish_reason": "tool_calls"}]}
    deltas = [{**call, "index": i} for i, call in enumerate(tool_calls)]
    chunks = [
        {"choices": [{"index": 0, "delta": {"tool_calls": deltas}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    frames = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks] + ["data: [DONE]\n\n"]
    fault = {"kind": "raw", "body": json.dumps(body), "frames": frames}
    await SimControl(sim.address).faults(fault)


async def streamed(
    client: AgentClient,
    session_id: str,
    text: str = "go",
    on_approval: ApprovalHandler | None = None,
    timeout: float = 60,
) -> list[agent_pb2.StreamRunResponse]:
    """Every event of one streamed run."""
    return [
        e async for e in client.stream(session_id, text, on_approval=on_approval, timeout=timeout)
    ]


def events_of(events: list[agent_pb2.StreamRunResponse], kind: str) -> list[Any]:
    """The payloads of one kind of event, in order."""
    return [getattr(e, kind) for e in events if e.WhichOneof("event") == kind]
