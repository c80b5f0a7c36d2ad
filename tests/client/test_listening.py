"""Why a port cannot be listened on: the words every listener of the project says."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from agentsidecar.listening import cannot_listen, port_holder


def test_a_free_port_and_port_zero_can_be_listened_on() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    free = probe.getsockname()[1]
    probe.close()
    assert cannot_listen("127.0.0.1", 0) is None
    assert cannot_listen("127.0.0.1", free) is None


def test_a_port_this_process_listens_on_is_named_as_its_own() -> None:
    with socket.socket() as own:
        own.bind(("127.0.0.1", 0))
        own.listen()
        port = own.getsockname()[1]
        assert cannot_listen("127.0.0.1", port) == f"port {port} is in use by this process"
        # The wildcard address collides with it too.
        assert cannot_listen("0.0.0.0", port) == f"port {port} is in use by this process"
    assert port_holder(port) is None


def test_an_address_no_interface_has_and_a_name_that_does_not_resolve() -> None:
    assert cannot_listen("192.0.2.1", 8080) == (
        "no interface of this machine has the address 192.0.2.1"
    )
    reason = cannot_listen("no-such-host.invalid", 8080)
    assert reason is not None and reason.startswith("no-such-host.invalid does not resolve")


def test_the_holders_command_line_is_shown_without_what_could_be_a_secret(
    tmp_path: Path,
) -> None:
    script = tmp_path / "holder.py"
    script.write_text(
        "import socket, time\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "print(s.getsockname()[1], flush=True); time.sleep(120)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, str(script), "--token=s3cret-value", "s3cret-too"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        port = int(holder.stdout.readline())
        reason = cannot_listen("127.0.0.1", port)
    finally:
        holder.kill()
        holder.communicate()
    assert reason == (
        f"port {port} is in use by process {holder.pid} ({sys.executable} {script} --token=...)"
    )
