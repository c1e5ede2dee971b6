"""The native scan (Hyperscan) and the pure-Python passes give identical results.

- the failure-anchor candidates of one native pass == one literal search per anchor (fixtures, generated text);
- the key phrases of a line found natively == the trie alternation's `finditer` (every fixture line, generated lines
  of overlapping phrases);
- `diagnose()` of every fixture log, every shared sample log (`oom`, `oom-dev`, `startup`) and a generated log with
  failures in its body: the same JSON with `VRAMCTL_NATIVE_SCAN=0` (the fallback) as with the native search.
"""

from __future__ import annotations

import contextlib
import gzip
import importlib.util
import io
import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl.core.errors import BadInputError
from vramctl.diagnose.catalogue import load_catalogue
from vramctl.diagnose.classify import _Scanner, diagnose
from vramctl.diagnose.literals import (
    NATIVE_ENV,
    native_finder,
    native_key_finder,
    native_line_finder,
    native_line_keys,
)

needs_hyperscan = pytest.mark.skipif(
    importlib.util.find_spec("hyperscan") is None,
    reason="the native scan needs the hyperscan package (a dependency where a wheel exists: x86-64, macOS arm64)",
)

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
SHARED_SAMPLES = ROOT.parent.parent / "shared" / "samples"
LOG_SUFFIXES = (".log", ".txt", ".gz", ".json", ".jsonl")


def _logs(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in LOG_SUFFIXES)


def _literal_candidates(data: bytes, lo: int, hi: int, anchors: tuple[bytes, ...]) -> list[tuple[int, int]]:
    found: dict[int, int] = {}
    for anchor in anchors:
        i = data.find(anchor, lo, hi)
        while i >= 0:
            start = data.rfind(b"\n", 0, i) + 1
            end = data.find(b"\n", i)
            found[start] = len(data) if end < 0 else end
            i = data.find(anchor, i + 1, hi)
    return sorted(found.items())


def _text(path: Path) -> bytes:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        with contextlib.suppress(OSError, EOFError):
            data = gzip.decompress(data)
    return data


@needs_hyperscan
def test_native_path_is_available() -> None:
    cat = load_catalogue()
    assert native_finder(cat.failure_anchors) is not None
    assert native_key_finder(cat.key_words) is not None


@needs_hyperscan
def test_native_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    cat = load_catalogue()
    monkeypatch.setenv(NATIVE_ENV, "0")
    assert native_finder(cat.failure_anchors) is None
    assert native_key_finder(cat.key_words) is None


@needs_hyperscan
@pytest.mark.parametrize("log", _logs(FIXTURES), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_native_candidates_and_keys_equal_python(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cat = load_catalogue()
    data = _text(log)
    native = _Scanner(cat)
    assert native._key_finder is not None
    for lo, hi in ((0, len(data)), (0, len(data) // 2), (data.find(b"\n") + 1, len(data))):
        hi = data.rfind(b"\n", 0, hi) + 1 if hi < len(data) else hi
        for anchors in (cat.failure_anchors, cat.all_anchors):
            assert native._candidates(data, lo, hi, anchors) == _literal_candidates(data, lo, hi, anchors)
    finder = native._key_finder
    for line in data.split(b"\n"):
        line = line[:65536]
        assert finder(line) == frozenset(m.group().decode() for m in cat.key_regex.finditer(line)), line[:200]


@needs_hyperscan
@settings(max_examples=200, deadline=None)
@given(st.data())
def test_native_keys_equal_finditer_on_overlapping_phrases(data: st.DataObject) -> None:
    """Lines made of key phrases, their pieces and glue: overlaps, prefixes and repeats of the phrases."""
    cat = load_catalogue()
    finder = native_key_finder(cat.key_words)
    assert finder is not None
    words = list(cat.key_words)
    pieces = st.one_of(
        st.sampled_from(words),
        st.sampled_from(words).map(lambda w: w[: max(1, len(w) // 2)]),
        st.sampled_from(words).map(lambda w: w[len(w) // 3 :]),
        st.sampled_from([b" ", b"", b"x", b"(", b":", b"e", b"r"]),
    )
    line = b"".join(data.draw(st.lists(pieces, max_size=12)))
    assert finder(line) == frozenset(m.group().decode() for m in cat.key_regex.finditer(line))


@needs_hyperscan
@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["Error", "rror", "rr", "emory", "emor", "Kill", "Kil", "SIG", "SI", "atchdog", "watch", "\n", " ",
             "plain words", "CUDA out of memory", "\n\n"]
        ),
        max_size=60,
    ),
    st.integers(0, 50),
    st.integers(0, 50),
)
def test_native_candidates_equal_python_generated(parts: list[str], lo_cut: int, hi_cut: int) -> None:
    cat = load_catalogue()
    data = "".join(parts).encode()
    lo = min(lo_cut, len(data))
    hi = max(lo, len(data) - hi_cut)
    assert _Scanner(cat)._candidates(data, lo, hi, cat.failure_anchors) == _literal_candidates(
        data, lo, hi, cat.failure_anchors
    )


@needs_hyperscan
@pytest.mark.parametrize("log", _logs(FIXTURES)[::3], ids=lambda p: str(p.relative_to(FIXTURES)))
def test_native_line_keys_equal_line_by_line(log: Path) -> None:
    """The key phrases of a range's candidate lines from one scan: what the per-line finder gives each line, with the
    64 KiB cut and with a short cut that falls inside phrases."""
    cat = load_catalogue()
    data = _text(log)
    per_line = native_key_finder(cat.key_words)
    by_range = native_line_keys(cat.key_words)
    assert per_line is not None and by_range is not None
    lines = _literal_candidates(data, 0, len(data), cat.all_anchors)
    for cap in (65536, 37):
        got = by_range(data, lines, cap)
        assert got == [per_line(data[s : min(e, s + cap)]) for s, e in lines]
        assert by_range(data, lines[1::2], cap) == [per_line(data[s : min(e, s + cap)]) for s, e in lines[1::2]]


@needs_hyperscan
@settings(max_examples=200, deadline=None)
@given(st.data())
def test_native_line_finder_and_keys_on_generated_text(data: st.DataObject) -> None:
    """Lines of key phrases, their pieces, anchors and newlines: the range finder gives the lines the per-anchor passes
    give, and the range key scan what the per-line key finder gives each of them."""
    cat = load_catalogue()
    words = list(cat.key_words)
    pieces = st.one_of(
        st.sampled_from(words),
        st.sampled_from(words).map(lambda w: w[: max(1, len(w) // 2)]),
        st.sampled_from(list(cat.all_anchors)),
        st.sampled_from([b"\n", b"\n\n", b" ", b"x", b"KV", b"rror", b"emory"]),
    )
    text = b"".join(data.draw(st.lists(pieces, max_size=40)))
    lo = data.draw(st.integers(0, len(text)))
    hi = data.draw(st.integers(lo, len(text)))
    finder = native_line_finder(cat.all_anchors)
    by_range = native_line_keys(cat.key_words)
    per_line = native_key_finder(cat.key_words)
    assert finder is not None and by_range is not None and per_line is not None
    lines = finder(text, lo, hi)
    assert lines == _literal_candidates(text, lo, hi, cat.all_anchors)
    cap = data.draw(st.sampled_from([65536, 1, 9, 30]))
    assert by_range(text, lines, cap) == [per_line(text[s : min(e, s + cap)]) for s, e in lines]


def _diagnosis_json(path: Path) -> str:
    try:
        return json.dumps(diagnose(path).to_json(), sort_keys=True, default=str)
    except BadInputError as exc:
        return f"bad input: {exc}"


def _assert_same_both_ways(paths: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    assert paths
    monkeypatch.delenv(NATIVE_ENV, raising=False)
    native = {p: _diagnosis_json(p) for p in paths}
    monkeypatch.setenv(NATIVE_ENV, "0")
    python = {p: _diagnosis_json(p) for p in paths}
    differ = [str(p) for p in paths if native[p] != python[p]]
    assert not differ


@needs_hyperscan
def test_diagnose_fixtures_same_native_and_python(monkeypatch: pytest.MonkeyPatch) -> None:
    _assert_same_both_ways(_logs(FIXTURES), monkeypatch)


@needs_hyperscan
@pytest.mark.shared("samples/oom")
@pytest.mark.shared("samples/oom-dev")
@pytest.mark.shared("samples/startup")
def test_diagnose_samples_same_native_and_python(monkeypatch: pytest.MonkeyPatch) -> None:
    paths = [p for sub in ("oom", "oom-dev", "startup") for p in _logs(SHARED_SAMPLES / sub)]
    _assert_same_both_ways(paths, monkeypatch)


@needs_hyperscan
def test_diagnose_body_failures_same_native_and_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log larger than the head, with failure lines scattered through its body (each anchor, a lone watchdog,
    keyless `Error` lines): the same hits and the same diagnosis both ways."""
    rng = random.Random(7)
    body_lines = [
        "INFO 11-30 10:00:00 [logger.py:43] Received request chatcmpl-1: prompt: 'hi', params: SamplingParams(n=1)",
        "INFO 11-30 10:00:01 [loggers.py:118] Engine 000: Avg prompt throughput: 1.0 tokens/s, GPU KV cache usage: 1%",
        'INFO:     10.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    ]
    rare = [
        "ERROR 11-30 10:00:02 [serving_chat.py:1] Error in chat completion stream generator.",
        "[rank0]:[E ProcessGroupNCCL.cpp:1] [PG 0 Rank 0] Watchdog caught collective operation timeout",
        "Killed",
        "Fatal Python error: Bus error (SIGBUS)",
        "WARNING 11-30 10:00:03 [x.py:1] Memory usage is high: 95%",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.00 GiB is free.",
    ]
    lines = []
    size = 0
    while size < 5 << 20:
        line = rng.choice(rare) if rng.random() < 0.0005 else rng.choice(body_lines)
        lines.append(line)
        size += len(line) + 1
    log = tmp_path / "body.log"
    log.write_text("\n".join(lines) + "\n")
    cat = load_catalogue()

    def hits() -> list[tuple[int, frozenset[str]]]:
        from vramctl.diagnose.reader import ScanStats

        return [(h.line.number, h.keys) for h in _Scanner(cat).scan(log, ScanStats())]

    monkeypatch.delenv(NATIVE_ENV, raising=False)
    native_hits, native_json = hits(), _diagnosis_json(log)
    monkeypatch.setenv(NATIVE_ENV, "0")
    python_hits, python_json = hits(), _diagnosis_json(log)
    assert native_hits == python_hits
    assert any(n > 20_000 for n, _ in native_hits)  # failures past the head were found
    assert native_json == python_json
    assert re.search(r'"cause"', native_json)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from([0, 1, 10, 80, 700, 3000, 9000, 70_000]), min_size=1, max_size=80),
    st.booleans(),
)
def test_whole_line_chunks_read_the_same_lines(tmp_path_factory: pytest.TempPathFactory, sizes: list[int], end_nl: bool) -> None:
    """A regular file read in place in chunks cut at a newline (`_iter_whole_lines`) gives exactly the lines of the
    same bytes read from a stream: lines longer than the probe, than a chunk and than the line cap included."""
    from vramctl.diagnose import reader

    rng = random.Random(len(sizes))
    text = b"\n".join(bytes(rng.choice(b"abc xyz") for _ in range(n)) for n in sizes) + (b"\n" if end_nl else b"")
    path = tmp_path_factory.mktemp("chunks") / "log.txt"
    path.write_bytes(text)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reader, "CHUNK_BYTES", 4096)
        mp.setattr(reader, "PROBE_BYTES", 512)
        from_file = [(x.number, x.raw, x.truncated) for x in reader.iter_log_lines(path)]
        from_stream = [(x.number, x.raw, x.truncated) for x in reader.iter_log_lines(io.BytesIO(text))]
    assert from_file == from_stream


@needs_hyperscan
@settings(max_examples=150, deadline=None)
@given(st.data())
def test_native_engine_words_equal_substring_tests(data: st.DataObject) -> None:
    """The engine vote of a line (which engines' words it holds) is the same natively as with `in` tests, non-ASCII
    text included."""
    from vramctl.diagnose.literals import native_presence

    cat = load_catalogue()
    words = [(w.encode(), engine) for engine, ws in cat.engines.items() for w in ws]
    finder = native_presence(tuple(w for w, _ in words))
    assert finder is not None
    pieces = st.one_of(
        st.sampled_from([w.decode() for w, _ in words]),
        st.sampled_from([w.decode()[:-1] for w, _ in words]),
        st.text(max_size=5),
    )
    raw = "".join(data.draw(st.lists(pieces, max_size=8)))
    found = finder(raw.encode("utf-8", "surrogatepass"))
    assert found is not None
    assert {words[i][1] for i in found} == {e for e, ws in cat.engines.items() if any(w in raw for w in ws)}


@needs_hyperscan
@settings(max_examples=150, deadline=None)
@given(st.data())
def test_native_engine_words_of_many_lines_equal_line_by_line(data: st.DataObject) -> None:
    """The engine words of a batch of lines from one scan: what the per-line scan gives each line (empty lines,
    non-ASCII text, words cut at a line's end included); a line holding a newline sends the batch line by line."""
    from vramctl.diagnose.literals import native_presence, native_presence_lines

    cat = load_catalogue()
    words = tuple(w.encode() for ws in cat.engines.values() for w in ws)
    per_line = native_presence(words)
    batch = native_presence_lines(words)
    assert per_line is not None and batch is not None
    pieces = st.one_of(
        st.sampled_from([w.decode() for w in words]),
        st.sampled_from([w.decode()[:-1] for w in words]),
        st.sampled_from([w.decode()[1:] for w in words]),
        st.text(max_size=4),
    )
    lines = [
        "".join(data.draw(st.lists(pieces, max_size=6))).replace("\n", " ")
        for _ in range(data.draw(st.integers(0, 12)))
    ]
    got = batch(lines)
    assert got == [per_line(x.encode("utf-8", "surrogatepass")) for x in lines]
    if lines:
        assert batch([*lines, "a\nb"]) is None



@needs_hyperscan
@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.sampled_from(["Error", "rror", "emory", "Kill", "SIG", "atchdog", "\n", " ", "abcdefgh", "xyz" * 7]),
        max_size=80,
    ),
    st.integers(0, 30),
)
def test_native_windows_find_matches_across_their_edges(parts: list[str], lo_cut: int) -> None:
    """The native finder scans in doubling windows that overlap by the longest anchor less one byte: with tiny
    windows every match across a window's edge is still found, and the first one by its end."""
    from vramctl.diagnose import literals

    cat = load_catalogue()
    data = "".join(parts).encode()
    lo = min(lo_cut, len(data))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(literals, "FIRST_WINDOW", 8)
        mp.setattr(literals, "MAX_WINDOW", 32)
        for anchors in (cat.failure_anchors, cat.all_anchors):
            assert _Scanner(cat)._candidates(data, lo, len(data), anchors) == _literal_candidates(
                data, lo, len(data), anchors
            )


@needs_hyperscan
def test_native_windows_every_offset() -> None:
    """Each anchor (the longest ones decide the overlap) placed at every offset around tiny windows' edges."""
    from vramctl.diagnose import literals

    cat = load_catalogue()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(literals, "FIRST_WINDOW", 8)
        mp.setattr(literals, "MAX_WINDOW", 16)
        for anchors in (cat.failure_anchors, cat.all_anchors):
            finder = native_finder(anchors)
            assert finder is not None
            longest = sorted(anchors, key=len)[-3:]
            for anchor in {*longest, *cat.failure_anchors}:
                for pad in range(0, 80):
                    data = b"_" * pad + anchor + b"_" * 5
                    assert finder(data, 0, len(data)) == pad + len(anchor) - 1, (anchor, pad)


def _split_prefixes_reference(line: str) -> tuple[str | None, str]:
    """split_prefixes as it was before the first-character dispatch: every regex tried in order."""
    from vramctl.diagnose import reader

    process: str | None = None
    rest = line
    for _ in range(8):
        stripped = rest.lstrip(" ")
        matched = False
        for regex in reader._PROCESS_RES:
            m = regex.match(stripped)
            if m is not None:
                if process is None:
                    process = m.group("tag")
                rest = stripped[m.end() :]
                matched = True
                break
        if matched:
            continue
        m = reader._BRACKET_TAG_RE.match(stripped)
        if m is not None and (m.group("ts") or m.group("tag")):
            if m.group("tag") and process is None:
                process = m.group("tag").strip()
            rest = stripped[m.end() :]
            continue
        for regex in reader._HEADER_RES:
            m = regex.match(stripped)
            if m is not None:
                rest = stripped[m.end() :]
                matched = True
                break
        if not matched:
            break
    return process, rest


def test_split_prefixes_dispatch_equals_every_regex() -> None:
    """The first-character dispatch of split_prefixes peels exactly what trying every regex peels: every line of
    every fixture log, and each line behind stacked prefixes of every kind (Unicode digits included)."""
    from vramctl.diagnose.reader import clean_line, split_prefixes

    prefixes = [
        "", "(EngineCore_DP0 pid=123) ", "[rank0]: ", "[TP3] ", "[1,3]<stderr>: ", "vllm-1  | ",
        "INFO 01-02 03:04:05 [file.py:123] ", "2024-12-19 21:40:35 ERROR 56542 [file.py:64] ",
        "2023-07-26T09:55:39.447617Z  INFO ", "[file.py:12] ", "LMCache WARNING: ",
        "2025-01-01T00:00:00.123456789Z stdout F ", "May 01 12:00:00 host vllm[123]: ", "\u0662\u0660\u0662\u0664 ",
        "INFO 2025-11-19T20:16:36.096674521Z [resource.labels.containerName: vllm] ", "[2025-05-19 18:08:26,176] ",
        "é ", "-- ", "  ",
    ]
    lines = [clean_line(raw[:4096]) for log in _logs(FIXTURES) for raw in _text(log).split(b"\n")[:400]]
    for a in prefixes:
        for b in prefixes:
            lines.append(a + b + "Received request x")
    for line in lines:
        assert split_prefixes(line) == _split_prefixes_reference(line), line[:200]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x3000), max_size=60) | st.text(alphabet="\x00\x08\x09\x1b\x1f\x7f\ufffdab", max_size=30))
def test_binary_check_counts_what_the_character_test_counted(text: str) -> None:
    """check_text's one-regex count of non-text characters == the per-character test it replaced."""
    from vramctl.diagnose import reader

    expected = sum(
        1 for ch in text if ch == "\ufffd" or (ch < " " and ch not in reader._TEXT_CONTROLS) or ch == "\x7f"
    )
    assert len(reader._NOT_TEXT_RE.findall(text)) == expected


def test_setting_words_prefilter_never_skips_a_match() -> None:
    """A line is read for a setting only when it holds the setting's key or one of its flags: every line of every
    fixture on which a setting's regex matches holds one of them (and made-up lines for each word)."""
    from vramctl.diagnose.reader import clean_line

    cat = load_catalogue()
    lines = [clean_line(raw[:4096]) for log in _logs(FIXTURES) for raw in _text(log).split(b"\n")]
    for setting in cat.settings:
        for word in setting.words:
            lines += [f"{word}=0.5", f"'{word}': 8192", f"{word} 12", f"x {word.upper()}=1"]
        for line in lines:
            if setting.regex.compiled.search(line) is not None:
                assert any(word in line for word in setting.words), (setting.name, line[:200])


@needs_hyperscan
@pytest.mark.parametrize("cached", [False, True], ids=["compiled", "from-cache"])
def test_native_databases_answer_natively(cached: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The finders answer from Hyperscan itself, whether their database was compiled or loaded from the package's cache
    (a loaded database needs its own scratch space; a finder that silently fell back to Python would pass every
    equality test above): the pure-Python fallback is made to fail and the answers must still come."""
    from vramctl.diagnose import literals

    cat = load_catalogue()
    monkeypatch.delenv("VRAMCTL_CACHE", raising=False)
    for memo in (literals._CACHE, literals._KEY_CACHE, literals._PRESENCE_CACHE):
        monkeypatch.setattr(literals, memo_name(literals, memo), {})
    if cached:  # build once (writes the cache), forget, build again (reads it)
        native_finder(cat.failure_anchors)
        native_key_finder(cat.key_words)
        monkeypatch.setattr(literals, "_CACHE", {})
        monkeypatch.setattr(literals, "_KEY_CACHE", {})

    def fail(*_args: object) -> int:
        raise AssertionError("the pure-Python fallback ran")

    monkeypatch.setattr(literals, "_first_end", fail)
    finder = native_finder(cat.failure_anchors)
    keys = native_key_finder(cat.key_words)
    assert finder is not None and keys is not None
    data = b"INFO ok\nERROR Killed process 12\n"
    assert finder(data, 0, len(data)) == data.index(b"Kill") + 3
    assert keys(b"torch.OutOfMemoryError: CUDA out of memory.") == frozenset(
        m.group().decode() for m in cat.key_regex.finditer(b"torch.OutOfMemoryError: CUDA out of memory.")
    )


def memo_name(module: object, memo: object) -> str:
    return next(name for name, value in vars(module).items() if value is memo)


@needs_hyperscan
def test_native_finders_from_several_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The finders keep no state between calls (each scan's matches go through its own context): diagnoses made in
    four threads at once equal the ones made one by one."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.delenv(NATIVE_ENV, raising=False)
    logs = [p for p in _logs(FIXTURES / "oom") if p.suffix == ".log"][:24]
    alone = [_diagnosis_json(p) for p in logs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(_diagnosis_json, logs * 3))
    assert together == alone * 3
