"""What every HTTP front of the sidecar shares (the A2A listener; the MCP endpoint can take
the same): the door each request passes before a front reads it, and the listener that
serves an ASGI application with bounded connections.

- :class:`~sidecar.http.door.Door`: Origin and Host (against DNS rebinding), then the
  caller's credentials, for every path but the ones a front names public.
- :class:`~sidecar.http.listener.HttpListener`: uvicorn on a socket bound before it
  starts, TLS from ``server.tls``, a read timeout and a connection cap
  (:class:`~sidecar.config.HttpLimits`).
"""

from sidecar.http.door import Door, OriginRule, Refusal
from sidecar.http.listener import HttpListener

__all__ = ["Door", "HttpListener", "OriginRule", "Refusal"]
