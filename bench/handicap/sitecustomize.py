"""A deliberately slower sidecar, to prove the speed guard catches one.

``python -m bench.guard --handicap MS`` starts its sidecar with this directory on
``PYTHONPATH``; Python imports this module at start-up, and it makes every turn burn
``AGENT_SIDECAR_HANDICAP_MS`` milliseconds of CPU more (a busy loop on the thread's CPU
clock) before it runs. Nothing in the product knows about it.
"""

import os
import time

_MS = float(os.environ.get("AGENT_SIDECAR_HANDICAP_MS") or 0)

if _MS > 0:
    from sidecar.agent import loop

    _run = loop.AgentLoop.run

    async def _slower_run(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        until = time.thread_time() + _MS / 1000
        while time.thread_time() < until:
            pass
        return await _run(self, *args, **kwargs)

    loop.AgentLoop.run = _slower_run  # type: ignore[method-assign]
