"""What identity costs a tool call: the metadata (always on) and the signed assertion.

**In process** (CPU per operation, this process, ``time.process_time_ns``): the sidecar's
per-run build of the identity (``ToolIdentity.for_run``), its per-call metadata
(``RunIdentity.call_metadata``, plain and with the assertion reused), one signature (once
per run and tool server); the SDK's decoding of the plain identity, its verification of a
new assertion, and of one it verified before (a run's later calls).

**Over gRPC** (CPU per call, the client's and the tool server's, ``/proc``): the orders
example server is called with ``get_order_status`` by a plain ``grpc.aio`` client, in
interleaved rounds, four ways: no identity metadata (before tool calls carried it), the
plain identity metadata, plus the assertion (a server that does not verify), and the
assertion verified by the server (``--identity-keys``). Each round starts a new run every
three calls, as the pre-sales run makes three tool calls.

``python -m bench.micro.tool_identity [--calls 600] [--rounds 6]`` writes
``bench/results/tool_identity.md`` and prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from agentsidecar.v1 import tool_pb2, tool_pb2_grpc
from bench import processes
from bench.stats import median
from sidecar.config import ToolAssertionConfig
from sidecar.security.identity import Principal
from sidecar.security.tool_identity import AssertionSigner, ToolIdentity
from toolservers._identity import IdentityVerifier, plain_identity

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench/results/tool_identity.md"
LABELS = {"team": "checkout", "tenant": "acme-eu", "region": "Zürich"}
TRACE = [("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")]
CALLS_PER_RUN = 3
_TICK = 1e9 / os.sysconf("SC_CLK_TCK")


def _key(directory: Path) -> Path:
    path = directory / "key.pem"
    path.write_bytes(
        ed25519.Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


def _cpu_us(fn: Callable[[int], object], n: int) -> float:
    """Median over 5 batches of the CPU microseconds one ``fn(i)`` takes."""
    batches = []
    for _ in range(5):
        start = time.process_time_ns()
        for i in range(n):
            fn(i)
        batches.append((time.process_time_ns() - start) / n / 1000)
    return median(batches)


def in_process(key: Path, keys_file: Path) -> list[tuple[str, float]]:
    plain = ToolIdentity()
    signer = AssertionSigner(ToolAssertionConfig(key_file=str(key)))
    signed = ToolIdentity(signer)
    alice = Principal("alice")
    run = plain.for_run(alice, "user-1", "r" * 32, LABELS)
    signed_run = signed.for_run(alice, "user-1", "r" * 32, LABELS)
    signed_run.assertion("orders")
    metadata = signed_run.call_metadata("orders", "call_0123456789abcdef01234567", TRACE)
    fresh = [
        signed.for_run(alice, "user-1", f"{i:032x}", LABELS).call_metadata("orders", "c", ())
        for i in range(200)
    ]
    verifier = IdentityVerifier(str(keys_file), "orders", "agent-sidecar")

    def verify_new(i: int) -> None:
        verifier._verified.clear()  # as for a run's first call
        verifier.verify(fresh[i % len(fresh)], "c")

    return [
        (
            "sidecar, per run: the identity (plain)",
            _cpu_us(lambda i: plain.for_run(alice, "user-1", "r" * 32, LABELS), 20_000),
        ),
        (
            "sidecar, per run: the identity (signing on)",
            _cpu_us(lambda i: signed.for_run(alice, "user-1", "r" * 32, LABELS), 20_000),
        ),
        (
            "sidecar, per call: the metadata (plain)",
            _cpu_us(
                lambda i: run.call_metadata("orders", "call_0123456789abcdef01234567", TRACE),
                50_000,
            ),
        ),
        (
            "sidecar, per call: the metadata + the assertion reused",
            _cpu_us(
                lambda i: signed_run.call_metadata(
                    "orders", "call_0123456789abcdef01234567", TRACE
                ),
                50_000,
            ),
        ),
        (
            "sidecar, per run and server: one signature",
            _cpu_us(
                lambda i: signer.sign(
                    {"iss": "agent-sidecar", "sid": "s", "run_id": "r"}, "o", 1e9
                ),
                2_000,
            ),
        ),
        (
            "tool server, per call: the plain identity decoded",
            _cpu_us(lambda i: plain_identity(metadata, "c"), 20_000),
        ),
        ("tool server, per run: a new assertion verified", _cpu_us(verify_new, 1_000)),
        (
            "tool server, per call: an assertion verified before",
            _cpu_us(lambda i: verifier.verify(metadata, "call_0123456789abcdef01234567"), 20_000),
        ),
    ]


def _server_cpu_ns(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int((int(fields[11]) + int(fields[12])) * _TICK)


async def over_grpc(
    key: Path, keys_file: Path, calls: int, rounds: int
) -> dict[str, tuple[float, float]]:
    signer = AssertionSigner(ToolAssertionConfig(key_file=str(key)))
    requests = [
        tool_pb2.CallToolRequest(
            call_id=f"call_{i}", tool_name="get_order_status", arguments='{"order_id": "20250101"}'
        )
        for i in range(calls)
    ]
    verify = ["--identity-keys", str(keys_file), "--identity-audience", "orders"]
    with (
        processes.tool_server("orders", 0) as plain_server,
        processes.tool_server("orders", 0, *verify) as verifying_server,
    ):
        modes: dict[str, tuple[Any, ToolIdentity | None]] = {}
        channels = []
        for name, server, identity in (
            ("no identity metadata (before)", plain_server, None),
            ("the plain identity metadata", plain_server, ToolIdentity()),
            ("+ the assertion, not verified", plain_server, ToolIdentity(signer)),
            ("+ the assertion, verified by the server", verifying_server, ToolIdentity(signer)),
        ):
            channel = grpc.aio.insecure_channel(server.address)
            channels.append(channel)
            modes[name] = ((tool_pb2_grpc.ToolServiceStub(channel), server.popen.pid), identity)
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in modes}
        try:
            for (stub, _), _ in modes.values():  # warm up
                for request in requests[:50]:
                    await stub.CallTool(request, timeout=5)
            for round_ in range(rounds):
                for name, ((stub, pid), identity) in modes.items():
                    client0, server0 = time.process_time_ns(), _server_cpu_ns(pid)
                    run = None
                    for i in range(calls):
                        metadata: Any = TRACE
                        if identity is not None:
                            if i % CALLS_PER_RUN == 0:
                                run = identity.for_run(
                                    Principal("alice"), "user-1", f"{round_}-{i}", LABELS
                                )
                            assert run is not None
                            metadata = run.call_metadata("orders", f"call_{i}", TRACE)
                        await stub.CallTool(requests[i], timeout=5, metadata=metadata)
                    client_us = (time.process_time_ns() - client0) / calls / 1000
                    server_us = (_server_cpu_ns(pid) - server0) / calls / 1000
                    samples[name].append((client_us, server_us))
        finally:
            for channel in channels:
                await channel.close()
    return {
        name: (median([c for c, _ in s]), median([v for _, v in s])) for name, s in samples.items()
    }


def render(
    costs: list[tuple[str, float]],
    grpc_costs: dict[str, tuple[float, float]],
    calls: int,
    rounds: int,
) -> str:
    lines = [
        "# What identity costs a tool call",
        "",
        "`python -m bench.micro.tool_identity` on this machine (2 shared cores); Ed25519 keys.",
        "",
        "In process, CPU per operation (median of 5 batches):",
        "",
        "| operation | CPU (us) |",
        "| --- | ---: |",
        *(f"| {name} | {us:.1f} |" for name, us in costs),
        "",
        f"Over gRPC, CPU per `CallTool` of the orders example server ({calls} calls per",
        f"round, {rounds} interleaved rounds, medians of the rounds; a new run every",
        f"{CALLS_PER_RUN} calls):",
        "",
        "| metadata | client CPU (us) | server CPU (us) |",
        "| --- | ---: | ---: |",
        *(f"| {name} | {c:.0f} | {s:.0f} |" for name, (c, s) in grpc_costs.items()),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        key = _key(Path(scratch))
        keys_file = Path(scratch) / "jwks.json"
        keys_file.write_text(
            json.dumps(AssertionSigner(ToolAssertionConfig(key_file=str(key))).jwks())
        )
        costs = in_process(key, keys_file)
        grpc_costs = asyncio.run(over_grpc(key, keys_file, args.calls, args.rounds))
    text = render(costs, grpc_costs, args.calls, args.rounds)
    OUT.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
