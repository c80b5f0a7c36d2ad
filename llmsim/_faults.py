"""Faults the simulator injects: their specification, the FIFO queue and chaos rates.

A fault replaces or corrupts the answer to one chat-completions request. Tests queue them
through the control API (``POST /sim/faults``); chaos runs draw them at random; scenario
steps carry them too.
"""

from __future__ import annotations

import random
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from llmsim._errors import FaultSpecError

FaultKind = Literal[
    "status",
    "hang",
    "malformed_arguments",
    "invalid_arguments",
    "tool_use_failed",
    "unknown_tool",
    "disconnect",
    "raw",
]
FAULT_KINDS: Final[frozenset[str]] = frozenset(get_args(FaultKind))

_UNSET: Final = object()


@dataclass(frozen=True, slots=True)
class Fault:
    """One injectable fault.

    Attributes:
        kind: what goes wrong (see the module docs in ``docs/llm-simulator.md``).
        times: how many consecutive requests it affects. Default 1.
        status: HTTP status of a ``status`` fault. Default 500.
        retry_after: seconds sent as ``retry-after``; ``None`` sends no header. A 429 without
            an explicit value gets 1 s, as Groq always sends one.
        message: error message override for ``status`` faults.
        hang_s: how long a ``hang`` holds the request at most; ``None`` uses the simulator's
            cap.
        body: a ``raw`` fault's whole response body to a request that does not stream,
            sent as it is (any bytes a broken or unusual server might send).
        frames: a ``raw`` fault's response to a streaming request: each string is written
            as it is, in order (``"data: {...}\n\n"``, ``"event: error\n"``...).
        headers: extra response headers of a ``raw`` fault.
        repeat: how many times a ``raw`` fault writes ``frames`` (a large answer from a
            small fault).
        then: frames a ``raw`` fault writes once, after the repeated ones.
        encoding: ``"gzip"``: a ``raw`` fault's body or frames go out gzip-compressed with
            ``Content-Encoding: gzip``, asked for or not; ``None`` sends them as they are.
    """

    kind: FaultKind
    times: int = 1
    status: int = 500
    retry_after: float | None = None
    message: str | None = None
    hang_s: float | None = None
    body: str | None = None
    frames: tuple[str, ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    repeat: int = 1
    then: tuple[str, ...] = ()
    encoding: Literal["gzip"] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form accepted by :func:`parse_fault`."""
        out: dict[str, Any] = {"kind": self.kind, "times": self.times}
        if self.kind == "status":
            out["status"] = self.status
            out["retry_after"] = self.retry_after
            if self.message is not None:
                out["message"] = self.message
        if self.kind == "hang" and self.hang_s is not None:
            out["hang_s"] = self.hang_s
        if self.kind == "raw":
            out.update(status=self.status, body=self.body, frames=list(self.frames))
            out.update(repeat=self.repeat, then=list(self.then))
            out["headers"] = dict(self.headers)
            if self.encoding is not None:
                out["encoding"] = self.encoding
        return out


def parse_fault(data: object) -> Fault:
    """Validate one fault object from JSON or YAML.

    Raises:
        FaultSpecError: an unknown kind or a field of the wrong type or range.
    """
    if isinstance(data, Fault):
        return data
    if not isinstance(data, Mapping):
        raise FaultSpecError(f"a fault must be an object, got {type(data).__name__}")
    fields = {"kind", "times", "status", "retry_after", "message", "hang_s"}
    unknown = set(data) - fields - {"body", "frames", "headers", "repeat", "then", "encoding"}
    if unknown:
        raise FaultSpecError(f"unknown fault field(s): {', '.join(sorted(map(str, unknown)))}")
    kind = data.get("kind")
    if kind not in FAULT_KINDS:
        raise FaultSpecError(f"fault kind must be one of {', '.join(sorted(FAULT_KINDS))}")
    times = _integer(data.get("times", 1), "times", low=1)
    if kind == "raw":
        return _raw(data, times)
    if set(data) - fields:
        raise FaultSpecError(
            "body, frames, headers, repeat, then and encoding belong to raw faults"
        )
    status = _integer(data.get("status", 500), "status", low=400, high=599)
    retry_raw = data.get("retry_after", _UNSET)
    if retry_raw is _UNSET:
        retry_after = 1.0 if status == 429 else None
    elif retry_raw is None:
        retry_after = None
    else:
        retry_after = _seconds(retry_raw, "retry_after")
    hang_raw = data.get("hang_s")
    hang_s = None if hang_raw is None else _seconds(hang_raw, "hang_s")
    message = data.get("message")
    if message is not None and not isinstance(message, str):
        raise FaultSpecError("fault 'message' must be a string")
    return Fault(kind, times, status, retry_after, message, hang_s)


def _raw(data: Mapping[str, Any], times: int) -> Fault:
    status = _integer(data.get("status", 200), "status", low=200, high=599)
    body = data.get("body")
    if body is not None and not isinstance(body, str):
        raise FaultSpecError("a raw fault's 'body' must be a string")
    frames = data.get("frames", [])
    if not isinstance(frames, list) or not all(isinstance(f, str) for f in frames):
        raise FaultSpecError("a raw fault's 'frames' must be a list of strings")
    then = data.get("then", [])
    if not isinstance(then, list) or not all(isinstance(f, str) for f in then):
        raise FaultSpecError("a raw fault's 'then' must be a list of strings")
    repeat = _integer(data.get("repeat", 1), "repeat", low=1, high=100_000)
    headers = data.get("headers", {})
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise FaultSpecError("a raw fault's 'headers' must map strings to strings")
    encoding = data.get("encoding")
    if encoding not in (None, "gzip"):
        raise FaultSpecError("a raw fault's 'encoding' must be \"gzip\" or absent")
    return Fault(
        "raw",
        times,
        status,
        body=body,
        frames=tuple(frames),
        headers=tuple(headers.items()),
        repeat=repeat,
        then=tuple(then),
        encoding=encoding,
    )


def parse_faults(data: object) -> list[Fault]:
    """Validate the control API's ``{"faults": [...]}`` body.

    Raises:
        FaultSpecError: the body is not of that shape, or one fault is malformed.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("faults"), list):
        raise FaultSpecError('expected a JSON object {"faults": [{"kind": ...}, ...]}')
    return [parse_fault(item) for item in data["faults"]]


class FaultQueue:
    """Queued faults first (FIFO, one unit per request), then chaos draws."""

    def __init__(
        self,
        *,
        rate_429: float = 0.0,
        rate_500: float = 0.0,
        rate_hang: float = 0.0,
        rng: random.Random | None = None,
    ) -> None:
        self._queue: deque[list[Any]] = deque()  # [fault, units left]
        self._rates = (rate_429, rate_429 + rate_500, rate_429 + rate_500 + rate_hang)
        self._chaos = self._rates[2] > 0
        self._rng = rng or random.Random()

    def extend(self, faults: Iterable[Fault]) -> int:
        """Append faults; return how many fault units are now pending."""
        self._queue.extend([fault, fault.times] for fault in faults)
        return self.pending()

    def clear(self) -> int:
        """Drop every queued fault; return how many units were pending."""
        pending = self.pending()
        self._queue.clear()
        return pending

    def pending(self) -> int:
        """Fault units still queued."""
        return sum(entry[1] for entry in self._queue)

    def take(self) -> Fault | None:
        """The fault for the next request, if any; consumes one unit of the head fault."""
        if self._queue:
            head = self._queue[0]
            head[1] -= 1
            if head[1] <= 0:
                self._queue.popleft()
            fault: Fault = head[0]
            return fault
        if not self._chaos:
            return None
        draw = self._rng.random()
        if draw < self._rates[0]:
            return _CHAOS_429
        if draw < self._rates[1]:
            return _CHAOS_500
        if draw < self._rates[2]:
            return _CHAOS_HANG
        return None


class OnceGate:
    """Counts how often a keyed fault fired, so a scripted fault stops after ``times``.

    Bounded (least recently used keys are forgotten) so a long run cannot grow it forever.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self._fired: OrderedDict[Hashable, int] = OrderedDict()
        self._capacity = capacity

    def allow(self, key: Hashable, times: int) -> bool:
        """Whether the fault under ``key`` fires now; records it when it does."""
        fired = self._fired.pop(key, 0)
        self._fired[key] = fired + 1 if fired < times else fired
        if len(self._fired) > self._capacity:
            self._fired.popitem(last=False)
        return fired < times

    def clear(self) -> None:
        """Forget every count."""
        self._fired.clear()


_CHAOS_429 = Fault("status", status=429, retry_after=1.0, message="chaos: rate limited")
_CHAOS_500 = Fault("status", status=500, message="chaos: internal error")
_CHAOS_HANG = Fault("hang")


def _integer(value: object, field: str, *, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FaultSpecError(f"fault '{field}' must be an integer")
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise FaultSpecError(f"fault '{field}' must be {bounds}, got {value}")
    return value


def _seconds(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise FaultSpecError(f"fault '{field}' must be a non-negative number of seconds")
    return float(value)
