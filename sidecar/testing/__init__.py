"""Start real sidecars, LLM simulators and tool servers in tests: ours and yours.

Every piece runs as its own process on 127.0.0.1, on a free port it announces, the way
``aiohttp.test_utils`` and ``temporalio.testing`` start real servers for a test::

    from sidecar import testing

    def test_my_service_answers(tmp_path):
        with testing.example_stack(tmp_path) as stack:
            my_service = MyService(sidecar_address=stack.sidecar.address)
            ...

Pieces start one by one too: :func:`simulator`, :func:`tool_server` (an SDK server
module or script), :func:`sidecar` (from a configuration :func:`sidecar_config`
builds); each returns a :class:`ServerProcess`, a context manager that stops it with
SIGTERM. :func:`wait_serving` waits until a sidecar's health says SERVING (it has
discovered its tool servers).

:class:`PostgresServer` starts a private PostgreSQL server (Debian's binaries, a port of
its own) for the shared store's tests and benchmarks; :func:`create_database` makes each
test a fresh namespace on it.

A recorded session becomes a test: :func:`simulator` with ``recording=`` answers each
recorded input as the model did, and :func:`recorded_turns` reads the turns (their
inputs, tool calls and answers) to drive the sidecar with and check against.

Every wait here (an address, SERVING) is stretched by :func:`slowness`, the machine's
load per core now or ``AGENT_SIDECAR_TEST_SLOWNESS``: :func:`scaled` does the same for a
test's own waits.

Tests in other languages start the same stack with the launcher,
``python -m sidecar.testing``: it prints ``stack {JSON}`` (the addresses), then
``listening on HOST:PORT`` (the sidecar, SERVING), and runs until SIGTERM, SIGINT or
the end of its stdin. See ``docs/testing.md``.
"""

from pathlib import Path

from sidecar.recording.format import RecordedTurn, read_turns
from sidecar.testing._health import wait_serving
from sidecar.testing._pace import SLOWNESS_ENV, scaled, slowness
from sidecar.testing._postgres import (
    POSTGRES_MISSING,
    PostgresServer,
    create_database,
    drop_database,
    postgres_binaries,
)
from sidecar.testing._process import (
    READY_PREFIX,
    ProcessStartError,
    ServerProcess,
    start_process,
)
from sidecar.testing._stack import (
    CLIENT_PROFILES,
    EXAMPLE_TOOL_SERVERS,
    SCENARIO,
    SIMULATOR_MODEL,
    Stack,
    example_stack,
    sidecar,
    sidecar_config,
    simulator,
    tool_server,
)


def recorded_turns(*recordings: str | Path) -> list[RecordedTurn]:
    """The live turns of recordings (files or directories), in the order recorded.

    Raises:
        RecordingError: a recording cannot be read.
    """
    return [t for t in read_turns(recordings) if t.shadow_of is None]


__all__ = [
    "CLIENT_PROFILES",
    "EXAMPLE_TOOL_SERVERS",
    "POSTGRES_MISSING",
    "READY_PREFIX",
    "SCENARIO",
    "SIMULATOR_MODEL",
    "SLOWNESS_ENV",
    "PostgresServer",
    "ProcessStartError",
    "RecordedTurn",
    "ServerProcess",
    "Stack",
    "create_database",
    "drop_database",
    "example_stack",
    "postgres_binaries",
    "recorded_turns",
    "scaled",
    "sidecar",
    "sidecar_config",
    "simulator",
    "slowness",
    "start_process",
    "tool_server",
    "wait_serving",
]
