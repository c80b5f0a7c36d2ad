"""The audit record: who did what, one JSON line per event, appended and never rewritten.

Every line has ``time`` (UTC, RFC 3339 with milliseconds), ``event`` and ``principal``;
lines about a session, a run or a call carry ``session_id``, ``run_id`` and ``call_id``
(the ids the caller knows). A tool call's arguments appear redacted and capped, with
the SHA-256 of the whole text, so a record can prove which arguments were sent without
holding a secret. Each line is one ``write`` to a file opened ``O_APPEND``: lines of
concurrent events never interleave, and the file can be rotated by renaming it (the
sidecar reopens the path when it no longer names the file it writes).

Events: ``session_created``, ``session_deleted``, ``run_started``, ``run_finished``,
``tool_call``, ``approval_decided``, ``auth_failed`` (no or bad credentials),
``call_refused`` (a principal's permission or quota).
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

import orjson

from sidecar.redaction import Redactor

__all__ = ["AuditLog"]

log = logging.getLogger(__name__)

_ARGUMENTS_CAP = 4096  # characters of redacted arguments kept on a line
_REOPEN_CHECK = 1.0  # seconds between checks that the path still names the open file


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class AuditLog:
    """Appends audit lines to a file (``-``: stdout), or nowhere when ``path`` is None."""

    def __init__(self, path: str | None, redact: Redactor | None = None) -> None:
        self.path = path
        self.enabled = path is not None
        self._redact = redact
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None
        self._checked = 0.0
        if path == "-":
            self._fd = sys.stdout.fileno()
        elif path is not None:
            self._open()

    def _open(self) -> None:
        assert self.path is not None and self.path != "-"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        stat = os.fstat(fd)
        self._fd, self._identity = fd, (stat.st_dev, stat.st_ino)
        self._checked = time.monotonic()

    def _reopen_if_moved(self) -> None:
        now = time.monotonic()
        if self.path == "-" or now - self._checked < _REOPEN_CHECK:
            return
        self._checked = now
        try:
            stat = os.stat(self.path)  # type: ignore[arg-type]
            moved = (stat.st_dev, stat.st_ino) != self._identity
        except FileNotFoundError:
            moved = True
        if moved:
            old = self._fd
            self._open()
            if old is not None:
                os.close(old)

    def record(self, event: str, principal: str, **fields: Any) -> None:
        """Append one line; fields whose value is None are left out."""
        if not self.enabled:
            return
        line: dict[str, Any] = {"time": _now(), "event": event, "principal": principal}
        line.update((k, v) for k, v in fields.items() if v is not None)
        data = orjson.dumps(line) + b"\n"
        try:
            self._reopen_if_moved()
            assert self._fd is not None
            os.write(self._fd, data)
        except OSError as exc:
            # The sidecar goes on serving; the operator learns the record has a gap.
            log.error("audit record not written to %s: %s", self.path, exc.strerror)

    def arguments(self, text: str) -> dict[str, str]:
        """The ``arguments`` and ``arguments_sha256`` fields of a tool call's line."""
        digest = hashlib.sha256(text.encode()).hexdigest()
        shown = self._redact(text) if self._redact is not None else text
        if len(shown) > _ARGUMENTS_CAP:
            shown = shown[:_ARGUMENTS_CAP] + "…"
        return {"arguments": shown, "arguments_sha256": digest}

    def close(self) -> None:
        if self._fd is not None and self.path != "-":
            os.close(self._fd)
        self._fd = None
        self.enabled = False
