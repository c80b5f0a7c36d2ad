"""The A2A tests' stack: the simulator, the scripted tool server and a sidecar serving A2A
on its port and on an HTTP listener, with two principals (alice, bob), tracing to a
receiver in this process; one per module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.a2a import A2A_SKILLS, ENV, principals
from tests.support.otlp import otlp_receiver
from tests.support.stack import scripted_toolserver, sidecar, sidecar_config, simulator

BACKGROUND: dict[str, Any] = {
    "flush_interval": 0.02,
    "poll_interval": 0.2,
    "callbacks": {
        "allowed_hosts": ["127.0.0.1"],
        "allow_private_networks": True,
        "allow_http": True,
        "timeout": 2,
        "retry": {"max_attempts": 3, "initial_backoff": 0.05, "max_backoff": 0.1},
    },
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with otlp_receiver() as receiver, simulator() as sim, scripted_toolserver() as tools:
        tracing = {"enabled": True, "otlp_endpoint": receiver.address, "export_delay": 0.05}
        config = sidecar_config(
            sim,
            [{"name": "scripted", "address": tools.address}],
            background=BACKGROUND,
            auth=principals(),
            a2a={"skills": A2A_SKILLS, "http": {"port": 0}},
            telemetry={"tracing": tracing},
        )
        with sidecar(config, tmp_path_factory.mktemp("sidecar"), env=ENV) as side:
            yield {"sim": sim, "tools": tools, "sidecar": side, "receiver": receiver}
