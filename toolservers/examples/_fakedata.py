"""Deterministic fake data: the same id always yields the same answer."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import date, timedelta
from typing import TypeVar

T = TypeVar("T")

# Every example answer says where it comes from, so nobody mistakes it for real data.
SOURCE = "example data (fake)"


def _digest(key: str, salt: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{salt}:{key}".encode()).digest()[:8], "big")


def pick(key: str, salt: str, choices: Sequence[T]) -> T:
    """One of ``choices``, chosen by ``key``."""
    return choices[_digest(key, salt) % len(choices)]


def number(key: str, salt: str, low: int, high: int) -> int:
    """An integer in ``[low, high]``, chosen by ``key``."""
    return low + _digest(key, salt) % (high - low + 1)


def day(key: str, salt: str, around: date, spread_days: int) -> date:
    """A date within ``spread_days`` after ``around``, chosen by ``key``."""
    return around + timedelta(days=number(key, salt, 0, spread_days))


def order_placed(order_id: str) -> date:
    """When an order was placed: read from ids shaped YYYYMMDD, else derived."""
    try:
        return date(int(order_id[:4]), int(order_id[4:6]), int(order_id[6:8]))
    except ValueError:
        return day(order_id, "placed", date(2025, 1, 1), 300)
