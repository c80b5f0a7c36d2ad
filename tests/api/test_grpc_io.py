"""The sidecar and SDK tool servers load gRPC on its poller I/O path (agentsidecar.grpc_io).

The effect is observed from outside, on real processes: while a server answers gRPC calls,
its ``event_engine`` threads stay asleep, where with gRPC's defaults they wake for every
call. Thread names and context switches come from ``/proc``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.testing import ServerProcess, start_process

CALLS = 60


def event_engine_switches(pid: int) -> int:
    """Context switches so far of the process's threads named ``event_engine``."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        if (task / "comm").read_text().strip() != "event_engine":
            continue
        for line in (task / "status").read_text().splitlines():
            if "ctxt_switches" in line:
                total += int(line.split()[1])
    return total


# The calls come from a process of their own, loading gRPC the way ours do: the test's own
# process has dozens of channels and tests behind it, which would change what it sends.
_CALLER = """
import sys
import sidecar  # loads gRPC on its poller I/O, as every process of ours does
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
with grpc.insecure_channel(sys.argv[1]) as channel:
    health = health_pb2_grpc.HealthStub(channel)
    request = health_pb2.HealthCheckRequest(service="")
    health.Check(request, timeout=10)  # connected and warm
    print("ready", flush=True)
    sys.stdin.readline()
    for _ in range(int(sys.argv[2])):
        assert health.Check(request, timeout=10).status == health_pb2.HealthCheckResponse.SERVING
    print("done", flush=True)
"""


def switches_while_answering(server: ServerProcess) -> int:
    caller = subprocess.Popen(
        [sys.executable, "-c", _CALLER, server.address, str(CALLS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert caller.stdin is not None and caller.stdout is not None
    try:
        assert caller.stdout.readline().strip() == "ready"
        before = event_engine_switches(server.pid)
        caller.stdin.write("go\n")
        caller.stdin.flush()
        assert caller.stdout.readline().strip() == "done"
        return event_engine_switches(server.pid) - before
    finally:
        caller.stdin.close()
        caller.wait(timeout=10)
        caller.stdout.close()


def server_command(name: str, tmp_path: Path) -> list[str]:
    if name == "tool server":
        return ["-m", "toolservers.examples.shop", "--port", "0"]
    config = tmp_path / "sidecar.yaml"
    config.write_text(f"sessions: {{sqlite: {{path: {tmp_path / 'sessions.db'}}}}}\n")
    return ["-m", "sidecar", "serve", "--config", str(config), "--port", "0"]


@pytest.mark.parametrize("name", ["tool server", "sidecar"])
def test_a_server_does_its_grpc_io_without_waking_event_engine_threads(
    name: str, tmp_path: Path
) -> None:
    command = server_command(name, tmp_path)
    env = {"GROQ_API_KEY": ""}
    tuned = start_process(command, env=env)
    try:
        tuned_switches = switches_while_answering(tuned)
    finally:
        tuned.stop()
    # An operator's GRPC_EXPERIMENTS wins; empty keeps gRPC's defaults.
    default = start_process(command, env={**env, "GRPC_EXPERIMENTS": ""})
    try:
        default_switches = switches_while_answering(default)
    finally:
        default.stop()
    assert default_switches >= CALLS, "with gRPC's defaults, each call wakes its I/O threads"
    # Measured against the defaults in the same conditions: a loaded machine wakes idle
    # threads now and then too (timers), so an absolute bound would measure the machine.
    assert tuned_switches < default_switches / 4, (tuned_switches, default_switches)


def test_loading_grpc_leaves_the_environment_as_it_found_it() -> None:
    show = "import os, sidecar, toolservers; print(repr(os.environ.get('GRPC_EXPERIMENTS')))"
    for preset, expected in ((None, "None"), ("", "''"), ("-x", "'-x'")):
        env = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
        if preset is not None:
            env["GRPC_EXPERIMENTS"] = preset
        shown = subprocess.run(
            [sys.executable, "-c", show], env=env, capture_output=True, text=True, check=True
        )
        assert shown.stdout.strip() == expected  # child processes inherit nothing new
