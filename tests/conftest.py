"""Fixtures shared by several test modules.

``postgres_server`` / ``postgres_dsn``: one private PostgreSQL server per test session,
and a fresh database per test (for the shared session store and result cache).

``observed_stack``: the LLM simulator, the scripted tool server, the example shop tool
server (tracing on, exporting to an OTLP receiver in this process) and a sidecar with
metrics, tracing, the timeline log, a price table, and profiles whose latency budgets
the scripted conversations overrun on purpose. Tests that use it reset the simulator
and work in their own sessions; metric assertions compare scrapes around their own runs.

``client``: an ``AgentClient`` of the sidecar in the requesting module's own ``stack``
fixture (a dict with ``sim`` and ``sidecar``), the simulator's faults reset first.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from agentsidecar.client import AgentClient
from sidecar.testing import (
    POSTGRES_MISSING,
    PostgresServer,
    create_database,
    drop_database,
    postgres_binaries,
    scaled,
    start_process,
)
from tests.support.otlp import otlp_receiver
from tests.support.stack import SimControl, scripted_toolserver, sidecar, sidecar_config, simulator

# Property-based suites: a fixed, bounded run in `make test` (derandomized: the same
# examples every time), a long random one in `make fuzz`.
settings.register_profile(
    "ci",
    max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", "60")),
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile(
    "fuzz",
    max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", "3000")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


_BASE_TIMEOUT = pytest.StashKey[float | None]()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Each test's time limit (pyproject's ``timeout``, for an idle machine) stretched for
    the machine's load as the test starts, as every wait of the harness is."""
    config = item.config
    if _BASE_TIMEOUT not in config.stash:
        config.stash[_BASE_TIMEOUT] = getattr(config, "_env_timeout", None)
    base = config.stash[_BASE_TIMEOUT]
    if base:
        config._env_timeout = scaled(base)  # type: ignore[attr-defined]  # pytest-timeout's
    yield


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every property-based test, so `make fuzz` can run them alone, longer."""
    for item in items:
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.property)


PRICES = {"prompt": 0.5, "completion": 1.5, "cached_prompt": 0.25}  # USD per million
TOOLS_100MS = {"tools": 0.1}


@pytest.fixture(scope="session")
def observed_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("observed")
    log = tmp / "timeline.jsonl"
    with otlp_receiver() as receiver, simulator() as sim, scripted_toolserver() as tools:
        traced = ["--otlp-endpoint", receiver.address, "--log-level", "WARNING"]
        shop = start_process(
            ["-m", "toolservers.examples.shop", "--port", "0", *traced],
            env={"OTEL_BSP_SCHEDULE_DELAY": "50"},  # export within 50 ms
        )
        try:
            config = sidecar_config(
                sim,
                [
                    {
                        "name": "scripted",
                        "address": tools.address,
                        "timeout": 1.0,
                        "retry": {"max_attempts": 3, "initial_backoff": 0.01, "max_backoff": 0.05},
                        "breaker": {"failure_threshold": 3, "reset_timeout": 0.3},
                    },
                    {"name": "shop", "address": shop.address},
                ],
                profiles={
                    "default": {},
                    "tools_stop": {"budget": {**TOOLS_100MS, "policy": "stop"}},
                    "tools_answer": {"budget": {**TOOLS_100MS, "policy": "answer"}},
                    "tools_continue": {"budget": {**TOOLS_100MS, "other": 1e-6}},
                    "total_stop": {"budget": {"total": 0.5, "policy": "stop"}},
                    "roomy": {"budget": {"total": 30, "policy": "stop"}},
                },
                telemetry={
                    "label": "build-42",
                    "metrics": {"enabled": True, "port": 0},
                    "tracing": {
                        "enabled": True,
                        "otlp_endpoint": receiver.address,
                        "export_delay": 0.05,
                    },
                    "timeline_log": str(log),
                },
                prices={"simulated-model": PRICES},
            )
            with sidecar(config, tmp) as side:
                yield {
                    "sim": sim,
                    "tools": tools,
                    "sidecar": side,
                    "receiver": receiver,
                    "log": log,
                }
        finally:
            shop.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole test session, started on first use."""
    binaries = postgres_binaries()
    if binaries is None:
        pytest.fail(POSTGRES_MISSING)
    server = PostgresServer(binaries)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def postgres_dsn(postgres_server: PostgresServer) -> AsyncIterator[str]:
    """A fresh, empty database for one test."""
    dsn = await create_database(postgres_server)
    yield dsn
    await drop_database(postgres_server, dsn)


@pytest.fixture
async def client(stack: dict[str, Any]) -> AsyncIterator[AgentClient]:
    """A client of the requesting module's ``stack`` sidecar, its simulator reset first."""
    await SimControl(stack["sim"].address).reset()
    async with AgentClient(stack["sidecar"].address) as c:
        await c.wait_ready(20)
        yield c
