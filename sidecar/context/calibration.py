"""Token estimates calibrated by what the provider counts.

The window estimates tokens from sizes (about 4 bytes a token, ``sidecar.types``): right
for English and JSON, but Chinese, Japanese or emoji-heavy text has several times more
tokens per byte, and the window would overflow the model's. Every model call reports how
many prompt tokens the provider counted for a request of a known size; the ratio of the
two, averaged per model and per session, scales the window's budget, so a session in any
language stays under the model's limit after its first call.
"""

from __future__ import annotations

from collections import OrderedDict

from sidecar.tokens import tokens_of_size

__all__ = ["TokenCalibration"]

_WEIGHT = 0.3  # of the newest observation in the running average
_LOW, _HIGH = 0.5, 8.0  # a ratio outside this is a provider's quirk, not a language
_SESSIONS = 10_000


class TokenCalibration:
    """Provider tokens per estimated token, by model and by session."""

    def __init__(self) -> None:
        self._models: dict[str, float] = {}
        self._sessions: OrderedDict[str, float] = OrderedDict()

    def observe(self, model: str, session_id: str, request_bytes: int, prompt_tokens: int) -> None:
        """One model call: ``request_bytes`` sent, ``prompt_tokens`` counted by the provider."""
        estimated = tokens_of_size(request_bytes)
        if estimated <= 0 or prompt_tokens <= 0:
            return
        ratio = min(_HIGH, max(_LOW, prompt_tokens / estimated))
        self._models[model] = _average(self._models.get(model), ratio)
        self._sessions[session_id] = _average(self._sessions.get(session_id), ratio)
        self._sessions.move_to_end(session_id)
        if len(self._sessions) > _SESSIONS:
            self._sessions.popitem(last=False)

    def ratio(self, model: str, session_id: str) -> float:
        """How many provider tokens an estimated token is: the session's own ratio once it
        has one, else the model's, else 1."""
        return self._sessions.get(session_id) or self._models.get(model) or 1.0


def _average(old: float | None, new: float) -> float:
    return new if old is None else old + _WEIGHT * (new - old)
