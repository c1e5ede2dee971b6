"""Where the next line holding any of a few literals is: one native pass (Hyperscan) instead of one pass each.

explain-oom's body scan looks for a handful of failure anchors (`emory`, `rror`, `Kill`, `SIG`, `atchdog`) in every
block of a large log. Python has no multi-literal search: one `bytes.find` / SRE literal pass per anchor, ~0.2 s
each on 256 MiB. Hyperscan (`hyperscan` on PyPI: binary wheels, the library bundled) runs all of them in one SIMD
pass at several GB/s (docs/perf/explain-oom.md).

`native_finder(anchors)` returns a finder, or None when the native path cannot be used (the package is missing, the
CPU lacks what the library needs, an anchor holds a newline, `VRAMCTL_NATIVE_SCAN=0`): the caller then runs its
pure-Python passes, which find exactly the same lines (tests/diagnose/test_oom_native_scan.py runs both on every
sample and fixture log and compares the diagnoses).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "NATIVE_ENV",
    "KeyFinder",
    "LineFinder",
    "LineKeysFinder",
    "LinesPresenceFinder",
    "LiteralFinder",
    "PresenceFinder",
    "native_enabled",
    "native_finder",
    "native_key_finder",
    "native_line_finder",
    "native_line_keys",
    "native_presence",
    "native_presence_lines",
]

NATIVE_ENV = "VRAMCTL_NATIVE_SCAN"
"""`VRAMCTL_NATIVE_SCAN=0` turns the native search off (the pure-Python passes run instead)."""

LiteralFinder = Callable[[bytes, int, int], int]
"""`finder(data, lo, hi)`: the offset of the last byte of the first occurrence (by end) of any literal lying wholly
in `data[lo:hi]`, or -1."""

_CACHE: dict[tuple[bytes, ...], LiteralFinder | None] = {}

F = TypeVar("F")
"""A finder's type (`_memoised`)."""

FIRST_WINDOW = 16 << 10
MAX_WINDOW = 4 << 20
"""The scan windows of `native_finder`: the first one, and the largest they double to."""


def native_enabled() -> bool:
    """Whether the native search may be used (not turned off by `VRAMCTL_NATIVE_SCAN=0`)."""
    return os.environ.get(NATIVE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _memoised(
    cache: dict[tuple[bytes, ...], F | None],
    words: tuple[bytes, ...],
    build: Callable[[tuple[bytes, ...]], F | None],
    *,
    per_line: bool,
) -> F | None:
    """`build(words)`, made once per word set; None where the native search may not run: turned off, no words, an
    empty word, or (`per_line`: a finder whose matches are turned into lines) a word holding a newline."""
    if not native_enabled() or not words or any(not w or (per_line and b"\n" in w) for w in words):
        return None
    if words not in cache:
        cache[words] = build(words)
    return cache[words]


def _native_database(
    kind: str, words: tuple[bytes, ...], *, single_match: bool = False
) -> tuple[Any, Any] | None:
    """(the hyperscan module, a database of `words`), or None: the package is missing, the CPU unsupported
    (ArchitectureError) or the library cannot load; the caller's pure-Python fallback runs then."""
    try:
        import hyperscan

        flags = hyperscan.HS_FLAG_SINGLEMATCH if single_match else 0
        return hyperscan, _database(hyperscan, kind, words, flags)
    except Exception:
        return None


def native_finder(anchors: tuple[bytes, ...]) -> LiteralFinder | None:
    """A one-pass finder for `anchors`, or None (use the pure-Python passes). Built once per anchor set."""
    return _memoised(_CACHE, anchors, _build, per_line=True)


def _database(hyperscan: Any, kind: str, words: tuple[bytes, ...], flags: int) -> Any:
    """A block-mode database of `words` as literals: from the package's cache when one holds exactly these words, these
    flags and this library version (compiling 515 literals takes ~15 ms, loading its 130 KB ~0.1 ms), else compiled
    and cached (`yamlcache.write_cache`; `VRAMCTL_CACHE=0` neither reads nor writes)."""
    from vramctl.diagnose.yamlcache import PACKAGE_CACHE, cache_enabled, checksum, read_cache, write_cache

    version = str(getattr(hyperscan, "__version__", ""))
    key = (version, flags, words)
    cache = PACKAGE_CACHE / f"hyperscan-{kind}-{len(words)}.{checksum(repr(key).encode())}.marshal"
    if cache_enabled():
        held = read_cache(cache)
        if isinstance(held, tuple) and len(held) == 2 and held[0] == key and isinstance(held[1], bytes):
            try:  # the library checks that the database was built for this platform and version
                loaded = hyperscan.loadb(held[1], hyperscan.HS_MODE_BLOCK)
                loaded.scratch = hyperscan.Scratch(loaded)  # a loaded database comes without scratch space
                if _finds_first_word(hyperscan, loaded, words):
                    return loaded
            except Exception:
                pass
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(expressions=list(words), ids=list(range(len(words))), flags=flags, literal=True)
    if not _finds_first_word(hyperscan, db, words):  # a library or CPU that cannot run it: the caller falls back
        raise RuntimeError("hyperscan database check failed")
    if cache_enabled():
        with contextlib.suppress(Exception):  # a database the library cannot serialise is simply not cached
            write_cache(cache, (key, bytes(hyperscan.dumpb(db))))
    return db


def _finds_first_word(hyperscan: Any, db: Any, words: tuple[bytes, ...]) -> bool:
    """Whether the database, scanned directly (no fallback in between), reports its first word in a text holding it."""
    seen: list[int] = []

    def on_match(index: int, _start: int, _end: int, _flags: int, _ctx: Any) -> None:
        seen.append(index)

    try:
        db.scan(b"\n" + words[0] + b"\n", match_event_handler=on_match)
    except Exception:
        return False
    return 0 in seen


def _first_end(anchors: tuple[bytes, ...], data: bytes, lo: int, hi: int) -> int:
    """What the native finder returns, with one `bytes.find` per literal (each literal's first occurrence is also
    its earliest-ending one)."""
    best = -1
    for anchor in anchors:
        i = data.find(anchor, lo, hi)
        if i >= 0 and (best < 0 or i + len(anchor) - 1 < best):
            best = i + len(anchor) - 1
    return best


def _build(anchors: tuple[bytes, ...]) -> LiteralFinder | None:
    native = _native_database("lines", anchors)
    if native is None:
        return None
    hyperscan, db = native
    terminated = hyperscan.ScanTerminated
    # per-call state goes through the scan's context (no shared list: a finder may be called from several threads)
    def on_match(_id: int, _start: int, end: int, _flags: int, found: list[int]) -> bool:
        found.append(end)
        return True  # stop: the first match reported has the smallest end offset

    overlap = max(len(a) for a in anchors) - 1
    view_of: list[tuple[bytes | None, memoryview | None]] = [(None, None)]

    def finder(data: bytes, lo: int, hi: int) -> int:
        # a scan costs time in proportion to the length it is given, even when the first match stops it (measured:
        # 365 us for 8 MiB with a match in the first line, 3 us for 4 KiB), so the range is scanned in windows that
        # double while nothing is found; consecutive windows overlap by the longest literal less one byte, so a match
        # across a window's end lies whole in the next window, and the first window holding a match holds the
        # earliest-ending one
        held = view_of[0]  # read once: another thread may replace it
        if held[0] is not data:
            held = view_of[0] = (data, memoryview(data))
        view = held[1]
        assert view is not None
        start = lo
        least = 2 * (overlap + 1)  # a window holds the longest literal whole, and moves on by at least its length
        width = max(FIRST_WINDOW, least)
        while start < hi:
            stop = min(hi, start + width)
            found: list[int] = []
            try:
                db.scan(view[start:stop], match_event_handler=on_match, context=found)  # type: ignore[type-var]
            except terminated:
                pass
            except Exception:  # e.g. the scratch in use by another thread: the same answer, one pass per literal
                return _first_end(anchors, data, lo, hi)
            if found:
                return start + found[0] - 1
            if stop >= hi:
                break
            start = max(start + 1, stop - overlap)
            width = max(min(width * 2, MAX_WINDOW), least)
        return -1

    try:  # a CPU the library cannot run on fails here, not in the middle of a log
        if finder(b"x" + anchors[0] + b"\n", 0, len(anchors[0]) + 2) != len(anchors[0]):
            return None
    except Exception:
        return None
    return finder


LineFinder = Callable[[bytes, int, int], "list[tuple[int, int]] | None"]
"""`finder(data, lo, hi)`: the lines (start, end) holding a literal that lies wholly in `data[lo:hi]`, in order (`end`
is the line's newline, or the data's end), or None when the native search failed (use the pure-Python passes)."""

_LINE_CACHE: dict[tuple[bytes, ...], LineFinder | None] = {}


def native_line_finder(anchors: tuple[bytes, ...]) -> LineFinder | None:
    """A finder of every line holding one of `anchors` in a range, in one native pass over the range; or None.

    `native_finder` stops at the first match and is called again after each line found: right for the body, where
    lines with an anchor are rare, but ~7,600 scans of 16 KiB windows for the 2 MiB head of a busy server log (most
    of its lines hold one of the 190 anchors). This one takes every match of the range in one scan (20,800 matches
    of the head in ~5 ms) and turns them into lines: the same lines, since a line is found exactly when it holds a
    match lying wholly in the range."""
    return _memoised(_LINE_CACHE, anchors, _build_lines, per_line=True)


def _build_lines(anchors: tuple[bytes, ...]) -> LineFinder | None:
    if native_finder(anchors) is None:  # the same checks (package, CPU, a scan that finds its first word)
        return None
    native = _native_database("lines", anchors)
    if native is None:
        return None
    _, db = native

    def on_match(_id: int, _start: int, end: int, _flags: int, found: list[int]) -> None:
        found.append(end)

    def finder(data: bytes, lo: int, hi: int) -> list[tuple[int, int]] | None:
        if hi <= lo:
            return []
        ends: list[int] = []  # per call (the scan's context): safe from several threads
        try:
            db.scan(memoryview(data)[lo:hi], match_event_handler=on_match, context=ends)
        except Exception:
            return None
        ends.sort()
        lines: list[tuple[int, int]] = []
        size = len(data)
        line_end = -1
        for e in ends:
            i = lo + e - 1  # the match's last byte
            if i < line_end:  # on the line just found
                continue
            line_end = data.find(b"\n", i)
            line_end = size if line_end < 0 else line_end
            lines.append((data.rfind(b"\n", 0, i) + 1, line_end))
        return lines

    return finder


KeyFinder = Callable[[bytes], "frozenset[str] | None"]
"""`finder(line)`: the phrases `re.finditer` of the phrases' alternation would find on the line (non-overlapping, the
leftmost first, the longest at each place), or None when the native search failed for this line (run the regex)."""

_KEY_CACHE: dict[tuple[bytes, ...], KeyFinder | None] = {}
_NO_KEYS: frozenset[str] = frozenset()


def native_key_finder(words: tuple[bytes, ...]) -> KeyFinder | None:
    """A one-pass finder of which of `words` (literal phrases) a line holds, or None (use the regex)."""
    return _memoised(_KEY_CACHE, words, _build_keys, per_line=False)


def _build_keys(words: tuple[bytes, ...]) -> KeyFinder | None:
    native = _native_database("keys", words)
    if native is None:
        return None
    _, db = native
    lens = [len(w) for w in words]
    texts = [w.decode("utf-8", "replace") for w in words]
    def on_match(index: int, _start: int, end: int, _flags: int, found: list[tuple[int, int, int]]) -> None:
        size = lens[index]
        found.append((end - size, -size, index))  # every occurrence of every phrase, overlapping ones included

    def finder(line: bytes) -> frozenset[str] | None:
        found: list[tuple[int, int, int]] = []  # per call (the scan's context): safe from several threads
        try:
            db.scan(line, match_event_handler=on_match, context=found)
        except Exception:
            return None
        if not found:
            return _NO_KEYS
        if len(found) == 1:
            return frozenset((texts[found[0][2]],))
        # what the alternation's finditer keeps: from the left, the longest phrase at the leftmost place, then on
        # from its end (a phrase overlapping one already taken is not a match of its own)
        found.sort()
        keys: set[str] = set()
        pos = 0
        for start, neg_size, index in found:
            if start >= pos:
                keys.add(texts[index])
                pos = start - neg_size
        return frozenset(keys)

    try:
        if finder(words[0]) != frozenset((texts[0],)):
            return None
    except Exception:
        return None
    return finder


LineKeysFinder = Callable[[bytes, "list[tuple[int, int]]", int], "list[frozenset[str]] | None"]
"""`finder(data, lines, cap)`: for each line (start, end) of `lines` (in order, not overlapping), what `KeyFinder` gives
for `data[start:min(end, start + cap)]`, from one native scan of the range the lines span; None when the native
search failed (ask line by line)."""

_LINE_KEYS_CACHE: dict[tuple[bytes, ...], LineKeysFinder | None] = {}


def native_line_keys(words: tuple[bytes, ...]) -> LineKeysFinder | None:
    """The key phrases of many lines in one native pass, or None (ask `native_key_finder` line by line).

    One scan per candidate line costs ~3 us of call overhead whatever the line's length: on the head of a busy server
    log (thousands of candidate lines, most with no key phrase at all) the scans of the whole range at once find the
    same phrases for a fraction of it. None where a phrase holds a newline (a match could then span two lines)."""
    return _memoised(_LINE_KEYS_CACHE, words, _build_line_keys, per_line=True)


def _build_line_keys(words: tuple[bytes, ...]) -> LineKeysFinder | None:
    if native_key_finder(words) is None:  # the same checks (package, CPU, a scan that finds its first word)
        return None
    native = _native_database("keys", words)
    if native is None:
        return None
    _, db = native
    lens = [len(w) for w in words]
    texts = [w.decode("utf-8", "replace") for w in words]

    def on_match(index: int, _start: int, end: int, _flags: int, found: list[tuple[int, int, int]]) -> None:
        size = lens[index]
        found.append((end - size, -size, index))

    def finder(data: bytes, lines: list[tuple[int, int]], cap: int) -> list[frozenset[str]] | None:
        if not lines:
            return []
        lo = lines[0][0]
        hi = lines[-1][1]
        found: list[tuple[int, int, int]] = []  # per call (the scan's context): safe from several threads
        try:
            db.scan(memoryview(data)[lo:hi], match_event_handler=on_match, context=found)
        except Exception:
            return None
        found.sort()  # by start, the longest first: the order `KeyFinder` reads one line's matches in
        out: list[frozenset[str]] = []
        k = 0
        count = len(found)
        for start, end in lines:
            start -= lo
            stop = min(end, start + lo + cap) - lo  # the line as `KeyFinder` is given it
            while k < count and found[k][0] < start:  # matches on lines that are not asked about
                k += 1
            keys: set[str] | None = None
            pos = start
            while k < count and found[k][0] < stop:
                m_start, neg_size, index = found[k]
                k += 1
                if m_start - neg_size > stop:  # past the cut of an over-long line: not in what was asked
                    continue
                if m_start >= pos:  # what the alternation's finditer keeps (see `KeyFinder`)
                    if keys is None:
                        keys = set()
                    keys.add(texts[index])
                    pos = m_start - neg_size
            out.append(_NO_KEYS if keys is None else frozenset(keys))
        return out

    return finder


PresenceFinder = Callable[[bytes], "set[int] | None"]
"""`finder(text)`: the indices of the phrases that occur in `text` (anywhere, overlaps included), or None when the
native search failed for this text (test each phrase with `in`)."""

_PRESENCE_CACHE: dict[tuple[bytes, ...], PresenceFinder | None] = {}


def native_presence(words: tuple[bytes, ...]) -> PresenceFinder | None:
    """A one-pass test of which of `words` occur in a text, or None (test each with `in`)."""
    return _memoised(_PRESENCE_CACHE, words, _build_presence, per_line=False)


def _build_presence(words: tuple[bytes, ...]) -> PresenceFinder | None:
    # one report per phrase and scan: all that is asked is whether it occurs
    native = _native_database("presence", words, single_match=True)
    if native is None:
        return None
    _, db = native

    def on_match(index: int, _start: int, _end: int, _flags: int, found: set[int]) -> None:
        found.add(index)

    def finder(text: bytes) -> set[int] | None:
        found: set[int] = set()  # per call (the scan's context): safe from several threads
        try:
            db.scan(text, match_event_handler=on_match, context=found)
        except Exception:
            return None
        return found

    try:
        if finder(b"." + words[0]) != {0}:
            return None
    except Exception:
        return None
    return finder


LinesPresenceFinder = Callable[["list[str]"], "list[set[int]] | None"]
"""`finder(texts)`: for each text, the indices of the phrases that occur in it (what `PresenceFinder` gives for its
UTF-8 bytes), from one scan of the texts joined; None when the native search failed or a text holds a newline (ask
text by text)."""

_LINES_PRESENCE_CACHE: dict[tuple[bytes, ...], LinesPresenceFinder | None] = {}


def native_presence_lines(words: tuple[bytes, ...]) -> LinesPresenceFinder | None:
    """Which of `words` occur in each of many texts, in one native pass; or None (test text by text).

    explain-oom counts, per hit line, which engines' words it holds: one scan per line costs ~3 us of call overhead,
    thousands of times on the head of a busy server log; the lines joined by newlines are scanned at once (no phrase
    holds a newline, so every match lies inside one line)."""
    return _memoised(_LINES_PRESENCE_CACHE, words, _build_presence_lines, per_line=True)


def _build_presence_lines(words: tuple[bytes, ...]) -> LinesPresenceFinder | None:
    if native_presence(words) is None:  # the same checks (package, CPU, a scan that finds its first word)
        return None
    native = _native_database("presence-all", words)
    if native is None:
        return None
    _, db = native

    def on_match(index: int, start: int, end: int, _flags: int, found: list[tuple[int, int]]) -> None:
        found.append((end, index))

    def finder(texts: list[str]) -> list[set[int]] | None:
        if not texts:
            return []
        blob = "\n".join(texts).encode("utf-8", "surrogatepass")  # UTF-8 of the join: the join of each one's
        if blob.count(b"\n") != len(texts) - 1:  # a text holding a newline: the lines would not be the texts
            return None
        found: list[tuple[int, int]] = []
        try:
            db.scan(blob, match_event_handler=on_match, context=found)
        except Exception:
            return None
        out: list[set[int]] = [set() for _ in texts]
        if not found:
            return out
        found.sort()
        line = 0
        line_end = blob.find(b"\n")
        for end, index in found:
            while line_end >= 0 and end > line_end:  # the match's last byte lies past this line's newline
                line += 1
                line_end = blob.find(b"\n", line_end + 1)
            out[line].add(index)
        return out

    return finder
