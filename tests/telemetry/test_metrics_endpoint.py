"""The metrics endpoint under careless and hostile clients, through a real sidecar: a
client that sends half a request is closed, connections beyond the cap are closed as
they are accepted, and scrapes are served again once they are gone."""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

from tests.support.stack import sidecar, sidecar_config, simulator

CAP = 4


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except OSError:
        return True
    return True


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
            half = socket.create_connection((host, int(port)), timeout=10)
            half.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no end of headers
            assert _closed_within(half, 20)  # 0.5 s: generous, and far short of never
            half.close()
            idle = [socket.create_connection((host, int(port)), timeout=10) for _ in range(CAP)]
            try:
                time.sleep(0.2)  # each accepted, each in its thread, waiting to read
                extra = socket.create_connection((host, int(port)), timeout=10)
                assert _closed_within(extra, 20)  # beyond the cap: closed as accepted
                extra.close()
            finally:
                for sock in idle:
                    sock.close()
            deadline = time.monotonic() + 20
            while (status := _scrape(address)) != 200 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert status == 200
