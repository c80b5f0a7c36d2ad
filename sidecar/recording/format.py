"""The recording format: one JSON document per turn, one document a line (JSON lines).

A document holds what one turn sent to the model and got back, the tool calls it made
and their results, its timings, usage and cost: enough to run the turn again against
another configuration and to serve its model side back to a test. ``docs/replay.md``
describes every field. Each document names its format and version::

    {"format": "agent-sidecar-recording", "version": 1, "run_id": ..., ...}

Versioning: a reader takes every version up to its own :data:`VERSION` and refuses a
newer one, naming both; a new version may add fields (readers ignore fields they do not
know), and a field's meaning never changes within a version.

Nothing secret is written: every string of a document (keys included) goes through the
sidecar's redactor before it is encoded, and a document larger than the configured bound
has its longest texts cut, saying so (``truncated``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from sidecar.errors import RecordingError
from sidecar.types import RunCost, StopReason, ToolCall, ToolCallStatus, ToolOutcome, Usage

__all__ = [
    "FORMAT",
    "VERSION",
    "RecordedCall",
    "RecordedTurn",
    "bounded",
    "cost_document",
    "read_lines",
    "read_turns",
    "recording_files",
    "redacted",
    "usage_document",
]

FORMAT = "agent-sidecar-recording"
"""Every document's ``format``: what tells a recording from any other JSON."""
VERSION = 1
"""The version this sidecar writes, and the newest it reads."""

_CUT = "…[cut {} characters]"
_KEEP = 256  # characters a cut text keeps at least: enough to recognise it


def usage_document(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cached_prompt_tokens": usage.cached_prompt_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
    }


def cost_document(cost: RunCost | None) -> dict[str, Any] | None:
    if cost is None:
        return None
    return {
        "total_usd": cost.total_usd,
        "priced_as": cost.priced_as,
        "simulated": cost.simulated,
        "models": dict(cost.models),
    }


def redacted(node: Any, redact: Callable[[str], str]) -> Any:
    """``node`` (decoded JSON) with every string, keys included, redacted."""
    if isinstance(node, str):
        return redact(node)
    if isinstance(node, dict):
        return {redact(k): redacted(v, redact) for k, v in node.items()}
    if isinstance(node, list):
        return [redacted(v, redact) for v in node]
    return node


def _cuttable(document: dict[str, Any]) -> list[tuple[Any, Any]]:
    """Where the long texts of a document are: (container, key) pairs."""
    places: list[tuple[Any, Any]] = []
    for message in document.get("messages", ()):
        if isinstance(message.get("content"), str):
            places.append((message, "content"))
    for call in document.get("tool_calls", ()):
        places += [(call, "content"), (call, "arguments")]
    for exchange in document.get("exchanges", ()):
        response = exchange.get("response")
        if response is not None and isinstance(response.get("text"), str):
            places.append((response, "text"))
    places += [(document, "answer"), (document, "input")]
    return places


def _cut(text: str, keep: int) -> str:
    return text[:keep] + _CUT.format(len(text) - keep)


def bounded(document: dict[str, Any], max_bytes: int) -> bytes:
    """The document as one line of JSON, at most ``max_bytes`` (4096 or more) long.

    Past it, ``truncated`` is set and, in turn, until it fits: the longest texts are cut
    (each keeps its head and says how much went); the conversation and the tool
    definitions are dropped; only the turn's identity and measures are kept, with its
    input and answer cut short.
    """
    line = orjson.dumps(document) + b"\n"
    if len(line) <= max_bytes:
        return line
    document["truncated"] = True
    places = _cuttable(document)
    while len(line) > max_bytes:
        container, key = max(places, key=lambda place: len(place[0][place[1]]))
        text = container[key]
        if len(text) <= _KEEP * 2:
            break
        excess = len(line) - max_bytes
        # Cut what is too much (bytes >= characters), at most half the text at a time.
        container[key] = _cut(text, max(_KEEP, len(text) - max(excess, len(text) // 2)))
        line = orjson.dumps(document) + b"\n"
    if len(line) > max_bytes:
        document["messages"] = []
        for exchange in document.get("exchanges", ()):
            exchange["messages"] = []
        for tool in document.get("tools", ()):
            tool["definition"] = None
        line = orjson.dumps(document) + b"\n"
    if len(line) > max_bytes:
        # A character takes at most 6 bytes in JSON (an escaped control character).
        keep = max(16, (max_bytes - 2048) // 12)
        measures = {k: v for k, v in document.items() if k not in _BULK}
        for key in ("input", "answer"):
            if len(measures[key]) > keep:
                measures[key] = _cut(measures[key], keep)
        line = orjson.dumps({**measures, **{name: [] for name in _BULK}}) + b"\n"
    return line


_BULK = ("messages", "exchanges", "tool_calls", "tools")
"""What a document that cannot fit its bound at all goes without."""


# -- reading -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """A tool call of a recorded turn, with the result the model saw."""

    step: int
    id: str
    name: str
    arguments: str
    status: ToolCallStatus
    content: str
    duration: float

    def outcome(self, call: ToolCall, start: float) -> ToolOutcome:
        """This call's recorded result, as the outcome of ``call`` (a new run's call)."""
        return ToolOutcome(
            call_id=call.id,
            tool_name=call.name,
            status=self.status,
            content=self.content,
            start=start,
            duration=0.0,
        )


@dataclass(frozen=True, slots=True)
class RecordedTurn:
    """One recorded turn as a reader sees it; ``document`` is the whole of it."""

    document: Mapping[str, Any]
    where: str
    """The file and line it came from, for messages."""

    @property
    def run_id(self) -> str:
        return str(self.document["run_id"])

    @property
    def session_id(self) -> str:
        return str(self.document.get("session_id", ""))

    @property
    def profile(self) -> str:
        return str(self.document["profile"])

    @property
    def variant(self) -> str:
        return str(self.document.get("variant", ""))

    @property
    def shadow_of(self) -> str | None:
        """The live run this one shadowed; None for a live run."""
        found = self.document.get("shadow_of")
        return str(found) if found else None

    @property
    def started_at(self) -> float:
        return float(self.document["started_at"])

    @property
    def duration(self) -> float:
        return float(self.document["duration"])

    @property
    def input(self) -> str:
        return str(self.document["input"])

    @property
    def answer(self) -> str:
        return str(self.document["answer"])

    @property
    def stop_reason(self) -> StopReason:
        return StopReason[self.document["stop_reason"]]

    @property
    def usage(self) -> Usage:
        usage = self.document["usage"]
        return Usage(
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            cached_prompt_tokens=int(usage.get("cached_prompt_tokens", 0)),
            reasoning_tokens=int(usage.get("reasoning_tokens", 0)),
        )

    @property
    def cost_usd(self) -> float | None:
        cost = self.document.get("cost")
        return float(cost["total_usd"]) if cost else None

    @property
    def history(self) -> list[dict[str, Any]]:
        """The conversation before the turn's input, as the model saw it (no system
        message: a replay sends its own)."""
        messages = self.document["messages"]
        count = int(self.document["history"])
        return [m for m in messages[:count] if m.get("role") != "system"]

    @property
    def tools(self) -> list[Mapping[str, Any]]:
        """The tools offered to the model: ``name``, ``server``, ``read_only``,
        ``definition``."""
        return list(self.document.get("tools", ()))

    @property
    def calls(self) -> list[RecordedCall]:
        return [
            RecordedCall(
                step=int(c["step"]),
                id=str(c["id"]),
                name=str(c["name"]),
                arguments=str(c["arguments"]),
                status=ToolCallStatus[c["status"]],
                content=str(c["content"]),
                duration=float(c.get("duration", 0.0)),
            )
            for c in self.document["tool_calls"]
        ]


_REQUIRED: Mapping[str, tuple[type, ...]] = {
    "run_id": (str,),
    "profile": (str,),
    "started_at": (int, float),
    "duration": (int, float),
    "input": (str,),
    "history": (int,),
    "messages": (list,),
    "exchanges": (list,),
    "tool_calls": (list,),
    "answer": (str,),
    "stop_reason": (str,),
    "usage": (dict,),
}


def _checked(document: Any, where: str) -> RecordedTurn:
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise RecordingError(f"{where}: not an agent-sidecar recording (no format {FORMAT!r})")
    version = document.get("version")
    if not isinstance(version, int) or version < 1:
        raise RecordingError(f"{where}: the recording's version {version!r} is not a version")
    if version > VERSION:
        raise RecordingError(
            f"{where}: recorded in format version {version}, newer than this agent-sidecar "
            f"reads ({VERSION}): replay it with the version that recorded it, or newer"
        )
    for name, types in _REQUIRED.items():
        if not isinstance(document.get(name), types):
            kind = types[0].__name__
            raise RecordingError(f"{where}: the field {name!r} is missing or not a {kind}")
    if document["stop_reason"] not in StopReason.__members__:
        raise RecordingError(f"{where}: unknown stop_reason {document['stop_reason']!r}")
    for i, call in enumerate(document["tool_calls"]):
        if not isinstance(call, dict) or not all(
            isinstance(call.get(k), str) for k in ("id", "name", "arguments", "content")
        ):
            raise RecordingError(f"{where}: tool_calls[{i}] is not a recorded tool call")
        if call.get("status") not in ToolCallStatus.__members__ or not isinstance(
            call.get("step"), int
        ):
            raise RecordingError(f"{where}: tool_calls[{i}] has no valid status or step")
    return RecordedTurn(document, where)


def recording_files(path: Path) -> list[Path]:
    """The files a recording path names: itself, or a directory's ``*.jsonl`` files in the
    order of their names.

    Raises:
        RecordingError: there is nothing at ``path``.
    """
    if path.is_dir():
        return sorted(path.glob("*.jsonl"))
    if path.exists():
        return [path]
    raise RecordingError(f"{path}: no such file or directory")


def read_lines(path: str | Path) -> Iterator[tuple[bytes, RecordedTurn]]:
    """Every turn of a recording file, or of every ``*.jsonl`` file of a directory (in
    the order of their names), with the line it was read from.

    Raises:
        RecordingError: a file cannot be read, a line is not JSON or not a recording of
            a version this sidecar reads; the message names the file and line.
    """
    for file in recording_files(Path(path)):
        try:
            handle = file.open("rb")
        except OSError as exc:
            raise RecordingError(f"{file}: cannot be read: {exc.strerror}") from None
        with handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                where = f"{file}:{number}"
                try:
                    document = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    if not line.endswith(b"\n"):
                        continue  # the last line, still being written
                    raise RecordingError(f"{where}: not JSON ({exc})") from None
                if not line.endswith(b"\n"):
                    line += b"\n"
                yield line, _checked(document, where)


def read_turns(paths: Sequence[str | Path]) -> list[RecordedTurn]:
    """Every turn of the recordings at ``paths``.

    Raises:
        RecordingError: as :func:`read_lines`.
    """
    return [turn for path in paths for _, turn in read_lines(path)]
