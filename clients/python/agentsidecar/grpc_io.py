"""Load gRPC on the I/O path that costs the sidecar and tool servers the least.

Since 1.80, gRPC Python does its socket I/O on EventEngine threads, which hand every
completion to the asyncio loop's thread: about eight thread switches per unary call on
each side. gRPC's older poller does the I/O on the thread that polls for completions. On a
two-core machine, one agent run (one ``Run`` call, three tool calls) made the sidecar
switch threads 14 times instead of 35 and cost it 12 to 14% less CPU, and the tool server
4 to 8% less (``docs/benchmarks.md``, step 6 of the profile, and its ``sidecar_event_engine``
row). Both are gRPC's own code paths, chosen by its ``GRPC_EXPERIMENTS`` variable, which
gRPC reads once, when it is first imported.
"""

from __future__ import annotations

import os
import sys

__all__ = ["POLLER_EXPERIMENTS", "load_grpc"]

POLLER_EXPERIMENTS = "-event_engine_client,-event_engine_listener,-event_engine_callback_cq"
"""The ``GRPC_EXPERIMENTS`` value that turns gRPC's socket I/O back to its poller."""


def load_grpc() -> None:
    """Import ``grpc`` with :data:`POLLER_EXPERIMENTS`, unless that cannot or should not be.

    Nothing changes when ``GRPC_EXPERIMENTS`` is set (the operator's choice wins; an empty
    value keeps gRPC's defaults) or when ``grpc`` is already imported (its experiments are
    read then). The variable is removed again after the import, so processes this one
    starts are not affected.
    """
    if "grpc" in sys.modules or "GRPC_EXPERIMENTS" in os.environ:
        return
    os.environ["GRPC_EXPERIMENTS"] = POLLER_EXPERIMENTS
    try:
        import grpc  # noqa: F401  (read its experiments now)
    finally:
        del os.environ["GRPC_EXPERIMENTS"]
