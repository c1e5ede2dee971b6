"""Logs wrapped by a collector (Docker json-file, CRI with partial lines, journald JSON / short): explain-oom
reads them like the plain log, and its evidence keeps the wrapped file's line numbers.

The fixtures in tests/fixtures/wrapped are the hand-written engine logs of tests/fixtures/oom (built from the
engines' format strings) wrapped the way each collector stores them: Docker's Go JSON encoding (`\\u001b`
colour codes, `\\u003c`, `\\"`), 16 KiB-style split pieces (cut shorter here), CRI `P` pieces with the other
stream writing in between, journald records with `"MESSAGE"` as an array of bytes and a traceback sent as
one multi-line message.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl.cli.main import main
from vramctl.diagnose import diagnose, reader
from vramctl.diagnose.reader import ScanStats, iter_log_lines, iter_matching_lines
from vramctl.diagnose.wrapped import sniff, unwrap_json_line

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
WRAPPED = FIXTURES / "wrapped"

CASES = [
    ("oom/vllm_v1_negative_kv.log", "vllm_v1_negative_kv.docker.json", "docker-json"),
    ("oom/vllm_v1_negative_kv.log", "vllm_v1_negative_kv.journal.json", "journald-json"),
    ("oom/vllm_v1_negative_kv.log", "vllm_v1_negative_kv.journal-short.log", None),
    ("oom/sglang_capture_oom.log", "sglang_capture_oom.docker-split.json", "docker-json"),
    ("oom/sglang_capture_oom.log", "sglang_capture_oom.cri-partial.log", "cri"),
]


def _docker(msg: str, stream: str = "stderr") -> str:
    """One json-file record as Docker writes it (Go's encoder: `<`, `>`, `&` and control characters as \\u00XX)."""
    body = json.dumps(msg, ensure_ascii=False)[1:-1]
    for ch in "<>&\x1b":
        body = body.replace(ch, f"\\u{ord(ch):04x}")
    return f'{{"log":"{body}","stream":"{stream}","time":"2025-05-02T14:11:00.123456789Z"}}'


@pytest.mark.parametrize(("plain", "wrapped", "kind"), CASES, ids=[c[1] for c in CASES])
def test_oom_wrapped_log_diagnosed_like_the_plain_one(plain: str, wrapped: str, kind: str | None) -> None:
    p = diagnose(FIXTURES / plain)
    w = diagnose(WRAPPED / wrapped)
    assert (w.cause, w.phase, w.signature, w.engine) == (p.cause, p.phase, p.signature, p.engine)
    assert w.facts == p.facts
    assert [(f.flag, f.value) for f in w.fixes] == [(f.flag, f.value) for f in p.fixes]
    if kind == "journald-json":  # the traceback is one record: its lines share a number, shown once
        assert {e.text for e in w.evidence} <= {e.text for e in p.evidence}
    else:
        assert [e.text for e in w.evidence] == [e.text for e in p.evidence]
    if kind is not None:
        assert any(f"unwrapped {kind}" in x for x in w.warnings)


@pytest.mark.parametrize(("plain", "wrapped", "kind"), CASES, ids=[c[1] for c in CASES])
def test_oom_wrapped_evidence_numbers_are_the_files(plain: str, wrapped: str, kind: str | None) -> None:
    """Each evidence line number is the wrapped file's line where that message starts."""
    lines = (WRAPPED / wrapped).read_text().split("\n")
    for ev in diagnose(WRAPPED / wrapped).evidence:
        line = lines[ev.line - 1]
        head = ev.text[:24]
        message = unwrap_json_line(line.encode())
        where = message.decode() if message is not None else line
        assert head in where, (ev.line, head, line[:120])


def test_oom_wrapped_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["explain-oom", "--json", str(WRAPPED / "sglang_capture_oom.cri-partial.log")])
    out = json.loads(capsys.readouterr().out)
    assert out["cause"] == "cuda-graph-capture-oom" and out["phase"] == "graph-capture"
    plain_code = main(["explain-oom", "--json", str(FIXTURES / "oom/sglang_capture_oom.log")])
    capsys.readouterr()
    assert code == plain_code


def test_oom_wrapped_gzip_docker_log(tmp_path: Path) -> None:
    src = WRAPPED / "vllm_v1_negative_kv.docker.json"
    gz = tmp_path / "container-json.log.1.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    d = diagnose(gz)
    assert (d.cause, d.phase) == ("no-kv-cache-memory", "kv-alloc")
    assert [e.line for e in d.evidence] == [e.line for e in diagnose(src).evidence]


# ------------------------------------------------------------------------------------------------
# The unwrapping itself


def test_oom_sniff_plain_logs_are_left_alone() -> None:
    plain = (FIXTURES / "oom/vllm_v1_negative_kv.log").read_bytes()
    assert sniff(plain) is None
    assert sniff((WRAPPED / "vllm_v1_negative_kv.docker.json").read_bytes()) == "docker-json"
    assert sniff((WRAPPED / "vllm_v1_negative_kv.journal.json").read_bytes()) == "journald-json"
    assert sniff((WRAPPED / "sglang_capture_oom.cri-partial.log").read_bytes()) == "cri"
    # a JSON access log line or a Python dict printed by the engine is not a wrapper
    assert sniff(b"{'model': 'x', 'max_model_len': 8192}\nINFO 01-01 00:00:00 [a.py:1] hi\n") is None


def test_oom_docker_escapes_are_undone() -> None:
    records = [
        _docker('\x1b[31mERROR\x1b[0m "quoted" <tag> & C:\\path\\n-literal \u00e9 \U0001f600 tab\there\n'),
    ]
    (line,) = iter_log_lines(io.BytesIO(("\n".join(records) + "\n").encode()))
    assert line.number == 1
    assert line.raw == 'ERROR "quoted" <tag> & C:\\path\\n-literal \u00e9 \U0001f600 tab\there'


def test_oom_docker_split_pieces_joined_across_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A message Docker cut into pieces (no `\\n` at the end of `log`) is one line, numbered as its first
    piece, even when the 8 MiB block boundary (here 64 bytes) falls between the pieces."""
    monkeypatch.setattr(reader, "CHUNK_BYTES", 64)
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity"
    records = [
        _docker("INFO 05-02 14:11:02 [core.py:1] starting\n", "stdout"),
        _docker(oom[:40]),
        _docker("INFO 05-02 14:11:03 [core.py:2] other stream\n", "stdout"),
        _docker(oom[40:80]),
        _docker(oom[80:] + " of 79.19 GiB\n"),
        _docker("tail\n"),
    ]
    lines = list(iter_log_lines(io.BytesIO(("\n".join(records) + "\n").encode())))
    assert [(ln.number, ln.text) for ln in lines] == [
        (1, "starting"),
        (3, "other stream"),
        (2, oom + " of 79.19 GiB"),
        (6, "tail"),
    ]
    hits = list(
        iter_matching_lines(io.BytesIO(("\n".join(records) + "\n").encode()), reader.re.compile(rb"Tried"))
    )
    assert [(h.number, h.text[:23]) for h in hits] == [(2, "torch.OutOfMemoryError:")]


def test_oom_cri_partial_lines_joined_per_stream() -> None:
    data = (
        b"2025-05-02T14:11:00.1Z stderr P torch.OutOfMemoryError: CUDA out of memory. \n"
        b'2025-05-02T14:11:00.2Z stdout F INFO:     127.0.0.1:5000 - "GET /health HTTP/1.1" 200 OK\n'
        b"2025-05-02T14:11:00.3Z stderr F Tried to allocate 1.00 GiB.\n"
        b"2025-05-02T14:11:00.4Z stderr F done\n"
    )
    lines = [(ln.number, ln.text) for ln in iter_log_lines(io.BytesIO(data))]
    assert lines == [
        (2, 'INFO:     127.0.0.1:5000 - "GET /health HTTP/1.1" 200 OK'),
        (1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB."),
        (4, "done"),
    ]


def test_oom_cri_whole_lines_untouched_and_unfinished_piece_kept() -> None:
    data = b"2025-05-02T14:11:00Z stderr F one\n2025-05-02T14:11:01Z stderr P two-\n"
    stats = ScanStats()
    assert [(ln.number, ln.text) for ln in iter_log_lines(io.BytesIO(data), stats=stats)] == [
        (1, "one"),
        (2, "two-"),
    ]
    assert stats.lines == 2


def test_oom_journald_byte_array_and_multiline_message() -> None:
    records = [
        {
            "__CURSOR": "s=1",
            "MESSAGE": list(b"\x1b[32mINFO\x1b[0m 05-02 14:11:02 [core.py:1] up"),
            "_PID": "7",
        },
        {
            "__CURSOR": "s=2",
            "MESSAGE": 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: boom',
        },
        {"__CURSOR": "s=3", "MESSAGE": "after", "_PID": "7"},
    ]
    data = "\n".join(json.dumps(r) for r in records).encode() + b"\n"
    lines = [(ln.number, ln.text) for ln in iter_log_lines(io.BytesIO(data))]
    assert lines == [
        (1, "up"),
        (2, "Traceback (most recent call last):"),
        (2, 'File "x.py", line 1'),
        (2, "ValueError: boom"),
        (3, "after"),
    ]


def test_oom_stray_wrapped_line_in_a_plain_log_is_unwrapped() -> None:
    """Sniffing looks at the first lines of each block; a lone JSON record later on is unwrapped per line."""
    plain = "".join(f"INFO 05-02 14:11:{i:02d} [core.py:1] line {i}\n" for i in range(40))
    data = (plain + _docker("ValueError: No available memory for the cache blocks.\n") + "\n").encode()
    last = list(iter_log_lines(io.BytesIO(data)))[-1]
    assert (last.number, last.text) == (41, "ValueError: No available memory for the cache blocks.")


def test_oom_over_long_docker_line_is_cut_and_unwrapped() -> None:
    long = "x" * (reader.MAX_LINE_BYTES + 100)
    data = (_docker("ValueError: " + long + "\n") + "\n" + _docker("next\n") + "\n").encode()
    lines = list(iter_log_lines(io.BytesIO(data)))
    assert lines[0].truncated and lines[0].text.startswith("ValueError: xxx")
    assert (lines[1].number, lines[1].text) == (2, "next")


def test_oom_shipper_json_other_key_order() -> None:
    data = b'{"time":"2025-05-02T14:11:00Z","stream":"stderr","_p":"F","log":"ERROR boom"}\n' * 3
    assert [ln.text for ln in iter_log_lines(io.BytesIO(data))] == ["ERROR boom"] * 3


_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x85\u2028\u2029"),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=30), st.integers(min_value=16, max_value=400))
def test_oom_docker_wrapped_reads_like_plain(lines: list[str], chunk: int) -> None:
    """Property: any text, Docker-wrapped (pieces of up to 25 characters), reads as the plain text does,
    with the number of each message's first piece, whatever the block size."""
    plain = "".join(f"{ln}\n" for ln in lines).encode()
    records: list[str] = []
    first_numbers: list[int] = []
    for ln in lines:
        pieces = [ln[i : i + 25] for i in range(0, len(ln), 25)] or [""]
        first_numbers.append(len(records) + 1)
        records += [_docker(p + ("\n" if k == len(pieces) - 1 else "")) for k, p in enumerate(pieces)]
    wrapped = ("\n".join(records) + "\n").encode()
    old = reader.CHUNK_BYTES
    reader.CHUNK_BYTES = chunk
    try:
        want = [ln.text for ln in iter_log_lines(io.BytesIO(plain))]
        got = list(iter_log_lines(io.BytesIO(wrapped)))
    finally:
        reader.CHUNK_BYTES = old
    assert [ln.text for ln in got] == want
    assert [ln.number for ln in got] == first_numbers


def test_oom_cri_piece_completed_in_a_block_that_sniffs_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    """The last piece of a split CRI line can open a block whose other lines are not CRI at all."""
    part1 = b"".join(b"2025-05-02T14:10:%02dZ stdout F INFO starting %d\n" % (i, i) for i in range(20))
    part1 += b"2025-05-02T14:11:00Z stderr P torch.OutOfMemoryError: CUDA out of memory. \n"
    part2 = b"2025-05-02T14:11:01Z stderr F Tried to allocate 1.00 GiB.\n" + b"".join(
        b"plain line %d\n" % i for i in range(12)
    )
    assert len(part2) < len(part1)
    monkeypatch.setattr(reader, "CHUNK_BYTES", len(part1))
    lines = [(ln.number, ln.text) for ln in iter_log_lines(io.BytesIO(part1 + part2))]
    assert (21, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.") in lines
    assert lines[-1] == (34, "plain line 11") and len(lines) == 33
