"""Logs wrapped by a collector: unwrap them into the engine's own lines, keeping the file's line numbers.

Three wrappers are recognised by sniffing the first lines of each block (and, for the JSON ones, line by
line in `make_line`, for a stray wrapped line in an otherwise plain file):

- Docker's `json-file` log driver (`/var/lib/docker/containers/<id>/<id>-json.log`, and what log shippers
  export in the same shape): one JSON object per line, `{"log":"<message>\\n","stream":"stderr",
  "time":"2024-05-01T12:00:00.123456789Z"}` (optionally `"attrs":{...}`). The message is JSON-escaped
  (Docker writes `\\"`, `\\\\`, `\\n`, `\\r`, `\\t`, and `\\u00XX` for control characters, `<`, `>`, `&`).
  A message longer than Docker's 16 KiB buffer is split into pieces whose `log` does not end in `\\n`;
  the pieces are joined (per stream) into one line. Other key orders and the shippers' keys (`"log"`,
  `"message"`, `"msg"`, `"MESSAGE"`) are read with `json.loads`.
- The CRI log format of containerd / CRI-O (what `/var/log/pods/...` holds and `kubectl logs` reads):
  `2024-05-01T12:00:00.123456789Z stderr F <message>`; `P` marks a partial line continued on the next
  line of the same stream. Full lines are left as they are (`reader.split_prefixes` peels the prefix);
  partial lines are joined.
- `journalctl -o json` (and `-o export`-like JSON from journal shippers): one JSON object per line with
  the message in `"MESSAGE"`, a string or, when the message held non-printable bytes (colour codes), an
  array of byte values. A message with embedded newlines (a Python traceback sent with
  `JournalHandler`) becomes several lines, all numbered as the JSON line. (`journalctl -o short` and
  `-o short-iso` prefixes are peeled by `reader.split_prefixes`; `-o cat` is the plain log.)

The unwrapped block has the same lines in the same order; `numbers` maps each of its lines to the file's
line number when the mapping is not one-to-one (joined pieces take the number of their first piece).
A plain log costs one sniff of the first lines of each 8 MiB block.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["Unwrapper", "sniff", "unwrap_json_line"]

# JSON escape handling, on bytes. `\uXXXX` (with surrogate pairs) is decoded by a callback: rare (ANSI
# codes, `<`, `>`, `&`); the others by `bytes.replace`, with escaped backslashes protected first.
_U_ESC_RE = re.compile(rb"\\u([0-9a-fA-F]{4})(?:\\u([dD][c-fC-F][0-9a-fA-F]{2}))?")
_BS_SENTINEL = b"\x00"
_RARE_ESC_RE = re.compile(rb"\\[rtbf/]")
_RARE = {b"\\r": b"\r", b"\\t": b"\t", b"\\b": b"", b"\\f": b"", b"\\/": b"/"}


def _rare_repl(m: re.Match[bytes]) -> bytes:
    return _RARE[m.group()]


def _u_repl(m: re.Match[bytes]) -> bytes:
    hi = int(m.group(1), 16)
    lo = m.group(2)
    if lo is not None and 0xD800 <= hi <= 0xDBFF:
        cp = 0x10000 + ((hi - 0xD800) << 10) + (int(lo, 16) - 0xDC00)
        return chr(cp).encode("utf-8")
    if hi == 0:  # NUL: dropped (the reader drops control characters; and NUL is the backslash sentinel)
        return b""
    out = "\ufffd" if 0xD800 <= hi <= 0xDFFF else chr(hi)
    tail = b"" if lo is None else "\ufffd".encode()  # a lone low surrogate after a non-surrogate
    return out.encode("utf-8") + tail


def _unescape(data: bytes, newline: bytes = b" ") -> bytes:
    """JSON string escapes undone (the string's content, without its quotes). An escaped newline becomes
    `newline` (a space by default: one JSON line stays one line)."""
    if b"\\" not in data:
        return data
    if _BS_SENTINEL in data:  # cannot use the sentinel: the careful (slower) way
        try:
            text = json.loads(b'"' + data + b'"')
        except ValueError:
            return data
        return str(text).replace("\n", newline.decode()).encode("utf-8", "replace")
    backslashes = b"\\\\" in data
    if backslashes:
        data = data.replace(b"\\\\", _BS_SENTINEL)
    if b"\\u" in data:
        data = _U_ESC_RE.sub(_u_repl, data)
    data = data.replace(b'\\"', b'"').replace(b"\\n", newline)
    if _RARE_ESC_RE.search(data) is not None:
        data = _RARE_ESC_RE.sub(_rare_repl, data)
    return data.replace(_BS_SENTINEL, b"\\") if backslashes else data


# --------------------------------------------------------------------------------------------------
# Sniffing

DOCKER = "docker-json"
JOURNAL = "journald-json"
CRI = "cri"
JSON = "json"

# the canonical json-file line: `log`, `stream`, optional `attrs`, `time`, in Docker's order
_DOCKER_LINE_RE = re.compile(
    rb'^\{"log":"((?:[^"\\\n]|\\.)*)","stream":"(std(?:out|err))"(?:,"attrs":\{[^\n]*?\})?,"time":"[^"\n]*"\}\r?$',
    re.MULTILINE,
)
# The fast path cuts the record's head and tail with two substitutions that start with a literal (the
# regex engine then runs at memchr speed): the head `{"log":"` at a line start, and the tail from the
# message's final escaped newline on. Inside the message every `"` is escaped, so `\n","stream":"` cannot
# occur there. A piece of a split message has no such tail and is left for the slow path.
_DOCKER_HEAD = b'{"log":"'
_DOCKER_TAIL_RE = re.compile(rb'\\n","stream":"std(?:out|err)","time":"[^"\n]*"\}\r?$', re.MULTILINE)
_DOCKER_TAIL_ATTRS_RE = re.compile(
    rb'\\n","stream":"std(?:out|err)"(?:,"attrs":\{[^\n]*?\})?,"time":"[^"\n]*"\}\r?$', re.MULTILINE
)
_DOCKER_TAIL_MARK = b'","stream":"std'
_CRI_LINE_RE = re.compile(
    rb"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}) (stdout|stderr) ([PF]) ?)(.*?)\r?$",
    re.MULTILINE,
)
_CRI_PARTIAL_RE = re.compile(
    rb"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}) std(?:out|err) P ", re.MULTILINE
)
_MESSAGE_KEYS = ("log", "MESSAGE", "message", "msg")
_SNIFF_LINES = 32
_SNIFF_BYTES = 256 << 10


def _line_kind(line: bytes) -> str | None:
    if line.startswith(b"{"):
        if line.startswith(b'{"log":"') and _DOCKER_LINE_RE.match(line):
            return DOCKER
        if (b'"MESSAGE":' in line and b'"__' in line) or line.startswith(b'{"__CURSOR"'):
            return JOURNAL
        if line.rstrip(b"\r").endswith(b"}") and any(b'"%s":' % k.encode() in line for k in _MESSAGE_KEYS):
            return JSON
        return None
    if line[:1].isdigit() and _CRI_LINE_RE.match(line):
        return CRI
    return None


def sniff(data: bytes) -> str | None:
    """The wrapper of the first lines of `data` (most of the non-empty ones must agree), or None."""
    head = data[:_SNIFF_BYTES]
    counts: dict[str, int] = {}
    seen = 0
    for line in head.split(b"\n", _SNIFF_LINES)[:_SNIFF_LINES]:
        if not line.strip():
            continue
        seen += 1
        kind = _line_kind(line)
        if kind is not None:
            counts[kind] = counts.get(kind, 0) + 1
    if not counts:
        return None
    kind, n = max(counts.items(), key=lambda kv: kv[1])
    return kind if n * 2 >= seen else None


# --------------------------------------------------------------------------------------------------
# One JSON line


def _message_of(obj: Any) -> tuple[bytes, str, bool] | None:
    """(message bytes without its final newline, stream, whether it is a partial piece) of one JSON record."""
    if not isinstance(obj, dict):
        return None
    for key in _MESSAGE_KEYS:
        if key not in obj:
            continue
        value = obj[key]
        if isinstance(value, list):  # journald: non-printable messages are arrays of byte values
            try:
                msg = bytes(v & 0xFF for v in value if isinstance(v, int))
            except (TypeError, ValueError):
                return None
        elif isinstance(value, str):
            msg = value.encode("utf-8", "replace")
        else:
            continue
        stream = str(obj.get("stream", ""))
        # Docker's own record (only its keys): a `log` without its final newline is a piece of a longer line
        docker = key == "log" and "stream" in obj and set(obj) <= {"log", "stream", "time", "attrs"}
        partial = (docker and not msg.endswith(b"\n")) or obj.get("_p") == "P"
        if msg.endswith(b"\n"):
            msg = msg[:-1]
        if msg.endswith(b"\r"):
            msg = msg[:-1]
        return msg, stream, bool(partial)
    return None


def _parse_json_line(line: bytes) -> tuple[bytes, str, bool] | None:
    body = line.rstrip(b"\r")
    if not (body.startswith(b"{") and body.endswith(b"}")):
        return None
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    return _message_of(obj)


def unwrap_json_line(line: bytes) -> bytes | None:
    """The message of one Docker / journald / shipper JSON line (newlines in it become spaces), or None.

    Also copes with a line cut short (over-long): the `{"log":"` prefix is dropped and the escapes undone.
    """
    if line.startswith(b'{"log":"'):
        m = _DOCKER_LINE_RE.match(line)
        if m is not None:
            body = m.group(1)
            if body.endswith(b"\\n"):
                body = body[:-2]
            if body.endswith(b"\\r"):
                body = body[:-2]
            return _unescape(body)
        if not line.rstrip(b"\r").endswith(b"}"):  # cut: no closing quote to find
            return _unescape(line[len(b'{"log":"') :])
    parsed = _parse_json_line(line)
    if parsed is None:
        return None
    return parsed[0].replace(b"\n", b" ")


# --------------------------------------------------------------------------------------------------
# Blocks


class Unwrapper:
    """Per-source state: unwraps blocks of whole lines, joining partial pieces across blocks."""

    def __init__(self) -> None:
        self.kinds: set[str] = set()
        """The wrappers seen (for a note in the scan statistics)."""
        self._pending: dict[str, tuple[int, bytearray]] = {}
        """stream → (line number of the first piece, the pieces so far)."""
        self._last_kind: str | None = None

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def block(self, first_number: int, data: bytes) -> tuple[bytes, list[int] | None]:
        """(unwrapped data, file line number of each of its lines or None when they are `first_number + i`)."""
        kind = sniff(data)
        if kind is None and not self._pending:
            return data, None
        if kind is None:  # a block that does not look wrapped, while a split message waits for its last piece
            kind = self._last_kind
        if kind is not None:
            self.kinds.add(kind)
            self._last_kind = kind
        if kind == CRI:
            if not self._pending and _CRI_PARTIAL_RE.search(data) is None:
                return data, None  # whole lines: split_prefixes peels the prefix
            return self._lines(first_number, data, self._cri_line)
        if kind == DOCKER and not self._pending:
            heads = data.count(b"\n" + _DOCKER_HEAD) + data.startswith(_DOCKER_HEAD)
            out = data.replace(b"\n" + _DOCKER_HEAD, b"\n")
            if out.startswith(_DOCKER_HEAD):
                out = out[len(_DOCKER_HEAD) :]
            out, tails = _DOCKER_TAIL_RE.subn(b"", out)
            if tails < heads:  # records with `attrs` (`--log-opt labels=…`)
                out, more = _DOCKER_TAIL_ATTRS_RE.subn(b"", out)
                tails += more
            # every Docker record was whole (no piece of a split message, no tail left): the fast path
            if heads == tails and out.find(_DOCKER_TAIL_MARK) < 0:
                return _unescape(out), None
        return self._lines(first_number, data, self._json_line)

    def flush(self) -> list[tuple[int, bytes]]:
        """Pieces never completed (the log ended inside a split message): (line number, text) each."""
        out = [(first, bytes(buf)) for first, buf in self._pending.values()]
        self._pending.clear()
        return sorted(out)

    # the slow path: line by line, with partial pieces

    def _lines(self, first_number: int, data: bytes, parse: Any) -> tuple[bytes, list[int] | None]:
        out: list[bytes] = []
        numbers: list[int] = []
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        for i, line in enumerate(lines):
            number = first_number + i
            parsed = parse(line)
            if parsed is None:
                out.append(line)
                numbers.append(number)
                continue
            pieces, stream, partial = parsed
            if stream in self._pending:
                start, buf = self._pending[stream]
                buf += pieces[0]
                if partial and len(buf) < (64 << 10):
                    continue
                del self._pending[stream]
                out.append(bytes(buf))
                numbers.append(start)
                rest = pieces[1:]
            else:
                if partial:
                    self._pending[stream] = (number, bytearray(pieces[0]))
                    continue
                rest = pieces
                out.append(pieces[0])
                numbers.append(number)
                rest = pieces[1:]
            for extra in rest:  # a message with embedded newlines: more lines, the same number
                out.append(extra)
                numbers.append(number)
        if not out:
            return b"", []
        joined = b"\n".join(out) + b"\n"
        consecutive = numbers[0] == first_number and numbers[-1] == first_number + len(numbers) - 1
        return joined, None if consecutive and len(numbers) == len(lines) else numbers

    @staticmethod
    def _cri_line(line: bytes) -> tuple[list[bytes], str, bool] | None:
        m = _CRI_LINE_RE.match(line)
        if m is None:
            return None
        return [m.group(4)], m.group(2).decode(), m.group(3) == b"P"

    @staticmethod
    def _json_line(line: bytes) -> tuple[list[bytes], str, bool] | None:
        if not line.startswith(b"{"):
            return None
        if line.startswith(b'{"log":"'):
            m = _DOCKER_LINE_RE.match(line)
            if m is not None:
                body = m.group(1)
                partial = not body.endswith(b"\\n")
                if not partial:
                    body = body[:-2]
                    if body.endswith(b"\\r"):
                        body = body[:-2]
                return [_unescape(body)], m.group(2).decode(), partial
        parsed = _parse_json_line(line)
        if parsed is None:
            return None
        msg, stream, partial = parsed
        return msg.split(b"\n"), stream, partial
