"""Where recorded turns are kept: JSON lines files in one directory, bounded on disk.

Each process appends to a file of its own (named by its start time, host and process id,
so replicas sharing a directory never write to one file), one line per turn, written
unbuffered: a reader (``agent-sidecar record export``) running beside a sidecar sees whole
turns, and skips a last line still being written. A file that grows past
``max_file_bytes`` is closed and the next turn starts a new one; past ``max_files`` files
in the directory, the oldest goes. A write that fails (a full disk) is logged once and
the turn is not recorded: a recording never fails a turn.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from io import FileIO
from pathlib import Path

from sidecar.errors import RecordingError
from sidecar.recording.format import RecordedTurn, read_lines, recording_files

__all__ = ["RecordingFiles", "TurnFilter", "export", "export_to"]

log = logging.getLogger(__name__)

_SUFFIX = ".jsonl"


class RecordingFiles:
    """Appends recorded turns to files in ``directory``.

    Args:
        directory: Created if missing.
        max_file_bytes: A file past this size is closed; the next turn opens another.
        max_files: Files kept in the directory; the oldest go first.
    """

    def __init__(self, directory: str | Path, *, max_file_bytes: int, max_files: int) -> None:
        self.directory = Path(directory)
        self._max_file_bytes = max_file_bytes
        self._max_files = max_files
        self._file: FileIO | None = None
        self._size = 0
        self._sequence = 0
        self._failing = False
        self._stem = f"{socket.gethostname()}-{os.getpid()}"

    def write(self, line: bytes) -> bool:
        """Append one turn's line; False when it could not be written (logged once)."""
        try:
            if self._file is None:
                self._open()
            assert self._file is not None
            view = memoryview(line)
            while view:
                view = view[self._file.write(view) or 0 :]
        except OSError as exc:
            if not self._failing:
                log.warning("recording: cannot write to %s: %s", self.directory, exc.strerror)
            self._failing = True
            self.close()
            return False
        self._failing = False
        self._size += len(line)
        if self._size >= self._max_file_bytes:
            self.close()
        return True

    def _open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._sequence += 1
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        path = self.directory / f"{stamp}-{self._stem}-{self._sequence:04d}{_SUFFIX}"
        self._prune(keep=self._max_files - 1)
        # Unbuffered: each line goes out in write calls of its own, never split across
        # the flushes of a buffer.
        self._file = path.open("ab", buffering=0)
        self._size = 0

    def _prune(self, keep: int) -> None:
        files = sorted(self.directory.glob(f"*{_SUFFIX}"), key=lambda p: p.stat().st_mtime)
        for old in files[: max(0, len(files) - keep)]:
            try:
                old.unlink()
            except FileNotFoundError:
                pass  # another replica pruned it first

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass  # the data was flushed line by line; nothing is lost here
            self._file = None


@dataclass(frozen=True, slots=True)
class TurnFilter:
    """Which recorded turns an export keeps; unset fields keep every turn."""

    session_id: str | None = None
    profile: str | None = None
    variant: str | None = None
    since: float | None = None
    """Turns started at or after this time (seconds since the epoch)."""
    until: float | None = None
    """Turns started before this time."""
    shadows: bool = False
    """Keep the runs of shadow variants too (they are left out by default: a replay
    re-runs what users sent)."""

    def keeps(self, turn: RecordedTurn) -> bool:
        return (
            (self.session_id is None or turn.session_id == self.session_id)
            and (self.profile is None or turn.profile == self.profile)
            and (self.variant is None or turn.variant == self.variant)
            and (self.since is None or turn.started_at >= self.since)
            and (self.until is None or turn.started_at < self.until)
            and (self.shadows or turn.shadow_of is None)
        )


def export(source: str | Path, keep: TurnFilter) -> Iterator[bytes]:
    """The lines of the turns at ``source`` (a file or a directory) that ``keep`` keeps,
    as they were written.

    Raises:
        RecordingError: a line cannot be read as a recording.
    """
    for line, turn in read_lines(source):
        if keep.keeps(turn):
            yield line


def export_to(source: str | Path, keep: TurnFilter, out: Path) -> int:
    """Write the export to ``out`` through a temporary file beside it, swapped in once
    complete (a failed export leaves ``out`` as it was); return the turns written.

    Raises:
        RecordingError: ``out`` is (or links to) one of the recordings read, which the
            export would empty; or a line cannot be read as a recording.
        OSError: ``out`` cannot be written.
    """
    if out.exists():
        for file in recording_files(Path(source)):
            if os.path.samefile(file, out):
                raise RecordingError(
                    f"{out} is one of the recordings the export reads ({file}): writing it "
                    "would empty it; write the export elsewhere"
                )
    handle, temporary = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    count = 0
    try:
        with os.fdopen(handle, "wb") as sink:
            for line in export(source, keep):
                sink.write(line)
                count += 1
        os.replace(temporary, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return count
