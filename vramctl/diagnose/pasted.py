"""A log pasted somewhere before it reached us: undo what the paste did, so the answer is the same as on the log.

Real logs come from issue threads, chats and HTTP clients, not only from files. The same engine messages then
arrive hard-wrapped at the terminal's or the editor's width (a line cut into several, also inside a word),
markdown-quoted (`> `, `>> `, `> - `), with HTML entities (`&quot;`, `&gt;`, `&#39;`: an HTML export of a
thread), as one JSON string with `\\n` escapes (`{"error": "…\\n…"}`, an HTTP error payload), with line
numbers (`12: `, `L12 `) or one tag in front of every line (`pod-name | `). Each of these is recognised on
the first lines of the input (`sniff`, once per source: a plain log costs one look at its head) and undone on
the bytes of each block before the catalogue's anchors are searched, so the byte-level scan sees the engine's
own lines. Per-line cleaning (ANSI codes written out as `#033[` / `^[[` / `\\u001b[`, a single `> ` quote, a
JSON-escaped line) stays in `reader.clean_line`.

Every line keeps the input's line number: a rejoined line takes the number of its first piece, the lines of a
JSON string the number of the line that held it (`Block.numbers`).
"""

from __future__ import annotations

import itertools
import re

__all__ = ["Unpaster", "sniff"]

_HEAD_BYTES = 256 << 10
_HEAD_LINES = 400
_MOST = 0.8
"""The share of the head's non-empty lines that must carry a quote, a line number or a tag for it to be undone."""

HTML = "html-entities"
JSON_STRING = "json-string"
QUOTE = "markdown-quote"
LINE_NUMBERS = "line-numbers"
TAG = "line-tag"
WRAP = "hard-wrap"

_ENTITIES = (
    (b"&quot;", b'"'),
    (b"&#39;", b"'"),
    (b"&#x27;", b"'"),
    (b"&lt;", b"<"),
    (b"&gt;", b">"),
    (b"&amp;", b"&"),
)
_ESCAPED_NEWLINES = 3
"""A line holding this many `\\n` escapes carries a log in a JSON string (one escaped message has one or two)."""
_QUOTE_RE = re.compile(rb"^[ \t]*(?:>[ \t]?)+(?:[-*+] )?", re.MULTILINE)
_NUMBER_RE = re.compile(rb"^[ \t]*L?(\d{1,7})(?::?[ \t]|:$)")  # `12: `, `L12 `; never a time `10:00:00`
_TAG_RE = re.compile(rb"^([A-Za-z][\w.\-]*)[ \t]*\|[ \t]?")
_U_ESC_RE = re.compile(rb"\\u([0-9a-fA-F]{4})")
# the start of a record that `reader.split_prefixes` does not peel: a wrapped line never continues onto one of these
_RECORD_RE = re.compile(
    r"(?:(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)[ :]|\d{4}-\d{2}-\d{2}|Traceback |\s*File \")"
)
_MIN_WRAP = 60
_MAX_WRAP = 400
_NEAR = 8
_USUAL_WIDTHS = frozenset({80, 100, 120, 132, 140, 150, 160, 200})
"""Terminal and editor widths: one line cut at one of these is enough to read the log as hard-wrapped."""


def _head_lines(data: bytes) -> list[bytes]:
    return [line for line in data[:_HEAD_BYTES].split(b"\n", _HEAD_LINES)[:_HEAD_LINES] if line.strip()]


def _share(lines: list[bytes], test: re.Pattern[bytes]) -> float:
    return sum(1 for line in lines if test.match(line) is not None) / len(lines) if lines else 0.0


def _numbered(lines: list[bytes]) -> bool:
    """Most lines start with a line number, and the numbers go up."""
    numbers = [m for m in (_NUMBER_RE.match(line) for line in lines) if m is not None]
    if len(lines) < 3 or len(numbers) < _MOST * len(lines):
        return False
    values = [int(m.group(1)) for m in numbers]
    return sum(1 for a, b in itertools.pairwise(values) if b > a) >= _MOST * (len(values) - 1)


def _common_tag(lines: list[bytes]) -> bytes | None:
    """The one `name | ` tag most lines start with (docker compose, a pod's name), or None."""
    tags: dict[bytes, int] = {}
    for line in lines:
        m = _TAG_RE.match(line)
        if m is not None:
            tags[m.group(1)] = tags.get(m.group(1), 0) + 1
    if not tags or len(lines) < 3:
        return None
    tag, count = max(tags.items(), key=lambda kv: kv[1])
    return tag if count >= _MOST * len(lines) else None


def sniff(data: bytes) -> tuple[frozenset[str], bytes | None]:
    """What a paste did to a log, from its first lines: (the kinds, the common line tag if any). Cheap on a plain
    log: substring tests and a match on each of the first lines."""
    head = data[:_HEAD_BYTES]
    kinds: set[str] = set()
    if any(entity in head for entity, _ in _ENTITIES[:5]):
        kinds.add(HTML)
    if b"\\n" in head and any(line.count(b"\\n") >= _ESCAPED_NEWLINES for line in head.split(b"\n", 64)[:64]):
        kinds.add(JSON_STRING)
    lines = _head_lines(head)
    quoted = lines and (head[:1] == b">" or b"\n>" in head) and _share(lines, _QUOTE_RE) >= _MOST
    if quoted and not all(line.startswith(b">>>") for line in lines):  # (a Python prompt session is no quote)
        kinds.add(QUOTE)
    if lines and _numbered(lines):
        kinds.add(LINE_NUMBERS)
    tag = _common_tag(lines) if b"|" in head else None
    if tag is not None:
        kinds.add(TAG)
    return frozenset(kinds), tag


def _json_lines(data: bytes) -> tuple[list[bytes], list[int]]:
    """Each line holding a log in a JSON string split at its `\\n` escapes: (lines, index of the source line)."""
    out: list[bytes] = []
    where: list[int] = []
    for i, line in enumerate(data.split(b"\n")):
        if line.count(b"\\n") < _ESCAPED_NEWLINES:
            out.append(line)
            where.append(i)
            continue
        body = line.replace(b"\\\\", b"\x00")
        first = body.find(b"\\n")
        opening = body.rfind(
            b'"', 0, first
        )  # the quote that opens the string holding the log (not an escaped one)
        while opening > 0 and body[opening - 1 : opening] == b"\\":
            opening = body.rfind(b'"', 0, opening - 1)
        last = body.rfind(b"\\n")
        closing = body.find(b'"', last)
        while closing > 0 and body[closing - 1 : closing] == b"\\":
            closing = body.find(b'"', closing + 1)
        if opening >= 0:
            body = body[: opening + 1] + b"\\n" + body[opening + 1 :]
            closing = closing + 2 if closing >= 0 else closing
        if closing >= 0:
            body = body[:closing] + b"\\n" + body[closing:]
        body = _U_ESC_RE.sub(lambda m: chr(int(m.group(1), 16)).encode("utf-8", "replace"), body)
        body = body.replace(b'\\"', b'"').replace(b"\\t", b"\t").replace(b"\\r", b"").replace(b"\\/", b"/")
        for piece in body.replace(b"\x00", b"\\").split(b"\\n"):
            out.append(piece)
            where.append(i)
    return out, where


def _strip(lines: list[bytes], regex: re.Pattern[bytes]) -> list[bytes]:
    return [line[m.end() :] if (m := regex.match(line)) is not None else line for line in lines]


def _visible(line: str) -> int:
    """A line's width on the terminal that cut it: colour codes (real or written out) take no column."""
    if "\x1b" in line or "033[" in line or "[[" in line or "\\u001" in line or "\\x1" in line:
        from vramctl.diagnose.reader import _ANSI_RE, _ESCAPED_ANSI_RE

        return len(_ESCAPED_ANSI_RE.sub("", _ANSI_RE.sub("", line)))
    return len(line)


def _wrap_width(lines: list[str]) -> tuple[int, bool] | None:
    """(the width a log was hard-wrapped at, whether the evidence is weak), or None. A cut at a fixed width leaves
    several lines of exactly the longest length and few just shorter (the last pieces' lengths fall anywhere); a
    word wrap (prose, `fold -s`) leaves many just shorter (lines followed by a record of their own are not counted). One line of a usual terminal width with none just
    shorter is weak evidence: only a cut inside a word is rejoined then."""
    lines = lines[:_HEAD_LINES]
    widths = [_visible(line) for line in lines]
    width = max(widths, default=0)
    if not _MIN_WRAP <= width <= _MAX_WRAP:
        return None
    # the lines continued on the next one, by width: exactly the width, or just shorter
    cut = [
        w
        for w, a, b in zip(widths, lines, lines[1:], strict=False)
        if w >= width - _NEAR and _continues(b, a)
    ]
    at = cut.count(width)
    near = len(cut) - at
    if at >= 2 and at > near:
        return width, False
    return (width, True) if at == 1 and near == 0 and width in _USUAL_WIDTHS else None


def _continues(line: str, previous: str) -> bool:
    """Whether `line` can be the rest of `previous` cut short: not blank, not the same record again, not the start
    of a record (a logging header, a timestamp, a process tag, a traceback's head or frame)."""
    from vramctl.diagnose.reader import split_prefixes  # (the reader imports this module)

    return (
        bool(line.strip())
        and not line.startswith("  ")  # an indented line of its own (a cut at one space leaves one)
        and line[:16] != previous[:16]
        and _RECORD_RE.match(line) is None
        and split_prefixes(line) == (None, line)
    )


def _rejoin(lines: list[str], width: int, weak: bool) -> tuple[list[str], list[int]]:
    """Runs of lines cut at `width` joined to their continuation (no space: the cut fell anywhere, inside a word
    too): (lines, index of each one's first piece). A run is joined only when it ends in a shorter piece that
    continues it (a table's rows of one width end in a blank line or another row, and are left alone)."""
    out: list[str] = []
    where: list[int] = []
    i = 0
    n = len(lines)
    while i < n:
        j = i
        while j < n - 1 and _visible(lines[j]) == width and _continues(lines[j + 1], lines[j]):
            j += 1
        whole = j > i and _visible(lines[j]) < width
        if whole and weak:  # one cut: only where it falls inside a word
            whole = j == i + 1 and lines[i][-1:].isalnum() and lines[j][:1].isalnum()
        if whole:
            out.append("".join(lines[i : j + 1]))
            where.append(i)
            i = j + 1
        else:
            out.append(lines[i])
            where.append(i)
            i += 1
    return out, where


class Unpaster:
    """Per source: sniffs the first block once, then undoes the same paste on every block."""

    def __init__(self) -> None:
        self.kinds: frozenset[str] | None = None
        self.undone: set[str] = set()
        """What a paste did that was undone (the kinds whose undoing changed a block: for a note)."""
        self._tag: bytes | None = None
        self._width: int | None = None
        self._weak = False

    def block(
        self, first_number: int, data: bytes, numbers: list[int] | None
    ) -> tuple[bytes, list[int] | None]:
        if self.kinds is None:
            self.kinds, self._tag = sniff(data)
            if not self.kinds and self._wrapped(data) is None:
                return data, numbers
        elif not self.kinds and self._width is None:
            return data, numbers
        trailing = data.endswith(b"\n")
        lines = (data[:-1] if trailing else data).split(b"\n")
        index = list(range(len(lines)))
        if HTML in self.kinds:
            for entity, char in _ENTITIES:
                lines = [line.replace(entity, char) if b"&" in line else line for line in lines]
        if JSON_STRING in self.kinds:
            lines, where = _json_lines(b"\n".join(lines))
            index = [index[w] for w in where]
        for kind, regex in ((QUOTE, _QUOTE_RE), (LINE_NUMBERS, _NUMBER_RE)):
            if kind in self.kinds:
                lines = _strip(lines, regex)
        if TAG in self.kinds and self._tag is not None:
            tag_re = re.compile(rb"^" + re.escape(self._tag) + rb"[ \t]*\|[ \t]?")
            lines = _strip(lines, tag_re)
        if self._width is None and self.kinds:
            self._wrapped(b"\n".join(lines[:_HEAD_LINES]))
        if self._width is not None:
            text = [line.decode("utf-8", "surrogateescape") for line in lines]
            joined, where = _rejoin(text, self._width, self._weak)
            lines = [line.encode("utf-8", "surrogateescape") for line in joined]
            index = [index[w] for w in where]
        out = b"\n".join(lines) + (b"\n" if trailing else b"")
        if out != data:
            self.undone |= self.kinds
        base = numbers if numbers is not None else None
        mapped = [base[i] if base is not None and i < len(base) else first_number + i for i in index]
        consecutive = mapped == list(range(first_number, first_number + len(mapped)))
        return out, None if consecutive else mapped

    def _wrapped(self, data: bytes) -> int | None:
        head = data[:_HEAD_BYTES].split(b"\n", _HEAD_LINES)[:_HEAD_LINES]
        found = _wrap_width([line.rstrip(b"\r").decode("utf-8", "replace") for line in head])
        if found is None:
            return None
        self._width, self._weak = found
        self.kinds = (self.kinds or frozenset()) | {WRAP}
        return self._width
