"""The test harness's waits stretch with the machine's load (sidecar.testing._pace): told
by AGENT_SIDECAR_TEST_SLOWNESS, else the load per core, bounded; a wait that runs out
says what it waited for."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from sidecar.testing import SLOWNESS_ENV, ProcessStartError, scaled, slowness, start_process
from sidecar.testing._pace import MAX_SLOWNESS
from tests.support.stack import eventually


def test_the_environment_sets_the_factor_and_a_bad_value_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SLOWNESS_ENV, "3")
    assert slowness() == 3.0 and scaled(10) == 30.0
    monkeypatch.setenv(SLOWNESS_ENV, "0.2")  # never shorter than an idle machine's
    assert slowness() == 1.0
    monkeypatch.setenv(SLOWNESS_ENV, "fast")
    with pytest.raises(ValueError, match=SLOWNESS_ENV):
        slowness()


def test_without_it_the_load_per_core_decides_within_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(SLOWNESS_ENV, raising=False)
    cores = os.cpu_count() or 1
    for load, expected in [(0.1, 1.0), (cores * 2.5, 2.5), (cores * 100, MAX_SLOWNESS)]:
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        assert slowness() == pytest.approx(expected)


async def test_a_wait_that_runs_out_names_what_it_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SLOWNESS_ENV, "2")

    async def never() -> bool:
        return False

    started = asyncio.get_running_loop().time()
    with pytest.raises(TimeoutError, match=r"waited 0s for .*never \(test_harness_pace.py:\d+\)"):
        await eventually(never, timeout=0.1)
    assert asyncio.get_running_loop().time() - started >= 0.2  # stretched twice


def test_a_silent_process_is_given_the_stretched_time_and_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SLOWNESS_ENV, "2")
    with pytest.raises(ProcessStartError, match=r"no address within 1s \(waits stretched x2\.0"):
        start_process(["-c", "import time; time.sleep(30)"], timeout=0.5, executable=sys.executable)
