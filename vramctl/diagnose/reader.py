"""Streaming log reader: any size, bounded memory, the mess real server logs are made of.

`iter_log_lines(source)` yields every line of a log as a `LogLine`; `iter_matching_lines(source,
pattern)` yields only the lines whose raw bytes match a pre-filter pattern (plus a few lines after each
hit), which is how `explain-oom` stays near `grep` speed on a multi-GiB log.

What it copes with:
- a path, `"-"` (standard input) or an open binary stream; gzip detected by its magic bytes (any
  file name), multi-member gzip included;
- bounded memory: the input is read in chunks (`CHUNK_BYTES`); a line longer than `MAX_LINE_BYTES` is
  cut there and marked `truncated=True`, and the rest of it is skipped without being buffered;
- invalid UTF-8 (replaced with U+FFFD), CRLF, a file that uses bare CR as its line separator, bare CRs
  inside a line (tqdm progress bars: the segments are joined with a space), no trailing newline;
- ANSI colour / cursor escape codes and other C0 control characters removed;
- the prefixes that multi-process servers put in front of each message, split off into `process`
  and removed from `text` (stacked prefixes are peeled one after another):
  `(EngineCore_DP0 pid=123)`, `(VllmWorker TP1 pid=…)`, `(VllmWorker rank=0 pid=…)`,
  `(RayWorkerWrapper pid=…, ip=…)`, `(pid=…)`, `(raylet)`, `[rank0]:`, `[TP3]`, `[2025-… DP0 TP3]`
  (SGLang), `[2025-05-19 18:08:26,176]` (LMCache, Ray), `name-1  | ` (docker compose), and the logging
  header `INFO 01-02 03:04:05 [file.py:123]` (vLLM; also the older `file.py:123]` form, the `2024-12-19
  21:40:35 ERROR 56542 [file.py:64]` form and a bare `[file.py:123]`) or `2023-07-26T09:55:39.447Z  INFO`
  (TGI / tracing).

Logs wrapped by a collector are unwrapped while streaming (`wrapped.py`): Docker's json-file log
(`{"log":"…\\n","stream":"stderr","time":"…"}`, split pieces joined), the CRI file format's partial (`P`)
lines joined, `journalctl -o json` (`"MESSAGE"`, a string or an array of bytes); every line keeps the
line number it has in the file (`Block.numbers` maps them where the mapping is not one-to-one). The
`journalctl -o short` / `short-iso` / `short-precise` prefix (`May 01 12:00:00 host vllm[123]: `) is peeled.

A log pasted somewhere first (an issue thread, a chat, an HTTP error payload) is read as the log (`pasted.py`):
hard wraps rejoined, HTML entities, markdown quotes, line numbers, a common `name | ` tag and a log carried in a JSON
string undone, each sniffed once on the first lines (a plain log pays one look at its head).

Truncated gzip: every line that could be decompressed is yielded first, then `TruncatedInputError`
(a `BadInputError`, exit 2) is raised, carrying `lines_read`. Callers that can still use a partial
log (explain-oom) catch it and report it as a warning; callers that need the whole log let it through.

A directory, a missing or unreadable path raise `BadInputError` before anything is yielded.
"""

from __future__ import annotations

import codecs
import io
import os
import re
import stat
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from vramctl.core.errors import BadInputError
from vramctl.diagnose.pasted import Unpaster
from vramctl.diagnose.wrapped import Unwrapper, unwrap_json_line

__all__ = [
    "CHUNK_BYTES",
    "MAX_LINE_BYTES",
    "Block",
    "LogLine",
    "ScanStats",
    "TruncatedInputError",
    "clean_line",
    "iter_blocks",
    "iter_log_lines",
    "iter_matching_lines",
    "make_line",
    "split_prefixes",
]

CHUNK_BYTES = 8 << 20
"""Bytes read (or decompressed) per step. Peak memory is a small multiple of this, whatever the file size."""

MAX_LINE_BYTES = 64 << 10
"""A line longer than this is cut here (`LogLine.truncated`); the rest of it is skipped, never buffered."""

_GZIP_MAGIC = b"\x1f\x8b"


class TruncatedInputError(BadInputError):
    """The input ended early (a truncated gzip stream). Raised after every readable line was yielded."""

    def __init__(self, message: str, *, lines_read: int) -> None:
        super().__init__(message)
        self.lines_read = lines_read


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of a log, numbered as in the file (1-based, `\\n`-separated)."""

    number: int
    text: str
    """The message: ANSI codes, control characters and the process / logging prefixes removed."""
    raw: str
    """The whole line with ANSI codes and control characters removed but the prefixes kept."""
    process: str | None = None
    """The process tag of the prefix (`EngineCore_DP0 pid=123`, `TP3`, `rank0`, `raylet`), if any."""
    truncated: bool = False
    """True when the line was longer than `MAX_LINE_BYTES` and was cut."""


@dataclass(slots=True)
class ScanStats:
    """Filled in while a log is read: how much there was (for reports and warnings)."""

    lines: int = 0
    bytes_read: int = 0
    truncated_lines: int = 0
    gzip: bool = False
    truncated_input: bool = False
    hits: int = 0
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------------
# Cleaning one line: ANSI codes, control characters, prefixes.

_ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor movement
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks
    r"|\x1b[@-Z\\-_]"  # two-character escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# ANSI colours written out as text by something that escaped the ESC byte: syslog / rsyslog `#033[33m`, a JSON or
# Python repr `\u001b[0m` / `\x1b[0m` / `\033[0m`, caret notation `^[[0m`
_ESCAPED_ANSI_RE = re.compile(r"(?:#033|\\u001[bB]|\\x1[bB]|\\033|\^\[)\[[0-?]*[ -/]*[@-~]")
# a message carried inside a JSON string (an HTTP error payload, a log shipper's record that was not unwrapped):
# `\n` / `\t` escapes and `\"` quotes. Only undone on a line with two or more of them (a Windows path has one).
_JSON_ESCAPE_RE = re.compile(r'\\[nt"]')
# markdown quotes of a pasted log: `> ` (nested `> > `) in front of the line
_QUOTE_RE = re.compile(r"(?:>[ \t]?)+(?=\S)")

# Process tags in parentheses: `(EngineCore_DP0 pid=123)`, `(VllmWorker TP1 pid=5)`,
# `(VllmWorker rank=0 pid=10672)`, `(RayWorkerWrapper pid=1, ip=10.0.0.1)`, `(pid=1234)`,
# `(APIServer pid=1)`, and Ray's daemons `(raylet)`, `(gcs_server)`, `(autoscaler +1m2s)`.
_PAREN_TAG_RE = re.compile(
    r"\((?P<tag>"
    r"(?:[A-Za-z_][\w.\-]*(?:\s+[A-Za-z_]*\d+)*[\s,]+)?[a-z_]+=[^\s,()]+(?:[\s,]+[a-z_]+=[^\s,()]+)*"
    r"|raylet|gcs_server|dashboard|autoscaler(?:\s+\+[\w.]+)?|monitor|log_monitor"
    r")\)\s?"
)
# `[rank0]:` from torch.distributed elastic, `[TP3]`, `[DP0 TP3 EP3]`, `[2025-01-01 10:00:00 TP0]`,
# `[2025-05-19 18:08:26,176]`, `[2026-03-25 05:44:29,435 W 39 39]` (Ray: level letter, pid, tid).
_RANK_TAG_RE = re.compile(r"\[(?P<tag>rank\d+)\]:\s?")
_BRACKET_TAG_RE = re.compile(
    r"\[(?P<ts>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)?"
    r"(?(ts)(?:\s+[A-Z](?:\s+\d+){1,2})?)"
    r"\s*(?P<tag>(?:(?:ATTN_DP|ATTN_TP|MOE_DP|DP|TP|PP|EP|CP|DCP)\d+\s*)+)?\]\s?"
)
# docker compose: `vllm-1  | `, `sglang_1 | `.
_COMPOSE_RE = re.compile(r"(?P<tag>[A-Za-z][\w.\-]*?[-_]\d+)\s+\|\s?")
# `mpirun --tag-output` (TensorRT-LLM multi-GPU runs): `[1,3]<stderr>:` (job, rank).
_MPI_TAG_RE = re.compile(r"\[(?P<tag>\d+,\d+)\]<std(?:out|err)>:\s?")
# Logging headers. vLLM: `INFO 01-02 03:04:05 [file.py:123] `, older `INFO 02-26 09:54:02 file.py:1115] `,
# `2024-12-19 21:40:35 ERROR 56542 [file.py:64] `, `INFO  [gpu_worker.py:642]  `, bare `[file.py:492] `.
# TGI / Rust tracing: `2023-07-26T09:55:39.447617Z  INFO `. LMCache: `LMCache WARNING: ` / `WARNING LMCache: `.
_LEVELS = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|TRACE)"
_LEVEL_HEADER_RE = re.compile(
    r"(?:\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?Z?\s+)?"
    rf"(?P<level>{_LEVELS})\s+"
    r"(?:\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\s+)?"
    r"(?:\d+\s+)?"
    r"\[?[\w.\-/<>]+\.py(?::\d+)?\]\s*"
)
_TRACING_HEADER_RE = re.compile(
    rf"\d{{4}}-\d{{2}}-\d{{2}}T\d{{2}}:\d{{2}}:\d{{2}}(?:\.\d+)?Z?\s+(?P<level>{_LEVELS})\s+"
)
_BARE_FILE_RE = re.compile(r"\[[\w.\-/<>]+\.py(?::\d+)?\]\s*")
# Collectors' timestamps in front of the engine's own line: `kubectl logs --timestamps` / `docker logs -t`
# (`2025-01-01T00:00:00.123456789Z `), the CRI log file format of containerd / CRI-O (`<RFC 3339 time> stdout F `).
_COLLECTOR_TS_RE = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})(?:\s+(?:stdout|stderr)\s+[PF])?\s+"
)
_LMCACHE_RE = re.compile(rf"(?:LMCache\s+{_LEVELS}|{_LEVELS}\s+LMCache):\s*")
# Google Cloud Logging / GKE exports: `INFO 2025-11-19T20:16:36.096674521Z [resource.labels.containerName: vllm] `
# (severity, RFC 3339 time, the resource label in brackets) in front of the container's own line.
_CLOUD_LOG_RE = re.compile(
    rf"(?:{_LEVELS}|DEFAULT|NOTICE|ALERT|EMERGENCY)\s+\d{{4}}-\d{{2}}-\d{{2}}T\d{{2}}:\d{{2}}:\d{{2}}(?:\.\d+)?Z?\s+"
    r"\[resource\.labels\.[\w.]+:[^\]]*\]\s*"
)
# `journalctl -o short` (`May 01 12:00:00 host vllm[123]: `), `-o short-precise` (fractional seconds),
# `-o short-iso` (`2024-05-01T12:00:00+0000 host …`), and classic syslog files in the same shape.
_JOURNAL_SHORT_RE = re.compile(
    r"(?:[A-Z][a-z]{2}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}(?:\.\d+)?"
    r"|\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2}))"
    r" [\w.\-]+ [\w.\-@/:]+\[\d+\]: "
)

_PROCESS_RES = (_PAREN_TAG_RE, _RANK_TAG_RE, _COMPOSE_RE, _MPI_TAG_RE)
_HEADER_RES = (
    _CLOUD_LOG_RE,
    _LEVEL_HEADER_RE,
    _TRACING_HEADER_RE,
    _BARE_FILE_RE,
    _LMCACHE_RE,
    _COLLECTOR_TS_RE,
    _JOURNAL_SHORT_RE,
)
# The prefixes a line can start with, by its first character (same order as above; a regex whose first character
# cannot be this one is not tried): `(` a process tag; `[` a rank / MPI / bracket tag or a bare file; an ASCII letter
# a compose tag or a level / cloud / LMCache / journal header; a digit a time-stamped header. Nothing else starts one.
_BY_FIRST: dict[str, tuple[tuple[re.Pattern[str], ...], bool, tuple[re.Pattern[str], ...]]] = {
    "(": ((_PAREN_TAG_RE,), False, ()),
    "[": ((_RANK_TAG_RE, _MPI_TAG_RE), True, (_BARE_FILE_RE,)),
    "a": ((_COMPOSE_RE,), False, (_CLOUD_LOG_RE, _LEVEL_HEADER_RE, _LMCACHE_RE, _JOURNAL_SHORT_RE)),
    "0": ((), False, (_LEVEL_HEADER_RE, _TRACING_HEADER_RE, _COLLECTOR_TS_RE, _JOURNAL_SHORT_RE)),
}
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _in_one_pass(process_res: tuple[re.Pattern[str], ...], headers: tuple[re.Pattern[str], ...]) -> re.Pattern[str]:
    """A kind's process tag (at most one regex, its `tag` group kept) and logging headers as one alternation, in the
    same order. `match` takes an alternation's first alternative that matches at the start, and each alternative
    matches there exactly what its own regex matches (nothing follows it): the same prefix as trying the regexes one
    by one, in one call instead of up to five (a vLLM line's header, then its message, tried each of them)."""
    assert len(process_res) <= 1
    parts = [r.pattern for r in process_res]
    parts += [r.pattern.replace("(?P<level>", "(?:") for r in headers]  # the headers' groups are never read
    return re.compile("|".join(f"(?:{part})" for part in parts))


# the kinds with no bracket tag, each in one alternation (`split_prefixes`), and whether it holds a process tag (its
# `tag` group matched: the process tag matched)
_ONE_PASS: dict[str, tuple[re.Pattern[str], bool]] = {
    kind: (_in_one_pass(process_res, headers), bool(process_res))
    for kind, (process_res, bracket, headers) in _BY_FIRST.items()
    if not bracket
}


def _first_kind(first: str) -> str | None:
    if first in ("(", "["):
        return first
    if first in _ASCII_LETTERS:
        return "a"
    if first.isdigit():  # `\d` matches any Unicode decimal digit; isdigit() holds for each of them
        return "0"
    return None


def split_prefixes(line: str) -> tuple[str | None, str]:
    """Peel the process tags and logging headers off the front of a cleaned line: (process, message)."""
    process: str | None = None
    rest = line
    for _ in range(8):  # prefixes stack (tag, then logging header); a bounded number of rounds
        stripped = rest.lstrip(" ")
        kind = _first_kind(stripped[:1])
        if kind is None:
            break
        one_pass = _ONE_PASS.get(kind)
        if one_pass is not None:
            m = one_pass[0].match(stripped)
            if m is None:
                break
            tag = m.group("tag") if one_pass[1] else None
            if tag is not None and process is None:
                process = tag
            rest = stripped[m.end() :]
            continue
        process_res, bracket, header_res = _BY_FIRST[kind]
        matched = False
        for regex in process_res:
            m = regex.match(stripped)
            if m is not None:
                if process is None:
                    process = m.group("tag")
                rest = stripped[m.end() :]
                matched = True
                break
        if matched:
            continue
        m = _BRACKET_TAG_RE.match(stripped) if bracket else None
        if m is not None and (m.group("ts") or m.group("tag")):
            if m.group("tag") and process is None:
                process = m.group("tag").strip()
            rest = stripped[m.end() :]
            continue
        for regex in header_res:
            m = regex.match(stripped)
            if m is not None:
                rest = stripped[m.end() :]
                matched = True
                break
        if not matched:
            break
    return process, rest


def _may_hold_escaped_ansi(text: str) -> bool:
    """Whether `text` holds one of the starts `_ESCAPED_ANSI_RE` needs (substring tests; the regex's search tries every
    position of the line, and a line with JSON-escaped newlines, `\\n`, holds a backslash but rarely an escape code)."""
    if "#033[" in text or "^[[" in text:
        return True
    return "\\" in text and ("\\u001" in text or "\\x1" in text or "\\033[" in text)


def clean_line(data: bytes) -> str:
    """Decode one line's bytes (invalid UTF-8 replaced), drop ANSI codes, control characters, CRs."""
    text = data.decode("utf-8", "replace")
    if text.endswith("\r"):
        text = text.rstrip("\r")
    if "\x1b" in text or "\x9b" in text:
        text = _ANSI_RE.sub("", text)
    if "\r" in text:  # progress bars overwrite themselves with bare CRs
        text = " ".join(seg for seg in text.split("\r") if seg.strip())
    # every character `_CONTROL_RE` removes is unprintable: a printable line (most lines; `isprintable` is a table
    # look-up a character, SRE's search tries a match at every position, ~3x the time) has none
    if not text.isprintable() and _CONTROL_RE.search(text) is not None:
        text = _CONTROL_RE.sub("", text)
    if _may_hold_escaped_ansi(text) and _ESCAPED_ANSI_RE.search(text) is not None:
        text = _ESCAPED_ANSI_RE.sub("", text)
    if "\\" in text and len(_JSON_ESCAPE_RE.findall(text, 0, 65536)) >= 2:
        text = text.replace("\\n", " ").replace("\\t", " ").replace('\\"', '"')
    if text[:1] == ">" and text[:3] != ">>>":
        m = _QUOTE_RE.match(text)
        if m is not None:
            text = text[m.end() :]
    return text


def make_line(number: int, data: bytes, *, truncated: bool = False) -> LogLine:
    """A `LogLine` from one line's bytes (without its newline), cut to `MAX_LINE_BYTES`."""
    if len(data) > MAX_LINE_BYTES:
        data = data[:MAX_LINE_BYTES]
        truncated = True
    if data[:1] == b"{":  # a Docker / journald JSON line the block sniffing did not unwrap
        unwrapped = unwrap_json_line(data)
        if unwrapped is not None:
            data = unwrapped
    raw = clean_line(data)
    process, text = split_prefixes(raw)
    return LogLine(number=number, text=text.strip(), raw=raw, process=process, truncated=truncated)


# --------------------------------------------------------------------------------------------------
# Bytes in: open the source, undo gzip, cut into blocks of whole lines.


def _open(source: str | os.PathLike[str] | BinaryIO) -> tuple[BinaryIO, str, bool]:
    """(stream, display name, whether we opened it and must close it)."""
    if isinstance(source, (str, os.PathLike)):
        if os.fspath(source) == "-":
            return sys.stdin.buffer, "<stdin>", False
        if not os.fspath(source).strip():
            # Path("") is "." (the current directory): name the real mistake
            raise BadInputError("LOG: empty file name (give the log's path, or - for standard input)")
        path = Path(source)
        try:
            is_dir = path.is_dir()
        except OSError as exc:  # a name too long for the filesystem (ENAMETOOLONG)
            raise BadInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
        except ValueError:  # a NUL byte in the name
            raise BadInputError(f"{str(path)!r}: not a file name (it holds a NUL byte)") from None
        if is_dir:
            raise BadInputError(f"{path}: is a directory, not a log file")
        try:
            stream = path.open("rb")
        except FileNotFoundError:
            raise BadInputError(f"{path}: no such file") from None
        except OSError as exc:
            raise BadInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if _endless_device(stream):  # /dev/zero, /dev/urandom: read without end; a terminal or a pipe is fine
            stream.close()
            raise BadInputError(f"{path}: is a device, not a log file (give the log's path, or - for a pipe)")
        return stream, str(path), True
    name = getattr(source, "name", None)
    return source, str(name) if isinstance(name, str) else "<stream>", False


def _endless_device(stream: BinaryIO) -> bool:
    """A character or block device that is not a terminal: no log lives there, and /dev/zero never ends."""
    try:
        mode = os.fstat(stream.fileno()).st_mode
        return (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)) and not os.isatty(stream.fileno())
    except (OSError, ValueError):
        return False


def _read(stream: BinaryIO, size: int, name: str) -> bytes:
    try:
        return stream.read(size)
    except IsADirectoryError:
        raise BadInputError(f"{name}: is a directory, not a log file") from None
    except OSError as exc:
        raise BadInputError(f"{name}: read error: {exc.strerror or exc}") from None


_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


BINARY_SAMPLE_BYTES = 64 * 1024
_BINARY_MIN_TEXT = 512
_BINARY_MAX_FRACTION = 0.10
_TEXT_CONTROLS = frozenset("\t\n\r\x0b\x0c\x08\x1b")
# what is not text: U+FFFD (invalid UTF-8), DEL and the control characters other than _TEXT_CONTROLS (one regex pass:
# ~5 ms less per 64 KiB sample than a test per character)
_NOT_TEXT_RE = re.compile("[" + "".join(f"\\x{c:02x}" for c in range(32) if chr(c) not in _TEXT_CONTROLS) + "\\x7f\ufffd]")


def check_text(sample: bytes, name: str) -> None:
    """BadInputError when the start of a log is binary data (an archive, an executable, random bytes) rather than
    text: more than 10 % of it, NULs aside (a sparse or zero-filled file is an empty log), is invalid UTF-8 or
    control characters that logs do not print. A log with a few garbled lines stays far below that."""
    text = sample[:BINARY_SAMPLE_BYTES].replace(b"\x00", b"").decode("utf-8", "replace")
    if len(text) < _BINARY_MIN_TEXT:
        return
    bad = len(_NOT_TEXT_RE.findall(text))
    if bad > _BINARY_MAX_FRACTION * len(text):
        raise BadInputError(
            f"{name}: binary data, not a text log ({100 * bad / len(text):.0f} % of the first "
            f"{min(len(sample), BINARY_SAMPLE_BYTES) // 1024} KiB is not text); pass the log itself (plain, gzip or "
            "UTF-16, as `docker logs` / `kubectl logs` / `journalctl` write it)"
        )


def _iter_bytes(stream: BinaryIO, name: str, stats: ScanStats) -> Iterator[bytes]:
    """Chunks of the content as UTF-8-compatible bytes: gzip undone, UTF-16 (with its byte-order mark: what
    Windows PowerShell's `>` writes) transcoded to UTF-8 chunk by chunk, so the byte-level anchors still match."""
    chunks = _iter_raw_bytes(stream, name, stats)
    for first in chunks:
        if not first.startswith(_UTF16_BOMS):
            check_text(first, name)
            yield first
            yield from chunks
            return
        stats.notes.append(f"{name}: UTF-16 text, read after converting it to UTF-8")
        decoder = codecs.getincrementaldecoder("utf-16")(errors="replace")
        yield decoder.decode(first).encode("utf-8", "replace")
        for chunk in chunks:
            yield decoder.decode(chunk).encode("utf-8", "replace")
        tail = decoder.decode(b"", True)
        if tail:
            yield tail.encode("utf-8", "replace")
        return


PROBE_BYTES = 64 << 10
"""How far before a chunk's end a regular file is probed for the last newline (see `_iter_whole_lines`)."""


def _regular_fd(stream: BinaryIO) -> int | None:
    """The descriptor of a regular file read from its current position (positioned reads are possible), else None."""
    try:
        fd = stream.fileno()
        return fd if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return None


def _iter_whole_lines(stream: BinaryIO, fd: int, name: str, stats: ScanStats) -> Iterator[bytes]:
    """The rest of a regular file in chunks that end at a newline, read in place: the last newline before a chunk's
    end is found in a small probe read first, so the block of whole lines is the chunk itself (no copy joining a
    carried partial line to the next chunk: ~0.06 s on 256 MiB). A probe without a newline (a line longer than the
    probe) reads a plain chunk; the caller carries its partial line as before."""
    try:
        pos = stream.tell()
        while True:
            size = CHUNK_BYTES
            probe = os.pread(fd, PROBE_BYTES, pos + CHUNK_BYTES - PROBE_BYTES)
            cut = probe.rfind(b"\n")
            if len(probe) == PROBE_BYTES and cut >= 0:
                size = CHUNK_BYTES - PROBE_BYTES + cut + 1
            chunk = os.pread(fd, size, pos)
            if not chunk:
                return
            pos += len(chunk)
            stats.bytes_read += len(chunk)
            yield chunk
    except OSError as exc:
        raise BadInputError(f"{name}: read error: {exc.strerror or exc}") from None


def _iter_raw_bytes(stream: BinaryIO, name: str, stats: ScanStats) -> Iterator[bytes]:
    """Chunks of the (decompressed) content. Raises TruncatedInputError at the end of a cut gzip."""
    first = _read(stream, CHUNK_BYTES, name)
    if not first:
        return
    if not first.startswith(_GZIP_MAGIC):
        stats.bytes_read += len(first)
        yield first
        fd = _regular_fd(stream)
        if fd is not None:
            yield from _iter_whole_lines(stream, fd, name, stats)
            return
        while True:
            chunk = _read(stream, CHUNK_BYTES, name)
            if not chunk:
                return
            stats.bytes_read += len(chunk)
            yield chunk
    stats.gzip = True
    decomp: zlib._Decompress | None = zlib.decompressobj(wbits=31)
    data = first
    while True:
        while data:
            if decomp is None:  # between gzip members: another member, zero padding, or garbage
                if data.startswith(_GZIP_MAGIC):
                    decomp = zlib.decompressobj(wbits=31)
                elif not data.strip(b"\x00"):
                    data = b""
                    break
                elif data == _GZIP_MAGIC[:1]:
                    data += _read(stream, 1, name)
                    continue
                else:
                    stats.notes.append(f"{name}: ignored non-gzip data after the compressed stream")
                    return
            try:
                out = decomp.decompress(data, CHUNK_BYTES)
            except zlib.error as exc:
                stats.truncated_input = True
                raise TruncatedInputError(
                    f"{name}: corrupt gzip data after {stats.bytes_read:,} decompressed bytes ({exc})",
                    lines_read=stats.lines,
                ) from None
            if out:
                stats.bytes_read += len(out)
                yield out
            if decomp.eof:
                data = decomp.unused_data
                decomp = None
            else:
                data = decomp.unconsumed_tail
        data = _read(stream, CHUNK_BYTES, name)
        if not data:
            break
    if decomp is not None:
        out = decomp.flush()
        if out:
            stats.bytes_read += len(out)
            yield out
        stats.truncated_input = True
        raise TruncatedInputError(
            f"{name}: truncated gzip stream (it ends after {stats.bytes_read:,} decompressed bytes)",
            lines_read=stats.lines,
        )


@dataclass(frozen=True, slots=True)
class Block:
    first_number: int
    data: bytes
    """Whole lines, each ending in `\\n` except possibly the file's last one."""
    truncated: bool = False
    """A single over-long line already cut to `MAX_LINE_BYTES`."""
    numbers: list[int] | None = None
    """The file's line number of each line of `data`, when they are not `first_number + i` (an unwrapped
    log whose split pieces were joined or whose messages held newlines)."""

    def number(self, index: int) -> int:
        """The file's line number of the `index`-th line (0-based) of `data`."""
        if self.numbers is None:
            return self.first_number + index
        if index < len(self.numbers):
            return self.numbers[index]
        return self.numbers[-1] if self.numbers else self.first_number


def iter_blocks(source: str | os.PathLike[str] | BinaryIO, stats: ScanStats) -> Iterator[Block]:
    """The content in blocks of whole lines (about `CHUNK_BYTES` each), numbered; over-long lines cut."""
    stream, name, owned = _open(source)
    unwrapper = Unwrapper()
    unpaster = Unpaster()  # a pasted log (hard-wrapped, quoted, HTML-escaped, in a JSON string): pasted.py
    try:
        number = 1
        carry = b""
        skipping = False  # inside the unread rest of an over-long line
        cr_only: bool | None = None
        for chunk in _iter_bytes(stream, name, stats):
            if (
                b"\x00" in chunk
            ):  # NUL runs (what `logrotate copytruncate` leaves) go before the line cap counts
                chunk = chunk.replace(b"\x00", b"")
            if cr_only is None:
                cr_only = b"\n" not in chunk and b"\r" in chunk
            if cr_only:
                chunk = chunk.replace(b"\r", b"\n")
            if skipping:
                nl = chunk.find(b"\n")
                if nl < 0:
                    continue
                chunk = chunk[nl + 1 :]
                skipping = False
                number += 1
            last = chunk.rfind(b"\n")
            if last < 0:
                carry += chunk
            else:
                # one copy of the block: the carried partial line joined to the chunk's whole lines
                if carry:
                    block = b"".join((carry, memoryview(chunk)[: last + 1]))
                elif last + 1 == len(chunk):
                    block = chunk
                else:
                    block = chunk[: last + 1]
                carry = chunk[last + 1 :]
                out, numbers = unpaster.block(number, *unwrapper.block(number, block))
                if out:
                    yield Block(number, out, numbers=numbers)
                count = block.count(b"\n")
                number += count
                stats.lines += count
            if len(carry) > MAX_LINE_BYTES:
                yield Block(number, carry[:MAX_LINE_BYTES], truncated=True)  # make_line unwraps a JSON one
                stats.truncated_lines += 1
                stats.lines += 1
                carry = b""
                skipping = True
        if carry:
            out, numbers = unpaster.block(number, *unwrapper.block(number, carry))
            if out:
                yield Block(number, out.removesuffix(b"\n"), numbers=numbers)
            stats.lines += 1
        for first, data in unwrapper.flush():  # split pieces whose last piece never came
            yield Block(first, data)
        if unwrapper.kinds:
            stats.notes.append(f"{name}: unwrapped {' and '.join(sorted(unwrapper.kinds))} log lines")
        if unpaster.undone:
            stats.notes.append(f"{name}: read as pasted ({', '.join(sorted(unpaster.undone))} undone)")
    finally:
        if owned:
            stream.close()


def _split_block(block: Block) -> Iterator[LogLine]:
    if block.truncated:
        yield make_line(block.first_number, block.data, truncated=True)
        return
    lines = block.data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if block.numbers is None:
        for offset, data in enumerate(lines):
            yield make_line(block.first_number + offset, data)
    else:
        for offset, data in enumerate(lines):
            yield make_line(block.number(offset), data)


def iter_log_lines(
    source: str | os.PathLike[str] | BinaryIO, *, stats: ScanStats | None = None
) -> Iterator[LogLine]:
    """Every line of the log, in order, as `LogLine`s (see the module docstring for what is handled)."""
    st = stats if stats is not None else ScanStats()
    for block in iter_blocks(source, st):
        yield from _split_block(block)


def iter_matching_lines(
    source: str | os.PathLike[str] | BinaryIO,
    pattern: re.Pattern[bytes],
    *,
    context_after: int = 0,
    stats: ScanStats | None = None,
) -> Iterator[LogLine]:
    """Only the lines whose raw bytes match `pattern`, each followed by up to `context_after` lines.

    The pattern runs over whole blocks (megabytes at a time); blocks without a hit cost one regex
    search and one newline count, so the scan runs at close to the regex engine's speed. A line that
    both matches and falls in a previous hit's context is yielded once. Lines come in file order.
    """
    st = stats if stats is not None else ScanStats()
    owed = 0  # context lines still owed after the last hit (carried across blocks)
    for block in iter_blocks(source, st):
        if block.truncated:
            hit = pattern.search(block.data) is not None
            if hit or owed:
                yield make_line(block.first_number, block.data, truncated=True)
                owed = context_after if hit else owed - 1
                st.hits += hit
            continue
        data = block.data
        size = len(data)
        pos = 0  # start of the next line not yet looked at
        line_no = 0  # index of that line in the block (`block.number` gives the file's number)
        while pos < size:
            if owed:
                end = data.find(b"\n", pos)
                end = size if end < 0 else end
                line = data[pos:end]
                yield make_line(block.number(line_no), line)
                owed -= 1
                if pattern.search(line) is not None:
                    st.hits += 1
                    owed = context_after
                pos = end + 1
                line_no += 1
                continue
            m = pattern.search(data, pos)
            if m is None:
                break
            st.hits += 1
            start = data.rfind(b"\n", pos, m.start()) + 1 if m.start() > pos else pos
            if start < pos:
                start = pos
            line_no += data.count(b"\n", pos, start)
            end = data.find(b"\n", m.start())
            end = size if end < 0 else end
            yield make_line(block.number(line_no), data[start:end])
            pos = end + 1
            line_no += 1
            owed = context_after
