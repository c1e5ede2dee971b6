"""`watch --record FILE`: a bounded ring of samples on disk, readable after a crash.

Layout: two JSON-lines segments, FILE (being written) and FILE.1 (the previous one). Each segment opens with
a header line (`{"vramctl_timeline": 1, ...}`); each sample is one line carrying a sequence number, written
with one write() and fsync'd. When FILE holds `max_samples // 2` samples it is renamed over FILE.1 (an atomic
rename, the folder fsync'd) and a new FILE begins, so the disk holds at most `max_samples` samples: constant
use, whatever the run's length. A crash can leave only a partial last line in FILE, which the reader drops
and reports; any other damage (a cut header, a corrupt line, sequence numbers out of order) is refused.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from vramctl.core.errors import BadInputError
from vramctl.watch.sample import Sample

FORMAT_VERSION = 1
MAX_LINE_BYTES = 1 << 20
"""A sample line longer than this is not one vramctl wrote."""
MAX_PROCESSES = 64


class TimelineError(BadInputError):
    """A timeline file that is missing, truncated or corrupt. Exit 2."""


def previous_segment(path: Path) -> Path:
    return path.with_name(path.name + ".1")


def _check_regular(path: Path) -> None:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode) or not stat.S_ISREG(mode):
        raise BadInputError(f"--record {path}: not a regular file (a link, FIFO or device is never replaced)")


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path.parent if str(path.parent) else ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class RingRecorder:
    """Appends samples to FILE, rotating into FILE.1; at most `max_samples` samples on disk."""

    def __init__(self, path: str | os.PathLike[str], *, max_samples: int = 3600, meta: dict[str, Any] | None = None,
                 fsync: bool = True) -> None:
        if max_samples < 2:
            raise BadInputError(f"--record-samples {max_samples}: keep at least 2 samples")
        self.path = Path(path)
        self.segment_samples = max_samples // 2
        self.meta = dict(meta or {})
        self.fsync = fsync
        _check_regular(self.path)
        _check_regular(previous_segment(self.path))
        self.seq = 0
        if self.path.exists() or previous_segment(self.path).exists():
            # a new run continues an existing ring (the timeline before a crash is the one worth keeping)
            try:
                self.seq = read_timeline(self.path).last_seq + 1
            except TimelineError as exc:
                raise BadInputError(f"--record {self.path}: {exc}; move it away to start a new timeline") from None
        self.count = 0
        self._handle: IO[bytes] | None = None
        self._open_new()

    def _open_new(self) -> None:
        if self._handle is not None:
            self._handle.close()
        if self.path.exists():
            os.replace(self.path, previous_segment(self.path))
            _fsync_dir(self.path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(self.path, flags, 0o666)
        self._handle = os.fdopen(fd, "wb", buffering=0)
        header = {
            "vramctl_timeline": FORMAT_VERSION,
            "first_seq": self.seq,
            "utc_offset_s": time.localtime().tm_gmtoff,
            **self.meta,
        }
        self._write(json.dumps(header, separators=(",", ":")) + "\n")
        _fsync_dir(self.path)
        self.count = 0

    def _write(self, line: str) -> None:
        assert self._handle is not None
        self._handle.write(line.encode("utf-8"))
        if self.fsync:
            os.fsync(self._handle.fileno())

    def append(self, sample: Sample) -> None:
        if self.count >= self.segment_samples:
            self._open_new()
        data = sample.to_json()
        for device in data["devices"]:
            device["processes"] = device["processes"][:MAX_PROCESSES]
        data["seq"] = self.seq
        self._write(json.dumps(data, separators=(",", ":"), allow_nan=False) + "\n")
        self.seq += 1
        self.count += 1

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


@dataclass(frozen=True)
class Timeline:
    samples: tuple[Sample, ...]
    header: dict[str, Any]
    dropped_partial_lines: int
    """Partial last lines dropped (what a crash while writing leaves)."""
    files: tuple[str, ...]
    last_seq: int = 0

    @property
    def utc_offset_s(self) -> int:
        value = self.header.get("utc_offset_s", 0)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _segment_lines(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, bytes, complete) of one segment, bounded line by line."""
    with open(path, "rb") as handle:
        lineno = 0
        while True:
            line = handle.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            lineno += 1
            if len(line) > MAX_LINE_BYTES:
                raise TimelineError(f"timeline {path} line {lineno}: over {MAX_LINE_BYTES:,} bytes, not a sample")
            yield lineno, line, line.endswith(b"\n")


def _read_segment(path: Path, is_current: bool) -> tuple[dict[str, Any], list[tuple[int, Sample]], int]:
    header: dict[str, Any] | None = None
    samples: list[tuple[int, Sample]] = []
    dropped = 0
    lines = list(_segment_lines(path))
    for index, (lineno, raw, complete) in enumerate(lines):
        last = index == len(lines) - 1
        if not complete:
            if last and is_current and header is not None:
                dropped += 1  # a crash while writing the last sample
                continue
            raise TimelineError(f"timeline {path} line {lineno}: truncated (the line is cut and not the last one written)")
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise TimelineError(f"timeline {path} line {lineno}: corrupt (not JSON)") from None
        if not isinstance(data, dict):
            raise TimelineError(f"timeline {path} line {lineno}: corrupt (not a JSON object)")
        if header is None:
            if data.get("vramctl_timeline") != FORMAT_VERSION:
                raise TimelineError(f"timeline {path}: not a vramctl timeline (line 1 is no `vramctl_timeline: 1` header)")
            header = data
            continue
        seq = data.get("seq")
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise TimelineError(f"timeline {path} line {lineno}: corrupt (no sequence number)")
        try:
            samples.append((seq, Sample.from_json(data)))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise TimelineError(f"timeline {path} line {lineno}: corrupt sample ({type(exc).__name__}: {exc})") from None
    if header is None:
        raise TimelineError(f"timeline {path}: empty or truncated before its header")
    return header, samples, dropped


def read_timeline(path: str | os.PathLike[str]) -> Timeline:
    """Both segments of a recorded ring, oldest first; TimelineError (exit 2) on any damage but a cut last line."""
    current = Path(path)
    previous = previous_segment(current)
    segments: list[tuple[Path, bool]] = []
    if previous.is_file():
        segments.append((previous, False))
    if current.is_file():
        segments.append((current, True))
    elif current.exists():
        raise TimelineError(f"timeline {current}: not a regular file")
    if not segments:
        raise TimelineError(f"timeline {current}: no such file")
    header: dict[str, Any] = {}
    samples: list[tuple[int, Sample]] = []
    dropped = 0
    for segment, is_current in segments:
        head, found, cut = _read_segment(segment, is_current or segment == segments[-1][0])
        header = head
        dropped += cut
        samples.extend(found)
    for (a, first), (b, second) in itertools.pairwise(samples):
        if b <= a or second.t < first.t:
            raise TimelineError(
                f"timeline {current}: corrupt (sample {b} after {a}: sequence or time out of order)"
            )
    if not samples:
        raise TimelineError(f"timeline {current}: holds no complete sample")
    return Timeline(
        tuple(s for _, s in samples), header, dropped, tuple(str(p) for p, _ in segments), samples[-1][0]
    )
