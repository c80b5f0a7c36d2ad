"""The model: the seam the loop calls (:class:`Model`, :class:`ModelRequest`,
:class:`ModelResponse`), the OpenAI-compatible client behind it with its retries, the two
transports that carry its bytes (aiohttp, the openai SDK), the wire format, and pacing by
the endpoint's rate limits.
"""

from sidecar.llm.model import Model, ModelRequest, ModelResponse
from sidecar.llm.openai_model import OpenAICompatibleModel

__all__ = ["Model", "ModelRequest", "ModelResponse", "OpenAICompatibleModel"]
