"""What a caller may send: the syntax of ids and labels, and the size of inputs.

Every request field is checked here before anything is looked up or stored; a violation
is an :class:`~sidecar.errors.InvalidRequest` naming each field, never a lookup of a
5,000-character id or a label with a NUL in it. ``docs/errors.md`` lists these limits.

A request's fields are checked together: the ``*_problems`` functions return what is wrong
with one field (nothing when it is fine), and :func:`refuse` raises one error that names
every invalid field, so a caller fixes them all at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from sidecar.errors import FieldViolation, InputTooLarge, InvalidRequest

__all__ = [
    "ID_PATTERN",
    "LABEL_KEY_PATTERN",
    "MAX_LABELS",
    "MAX_LABEL_VALUE",
    "MAX_REASON",
    "MAX_REQUEST_ID",
    "capped",
    "check_id",
    "check_input",
    "check_labels",
    "check_reason",
    "id_problems",
    "input_problems",
    "label_problems",
    "page_size",
    "page_size_problems",
    "reason_problems",
    "refuse",
    "request_id_problems",
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


def id_problems(value: str, field: str, *, required: bool = True) -> list[FieldViolation]:
    """What is wrong with an id of the syntax :data:`ID_PATTERN` (empty allowed when not
    ``required``)."""
    if (not value and not required) or ID_PATTERN.fullmatch(value):
        return []
    return [FieldViolation(field, _describe(value))]


MAX_REQUEST_ID = 256
"""The longest request id a caller may give (a UUID takes 36)."""


def request_id_problems(value: str, field: str = "request_id") -> list[FieldViolation]:
    """What is wrong with a caller's request id: empty (none) or at most
    :data:`MAX_REQUEST_ID` characters, no control characters."""
    if len(value) > MAX_REQUEST_ID:
        return [FieldViolation(field, f"is {len(value)} characters long; at most {MAX_REQUEST_ID}")]
    if _CONTROL.search(value):
        return [FieldViolation(field, "may not hold control characters")]
    return []


def check_id(value: str, field: str, *, required: bool = True) -> None:
    """An id of the syntax :data:`ID_PATTERN` (empty allowed when not ``required``).

    Raises:
        InvalidRequest: it is not.
    """
    refuse(id_problems(value, field, required=required))


def label_problems(labels: Mapping[str, str]) -> list[FieldViolation]:
    """What is wrong with a session's labels: at most :data:`MAX_LABELS`, keys of
    :data:`LABEL_KEY_PATTERN`, values of at most :data:`MAX_LABEL_VALUE` characters
    without control characters; one violation per bad label."""
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
    return problems


def check_labels(labels: Mapping[str, str]) -> None:
    """Labels as :func:`label_problems` wants them.

    Raises:
        InvalidRequest: naming every bad label.
    """
    refuse(label_problems(labels))


def input_problems(text: str) -> list[FieldViolation]:
    """What is wrong with a user input before its profile is known: empty, or only
    whitespace (its length is checked against the profile's limit later)."""
    if not text:
        return [FieldViolation("input", "must not be empty")]
    if text.isspace():
        return [FieldViolation("input", "must not be only whitespace")]
    return []


def reason_problems(text: str) -> list[FieldViolation]:
    """What is wrong with an approval's reason: longer than :data:`MAX_REASON`."""
    if len(text) > MAX_REASON:
        return [FieldViolation("reason", f"is {len(text)} characters; at most {MAX_REASON}")]
    return []


MAX_ANSWER = 65_536
"""Bytes of an answer to a tool's question."""


def parse_answer(text: str) -> tuple[dict[str, Any] | None, list[FieldViolation]]:
    """An approval's answer parsed (a JSON object; empty text is ``{}``), or what is wrong
    with it: too long, not JSON, not an object."""
    if not text:
        return None, []
    if len(text) > MAX_ANSWER:
        return None, [FieldViolation("answer", f"is {len(text)} characters; at most {MAX_ANSWER}")]
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None, [FieldViolation("answer", "is not JSON")]
    if not isinstance(value, dict):
        return None, [FieldViolation("answer", "must be a JSON object")]
    return value, []


def page_size_problems(requested: int) -> list[FieldViolation]:
    """What is wrong with a page size: above :data:`MAX_PAGE_SIZE`."""
    if requested > MAX_PAGE_SIZE:
        return [FieldViolation("page_size", f"is {requested}; at most {MAX_PAGE_SIZE}")]
    return []


def refuse(*problems: Iterable[FieldViolation]) -> None:
    """Raise one error naming every problem of a request; nothing when there is none.

    Raises:
        InvalidRequest: with one field violation per problem.
    """
    found = [p for group in problems for p in group]
    if found:
        raise InvalidRequest(found)


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
    refuse(reason_problems(text))


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
    refuse(page_size_problems(requested))
    return requested or DEFAULT_PAGE_SIZE
