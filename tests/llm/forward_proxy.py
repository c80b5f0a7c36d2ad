"""A real forward proxy on loopback for the model-path tests: proxy.py, from PyPI.

Run: ``python tests/llm/forward_proxy.py [PROXY.PY FLAGS]`` (``--basic-auth user:password``
makes it ask for credentials) prints ``listening on 127.0.0.1:PORT`` once it
accepts connections, then one line per request it forwards, as the request reaches it
(before it goes upstream): ``proxied METHOD HOST:PORT PATH`` (``CONNECT`` for a tunnel to
an ``https`` endpoint, whose path it cannot see), followed by ``with proxy-authorization VALUE``
when the request carried credentials for the proxy. It runs until SIGTERM.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import proxy
from proxy.http.proxy import HttpProxyBasePlugin


class Announce(HttpProxyBasePlugin):
    """Prints each request the proxy handles."""

    def handle_client_request(self, request: Any) -> Any:
        host = request.host.decode() if request.host else ""
        path = request.path.decode() if request.path and request.method != b"CONNECT" else ""
        line = f"proxied {request.method.decode()} {host}:{request.port} {path}"
        if request.has_header(b"proxy-authorization"):
            line += " with proxy-authorization " + request.header(b"proxy-authorization").decode()
        print(line, flush=True)
        if request.has_header(b"content-length"):
            # proxy.py 2.4.10 writes its own "Content-Length" beside a client's lower-case
            # "content-length" (httpx sends that), a duplicate servers refuse: spell the
            # client's header as proxy.py does, so its own replaces it.
            request.add_header(b"Content-Length", request.header(b"content-length"))
        return request


def main() -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    flags = ["--hostname", "127.0.0.1", "--port", "0", "--num-acceptors", "1"]
    flags += sys.argv[1:]
    with proxy.Proxy([*flags, "--log-level", "WARNING"], plugins=[Announce]) as server:
        print(f"listening on 127.0.0.1:{server.flags.port}", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
