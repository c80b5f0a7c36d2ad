"""Tool servers as the sidecar sees them: their connections (health, TLS, token, breaker),
the catalog of their tools under the names the model sees, what can be called now, and the
dispatch of a step's calls (concurrent, in key order, under deadlines, retried, hedged,
cached, started early from the stream or speculated before it).
"""

from sidecar.tools.ahead import EarlyCalls, Prefetch
from sidecar.tools.availability import ToolAccess
from sidecar.tools.breaker import CircuitBreaker
from sidecar.tools.catalog import CatalogTool, ToolCatalog
from sidecar.tools.connection import ToolServerConnection
from sidecar.tools.dispatch import Dispatcher, StepScope
from sidecar.tools.result_cache import ResultCache

__all__ = [
    "CatalogTool",
    "CircuitBreaker",
    "Dispatcher",
    "EarlyCalls",
    "Prefetch",
    "ResultCache",
    "StepScope",
    "ToolAccess",
    "ToolCatalog",
    "ToolServerConnection",
]
