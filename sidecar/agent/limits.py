"""What a caller may send: the syntax of ids and labels, and the size of inputs.

Every request field is checked here before anything is looked up or stored; a violation
is an :class:`~sidecar.errors.InvalidRequest` naming each field, never a lookup of a
5,000-character id or a label with a NUL in it. ``docs/errors.md`` lists these limits.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from sidecar.errors import FieldViolation, InputTooLarge, InvalidRequest

__all__ = [
    "ID_PATTERN",
    "LABEL_KEY_PATTERN",
    "MAX_LABELS",
    "MAX_LABEL_VALUE",
    "MAX_REASON",
    "capped",
    "check_id",
    "check_input",
    "check_labels",
    "check_reason",
    "page_size",
]

ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
"""Session, profile and call ids: 1 to 128 characters, letters, digits and ``._:@-``,
starting with a letter or digit (no ``/``, whitespace or control characters)."""
LABEL_KEY_PATTERN = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._/-]{0,62}[A-Za-z0-9])?")
"""Label keys: 1 to 64 characters of letters, digits and ``._/-``, alphanumeric at both
ends (``team``, ``app.kubernetes.io/name``)."""
MAX_LABELS = 64
MAX_LABEL_VALUE = 256
MAX_REASON = 2000
TURN_TEXT_CAP = 65_536
"""Longest input or answer of a turn a session read returns, in characters; the rest is
cut with a marker (the run's own result always carries the whole answer)."""
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _describe(value: str) -> str:
    if not value:
        return "is required"
    if len(value) > 128:
        return f"is {len(value)} characters long; at most 128"
    return "may hold only letters, digits and ._:@- and must start with a letter or digit"


def check_id(value: str, field: str, *, required: bool = True) -> None:
    """An id of the syntax :data:`ID_PATTERN` (empty allowed when not ``required``).

    Raises:
        InvalidRequest: it is not.
    """
    if not value and not required:
        return
    if not ID_PATTERN.fullmatch(value):
        raise InvalidRequest.field(field, _describe(value))


def check_labels(labels: Mapping[str, str]) -> None:
    """At most :data:`MAX_LABELS` labels, keys of :data:`LABEL_KEY_PATTERN`, values of at
    most :data:`MAX_LABEL_VALUE` characters without control characters.

    Raises:
        InvalidRequest: naming every bad label.
    """
    problems: list[FieldViolation] = []
    if len(labels) > MAX_LABELS:
        problems.append(FieldViolation("labels", f"{len(labels)} labels; at most {MAX_LABELS}"))
    for key, value in labels.items():
        if not LABEL_KEY_PATTERN.fullmatch(key):
            problems.append(
                FieldViolation(
                    "labels",
                    f"key {key[:70]!r} must be 1 to 64 letters, digits or ._/-, "
                    "alphanumeric at both ends",
                )
            )
        elif len(value) > MAX_LABEL_VALUE or _CONTROL.search(value):
            problems.append(
                FieldViolation(
                    f"labels[{key}]",
                    f"at most {MAX_LABEL_VALUE} characters, no control characters",
                )
            )
    if problems:
        raise InvalidRequest(problems)


def check_input(text: str, limit: int) -> None:
    """A user input: not empty, not only whitespace, at most ``limit`` characters.

    Raises:
        InvalidRequest: it is empty or only whitespace.
        InputTooLarge: it is longer than ``limit``.
    """
    if not text:
        raise InvalidRequest.field("input", "must not be empty")
    if text.isspace():
        raise InvalidRequest.field("input", "must not be only whitespace")
    if len(text) > limit:
        raise InputTooLarge(len(text), limit)


def check_reason(text: str) -> None:
    """An approval's reason: at most :data:`MAX_REASON` characters.

    Raises:
        InvalidRequest: it is longer.
    """
    if len(text) > MAX_REASON:
        raise InvalidRequest.field("reason", f"is {len(text)} characters; at most {MAX_REASON}")


def capped(text: str) -> str:
    """``text`` cut to :data:`TURN_TEXT_CAP` characters, with a marker saying how much."""
    if len(text) <= TURN_TEXT_CAP:
        return text
    left = len(text) - TURN_TEXT_CAP
    return text[:TURN_TEXT_CAP] + f"\n[... {left} more characters not shown]"


def page_size(requested: int) -> int:
    """The page size to use for ``page_size`` (0: the default).

    Raises:
        InvalidRequest: it is above :data:`MAX_PAGE_SIZE`.
    """
    if requested > MAX_PAGE_SIZE:
        raise InvalidRequest.field("page_size", f"is {requested}; at most {MAX_PAGE_SIZE}")
    return requested or DEFAULT_PAGE_SIZE
