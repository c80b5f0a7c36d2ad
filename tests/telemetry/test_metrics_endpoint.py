"""The metrics endpoint under careless and hostile clients, through a real sidecar: a
client that sends half a request is closed, connections beyond the cap are closed as
they are accepted, and scrapes are served again once they are gone."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from tests.support.http_limits import check_bounded
from tests.support.stack import sidecar, sidecar_config, simulator

CAP = 4


def _scrape(address: str) -> int:
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
            return int(response.status)
    except OSError:
        return 0


def test_a_half_sent_scrape_is_closed_and_connections_are_capped(tmp_path: Path) -> None:
    metrics = {"enabled": True, "port": 0, "read_timeout": 0.5, "max_connections": CAP}
    with simulator() as sim:
        with sidecar(sidecar_config(sim, [], telemetry={"metrics": metrics}), tmp_path) as side:
            address = side.announced("metrics on ")
            host, port = address.rsplit(":", 1)
            check_bounded(
                host,
                int(port),
                half_request=b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n",  # no end
                cap=CAP,
                serves=lambda: _scrape(address) == 200,
            )
