"""Classify a log's memory failure: one scan, the catalogue's signatures, one root cause with its numbers.

How it works (docs/explain-oom.md has the long form):
1. Scan (`scan_log`): the log is read in blocks (reader.py). Each block is searched for a few literal
   *failure anchors* (`bytes.find`); only lines containing one are looked at, and only those that
   contain one of the catalogue's key phrases (one compiled alternation) become hits. The first
   `head_bytes` of the log and a window around every failure hit are searched with *all* anchors
   (start-up lines, frames, settings). Line numbers are counted with `bytes.count`.
2. Events: each hit is matched against the signatures whose keys it contains; patterns give facts.
   Frames, progress markers, hints, the engine, its version and the printed settings are collected
   on the way.
3. Incidents: failure events close to each other (`INCIDENT_GAP_LINES`) form one incident. The root
   incident is the first with a strong failure (weight >= `STRONG_WEIGHT`), else the first at all. In
   it the highest-weight event is the root; its rules (`refine`) decide the final label from facts,
   hints and the phase; its fixes are computed from the facts.
Nothing here names a particular message: that is all in catalogue.yaml.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import io
import itertools
import os
import re
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO, cast

from vramctl.core.errors import BadInputError
from vramctl.diagnose.catalogue import LABELS, PHASES, Catalogue, Fix, Signature, load_catalogue, trie_regex
from vramctl.diagnose.facts import FactValue, convert, evaluate, fill, read_setting
from vramctl.diagnose.fixvalues import VALUE_NOTE, complete_fixes, foreign_flag, plain_value
from vramctl.diagnose.literals import (
    native_finder,
    native_key_finder,
    native_line_finder,
    native_line_keys,
    native_presence,
    native_presence_lines,
)
from vramctl.diagnose.reader import (
    BINARY_SAMPLE_BYTES,
    Block,
    LogLine,
    ScanStats,
    TruncatedInputError,
    check_text,
    clean_line,
    iter_blocks,
    make_line,
    split_prefixes,
)

STRONG_WEIGHT = 30
"""A failure event at least this heavy can be a root ahead of earlier weak ones (generic exceptions)."""
INCIDENT_GAP_LINES = 150
"""Failure events at most this many lines apart belong to one incident (one traceback, one crash)."""
_BELOW_ERROR_RE = re.compile(r"(?<![\w-])(?:WARNING|WARN|INFO|DEBUG|TRACE)(?![\w-])")
"""A logging level below ERROR in a line's prefix: a weak failure there (an exception a component caught and logged as a
warning, e.g. vLLM 0.32's chat-template warm-up `Tokenizer not available when skip_tokenizer_init=True`) never
outranks a failure logged as an error or printed bare."""
ERROR_LINE_SIGNATURE = "error-log-line"
TOLD_FAILURE_HINT = "words_failed"
TOLD_FAILURE_LINES = 3
"""A report's title and first lines: failure words there describe the incident the report is about."""
_TOLD_HINTS = ("words_start_died", "words_stall")
"""The start-up and stall words that, on a report's first lines, tell a failure too (`_told_other_failure`)."""
_NOT_AN_INCIDENT_RE = re.compile(
    r"\?\s*$|^\W*(?:what|why|how|which|if|whether)\b|"
    r"\b(?:no|nothing|without|never|not|n't|didn't|doesn't|won't)\s+(?:an?\s+|any\s+)?(?:errors?|fail\w*|crash\w*|exceptions?)\b|"
    r"\b(?:if|in case|when)\b[^.]{0,60}\b(?:fails?|errors?|crash(?:es)?)\b|"
    r"\b(?:errors?|fail(?:ures|ed|s)?|crash(?:es)?|exceptions?)\s*[:=]\s*0\b",
    re.IGNORECASE,
)
"""A question, a denial, advice or a zero count (`Errors: 0`) on the line that holds the failure words: no incident."""
_PROGRAM_OUTPUT_RE = re.compile(
    r"\b(?:[A-Z][A-Za-z]*)?Warning\b|"
    r"\bslow (?:image |video )?(?:processor|tokenizer)s?\b|"
    r"(?i:log(?:ging)?[_-]?level)\s*[= ]\s*['\"]?(?i:error|critical)\b|"
    r"\b(?i:errors?|fail(?:ures|ed|s)?|crash(?:es)?|exceptions?)\b[\w ]{0,24}[:=]\s*0\b|"
    r"\b(?:server_args=|[A-Z]\w*Args\(|Namespace\()|non-default args|with config:"
)
"""A program's own line whose failure words state no failure: a Python warning (`…: UserWarning: … not supported`,
torch's `Warning: …`), transformers' `Using a slow image processor`, a logging level set to error
(`--uvicorn-log-level error`, `VLLM_LOGGING_LEVEL=ERROR`), a zero count (`Failed requests: 0`), an engine's dump of
its settings (SGLang's `server_args=ServerArgs(…, crash_dump_folder=None, …)`, vLLM's `Namespace(…)`, `non-default
args:`, `… with config: …`), whose field names hold the failure words."""
GROWTH_HINT = "words_growth"
_NO_GROWTH_RE = re.compile(
    r"(?i:\b(?:not|no|isn't|wasn't|without)\s+(?:an?\s+|any\s+)?(?:(?:gpu|host|cpu)\s+)?memory[ -]leak|"
    r"\blimits?\b[^.;]{0,30}\bunbounded\b|\bunbounded\b[^.;]{0,12}\bno (?:memory )?limits?\b)"
)
"""A line that denies the growth (`not a memory leak`) or says unbounded of a limit (`memory limit is unbounded (no
limits set)`): no `words_growth` hint from it."""
_AT_ERROR_RE = re.compile(r"(?<![\w-])(?:ERROR|CRITICAL|FATAL)(?![\w-])")
"""A logging level of ERROR or above in a line's prefix."""
_TRACEBACK_STARTS = ('File "', "Traceback (most recent call last)")
_BARE_ERROR_RE = re.compile(r"(?:ERROR|CRITICAL)(?::[\w.]*:|:? +)\S|FAILED \S+::\S")
"""Python logging's default format (`ERROR:root:msg`) and pytest's failed test line (`FAILED tests/x.py::test_a`)."""
CONTEXT_BEFORE_LINES = 200
"""Frames and hints this many lines before an incident's first event belong to it."""
TITLE_LINES = 2
"""A failure on the log's first lines is a report's title or summary: whole-log hints below it still describe it."""
MAX_OTHER_FAILURES = 20
MAX_KEPT_TEXT = 2000
"""Characters of a line kept for evidence (patterns see the whole line, up to 64 KiB)."""
MAX_EVIDENCE = 10
ENGINE_BATCH_LINES = 4096
"""Hit lines whose engine words are looked up in one native scan (`_Analyser._engine`)."""


# --------------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True, slots=True)
class Evidence:
    line: int
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "text": self.text}


@dataclass(frozen=True, slots=True)
class FixAdvice:
    action: str
    flag: str | None
    value: str | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        """`value` is a JSON number when it is one (`0.85`, `4096`), else the text (`expandable_segments:True`)."""
        return {
            "action": self.action,
            "flag": self.flag,
            "value": json_value(self.value),
            "reason": self.reason,
        }


def json_value(value: str | None) -> str | int | float | None:
    """A fix value as JSON: numbers as numbers (no thousands separators), other values as text."""
    if value is None:
        return None
    text = plain_value(value)
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    if re.fullmatch(r"[+-]?\d+\.\d+", text):
        return float(text)
    return text


@dataclass(frozen=True, slots=True)
class OtherFailure:
    cause: str
    line: int
    text: str
    signature: str

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause, "line": self.line, "text": self.text, "signature": self.signature}


@dataclass(frozen=True)
class Diagnosis:
    """The answer for one log. `cause` is a taxonomy label; `phase` a taxonomy phase."""

    cause: str
    phase: str
    confidence: str
    summary: str
    why: tuple[str, ...]
    evidence: tuple[Evidence, ...]
    facts: Mapping[str, FactValue]
    fixes: tuple[FixAdvice, ...]
    do_not: tuple[str, ...]
    other_failures: tuple[OtherFailure, ...]
    engine: str | None
    engine_version: str | None
    signature: str | None
    what: str | None = None
    """For `not-oom`: what the failure is instead."""
    phase_inferred: bool = False
    lines_read: int = 0
    bytes_read: int = 0
    warnings: tuple[str, ...] = ()
    source: str = ""

    @property
    def found_failure(self) -> bool:
        return self.cause != "no-failure"

    @property
    def is_memory_failure(self) -> bool:
        return self.cause not in ("no-failure", "not-oom")

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "cause": self.cause,
            "phase": self.phase,
            "phase_inferred": self.phase_inferred,
            "confidence": self.confidence,
            "summary": self.summary,
            "what": self.what,
            "why": list(self.why),
            "signature": self.signature,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "evidence": [e.to_json() for e in self.evidence],
            "facts": dict(self.facts),
            "fixes": [f.to_json() for f in self.fixes],
            "do_not": list(self.do_not),
            "other_failures": [o.to_json() for o in self.other_failures],
            "lines_read": self.lines_read,
            "bytes_read": self.bytes_read,
            "warnings": list(self.warnings),
        }


def _fix_advice(action: str, flag: str, value: str, reason: str) -> FixAdvice:
    return FixAdvice(action=action, flag=flag, value=value, reason=reason)


def _completed_fixes(
    cause: str,
    phase: str,
    names: dict[str, Any],
    engine: str | None,
    fixes: list[FixAdvice],
    version: str | None,
) -> list[FixAdvice]:
    """The fixes with a number where the label's knobs give one (fixvalues.complete_fixes), at most five; `version`
    (the release the log names) decides the engine's defaults."""
    return complete_fixes(cause, phase, names, engine, fixes, _fix_advice, version)[:5]


def _vllm_release(engine_version: tuple[str, str] | None) -> str | None:
    """The vLLM release of an (engine, version) pair, None for another engine's: vLLM's defaults follow it."""
    return engine_version[1] if engine_version is not None and engine_version[0] == "vllm" else None


def _running_version(an: _Analyser, end_line: int) -> tuple[str, str] | None:
    """(engine, version) of the run that failed: the last version printed up to `end_line`, else the log's first."""
    running = [v for v in an.versions if v[0] <= end_line]
    return (running[-1][1], running[-1][2]) if running else an.engine_version


# --------------------------------------------------------------------------------------------------
# 0. The source inventory (vramctl/diagnose/inventory.yaml) beneath the catalogue

INVENTORY_SIGNATURE = "inventory-message"
"""The catalogue signature an inventory match becomes (weight just above the generic vocabulary's floor)."""
INVENTORY_KEYS: frozenset[str] = frozenset({"<inventory>"})
INVENTORY_LOOKUPS = 50_000
"""Keyless candidate lines tested against the inventory's phrases per scan (each test costs microseconds)."""
"""The key set of a line that no catalogue key names but the inventory's phrases do (checked by identity)."""
# the inventory's value names -> explain-oom's fact names
_INVENTORY_NAMES = {
    "tried_bytes": "requested_bytes",
    "total_bytes": "total_bytes",
    "free_bytes": "free_bytes",
    "allocated_bytes": "allocated_bytes",
    "reserved_unallocated_bytes": "reserved_unallocated_bytes",
    "reserved_bytes": "reserved_bytes",
    "this_process_bytes": "this_process_bytes",
    "other_process_bytes": "other_process_bytes",
    "size_bytes": "requested_bytes",
    "max_model_len": "max_model_len",
}


@functools.lru_cache(maxsize=1)
def _inventory_anchors() -> tuple[bytes, ...]:
    """The inventory's anchor phrases of memory failures, lower-case bytes (the cheap test before `match`)."""
    try:
        from vramctl.diagnose.inventory import load_inventory
    except ImportError:  # pragma: no cover - the inventory ships with the package
        return ()
    anchors = {
        a.lower().encode()
        for entry in load_inventory(check=False)
        if entry.facts is not None and entry.facts.failure
        for a in entry.anchors
    }
    return tuple(sorted(anchors))


# words one of which every failure phrase of the inventory contains (checked before the inventory is loaded: a
# clean log never pays for loading it). Sixteen `bytes.find` calls cost a fraction of SRE's search for their
# alternation, which tries a match at every position of the line (~8 us on a 300-byte line). `find`, not `in`: on
# CPython 3.11 `word in raw` first tries `word` as an integer and raises and clears a TypeError (~1.5 us a test).
_INVENTORY_PREGATE_WORDS = (
    b"emory", b"rror", b"Kill", b"kill", b"KILL", b"SIG", b"OOM", b"oom",
    b"lloc", b"ail", b"137", b"space", b"full", b"insufficient", b"blocks", b"created",
)  # fmt: skip


def _has_pregate_word(raw: bytes) -> bool:
    """Whether a line holds one of `_INVENTORY_PREGATE_WORDS`."""
    find = raw.find
    # a loop, not `any()` of a generator: half the time a line (~2,000 lines a run)
    for word in _INVENTORY_PREGATE_WORDS:  # noqa: SIM110
        if find(word) >= 0:
            return True
    return False


def _inventory_gate(raw: bytes) -> bool:
    """Whether a line holds one of the inventory's failure phrases: substring tests on the lower-cased line (an
    alternation regex with IGNORECASE costs milliseconds a line; these ~150 `find` tests cost microseconds)."""
    if not _has_pregate_word(raw):
        return False
    anchors = _inventory_anchors()
    if not anchors:
        return False
    find = raw.lower().find
    return any(find(a) >= 0 for a in anchors)


def _inventory_facts(text: str) -> dict[str, FactValue] | None:
    """The facts of a line the inventory maps to a memory failure: its numbers, label and phase; None otherwise."""
    from vramctl.diagnose.inventory import match

    found = match(text)
    if found is None or not found.failure:
        return None
    facts: dict[str, FactValue] = {"inventory_id": found.entry.id}
    if found.label:
        facts["inventory_label"] = found.label
    if found.phase:
        facts["inventory_phase"] = found.phase
    if found.kind:
        facts["inventory_kind"] = found.kind
    for name, value in found.values.items():
        mapped = _INVENTORY_NAMES.get(name)
        if mapped is not None and isinstance(value, (int, float)):
            facts[mapped] = int(value) if mapped.endswith("_bytes") else value
    return facts


# --------------------------------------------------------------------------------------------------
# 1. The scan


@dataclass(slots=True)
class Hit:
    line: LogLine
    keys: frozenset[str]
    following: tuple[str, ...]
    """The cleaned text of the next lines (for messages that wrap)."""


def _following(data: bytes, pos: int, count: int) -> tuple[str, ...]:
    out: list[str] = []
    size = len(data)
    while len(out) < count and pos < size:
        end = data.find(b"\n", pos)
        end = size if end < 0 else end
        out.append(split_prefixes(clean_line(data[pos:end][:4096]))[1].strip())
        pos = end + 1
    return tuple(out)


class _LineCounter:
    """Line numbers of positions in a block, counting newlines incrementally."""

    def __init__(self, block: Block) -> None:
        self.block = block
        self.data = block.data
        self.ref_pos = 0
        self.ref_index = 0

    def number_at(self, pos: int) -> int:
        if pos < self.ref_pos:
            return self.block.number(self.data.count(b"\n", 0, pos))
        self.ref_index += self.data.count(b"\n", self.ref_pos, pos)
        self.ref_pos = pos
        return self.block.number(self.ref_index)


FIND_MIN_ANCHOR = 5
"""A literal anchor this long is searched with `bytes.find`, a shorter one with SRE's literal search (each the faster
for its length on megabyte blocks: docs/perf/explain-oom.md)."""
TRIE_MIN_ANCHORS = 8
"""More anchors than this are searched as one trie alternation; fewer (the failure anchors) one literal each."""


class _Scanner:
    def __init__(self, cat: Catalogue) -> None:
        self.cat = cat
        self.told_only = told_only_keys(cat)
        self.failure_keys = (
            frozenset(
                key for sig in cat.signatures if sig.kind in ("failure", "consequence") for key in sig.keys
            )
            | INVENTORY_KEYS
        )
        self._inventory_budget = INVENTORY_LOOKUPS
        self.multiline_keys = frozenset(key for sig in cat.signatures if sig.multiline for key in sig.keys)
        self.window = max((sig.multiline for sig in cat.signatures), default=0)
        # one compiled literal per anchor in the pure-Python fallback (SRE's literal search runs ~25 % faster than
        # `bytes.find` on megabyte blocks: docs/perf/explain-oom.md), made on first use: the native pass needs none
        self._searchers: dict[bytes, Callable[..., re.Match[bytes] | None]] = {}
        self._trie_searchers: dict[tuple[bytes, ...], Callable[..., re.Match[bytes] | None]] = {}
        # the key phrases of a candidate line in one native pass (Hyperscan) when it can run, else the trie regex
        self._key_finder = native_key_finder(cat.key_words)
        # and of all the candidate lines of a range at once (the head, the tail, the windows: `_run`)
        self._line_keys = native_line_keys(cat.key_words) if self._key_finder is not None else None

    def _candidates(self, data: bytes, lo: int, hi: int, anchors: tuple[bytes, ...]) -> list[tuple[int, int]]:
        """The lines (start, end) holding an anchor that starts at or after `lo` and ends by `hi`, in order."""
        size = len(data)
        if len(anchors) > TRIE_MIN_ANCHORS:
            # many anchors (the head, the tail, the windows), whose lines are dense there: every match of the range
            # in one native pass (the same lines as the finder below, resumed after each line found)
            line_finder = native_line_finder(anchors)
            found_lines = line_finder(data, lo, hi) if line_finder is not None else None
            if found_lines is not None:
                return found_lines
        lines: list[tuple[int, int]] = []
        native = native_finder(anchors)
        if native is not None:
            # one native pass for all the anchors (Hyperscan), resumed after each line found: the same lines as the
            # passes below (anchors hold no newline, so the earliest-ending match is on the earliest line)
            i = native(data, lo, hi)
            while i >= 0:
                end = data.find(b"\n", i)
                end = size if end < 0 else end
                lines.append((data.rfind(b"\n", 0, i) + 1, end))
                i = native(data, end + 1, hi) if end + 1 < hi else -1
            return lines
        if len(anchors) > TRIE_MIN_ANCHORS:
            # many anchors (the head, the tail, the windows): one pass of their trie alternation, resumed after
            # each line found, instead of one literal pass per anchor (146 of them: 5x faster on a 2 MiB head).
            # Every line holding an anchor is found: a match that starts earlier on the line is on the line too.
            search = self._trie_searchers.get(anchors)
            if search is None:
                search = self._trie_searchers[anchors] = re.compile(trie_regex(list(anchors))).search
            m = search(data, lo, hi)
            while m is not None:
                i = m.start()
                end = data.find(b"\n", i)
                end = size if end < 0 else end
                lines.append((data.rfind(b"\n", 0, i) + 1, end))
                m = search(data, end + 1, hi) if end + 1 < hi else None
            return lines
        found: dict[int, int] = {}
        for anchor in anchors:
            if len(anchor) >= FIND_MIN_ANCHOR:
                # `bytes.find` skips further with a longer needle: per pass 10-25 % faster than SRE for `emory`, `atchdog`
                i = data.find(anchor, lo, hi)
                while i >= 0:
                    end = data.find(b"\n", i)
                    end = size if end < 0 else end
                    found[data.rfind(b"\n", 0, i) + 1] = end
                    i = data.find(anchor, end + 1, hi) if end + 1 < hi else -1
                continue
            search = self._searchers.get(anchor)
            if search is None:
                search = self._searchers[anchor] = re.compile(re.escape(anchor)).search
            m = search(data, lo, hi)
            while m is not None:
                i = m.start()
                start = data.rfind(b"\n", 0, i) + 1
                end = data.find(b"\n", i)
                end = size if end < 0 else end
                found[start] = end
                m = search(data, end + 1, hi) if end + 1 < hi else None
        return sorted(found.items())

    def _keys(self, data: bytes, start: int, end: int, found: frozenset[str] | None = None) -> frozenset[str]:
        """The catalogue key phrases on one line (empty for most lines); a line with none but with a failure
        anchor and one of the source inventory's phrases is handed to the inventory (`INVENTORY_KEYS`).
        `found`: the phrases already found on the line (by `_run`'s one scan of its range)."""
        keys = found
        raw = None
        if keys is None:
            raw = data[start : min(end, start + 65536)]
            keys = self._key_finder(raw) if self._key_finder is not None else None
            if keys is None:
                keys = frozenset(m.group().decode() for m in self.cat.key_regex.finditer(raw))
        if (keys and not keys <= self.told_only) or self._inventory_budget <= 0:
            return keys
        if raw is None:
            raw = data[start : min(end, start + 65536)]
        # (the candidate lines are those with a failure anchor, or any anchor in the head, the tail and the windows;
        # a log with a million keyless `Error` lines stops asking after INVENTORY_LOOKUPS of them)
        self._inventory_budget -= 1
        if _inventory_gate(raw):
            # a report's failure words alone (`Failed to CUDA host alloc …`) leave the line to the inventory as before
            return INVENTORY_KEYS | keys if keys else INVENTORY_KEYS
        return keys

    def _make(self, data: bytes, start: int, end: int, number: int, keys: frozenset[str]) -> Hit:
        raw = data[start : min(end, start + 65536)]
        following = _following(data, end + 1, self.window) if keys & self.multiline_keys else ()
        return Hit(make_line(number, raw), keys, following)

    def _hit(self, data: bytes, start: int, end: int, number: int) -> Hit | None:
        keys = self._keys(data, start, end)
        return self._make(data, start, end, number, keys) if keys else None

    def _run(
        self, data: bytes, counter: _LineCounter, lo: int, hi: int, anchors: tuple[bytes, ...]
    ) -> Iterator[tuple[Hit, int]]:
        """Hits among the lines that start in [lo, hi) and contain one of `anchors`, with their end."""
        lines = [(start, end) for start, end in self._candidates(data, lo, hi, anchors) if start >= lo]
        # the key phrases of all these lines from one native scan (None: line by line, as `_keys` does)
        found = self._line_keys(data, lines, 65536) if self._line_keys is not None else None
        for i, (start, end) in enumerate(lines):
            keys = self._keys(data, start, end, found[i] if found is not None else None)
            if keys:
                yield self._make(data, start, end, counter.number_at(start), keys), end

    def scan(
        self,
        source: str | os.PathLike[str] | BinaryIO,
        stats: ScanStats,
        *,
        head_bytes: int | None = None,
        tail_bytes: int | None = -1,
    ) -> Iterator[Hit]:
        """Hits in file order. `head_bytes` / `tail_bytes`: the start and end searched with all anchors
        (the catalogue's head and back window by default; None for none: a middle range of a file)."""
        cat = self.cat
        if tail_bytes == -1:
            tail_bytes = cat.back_bytes
        offset = 0  # content offset of the current block
        prev: Block | None = None
        prev_done = 0  # position in prev up to which lines were processed
        # content offset up to which all anchors are used (the head, and windows after failures)
        full_until = cat.head_bytes if head_bytes is None else head_bytes
        for block, last in _with_last(iter_blocks(source, stats)):
            data = block.data
            if block.truncated:
                hit = self._hit(data, 0, len(data), block.first_number)
                if hit is not None:
                    hit.line = LogLine(hit.line.number, hit.line.text, hit.line.raw, hit.line.process, True)
                    yield hit
                offset += len(data)
                prev, prev_done = None, 0
                continue
            size = len(data)
            counter = _LineCounter(block)
            done = 0  # lines that start before this position are processed
            # 1. the part of the block inside the head / a failure window: all anchors
            while full_until - offset > done:
                hi = min(size, full_until - offset)
                lo = done
                done = size if hi >= size else data.rfind(b"\n", 0, hi) + 1
                if done <= lo:
                    done = hi
                for hit, end in self._run(data, counter, lo, done, cat.all_anchors):
                    if hit.keys & self.failure_keys:
                        full_until = max(full_until, offset + end + cat.back_bytes)
                    yield hit
                if done >= size:
                    break
            # 2. the rest: failure anchors only, with a window of all anchors around each failure;
            # the end of the log (where a process that died left its last words) gets all anchors
            limit = size
            if last and tail_bytes is not None:
                limit = max(0, size - tail_bytes)
                limit = data.rfind(b"\n", 0, limit) + 1 if limit > 0 else 0
            pos = done
            while pos < limit:
                candidates = self._candidates(data, pos, limit, cat.failure_anchors)
                restart = None
                for start, end in candidates:
                    if start < pos:
                        continue
                    keys = self._keys(data, start, end)
                    if not keys:
                        continue
                    if not keys & self.failure_keys:
                        yield self._make(data, start, end, counter.number_at(start), keys)
                        pos = end + 1
                        continue
                    lo = start - cat.back_bytes
                    if lo < 0 and prev is not None:
                        yield from self._back_in_previous(prev, prev_done, -lo)
                        prev_done = len(prev.data)
                    lo = max(lo, pos)
                    if lo > pos:
                        lo = max(pos, data.rfind(b"\n", 0, lo) + 1)
                    for whit, _ in self._run(data, counter, lo, start, cat.all_anchors):
                        yield whit
                    yield self._make(data, start, end, counter.number_at(start), keys)
                    # the window after the failure: back to step 1 semantics from here
                    full_until = max(full_until, offset + end + 1 + cat.back_bytes)
                    restart = end + 1
                    break
                if restart is None:
                    break
                pos = restart
                while full_until - offset > pos and pos < size:
                    hi = min(size, full_until - offset)
                    lo = pos
                    pos = size if hi >= size else data.rfind(b"\n", 0, hi) + 1
                    if pos <= lo:
                        pos = hi
                    for hit, end in self._run(data, counter, lo, pos, cat.all_anchors):
                        if hit.keys & self.failure_keys:
                            full_until = max(full_until, offset + end + cat.back_bytes)
                        yield hit
            if pos < size and limit < size:
                for hit, _ in self._run(data, counter, max(pos, limit), size, cat.all_anchors):
                    yield hit
                pos = size
            prev, prev_done = block, max(done, pos)
            offset += size

    def _back_in_previous(self, prev: Block, prev_done: int, back: int) -> Iterator[Hit]:
        """The window before a failure near a block start reaches into the previous block."""
        pdata = prev.data
        lo = max(prev_done, len(pdata) - back)
        if lo > 0:
            lo = max(prev_done, pdata.rfind(b"\n", 0, lo) + 1)
        counter = _LineCounter(prev)
        for hit, _ in self._run(pdata, counter, lo, len(pdata), self.cat.all_anchors):
            yield hit


def _with_last(blocks: Iterator[Block]) -> Iterator[tuple[Block, bool]]:
    """Each block with whether it is the last one (one block of look-ahead)."""
    previous: Block | None = None
    try:
        for block in blocks:
            if previous is not None:
                yield previous, False
            previous = block
    except TruncatedInputError:
        if previous is not None:  # what was read before the cut is still scanned, as the end
            yield previous, True
        raise
    if previous is not None:
        yield previous, True


# --------------------------------------------------------------------------------------------------
# Parallel scan of a large regular file: contiguous ranges (cut at newlines), one process each.

PARALLEL_MIN_BYTES = 64 << 20
"""Below this a log is scanned in this process (starting workers costs more than it saves), unless
VRAMCTL_SCAN_WORKERS asks for workers."""
PARALLEL_RANGE_MIN_BYTES = 32 << 20
MAX_WORKER_HITS = 100_000
"""A range with more hits than this is scanned again in the parent, streaming (bounded memory)."""


class _RangeReader:
    """The bytes [start, end) of a file as a readable stream (just `read`, all the reader needs)."""

    def __init__(self, path: str, start: int, end: int) -> None:
        self._fh = open(path, "rb")  # noqa: SIM115 (closed in close())
        self._fh.seek(start)
        self._left = end - start
        self.name = path

    def read(self, size: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        n = self._left if size is None or size < 0 else min(size, self._left)
        data = self._fh.read(n)
        self._left -= len(data)
        return data

    def close(self) -> None:
        self._fh.close()


def _range_bounds(path: str, size: int, parts: int) -> list[tuple[int, int]]:
    """`parts` ranges covering the file, each starting at a line start."""
    cuts = [0]
    with open(path, "rb") as fh:
        for i in range(1, parts):
            pos = max(cuts[-1], size * i // parts)
            fh.seek(pos)
            while True:  # find the next newline without holding a long line in memory
                chunk = fh.read(1 << 16)
                if not chunk:
                    pos = size
                    break
                nl = chunk.find(b"\n")
                if nl >= 0:
                    pos += nl + 1
                    break
                pos += len(chunk)
            if pos < size and pos > cuts[-1]:
                cuts.append(pos)
    cuts.append(size)
    return [(a, b) for a, b in itertools.pairwise(cuts) if b > a]


def _scan_range(args: tuple[str, int, int, bool, bool]) -> tuple[int, int, int, list[Hit] | None]:
    """In a worker: (lines, bytes, over-long lines, hits or None when there were too many)."""
    path, start, end, first, last = args
    cat = load_catalogue()
    stats = ScanStats()
    hits: list[Hit] = []
    reader = _RangeReader(path, start, end)
    try:
        for hit in _Scanner(cat).scan(
            cast(BinaryIO, reader), stats, head_bytes=None if first else 0, tail_bytes=-1 if last else None
        ):
            hits.append(hit)
            if len(hits) > MAX_WORKER_HITS:
                return stats.lines, stats.bytes_read, stats.truncated_lines, None
    finally:
        reader.close()
    return stats.lines, stats.bytes_read, stats.truncated_lines, hits


def _parallel_plan(source: object) -> tuple[str, int, int] | None:
    """(path, size, workers) when a log is worth scanning in parallel, else None."""
    if not isinstance(source, (str, os.PathLike)) or os.fspath(source) == "-":
        return None
    path = os.fspath(source)
    import stat as stat_module

    try:
        st = os.stat(path)
        # a pipe or FIFO (`explain-oom <(kubectl logs …)`) is read once, by the streaming reader: reading its magic
        # here would consume the stream
        if not stat_module.S_ISREG(st.st_mode):
            return None
        with open(path, "rb") as fh:
            head = fh.read(BINARY_SAMPLE_BYTES)
    except OSError:
        return None
    magic = head[:2]
    if magic not in (b"\x1f\x8b", b"\xff\xfe", b"\xfe\xff"):
        check_text(head, path)  # the parallel ranges never pass through the reader's own check

    chosen = os.environ.get("VRAMCTL_SCAN_WORKERS", "")
    small = st.st_size < PARALLEL_MIN_BYTES and not (chosen.isdigit() and int(chosen) >= 2)
    # gzip and UTF-16 (byte-order mark) are read as one stream: byte ranges of them are not lines
    if not stat_module.S_ISREG(st.st_mode) or small or magic in (b"\x1f\x8b", b"\xff\xfe", b"\xfe\xff"):
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    # with fewer than 4 CPUs the workers only compete with each other (measured: docs/perf/explain-oom.md)
    workers = min(cpus, st.st_size // PARALLEL_RANGE_MIN_BYTES, 16) if cpus >= 4 else 1
    chosen = os.environ.get("VRAMCTL_SCAN_WORKERS", "")
    if chosen.isdigit() and int(chosen) >= 1:  # the user's choice (docs/explain-oom.md)
        workers = min(int(chosen), max(1, st.st_size // (1 << 20)), 64)
    if workers < 2:
        return None
    return path, st.st_size, workers


def _scan_parallel(path: str, size: int, workers: int, cat: Catalogue, stats: ScanStats) -> Iterator[Hit]:
    """Scan ranges in worker processes; yield their hits in file order with file line numbers."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ranges = _range_bounds(path, size, workers * 2)
    jobs = [(path, a, b, i == 0, i == len(ranges) - 1) for i, (a, b) in enumerate(ranges)]
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method)) as pool:
        base = 0
        for job, (lines, nbytes, cut, hits) in zip(jobs, pool.map(_scan_range, jobs), strict=True):
            if hits is None:  # too many hits to ship: stream this range here instead
                local = ScanStats()
                reader = _RangeReader(path, job[1], job[2])
                try:
                    for hit in _Scanner(cat).scan(
                        cast(BinaryIO, reader),
                        local,
                        head_bytes=None if job[3] else 0,
                        tail_bytes=-1 if job[4] else None,
                    ):
                        yield _shift(hit, base)
                finally:
                    reader.close()
            else:
                for hit in hits:
                    yield _shift(hit, base)
            base += lines
            stats.lines += lines
            stats.bytes_read += nbytes
            stats.truncated_lines += cut


def _shift(hit: Hit, base: int) -> Hit:
    if base:
        line = hit.line
        hit.line = LogLine(line.number + base, line.text, line.raw, line.process, line.truncated)
    return hit


def scan_log(
    source: str | os.PathLike[str] | BinaryIO,
    catalogue: Catalogue | None = None,
    stats: ScanStats | None = None,
) -> Iterator[Hit]:
    """The catalogue hits of a log, in file order (see the module docstring)."""
    cat = catalogue if catalogue is not None else load_catalogue()
    return _Scanner(cat).scan(source, stats if stats is not None else ScanStats())


# --------------------------------------------------------------------------------------------------
# 2. Events


@dataclass(slots=True)
class Event:
    sig_index: int
    line: int
    text: str
    facts: dict[str, FactValue]


@dataclass(slots=True)
class _Context:
    line: int
    kind: str  # "frame" | "hint" | "marker"
    value: str
    rank: int = 0
    phase: str | None = None
    text: str = ""
    done: str | None = None
    """For a marker: the phase it reports finished (where a log that ends on it stopped)."""
    yield_to: tuple[str, ...] = ()
    """For a frame: phases of a later marker that place the failure instead (`FrameRule.yield_to`)."""


@dataclass(slots=True)
class _Incident:
    events: list[Event] = field(default_factory=list)
    context: list[_Context] = field(default_factory=list)
    later_facts: list[tuple[int, str, FactValue]] = field(default_factory=list)
    """Fact lines printed while the incident is open (TRT-LLM prints the numbers after the error)."""

    @property
    def start(self) -> int:
        return self.events[0].line

    @property
    def end(self) -> int:
        return self.events[-1].line


# A copy from a fixed-width terminal pads each wrapped row with spaces to the next row: `of <29 spaces> which`,
# `by P <29 spaces> yTorch`. Whether a space belongs at the cut is unknowable (`of which` vs `PyTorch`), so such a
# line is read twice, the padding dropped and the padding made one space, and the numbers of both readings merged.
_WRAP_PADDING_RE = re.compile(r" {12,}")


def _read_facts(sig: Signature, texts: list[str]) -> dict[str, FactValue] | None:
    best: dict[str, FactValue] | None = None
    for text in texts:
        for pattern in sig.patterns:
            m = pattern.search(text)
            if m is None:
                continue
            facts: dict[str, FactValue] = {}
            units = dict(sig.units)
            for name, value in m.groupdict().items():
                if value is None:
                    continue
                try:
                    facts[name] = convert(value, units.get(name, "word"))
                except BadInputError:
                    continue
            if best is None or len(facts) > len(best):
                best = facts  # the pattern that reads the most numbers wins (torch 1.x vs 2.x wording)
    return best


def _match_signature(sig: Signature, hit: Hit) -> dict[str, FactValue] | None:
    texts = [hit.line.text]
    if sig.multiline and hit.following:
        texts.append(" ".join((hit.line.text, *hit.following[: sig.multiline])))
        # a fixed-width hard wrap (a terminal or a paste at 80-120 columns) splits words and numbers: `2.0` / `0 GiB`
        texts.append("".join((hit.line.text, *hit.following[: sig.multiline])))
    best = _read_facts(sig, texts)
    if "            " in hit.line.text and _WRAP_PADDING_RE.search(hit.line.text) is not None:
        for joiner in ("", " "):
            unwrapped = _read_facts(sig, [_WRAP_PADDING_RE.sub(joiner, hit.line.text)])
            if unwrapped is not None:
                best = dict(best or {})
                for name, value in unwrapped.items():
                    best.setdefault(name, value)
    return best


class _Analyser:
    def __init__(self, cat: Catalogue) -> None:
        self.cat = cat
        self.plan_source: str | os.PathLike[str] | None = None
        """The log's path when its deployment may be planned (planfacts.py); None for a stream."""
        self.root: _Incident | None = None
        self.fallback: _Incident | None = None
        self.current: _Incident | None = None
        self.recent: deque[_Context] = deque(maxlen=4000)
        self.global_facts: dict[str, tuple[int, FactValue]] = {}
        # every value a launch setting took (line, value): the one in force at the failure is chosen per root
        self.setting_history: dict[str, list[tuple[int, FactValue]]] = {}
        self.markers: list[_Context] = []
        self.marker_lines: list[int] = []  # the markers' line numbers (for bisect)
        self.engine_votes: dict[str, int] = {}
        engine_words = [(word.encode(), engine) for engine, words in cat.engines.items() for word in words]
        self._engine_word_owner = [engine for _, engine in engine_words]
        self._engine_finder = native_presence(tuple(word for word, _ in engine_words))
        # the lines' engine words are looked up in batches (one native scan for many lines); the votes are only read
        # by `engine()`, which takes in what is pending first
        self._engine_batch = (
            native_presence_lines(tuple(word for word, _ in engine_words)) if self._engine_finder is not None else None
        )
        self._engine_pending: list[str] = []
        self.engine_version: tuple[str, str] | None = None
        self.versions: list[tuple[int, str, str]] = []  # (line, engine, version) each time it changes
        self.other: list[tuple[_Incident, Event]] = []
        self.other_count = 0
        self.warned: set[int] = set()  # lines of weak failures logged below ERROR (they rank below any other failure)
        self.hint_keys = {word: name for name, words in cat.hints.items() for word in words}
        self.global_hint_keys = {word: name for name, words in cat.global_hints.items() for word in words}
        self.global_hints: dict[str, int] = {}  # hint -> first line
        self.global_hint_text: dict[str, str] = {}  # hint -> its first line's text
        self.told_below_error: set[str] = set()  # start / stall hints first seen in a record below ERROR
        self.marker_keys = {key: m for key, (m, _) in cat.marker_phrases.items()}
        self.marker_rank = {key: rank for key, (_, rank) in cat.marker_phrases.items()}
        self.version_keys = {key: v for v in cat.versions for key in v.keys}
        self.settings_keys = frozenset(cat.settings_keys)
        self.method_keys = frozenset(cat.method_keys)
        self.engine_order = list(cat.engines)
        self.fact_texts: dict[int, str] = {}
        self.failure_keys = frozenset(
            key for sig in cat.signatures if sig.kind in ("failure", "consequence") for key in sig.keys
        )
        self.inventory_index = next(
            (i for i, sig in enumerate(cat.signatures) if sig.id == INVENTORY_SIGNATURE), None
        )
        self.told_only_keys = told_only_keys(cat)

    # -- per hit
    def feed(self, hit: Hit) -> None:
        line = hit.line
        number = line.number
        text = line.text
        short = text[:MAX_KEPT_TEXT]  # what is kept for evidence: bounded, whatever the line length
        cat = self.cat
        told = hit.keys & self.told_only_keys
        if told:
            # a report's failure words (`words_failed`) that nothing else uses: a hint for the title lines, and the
            # line is read as if they were not there (no signature, marker or engine word; the inventory as before)
            self._told_hint(number, line.raw, text)
            rest = hit.keys - told
            if not rest:
                return
            hit = Hit(line, INVENTORY_KEYS if rest == INVENTORY_KEYS else rest, hit.following)
        self._engine(line.raw)
        # a line naming two versions (`sglang==0.1.17, vllm==0.4.3`): the first named wins (the line's keys are a set,
        # whose order changes from run to run). Looked up in the text, not among the line's keys: the key scan keeps
        # no phrase overlapping one it took (`Initializing a V1 LLM engine (v0.22.1)` holds the banner key and,
        # overlapping it, the version key `LLM engine (v`)
        version_keys = [key for key in self.version_keys if key in text]
        if len(version_keys) > 1:
            version_keys.sort(key=lambda k: (text.find(k) % (len(text) + 1), k))
        for key in version_keys:
            version = self.version_keys[key]
            if version is not None:
                m = version.pattern.search(text)
                if m is not None:
                    found = (version.engine, m.group("version"))
                    if self.engine_version is None:
                        self.engine_version = found
                    if (not self.versions or self.versions[-1][1:] != found) and len(self.versions) < 100:
                        self.versions.append((number, *found))
                    break
        if hit.keys & self.settings_keys:
            raw = line.raw
            for setting in cat.settings:
                if not any(word in raw for word in setting.words):  # its regex needs one of them: no match
                    continue
                value = read_setting(raw, setting.regex.compiled, setting.unit)
                if value is not None:
                    self.global_facts[setting.name] = (number, value)
                    history = self.setting_history.setdefault(setting.name, [])
                    if len(history) < 64:
                        history.append((number, value))
        frame = cat.frame_regex.search(text) if 'File "' in hit.keys else None
        if frame is None and hit.keys & self.method_keys:
            frame = cat.method_regex.search(text)
        if frame is not None:
            func = frame.group("func")
            file = frame.groupdict().get("file") or ""
            for rule in cat.frames:
                if rule.matches(func, file):
                    self._context(
                        _Context(number, "frame", func, rule.rank, rule.phase, short, yield_to=rule.yield_to)
                    )
                    if rule.hint:
                        self._context(_Context(number, "hint", rule.hint, text=short))
                    break
        for key in hit.keys:
            hint = self.hint_keys.get(key)
            if hint is not None and not (hint == GROWTH_HINT and _NO_GROWTH_RE.search(text) is not None):
                self._context(_Context(number, "hint", hint, text=short))
            ghint = self.global_hint_keys.get(key)
            if ghint == TOLD_FAILURE_HINT:
                self._told_hint(number, line.raw, text)
            elif ghint is not None and ghint not in self.global_hints:
                self.global_hints[ghint] = number
                self.global_hint_text[ghint] = short
                if ghint in _TOLD_HINTS and _record_below_error(line.raw, text):
                    self.told_below_error.add(ghint)  # a log's own record, not a report's words
            mark = self.marker_keys.get(key)
            if mark is not None:
                marker = _Context(number, "marker", key, phase=mark.phase, text=short, done=mark.done)
                # the later entry of the markers list wins for one line (kv-alloc after profiling, ...), whatever the
                # order the line's keys come in (a set: the order changes from run to run)
                if self.markers and self.markers[-1].line == number:
                    if self.marker_rank[key] >= self.marker_rank[self.markers[-1].value]:
                        self.markers[-1] = marker
                elif len(self.markers) < 100000:
                    self.markers.append(marker)
                    self.marker_lines.append(number)
        if hit.keys is INVENTORY_KEYS:
            inv_facts = _inventory_facts(text)
            index = self.inventory_index
            if inv_facts is not None and index is not None:
                self._event(Event(index, number, short, inv_facts))
            return
        strongest = 0
        # in catalogue order (the line's keys are a set, whose order changes from run to run)
        for index in sorted({i for key in hit.keys for i in cat.keys_to_signatures.get(key, ())}):
            sig = cat.signatures[index]
            facts = _match_signature(sig, hit)
            if facts is None:
                continue
            if sig.when is not None and not evaluate(sig.when, facts):
                continue
            if sig.id == ERROR_LINE_SIGNATURE and not _logged_at_error(line.raw, text):
                continue
            if sig.kind == "facts":
                for name, value in facts.items():
                    self.global_facts[name] = (number, value)
                    if self.current is not None and len(self.current.later_facts) < 200:
                        self.current.later_facts.append((number, name, value))
                if len(self.fact_texts) < 50000:
                    self.fact_texts[number] = short
                continue
            strongest = max(strongest, sig.weight)
            if sig.kind == "failure" and sig.weight < STRONG_WEIGHT and _logged_below_error(line.raw, text):
                self.warned.add(number)
            self._event(Event(index, number, short, facts))
        # a line whose catalogue keys gave no strong failure (a bare `ValueError: …`, a key whose pattern did not
        # match) is also looked up in the source inventory: its wording may be a memory failure the catalogue lacks
        if (
            strongest < STRONG_WEIGHT
            and self.inventory_index is not None
            and hit.keys & self.failure_keys
            and _inventory_gate(text.encode("utf-8", "replace"))
        ):
            inv_facts = _inventory_facts(text)
            if inv_facts is not None:
                self._event(Event(self.inventory_index, number, short, inv_facts))

    def _told_hint(self, number: int, raw: str, text: str) -> None:
        """A report's failure words on its first lines (`words_failed`); a log record below ERROR is not a report."""
        if number > TOLD_FAILURE_LINES or TOLD_FAILURE_HINT in self.global_hints or _record_below_error(raw, text):
            return
        if _PROGRAM_OUTPUT_RE.search(text) is not None:
            return  # a program's line, not a report's words: a later first line may still tell the failure
        self.global_hints[TOLD_FAILURE_HINT] = number
        self.global_hint_text[TOLD_FAILURE_HINT] = text[:MAX_KEPT_TEXT]

    def _engine(self, raw: str) -> None:
        if self._engine_batch is not None:
            self._engine_pending.append(raw)
            if len(self._engine_pending) >= ENGINE_BATCH_LINES:
                self._flush_engine()
            return
        self._engine_line(raw)

    def _flush_engine(self) -> None:
        pending, self._engine_pending = self._engine_pending, []
        found = self._engine_batch(pending) if self._engine_batch is not None and pending else None
        if found is None:  # the native search failed, or a line held a newline: line by line
            for raw in pending:
                self._engine_line(raw)
            return
        for indices in found:
            self._engine_vote(indices)

    def _engine_vote(self, indices: set[int]) -> None:
        owners = {self._engine_word_owner[i] for i in indices}
        for engine in self.cat.engines:
            if engine in owners:
                self.engine_votes[engine] = self.engine_votes.get(engine, 0) + 1

    def _engine_line(self, raw: str) -> None:
        if self._engine_finder is not None:
            # every engine's words in one native pass (a substring of the UTF-8 bytes is a substring of the text)
            found = self._engine_finder(raw.encode("utf-8", "surrogatepass"))
            if found is not None:
                self._engine_vote(found)
                return
        for engine, words in self.cat.engines.items():
            if any(word in raw for word in words):
                self.engine_votes[engine] = self.engine_votes.get(engine, 0) + 1

    def _context(self, item: _Context) -> None:
        self.recent.append(item)
        if self.current is not None and len(self.current.context) < 2000:
            self.current.context.append(item)

    def _event(self, event: Event) -> None:
        cur = self.current
        if cur is not None and event.line - cur.end > INCIDENT_GAP_LINES:
            self._close()
            cur = None
        if cur is None:
            cur = _Incident()
            cur.context = [c for c in self.recent if c.line >= event.line - CONTEXT_BEFORE_LINES]
            self.current = cur
        if len(cur.events) < 2000:
            cur.events.append(event)

    def _close(self) -> None:
        cur = self.current
        self.current = None
        if cur is None:
            return
        # a failure told only in a person's words (a title on top of the pasted log) is the root only when no
        # incident holds an engine's own failure message: it stays the fallback until one does
        strong = any(
            self.cat.signatures[e.sig_index].kind == "failure"
            and self.cat.signatures[e.sig_index].weight >= STRONG_WEIGHT
            and not self.cat.signatures[e.sig_index].report_words
            for e in cur.events
        )
        if self.root is None and strong:
            self.root = cur
            return
        if self.root is None and (
            self.fallback is None or self._failure_rank(cur) > self._failure_rank(self.fallback)
        ):
            if self.fallback is not None:  # the consequence-only (or warned-only) incident becomes a later failure
                top = _top_event(self.cat, self.fallback, self.warned)
                self.other_count += 1
                if top is not None and len(self.other) < MAX_OTHER_FAILURES:
                    self.other.append((self.fallback, top))
            self.fallback = cur
            return
        # a later failure: keep its top event for other_failures
        top = _top_event(self.cat, cur, self.warned)
        self.other_count += 1
        if top is not None and len(self.other) < MAX_OTHER_FAILURES:
            self.other.append((cur, top))

    def _has_failure(self, incident: _Incident) -> bool:
        return any(self.cat.signatures[e.sig_index].kind == "failure" for e in incident.events)

    def _failure_rank(self, incident: _Incident) -> int:
        """2: a failure logged as an error (or bare), 1: only weak failures logged as warnings, 0: no failure."""
        failures = [e for e in incident.events if self.cat.signatures[e.sig_index].kind == "failure"]
        if not failures:
            return 0
        return 1 if all(e.line in self.warned for e in failures) else 2

    def engine(self) -> str | None:
        if self._engine_pending:
            self._flush_engine()
        if not self.engine_votes:
            return None
        return max(
            self.engine_order, key=lambda e: (self.engine_votes.get(e, 0), -self.engine_order.index(e))
        )

    # -- the decision
    def finish(self, stats: ScanStats, warnings: list[str], source: str) -> Diagnosis:
        self._close()
        root = self.root
        extra: list[tuple[_Incident, Event]] = []
        if root is None:
            root = self.fallback
        elif self.fallback is not None:
            top = _top_event(self.cat, self.fallback, self.warned)
            if top is not None:
                extra.append((self.fallback, top))
        if root is None:
            told = (
                _startup_death(self, stats, warnings, source)
                or _impossible_utilization(self, stats, warnings, source)
                or _told_other_failure(self, stats, warnings, source)
            )
            return told if told is not None else _no_failure(self, stats, warnings, source)
        return _decide(self, root, extra + self.other, stats, warnings, source)


_PID_FACTS = frozenset({"other_pid", "killed_pid"})


def _same_facts(a: Mapping[str, FactValue], b: Mapping[str, FactValue]) -> bool:
    """The same failure again (process ids aside)."""
    return {k: v for k, v in a.items() if k not in _PID_FACTS} == {
        k: v for k, v in b.items() if k not in _PID_FACTS
    }


def told_only_keys(cat: Catalogue) -> frozenset[str]:
    """The `words_failed` phrases that nothing else in the catalogue uses: a line is read as if they were not there
    (only the title hint is taken from them), so adding them changes no other answer."""
    used = set(cat.keys_to_signatures) | set(cat.marker_phrases) | set(cat.settings_keys) | set(cat.method_keys)
    used |= {key for version in cat.versions for key in version.keys}
    used |= {word for words in cat.hints.values() for word in words}
    used |= {word for name, words in cat.global_hints.items() if name != TOLD_FAILURE_HINT for word in words}
    return frozenset(cat.global_hints.get(TOLD_FAILURE_HINT, ())) - used


def _logged_at_error(raw: str, text: str) -> bool:
    """The line is a record logged at level ERROR / CRITICAL / FATAL (the level in the prefix the reader peeled off, or
    at the start of the message: Python logging's `ERROR:name:msg`, `[… TP0] ERROR …`), or a failed test (pytest's
    `FAILED path::test`)."""
    if not text or text.startswith(_TRACEBACK_STARTS) or not text.strip("^~ "):
        return False  # a traceback logged line by line: its frames and its exception line speak for it
    cut = raw.find(text)
    prefix = raw[:cut] if cut > 0 else ""
    if prefix and _AT_ERROR_RE.search(prefix) is not None:
        return True
    return _BARE_ERROR_RE.match(text) is not None


_GLOG_BELOW_ERROR_RE = re.compile(r"(?:^|[\[:\s])[IW]\d{4} \d\d:\d\d:\d\d")
"""glog / torch c10's INFO and WARNING prefix (`[rank0]:[W1203 10:00:00.000000 ProcessGroupNCCL.cpp:4561] …`)."""


def _record_below_error(raw: str, text: str) -> bool:
    """A log record below ERROR: a level word in its prefix (`_logged_below_error`) or glog's `I` / `W` prefix."""
    return _logged_below_error(raw, text) or _GLOG_BELOW_ERROR_RE.search(raw[:80]) is not None


def _logged_below_error(raw: str, text: str) -> bool:
    """The line's prefix (what precedes its message) names a level below ERROR."""
    cut = raw.rfind(text[:40]) if text else -1
    head = raw[: cut if cut >= 0 else min(len(raw), 120)][:160]
    m = _BELOW_ERROR_RE.search(head)
    return m is not None and not any(word in head[: m.start()] for word in ("ERROR", "CRITICAL", "FATAL"))


def _top_event(cat: Catalogue, incident: _Incident, warned: set[int] | frozenset[int] = frozenset()) -> Event | None:
    best: Event | None = None
    best_key: tuple[int, int, int, int, int] | None = None
    # root before consequence: a memory failure in the incident outranks the failures that follow one (the other
    # ranks' NCCL timeouts and errors, a crash on the way down), whatever their weights
    memory_failure = any(
        cat.signatures[e.sig_index].kind == "failure"
        and cat.signatures[e.sig_index].weight >= STRONG_WEIGHT
        and cat.signatures[e.sig_index].cause not in (None, "not-oom")
        for e in incident.events
    )
    # a failure told in a person's words never outranks an engine's or runtime's own failure message in the incident
    engine_message = any(
        cat.signatures[e.sig_index].kind == "failure"
        and cat.signatures[e.sig_index].weight >= STRONG_WEIGHT
        and not cat.signatures[e.sig_index].report_words
        and not cat.signatures[e.sig_index].vocabulary
        for e in incident.events
    )
    for event in incident.events:
        sig = cat.signatures[event.sig_index]
        demoted = (memory_failure and sig.consequence_of_memory) or (engine_message and sig.report_words)
        key = (1 if sig.kind == "failure" else 0, 0 if demoted else 1, 0 if event.line in warned else 1, sig.weight, -event.line)
        if best_key is None or key > best_key:
            best, best_key = event, key
    return best


# --------------------------------------------------------------------------------------------------
# 3. The decision


def _phase_name(phase: str) -> str:
    return "phase_" + phase.replace("-", "_")


def _context_phase(an: _Analyser, incident: _Incident, root_line: int) -> tuple[str | None, _Context | None]:
    lo = incident.start - CONTEXT_BEFORE_LINES
    hi = incident.end + INCIDENT_GAP_LINES
    frames = [c for c in incident.context if c.kind == "frame" and lo <= c.line <= hi]
    if frames:
        best = max(frames, key=lambda c: (c.rank, -c.line))
        if best.yield_to:
            marker = _last_marker(an, root_line)
            if marker is not None and marker.phase in best.yield_to:
                return marker.phase, marker
        return best.phase, best
    marker = _last_marker(an, root_line)
    if marker is not None:
        return marker.phase, marker
    # Nothing before the failure places it: the failure is quoted ahead of the lines that led up to it (an issue
    # title or a summary line on top of the pasted log). It happened after them: the last progress marker within
    # the incident's reach places it (reported as inferred).
    later = None
    for m in an.markers[bisect.bisect_right(an.marker_lines, root_line) :]:
        if m.line > hi:
            break
        later = m
    if later is not None:
        return later.phase, later
    return None, None


def _last_marker(an: _Analyser, line: int) -> _Context | None:
    """The last progress marker at or before `line` (markers are kept in file order)."""
    index = bisect.bisect_right(an.marker_lines, line)
    return an.markers[index - 1] if index else None


def _names(
    an: _Analyser, incident: _Incident, root: Event, ctx_phase: str | None, engine: str | None
) -> dict[str, Any]:
    """Everything rules and fixes may name: facts, derived values, constants, hints, the phase."""
    cat = an.cat
    names: dict[str, Any] = {}
    for name, (line, value) in an.global_facts.items():
        if line <= root.line:
            names[name] = value
    # a launch setting: the last value printed up to the failure, else the first printed after it (an issue excerpt
    # that quotes the command below the error still describes the deployment that failed)
    for name, history in an.setting_history.items():
        before = [value for line, value in history if line <= root.line]
        names[name] = before[-1] if before else history[0][1]
    for event in incident.events:
        esig = cat.signatures[event.sig_index]
        if event is root or esig.id == cat.signatures[root.sig_index].id:
            continue
        if esig.kind != "failure" or esig.weight < STRONG_WEIGHT:
            continue
        for name, value in event.facts.items():
            names.setdefault(name, value)
    for line, name, value in incident.later_facts:
        if line > root.line:
            names.setdefault(name, value)
    names.update(root.facts)
    sig = cat.signatures[root.sig_index]
    for name, expr in sig.derive:
        if name not in names:
            derived = evaluate(expr, names)
            if derived is not None and not isinstance(derived, bool):
                names[name] = int(derived) if name.endswith("_bytes") else derived
    for name, expr in cat.constants:
        constant = evaluate(expr, names)
        if constant is not None:
            names[name] = constant
    total = names.get("total_bytes")
    if isinstance(total, (int, float)) and total > 0:
        for fact, pct in (
            ("requested_bytes", "requested_pct"),
            ("allocated_bytes", "allocated_pct"),
            ("weights_bytes", "weights_pct"),
        ):
            amount = names.get(fact)
            if isinstance(amount, (int, float)):
                names[pct] = round(100.0 * amount / total)
    lo = incident.start - CONTEXT_BEFORE_LINES
    hi = incident.end + INCIDENT_GAP_LINES
    for c in incident.context:
        if c.kind == "hint" and lo <= c.line <= hi:
            names["hint_" + c.value] = True
    # a failure told on the report's first lines (an issue title, a one-line summary on top) sums up everything
    # below it: the whole-log hints read after it describe the same run
    title = incident.start <= TITLE_LINES
    for hint, line in an.global_hints.items():
        if line <= incident.end or title:
            names["hint_" + hint] = True
    if ctx_phase is None:
        names["phase_unknown"] = True
    else:
        names[_phase_name(ctx_phase)] = True
    # where the progress lines say the engine was, even when frames decide the phase (a sampler warm-up after the
    # KV cache was sized is the post-capture one)
    marker = _last_marker(an, root.line)
    if marker is not None and marker.phase is not None:
        names["marker_" + marker.phase.replace("-", "_")] = True
    names["engine_known"] = engine is not None
    if engine is not None:
        names["engine_" + engine] = True  # the engine decides whose memory model applies (LMDeploy's TurboMind)
    return names


def _apply_fix(fix: Fix, names: Mapping[str, Any], engine: str | None) -> FixAdvice | None:
    if fix.engine is not None:
        if engine is None and fix.engine != "vllm":
            return None
        if engine is not None and fix.engine != engine:
            return None
    local = dict(names)
    for name, expr in fix.let:
        value = evaluate(expr, local)
        if value is None or isinstance(value, bool):
            return None
        if (
            isinstance(value, float)
            and value.is_integer()
            and abs(value) >= 1
            and "util" not in name
            and "mfs" not in name
        ):
            value = int(value)
        local[name] = value
    if fix.when is not None and not evaluate(fix.when, local):
        return None
    action = fill(fix.action, local)
    reason = fill(fix.reason, local)
    flag = fill(fix.flag, local) if fix.flag is not None else None
    value_text = fill(fix.value, local) if fix.value is not None else None
    if action is None or reason is None or (fix.flag is not None and flag is None):
        return None
    if fix.value is not None and value_text is None:
        return None
    if value_text is not None:
        try:
            number = float(value_text.replace(",", ""))
        except ValueError:
            number = None
        if number is not None and number <= 0 and fix.let:
            return None
    if value_text is not None:
        value_text = plain_value(value_text)
    if fix.engine is None and foreign_flag(flag, engine):
        # a fix written for any engine, in vLLM's spelling, on a log from an engine whose CLI spells it otherwise:
        # the advice stands without a flag it would not take (its own fix rows offer its own flag and number)
        flag, value_text = None, None
    return FixAdvice(action=action, flag=flag, value=value_text, reason=reason)


def _filled_what(template: str | None, names: Mapping[str, Any]) -> str | None:
    """A signature's `what` with its placeholders filled from the matched line; a placeholder the line did not fill
    is dropped with its parentheses (`({error_message})` never reaches the user)."""
    if not template:
        return template
    filled = fill(template, names)
    if filled is not None:
        return filled
    return re.sub(r"\s*\(\{[^}]*\}\)|\{[^}]*\}", "", template).strip()


def _decide(
    an: _Analyser,
    incident: _Incident,
    others: list[tuple[_Incident, Event]],
    stats: ScanStats,
    warnings: list[str],
    source: str,
) -> Diagnosis:
    cat = an.cat
    root = _top_event(cat, incident, an.warned)
    assert root is not None
    sig = cat.signatures[root.sig_index]
    engine = an.engine()
    if sig.engine is not None:
        engine = sig.engine  # the message itself names its engine
    ctx_phase, ctx_item = _context_phase(an, incident, root.line)
    names = _names(an, incident, root, ctx_phase, engine)
    names["lines_to_end"] = max(0, stats.lines - incident.end)  # a cut-off log ends inside its failure
    # a traceback frame (not a progress line or a guess) placed the failure: words never move it elsewhere
    names["phase_by_frame"] = ctx_item is not None and ctx_item.kind == "frame"
    cause, phase, confidence, why, refined = _resolve(cat, sig, names, ctx_phase)
    own_fixes = False  # the signature's own fixes stand beside the label's (they carry its numbers)
    if cause == "not-oom" and an.inventory_index is not None:
        inv_facts = _inventory_facts(root.text)
        if inv_facts is not None:
            cause, phase, confidence, why, refined = _inventory_reading(
                cat, sig, names, ctx_phase, inv_facts, an.inventory_index, (cause, phase, confidence, why, refined)
            )
            own_fixes = sig.cause == "not-oom" and cause != "not-oom"
    # the wording did not decide: the deployment the log describes, planned, may (vramctl/diagnose/planfacts.py)
    planned = None
    if confidence == "low" and an.plan_source is not None:
        from vramctl.diagnose.planfacts import revise

        planned = revise(cat, names, cause, an.plan_source, stats.bytes_read)
        if planned is not None:
            cause, phase, confidence, plan_why = planned
            why.append(plan_why)
            refined = True
    # the same small failure again and again: something is never given back
    # (the same numbers again, not just the same words)
    if sig.repeat is not None and not refined and root.facts:
        same = [
            e for e in incident.events if e.sig_index == root.sig_index and _same_facts(e.facts, root.facts)
        ]
        if len(same) >= sig.repeat.min_count:
            names["count"] = len(same)
            cause = sig.repeat.cause
            phase = sig.repeat.phase or phase
            confidence = sig.repeat.confidence or confidence
            text = fill(sig.repeat.why, names) if sig.repeat.why else None
            if text:
                why.append(text)
            refined = True
    # the same log ran an earlier version without this failure, then a newer one that fails
    regression = _version_change(an, incident)
    if regression is not None and cause in REGRESSION_CANDIDATES:
        old_version, new_version = regression
        why.append(
            f"the log first runs {old_version} without a failure, then {new_version} fails: "
            "the memory used before the engine's own allocations grew with the upgrade"
        )
        cause, confidence, refined = "version-regression", "medium", True
        names["previous_version"], names["new_version"] = old_version, new_version
    phase_inferred = planned is not None and phase not in ("context", ctx_phase)
    if phase_inferred:
        why.append(f"phase {phase} inferred from the plan: no frame or progress line places the failure there")
    if phase == "context":
        phase = ctx_phase or sig.default_phase or "unknown"
        if ctx_phase is None and sig.default_phase is not None:
            # no frame or progress line places it: the phase is where this kind of failure usually happens
            phase_inferred = True
            why.append(f"phase {phase} assumed: no frame or progress line in the log places the failure")
        if (
            ctx_item is not None
            and ctx_item.kind == "marker"
            and ctx_item.line > root.line
            and phase == ctx_phase
        ):
            phase_inferred = True
            why.append(
                f"phase inferred from line {ctx_item.line}: the failure is quoted above the lines that led to it"
            )
        if phase == "unknown":
            for guess in cat.phase_guess:
                if evaluate(guess.when, names):
                    phase = guess.phase
                    phase_inferred = True
                    text = fill(guess.why, names)
                    if text:
                        why.append(f"phase inferred: {text}")
                    if confidence == "high":
                        confidence = "medium"
                    break
    # calibration (docs/explain-oom.md, "Confidence"): a phase the log does not place lowers high to medium; the
    # progress lines BELOW a failure quoted on top of the paste place it only by inference
    if (
        confidence == "high"
        and ctx_item is not None
        and ctx_item.kind == "marker"
        and ctx_item.line > root.line
        and not any(c.kind == "frame" for c in incident.context)
    ):
        confidence = "medium"
    names["cause_" + cause.replace("-", "_")] = True
    names.setdefault("count", sum(1 for e in incident.events if e.sig_index == root.sig_index))

    # fixes: the signature's own (computed from its facts) when the label is its own, then the label's
    fixes: list[FixAdvice] = []
    seen: set[tuple[str | None, str]] = set()
    seen_actions: set[tuple[str, str | None]] = set()
    sources: list[Fix] = []
    if not refined or cause == sig.cause or own_fixes:
        sources.extend(sig.fixes)
    info = cat.causes.get(cause)
    if info is not None:
        sources.extend(info.fixes)
    for fix in sources:
        advice = _apply_fix(fix, names, engine)
        if advice is None:
            continue
        key = (advice.flag, advice.action) if advice.flag is None else (advice.flag, "")
        if key in seen or (advice.action, advice.value) in seen_actions:
            continue
        seen.add(key)
        seen_actions.add((advice.action, advice.value))
        fixes.append(advice)
        if len(fixes) >= 5:
            break
    # the version of the run that failed: the last one printed before the failure
    current = _running_version(an, incident.end)
    version = current[1] if current is not None else None
    if cause not in ("not-oom", "no-failure"):
        fixes = _completed_fixes(cause, phase, names, engine, fixes, _vllm_release(current))
    do_not_src = list(sig.do_not) if (not refined or cause == sig.cause) else []
    if info is not None and not do_not_src:
        do_not_src.extend(info.do_not)
    do_not: list[str] = []
    # alternatives: the first whose numbers the log gives (a fallback without numbers last)
    for text in do_not_src:
        filled = fill(text, names)
        if filled:
            do_not.append(filled)
            break

    evidence = _evidence(an, incident, root, ctx_item)
    facts = {k: v for k, v in names.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
    for internal in ("margin_bytes", "count", "lines_to_end"):
        facts.pop(internal, None)
    for k, v in list(facts.items()):
        if k.endswith("_bytes") and isinstance(v, float):
            facts[k] = round(v)

    other_out: list[OtherFailure] = []
    for event in incident.events:
        esig = cat.signatures[event.sig_index]
        if event is root or esig.kind != "failure" or esig.weight < STRONG_WEIGHT or esig.id == sig.id:
            continue
        if event.line == root.line:  # another reading of the same message (Ray lists possible causes)
            continue
        ecause = _event_cause(an, incident, event, engine)
        if ecause != cause and len(other_out) < MAX_OTHER_FAILURES:
            other_out.append(OtherFailure(ecause, event.line, event.text[:300], esig.id))
    for same_incident_event in (
        e for e in incident.events if e.sig_index == root.sig_index and e is not root
    ):
        if _same_facts(same_incident_event.facts, root.facts):
            continue
        if len(other_out) < MAX_OTHER_FAILURES:
            other_out.append(
                OtherFailure(cause, same_incident_event.line, same_incident_event.text[:300], sig.id)
            )
    for other_incident, event in others:
        if len(other_out) >= MAX_OTHER_FAILURES:
            break
        other_out.append(
            OtherFailure(
                _event_cause(an, other_incident, event, engine),
                event.line,
                event.text[:300],
                cat.signatures[event.sig_index].id,
            )
        )
    other_out.sort(key=lambda o: o.line)
    if an.other_count > len(an.other):
        warnings.append(f"{an.other_count - len(an.other)} more later failures not listed")

    what = _filled_what(sig.what, names) if cause == "not-oom" else None
    if cause == "not-oom" and not what:
        what = why[0] if why else "a failure that is not a memory allocation failure"
    if cause == "not-oom" and sig.id == "python-exception":
        exc = names.get("exception")
        what = f"an exception that is not about memory: {exc}" if exc else what
    summary = info.summary if info is not None else cause
    if current is not None and engine is None:
        engine = current[0]
    return Diagnosis(
        cause=cause,
        phase=phase,
        confidence=confidence,
        summary=summary,
        why=tuple(why),
        evidence=evidence,
        facts=facts,
        fixes=tuple(fixes),
        do_not=tuple(do_not),
        other_failures=tuple(other_out),
        engine=engine,
        engine_version=version,
        signature=sig.id,
        what=what,
        phase_inferred=phase_inferred,
        lines_read=stats.lines,
        bytes_read=stats.bytes_read,
        warnings=tuple(warnings),
        source=source,
    )


REGRESSION_CANDIDATES = frozenset(
    {
        "gpu-util-exceeds-free-memory",
        "no-kv-cache-memory",
        "weights-do-not-fit",
        "batch-budget-too-large",
        "cuda-graph-capture-oom",
        "sampler-warmup-oom",
        "activation-spike",
        "kv-cache-too-small-for-max-model-len",
    }
)
"""Start-up memory failures that a version change in the same log turns into `version-regression`."""


_INVENTORY_KIND_HINTS = {"shm": "hint_shm", "host-oom": "hint_host_memory"}
"""The hint an inventory site's kind gives to the catalogue's rules (a /dev/shm file, the host's memory)."""


def _inventory_reading(
    cat: Catalogue,
    sig: Signature,
    names: dict[str, Any],
    ctx_phase: str | None,
    inv_facts: dict[str, FactValue],
    inv_index: int,
    current: tuple[str, str, str, list[str], bool],
) -> tuple[str, str, str, list[str], bool]:
    """A root line the catalogue reads as no memory failure but the source inventory maps to one.

    - The catalogue's signature is a memory failure that a rule turned into not-oom for want of a hint (`No space
      left on device` with nothing naming /dev/shm): the inventory's kind for the very line is that hint
      (`_INVENTORY_KIND_HINTS`), and the signature's rules run again with it.
    - The catalogue maps the wording itself to not-oom (a sanity check) while the inventory, read from the
      engine's sources, states a memory failure: the inventory's facts decide, with low confidence.
    Otherwise, and wherever a rule of the signature read the numbers or the context and found no memory failure, the
    catalogue's reading stands."""
    kind = inv_facts.get("inventory_kind")
    hint = _INVENTORY_KIND_HINTS.get(kind) if isinstance(kind, str) else None
    if sig.cause != "not-oom":
        if hint is None or names.get(hint):
            return current
        again = _resolve(cat, sig, {**names, hint: True}, ctx_phase)
        if again[0] == "not-oom":
            return current
        return again[0], again[1], again[2], [
            *again[3],
            f"the source inventory entry {inv_facts['inventory_id']} places this message in {kind}",
        ], again[4]
    if any(rule.cause in (None, "not-oom") and evaluate(rule.when, names) for rule in sig.refine):
        return current  # a rule of the catalogue read the numbers and found no memory failure: that reading stands
    inv = _resolve(cat, cat.signatures[inv_index], {**names, **inv_facts}, ctx_phase)
    if inv[0] == "not-oom":
        return current
    return inv[0], inv[1], "low", [
        *inv[3],
        f"the catalogue reads this wording as no memory failure, the source inventory entry "
        f"{inv_facts['inventory_id']} as one",
    ], True


def _version_change(an: _Analyser, incident: _Incident) -> tuple[str, str] | None:
    """(older, newer) when the engine version changed before this (the first) failure, else None."""
    before = [v for v in an.versions if v[0] <= incident.start]
    if len(before) < 2:
        return None
    (_, engine_a, old), (_, engine_b, new) = before[-2], before[-1]
    if engine_a != engine_b or old == new or parse_version_tuple(new) <= parse_version_tuple(old):
        return None
    return f"{engine_a} {old}", f"{engine_b} {new}"


def parse_version_tuple(text: str) -> tuple[int, ...]:
    """`0.6.4.post1` -> (0, 6, 4): the numeric release part, for ordering."""
    parts: list[int] = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


_INVENTORY_KIND_LABELS = {"accounting": "gpu-util-exceeds-free-memory"}
"""Unlabelled inventory sites whose kind decides the cause: an `accounting` check fails when another process allocates
or frees memory on the card while the engine measures it (vLLM's profiling and sleep-mode checks): the free memory
the engine planned with was not its own."""


def _resolve(
    cat: Catalogue, sig: Signature, names: dict[str, Any], ctx_phase: str | None
) -> tuple[str, str, str, list[str], bool]:
    cause = sig.cause or "not-oom"
    phase = sig.phase or "context"
    confidence = sig.confidence
    why: list[str] = []
    if sig.id == INVENTORY_SIGNATURE:
        label = names.get("inventory_label")
        if isinstance(label, str) and label in LABELS and not names.get("hint_pinned"):
            inv_phase = names.get("inventory_phase")
            phase = inv_phase if isinstance(inv_phase, str) and inv_phase in PHASES else "context"
            why.append(f"the source inventory maps this message ({names.get('inventory_id')}) to {label}")
            return label, phase, confidence, why, label != sig.cause
        # no label: the kind of site says who allocated (the host, a library or the driver, or torch's allocator)
        kind = names.get("inventory_kind")
        kind_label = _INVENTORY_KIND_LABELS.get(kind) if isinstance(kind, str) else None
        if kind_label is not None and not names.get("hint_pinned"):
            inv_phase = names.get("inventory_phase")
            phase = inv_phase if isinstance(inv_phase, str) and inv_phase in PHASES else "context"
            why.append(f"the source inventory says this message ({names.get('inventory_id')}) is a failure of kind {kind}")
            return kind_label, phase, confidence, why, kind_label != sig.cause
        if kind == "host-oom":
            names["hint_host_memory"] = True
        elif kind in ("driver-oom", "nccl", "cublas"):
            names["hint_non_torch"] = True
    for rule in sig.refine:
        if evaluate(rule.when, names):
            cause = rule.cause or cause
            phase = rule.phase or phase
            confidence = rule.confidence or confidence
            if rule.why:
                text = fill(rule.why, names)
                if text:
                    why.append(text)
            return cause, phase, confidence, why, cause != sig.cause
    return cause, phase, confidence, why, False


def _event_cause(an: _Analyser, incident: _Incident, event: Event, engine: str | None) -> str:
    sig = an.cat.signatures[event.sig_index]
    ctx_phase, _ = _context_phase(an, incident, event.line)
    names = _names(an, incident, event, ctx_phase, engine)
    cause, _, _, _, _ = _resolve(an.cat, sig, names, ctx_phase)
    return cause


def _evidence(
    an: _Analyser, incident: _Incident, root: Event, ctx_item: _Context | None
) -> tuple[Evidence, ...]:
    items: dict[int, str] = {root.line: root.text}
    cat = an.cat
    for event in incident.events:
        if len(items) >= MAX_EVIDENCE - 2:
            break
        esig = cat.signatures[event.sig_index]
        if event.line not in items and (event.facts or esig.weight >= 20) and esig.kind == "failure":
            items[event.line] = event.text
    # the fact lines the numbers came from, nearest first
    fact_lines = sorted(
        {line for line, _ in an.global_facts.values() if incident.start - 400 <= line <= incident.end},
        key=lambda line: abs(line - root.line),
    )
    if ctx_item is not None and ctx_item.line not in items:
        items[ctx_item.line] = ctx_item.text
    for c in incident.context:
        if c.kind == "hint" and c.line not in items and len(items) < MAX_EVIDENCE:
            items[c.line] = c.text
    for line in fact_lines:
        if len(items) >= MAX_EVIDENCE:
            break
        if line not in items:
            items[line] = an.fact_texts.get(line, "")
    out: list[Evidence] = []
    seen_texts: set[str] = set()
    for line, text in sorted(items.items()):
        if text and (text not in seen_texts or line == root.line):  # the same message from another rank
            seen_texts.add(text)
            out.append(Evidence(line, text[:400]))
    return tuple(out)


STARTUP_DEATH_CAUSE = "host-oom-killer"
"""What a process that went away during start-up without an error line of its own is (`_startup_death`)."""

IMPOSSIBLE_UTILIZATION = 0.99
"""A vLLM `gpu_memory_utilization` no start-up can meet (`_impossible_utilization`)."""


def _told_start_died(an: _Analyser) -> bool:
    """The report's words say the server never came up or its process went away, not that it stalled."""
    return "words_start_died" in an.global_hints and "words_stall" not in an.global_hints


def _startup_death(an: _Analyser, stats: ScanStats, warnings: list[str], source: str) -> Diagnosis | None:
    """A start-up the report says ended, in a log that stops inside it with no error line: a process killed.

    The log holds no failure line, its last progress line is inside a start-up phase (device check, weights,
    profiling, KV sizing, capture) and nothing shows the engine serving, and the report's words say the server
    never came up or its process went away (`words_start_died`: "can't start", "the server task ended", "exited
    without any error"), not that it stalled (`words_stall`: "stuck", "hangs"). Every memory failure an engine or
    PyTorch detects raises and logs an exception; a process that disappears without one was sent SIGKILL, which on
    Linux, unasked, is the kernel's or a container's OOM killer (host RAM: the checkpoint streams through it while
    loading, torch.compile's workers use it while profiling). `host-oom-killer`, low: the log does not show the kill.
    A log that reaches serving, a stall, and words without start-up progress lines stay "no failure".
    """
    if not _told_start_died(an) or not an.markers:
        return None
    last = an.markers[-1]
    if last.done == "graph-capture" or any(m.phase == "serving" for m in an.markers):
        return None
    phase = last.phase
    if phase not in ("startup-check", "weights-load", "profiling", "kv-alloc", "graph-capture"):
        return None
    words_line = an.global_hints["words_start_died"]
    why = (
        f"the report says the start-up ended (line {words_line}) and the log stops in phase {phase} "
        f"(line {last.line}) with no error line: a process that dies without an exception of its own was killed "
        "(SIGKILL), which unasked is the kernel's or a container's OOM killer (host RAM)"
    )
    return _told_failure(an, stats, warnings, source, STARTUP_DEATH_CAUSE, phase, why, last, "startup-death")


def _impossible_utilization(
    an: _Analyser, stats: ScanStats, warnings: list[str], source: str
) -> Diagnosis | None:
    """A start-up the report says failed, with a `gpu_memory_utilization` no start-up can meet, and no error line.

    vLLM reserves `gpu_memory_utilization` x the card's total for itself and checks at start-up that the card has
    that much free (vllm/v1/worker/gpu_worker.py `init_device`: "Free memory on device … is less than desired GPU
    memory utilization"); the process's own CUDA context (hundreds of MiB) is already in use by then, so a share of
    0.99 or more can never be met, and before that check existed the profiler left nothing for activations. With a
    report that the server could not start or load (`words_start_died`) and no stall, the setting is the failure:
    `gpu-util-exceeds-free-memory`, low (the log does not show the check). A log that reached serving stays as it is.
    """
    if not _told_start_died(an) or any(m.phase == "serving" for m in an.markers):
        return None
    if an.engine() == "vllm" and an.engine_version is not None and _sized_after_warmup(an.engine_version[1]):
        return None  # vLLM 0.34's extensible KV cache: no free-memory check, and u = 1.0 is its default
    util = an.global_facts.get("gpu_memory_utilization")
    if util is None or not isinstance(util[1], (int, float)) or util[1] < IMPOSSIBLE_UTILIZATION:
        return None
    why = (
        f"the report says the start-up failed (line {an.global_hints['words_start_died']}) and the utilisation is "
        f"{util[1]:g} (line {util[0]}): vLLM wants that share of the card free at start-up, which its own CUDA "
        "context already makes impossible"
    )
    return _told_failure(
        an, stats, warnings, source, "gpu-util-exceeds-free-memory", "startup-check", why, None, "impossible-utilization"
    )


def _told_other_failure(an: _Analyser, stats: ScanStats, warnings: list[str], source: str) -> Diagnosis | None:
    """A report whose title or first lines say something failed, in a log with no failure line: `not-oom`, low.

    A title such as `CUDA Graph Capture Fail on H200`, `memory registration failed` or `cannot start the model` states
    an incident even when the excerpt below it holds no engine message (a paste of the command, the settings, the
    progress lines); nothing in the log names memory running out (every memory wording, a person's included, is a
    failure signature and would have decided), so it is a failure that is not an allocation failure, never "no
    failure" (issue 9: exit 3 only when the log holds no incident). A question (`what happens if … fails?`), a denial
    (`no error`, `without failing`) or advice (`if it fails, …`) on that line states no incident and stays "no
    failure"; so do failure words further down (a log's own INFO lines say `failed` for retried, harmless steps).
    """
    for hint in (TOLD_FAILURE_HINT, *_TOLD_HINTS):
        line = an.global_hints.get(hint)
        if line is None or line > TOLD_FAILURE_LINES or hint in an.told_below_error:
            continue
        text = an.global_hint_text.get(hint, "")
        if _NOT_AN_INCIDENT_RE.search(text) is not None:
            continue
        why = (
            f"the report's first lines say something failed (line {line}: {text[:120]!r}) and no line of the log "
            "names memory running out: a failure that is not an allocation failure"
        )
        return _told_failure(
            an, stats, warnings, source, "not-oom", "unknown", why, None, "told-failure-words", hint=hint,
            what="a failure told in the report's words that names no memory shortage",
        )
    return None


def _sized_after_warmup(version: str) -> bool:
    """Whether this vLLM release sizes its KV cache after warm-up by default (the extensible KV cache, 0.34 →:
    `VllmRules.extensible_kv_cache`), so that it skips the start-up free-memory check."""
    from vramctl.core.engines.vllm.rules import rules_for

    try:
        return rules_for(version).extensible_kv_cache
    except (BadInputError, ValueError):
        return False


def _told_failure(
    an: _Analyser,
    stats: ScanStats,
    warnings: list[str],
    source: str,
    cause: str,
    phase: str,
    why: str,
    marker: _Context | None,
    signature: str,
    *,
    hint: str = "words_start_died",
    what: str | None = None,
) -> Diagnosis:
    """A failure that no line of the log prints, decided from the report's words and the log's facts (`low`)."""
    cat = an.cat
    engine = an.engine()
    version = an.engine_version[1] if an.engine_version is not None else None
    names: dict[str, Any] = {name: value for name, (_, value) in an.global_facts.items()}
    names[_phase_name(phase)] = True
    names["engine_known"] = engine is not None
    info = cat.causes.get(cause)
    fixes: list[FixAdvice] = []
    if info is not None:
        for fix in info.fixes:
            advice = _apply_fix(fix, names, engine)
            if advice is not None and len(fixes) < 5:
                fixes.append(advice)
    fixes = _completed_fixes(cause, phase, names, engine, fixes, _vllm_release(an.engine_version))
    words_line = an.global_hints[hint]
    evidence = [Evidence(words_line, an.global_hint_text.get(hint, "")[:300])]
    if marker is not None and marker.line != words_line:
        evidence.append(Evidence(marker.line, (marker.text or "")[:300]))
    facts = {k: v for k, v in names.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
    return Diagnosis(
        cause=cause,
        phase=phase,
        confidence="low",
        summary=info.summary if info is not None else cause,
        why=(why,),
        evidence=tuple(sorted(evidence, key=lambda e: e.line)),
        facts=facts,
        fixes=tuple(fixes),
        do_not=tuple(info.do_not[:1]) if info is not None else (),
        other_failures=(),
        engine=engine,
        engine_version=version,
        signature=signature,
        what=what,
        phase_inferred=True,
        lines_read=stats.lines,
        bytes_read=stats.bytes_read,
        warnings=tuple(warnings),
        source=source,
    )


def _no_failure(an: _Analyser, stats: ScanStats, warnings: list[str], source: str) -> Diagnosis:
    engine = an.engine()
    version = an.engine_version[1] if an.engine_version is not None else None
    facts = {name: value for name, (_, value) in an.global_facts.items()}
    # how far the engine got: the last progress line (the log may end before the failure it is about): the phase
    # it reports finished (a result line such as `Available KV cache memory` ends profiling), else the one it starts
    last = an.markers[-1] if an.markers else None
    reached = (last.done or last.phase) if last is not None else None
    why = (
        (f"the last progress line (line {last.line}) is in phase {reached}: the log ends there",)
        if last is not None and reached is not None
        else ()
    )
    # calibration: "no failure" is sure only when the log shows the engine got to serving; a log whose progress lines
    # stop earlier may end before its failure, and a fragment without any progress line (a paste, a summary in words)
    # says nothing of how the run went
    if not stats.lines or last is None:
        confidence = "low"
    # (a capture that FINISHED counts; one that only started may end in its OOM, the last start-up allocation)
    elif last.done == "graph-capture" or reached == "serving" or any(m.phase == "serving" for m in an.markers[-20:]):
        # an excerpt under a bug report's title (`[Bug]: …`) comes from a run that failed somewhere: the serving lines
        # show the engine started, not that the paste kept the failure the report is about
        confidence = "medium" if "bug_report" in an.global_hints else "high"
    else:
        confidence = "medium"
    return Diagnosis(
        cause="no-failure",
        phase=reached or "unknown",
        confidence=confidence,
        summary="the log holds no failure" if stats.lines else "the log is empty",
        why=why,
        evidence=(),
        facts=facts,
        fixes=(),
        do_not=(),
        other_failures=(),
        engine=engine,
        engine_version=version,
        signature=None,
        lines_read=stats.lines,
        bytes_read=stats.bytes_read,
        warnings=tuple(warnings),
        source=source,
    )


# --------------------------------------------------------------------------------------------------
# Entry points


def diagnose(source: str | os.PathLike[str] | BinaryIO, *, catalogue: Catalogue | None = None) -> Diagnosis:
    """Explain the memory failure in a log (a path, "-" for stdin, or a binary stream).

    Raises BadInputError for an unreadable source (a directory, a missing file) and for a truncated
    gzip in which no failure was found; a truncated gzip with a failure is diagnosed, with a warning.
    """
    cat = catalogue if catalogue is not None else load_catalogue()
    stats = ScanStats()
    analyser = _Analyser(cat)
    if isinstance(source, (str, os.PathLike)) and str(source) != "-":
        analyser.plan_source = source
    warnings: list[str] = []
    name = (
        "<stdin>"
        if isinstance(source, str) and source == "-"
        else (
            os.fspath(source)
            if isinstance(source, (str, os.PathLike))
            else str(getattr(source, "name", "<stream>"))
        )
    )
    truncated: TruncatedInputError | None = None
    plan = _parallel_plan(source)
    try:
        hits = _scan_parallel(*plan, cat, stats) if plan is not None else _Scanner(cat).scan(source, stats)
        for hit in hits:
            analyser.feed(hit)
    except TruncatedInputError as exc:
        truncated = exc
        warnings.append(f"{exc}; diagnosed from the {stats.lines:,} lines before the cut")
    if stats.truncated_lines:
        warnings.append(f"{stats.truncated_lines} over-long line(s) cut at 64 KiB")
    warnings.extend(stats.notes)
    result = analyser.finish(stats, warnings, name)
    if truncated is not None and not result.found_failure:
        raise BadInputError(f"{truncated}; no failure in the {stats.lines:,} lines that could be read")
    result = _with_log_settings_fix(result, source)
    explicit = _with_explicit_kv_fix(result, source)
    return explicit if explicit is not None else _with_plan_checked_fix(result, source)


def _with_log_settings_fix(result: Diagnosis, source: object) -> Diagnosis:
    """A fix number from an engine's default, computed again from the settings only a fix needs (fixsettings.py)."""
    from vramctl.diagnose.fixsettings import refine_fixes
    from vramctl.diagnose.planfix import MAX_PLAN_LOG_BYTES

    if result.cause in ("not-oom", "no-failure") or result.bytes_read > MAX_PLAN_LOG_BYTES:
        return result
    fixes = refine_fixes(
        result.cause,
        result.phase,
        dict(result.facts),
        result.engine,
        result.fixes,
        source,
        MAX_PLAN_LOG_BYTES,
        _fix_advice,
        result.engine_version,
    )
    return result if fixes is None else dataclasses.replace(result, fixes=tuple(fixes[:5]))


def _with_explicit_kv_fix(result: Diagnosis, source: object) -> Diagnosis | None:
    """A KV budget failure of a log whose settings fix the KV size: the size flag replaces every utilisation fix
    (the engine ignores the utilisation then; vramctl/diagnose/explicitkv.py). None when it does not apply."""
    from vramctl.diagnose.explicitkv import EXPLICIT_KV_LABELS, KV_SIZE_FLAGS, explicit_kv_fix, sets_kv_size

    if result.cause not in EXPLICIT_KV_LABELS:
        # a failure whose own fix already sets the KV size (the CPU worker's KV check): no utilisation fix beside it
        if sets_kv_size(result.facts) and any(f.flag in KV_SIZE_FLAGS and f.value for f in result.fixes):
            kept = tuple(f for f in result.fixes if f.flag != "--gpu-memory-utilization")
            return dataclasses.replace(result, fixes=kept) if kept != result.fixes else result
        return None
    found = explicit_kv_fix(result.cause, result.engine, dict(result.facts), source)
    if found is None:
        return None
    advice = FixAdvice(action=found.action, flag=found.flag, value=found.value, reason=found.reason)
    fixes: list[FixAdvice] = []
    placed = False
    for fix in result.fixes:
        if fix.flag in ("--gpu-memory-utilization", found.flag):
            if not placed:  # where the first utilisation fix stood (after a --max-model-len cap, say)
                fixes.append(advice)
                placed = True
            continue
        fixes.append(fix)
    if not placed:
        fixes.insert(0, advice)
    return dataclasses.replace(result, fixes=tuple(fixes[:5]), do_not=(found.do_not,))


def _with_plan_checked_fix(result: Diagnosis, source: object) -> Diagnosis:
    """Where the log's own numbers gave no value for the label's setting, the deployment the log describes is
    planned and the value that makes it start replaces the fix without a value (vramctl/diagnose/planfix.py)."""
    from vramctl.diagnose.planfix import PLAN_LABELS, plan_checked_fix

    if result.cause not in PLAN_LABELS:
        return result
    # a value computed from the failing message's own numbers stands; one from a setting or a default is re-checked
    computed_from_log = any(
        f.flag and f.value is not None and VALUE_NOTE not in f.reason for f in result.fixes[:1]
    )
    if computed_from_log:
        return result
    found = plan_checked_fix(source, result.cause, result.engine, dict(result.facts), result.bytes_read)
    if found is None:
        return result
    advice = FixAdvice(action=found.action, flag=found.flag, value=found.value, reason=found.reason)
    fixes = [f for f in result.fixes if f.flag != found.flag]
    return dataclasses.replace(result, fixes=(advice, *fixes[:4]))


def diagnose_text(text: str, *, catalogue: Catalogue | None = None) -> Diagnosis:
    """The same diagnosis for a log held in a string (e.g. a caught exception's message)."""
    return diagnose(io.BytesIO(text.encode("utf-8", "replace")), catalogue=catalogue)
