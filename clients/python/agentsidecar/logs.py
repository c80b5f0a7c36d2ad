"""Log lines for people or for machines: the ``--log-format`` of every process we ship.

``text`` is one line per record (time, level, logger, message); ``json`` is one JSON
object per line, for log collectors in clusters: ``time`` (ISO 8601, UTC), ``level``,
``logger``, ``message``, and ``exception`` (the traceback) when there is one.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys

__all__ = ["FORMATS", "LEVELS", "JsonFormatter", "configure_logging"]

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS = ("text", "json")
_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, ensure_ascii=False)


def configure_logging(level: str, fmt: str = "text") -> None:
    """Send records at ``level`` and above to stderr in ``fmt`` (``text`` or ``json``).

    Raises:
        ValueError: an unknown level or format.
    """
    if level.upper() not in LEVELS:
        raise ValueError(f"unknown log level {level!r}; one of {', '.join(LEVELS)}")
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(_TEXT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
