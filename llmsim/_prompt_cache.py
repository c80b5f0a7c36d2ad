"""Emulates a provider's prompt cache, so cached-token ratios mean something offline."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import orjson

from llmsim._wire import estimate_tokens

CAPACITY = 1024
"""Distinct prefixes remembered (least recently used forgotten first)."""


class PromptCache:
    """Remembers request prefixes: the tool list plus the leading system/developer messages,
    byte for byte as received. A prefix seen before counts as cached, so a client that keeps
    its prefix byte-stable sees hits and one that reorders tools does not."""

    def __init__(self) -> None:
        self._prefixes: OrderedDict[bytes, None] = OrderedDict()

    def cached_tokens(self, body: Mapping[str, Any], prompt_tokens: int) -> int:
        """Estimated cached tokens of a validated request body (0 on a miss)."""
        messages = body["messages"]
        count = 0
        while count < len(messages) and messages[count].get("role") in ("system", "developer"):
            count += 1
        prefix = orjson.dumps([body.get("tools"), messages[:count]])
        key = hashlib.blake2b(prefix, digest_size=16).digest()
        if key in self._prefixes:
            self._prefixes.move_to_end(key)
            return min(prompt_tokens, estimate_tokens(len(prefix)))
        self._prefixes[key] = None
        if len(self._prefixes) > CAPACITY:
            self._prefixes.popitem(last=False)
        return 0

    def clear(self) -> None:
        """Forget every prefix."""
        self._prefixes.clear()
