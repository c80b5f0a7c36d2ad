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
``call_refused`` (a principal's permission or quota), ``refusals_suppressed``.

Refusals are written at a bounded rate: anyone who can reach the port can be refused, and
must not be able to fill the disk. Past :data:`REFUSALS_PER_SECOND` (with a burst of
:data:`REFUSAL_BURST`), refusals are counted instead of written, and one
``refusals_suppressed`` line says how many of each event were left out, written with the
next refusal that fits again, at most once a second, and at close.

A line is one line to every reader: JSON allows U+2028, U+2029 and U+0085 raw in strings
(tool arguments may hold them), but line-based readers split on them, so they are written
escaped (``\u2028``).
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
REFUSAL_EVENTS = frozenset({"auth_failed", "call_refused"})
"""Events anyone who reaches the port can cause: written at a bounded rate."""
REFUSALS_PER_SECOND = 10.0
REFUSAL_BURST = 20.0
# Characters JSON leaves raw in strings that line-based readers take for line breaks.
_LINE_BREAKS = (
    (b"\xe2\x80\xa8", b"\\u2028"),
    (b"\xe2\x80\xa9", b"\\u2029"),
    (b"\xc2\x85", b"\\u0085"),
)


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
        self._tokens = REFUSAL_BURST
        self._refilled = time.monotonic()
        self._suppressed: dict[str, int] = {}
        self._summarised = 0.0
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
        """Append one line; fields whose value is None are left out. A refusal
        (:data:`REFUSAL_EVENTS`) past the rate limit is counted instead."""
        if not self.enabled:
            return
        if event in REFUSAL_EVENTS and not self._admit_refusal(event):
            return
        line: dict[str, Any] = {"time": _now(), "event": event, "principal": principal}
        line.update((k, v) for k, v in fields.items() if v is not None)
        self._write(line)

    def _admit_refusal(self, event: str) -> bool:
        now = time.monotonic()
        self._tokens = min(
            REFUSAL_BURST, self._tokens + (now - self._refilled) * REFUSALS_PER_SECOND
        )
        self._refilled = now
        if self._suppressed and now - self._summarised >= 1.0:
            self._summarise(now)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        self._suppressed[event] = self._suppressed.get(event, 0) + 1
        return False

    def _summarise(self, now: float) -> None:
        suppressed, self._suppressed = self._suppressed, {}
        self._summarised = now
        self._write(
            {
                "time": _now(),
                "event": "refusals_suppressed",
                "principal": "",
                "count": sum(suppressed.values()),
                "events": suppressed,
            }
        )

    def _write(self, line: dict[str, Any]) -> None:
        data = orjson.dumps(line) + b"\n"
        if b"\xe2\x80" in data or b"\xc2\x85" in data:
            for raw, escaped in _LINE_BREAKS:
                data = data.replace(raw, escaped)
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
        if self.enabled and self._suppressed:
            self._summarise(time.monotonic())
        if self._fd is not None and self.path != "-":
            os.close(self._fd)
        self._fd = None
        self.enabled = False
