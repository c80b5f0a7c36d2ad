"""The A2A front: the Agent2Agent protocol (v1.0, as ``a2a-sdk`` 1.3.0 implements it)
over the runtime, tasks being background runs (docs/a2a.md).

:class:`~sidecar.a2a.front.A2AFront` serves it: the gRPC binding on the sidecar's port
(registered with the gRPC front's server), and an HTTP listener for the agent card, the
JSON-RPC binding and the HTTP+JSON binding. One
:class:`~sidecar.a2a.handler.TaskHandler` implements the operations behind every binding.

Nothing here is imported unless the configuration has an ``a2a`` section
(``commands/serve.py`` imports it then), so a sidecar that does not serve A2A loads none
of the SDK.
"""

from sidecar.a2a.front import SERVICE_NAME, A2AFront
from sidecar.a2a.handler import TaskHandler

__all__ = ["SERVICE_NAME", "A2AFront", "TaskHandler"]
