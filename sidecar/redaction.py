"""Secrets never leave the process: one redactor for errors, tool results, logs and traces.

The redactor knows the secrets the sidecar holds (the model's API key, the password of
the session store's connection string, caller tokens) and patterns of secrets it may see
in third-party text (provider keys, bearer tokens; more from ``security.redact``). It is
applied where text from outside is turned into text that goes out: a model error's
message (a provider's 401 body may echo the key), each tool result and tool error (what
the model, the caller and the store see), every log record, every span status.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from urllib.parse import quote

__all__ = ["BUILT_IN_PATTERNS", "MARK", "LogRedaction", "Redactor"]

MARK = "[redacted]"
BUILT_IN_PATTERNS = (
    r"gsk_[A-Za-z0-9]{20,}",  # Groq API keys
    r"sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}",  # OpenAI / Anthropic-style API keys
    r"(?i:bearer)\s+[A-Za-z0-9._~+/=-]{12,}",  # bearer tokens in echoed headers
    # Basic credentials in an echoed (Proxy-)Authorization header
    r"(?i:authorization)['\"]?\s*[:=]\s*['\"]?(?i:basic)\s+[A-Za-z0-9+/=]+",
)
"""Secret shapes redacted whatever the configuration says."""
_MIN_SECRET = 6  # shorter "secrets" (a test's "none") would redact ordinary words


class Redactor:
    """Replaces secrets in text with :data:`MARK`.

    Args:
        secrets: Literal secrets (empty and very short ones are ignored); their JSON-escaped
            and URL-quoted forms are redacted too.
        patterns: Regular expressions of secrets, added to :data:`BUILT_IN_PATTERNS`.
    """

    __slots__ = ("_literals", "_pattern")

    def __init__(self, secrets: Iterable[str | None] = (), patterns: Iterable[str] = ()) -> None:
        literals: set[str] = set()
        for secret in secrets:
            if secret and len(secret) >= _MIN_SECRET:
                literals.update({secret, json.dumps(secret)[1:-1], quote(secret, safe="")})
        # Longest first, so a secret's longer form is replaced whole.
        self._literals = tuple(sorted(literals, key=len, reverse=True))
        self._pattern = re.compile("|".join(f"(?:{p})" for p in (*BUILT_IN_PATTERNS, *patterns)))

    def __call__(self, text: str) -> str:
        """``text`` with every secret replaced (the same object when there was none)."""
        for literal in self._literals:
            if literal in text:
                text = text.replace(literal, MARK)
        return self._pattern.sub(MARK, text) if self._pattern.search(text) else text


class LogRedaction(logging.Filter):
    """A filter that redacts every record's message and traceback before a handler sees it."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self._redact(message)
        if redacted is not message:
            record.msg, record.args = redacted, None
        if record.exc_info and record.exc_info[1] is not None:
            # The formatter renders the traceback from exc_info: render it now, redacted.
            formatted = logging.Formatter().formatException(record.exc_info)
            record.exc_text = self._redact(formatted)
            record.exc_info = None
        return True
