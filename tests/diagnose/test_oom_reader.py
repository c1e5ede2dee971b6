"""The streaming reader: prefixes, encodings, gzip, over-long lines, bad paths, bounded memory."""

from __future__ import annotations

import gzip
import io
import re
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl.core.errors import BadInputError
from vramctl.diagnose.reader import (
    MAX_LINE_BYTES,
    ScanStats,
    TruncatedInputError,
    iter_log_lines,
    iter_matching_lines,
    split_prefixes,
)

SAMPLES = Path(__file__).resolve().parents[2] / ".." / "shared" / "samples" / "oom"


@pytest.mark.parametrize(
    ("line", "process", "text"),
    [
        ("(EngineCore_DP0 pid=123) INFO 01-02 03:04:05 [core.py:1] hello", "EngineCore_DP0 pid=123", "hello"),
        ("(VllmWorker TP1 pid=77) ERROR 01-02 03:04:05 [w.py:9] boom", "VllmWorker TP1 pid=77", "boom"),
        (
            "(VllmWorker rank=0 pid=10672) ERROR 03-16 06:12:38 [m.py:375] x",
            "VllmWorker rank=0 pid=10672",
            "x",
        ),
        (
            "(RayWorkerWrapper pid=5, ip=10.0.0.1) INFO 01-01 00:00:00 [x.py:1] ray",
            "RayWorkerWrapper pid=5, ip=10.0.0.1",
            "ray",
        ),
        ("(pid=4242) Traceback (most recent call last):", "pid=4242", "Traceback (most recent call last):"),
        ("[TP3] Capture cuda graph failed", "TP3", "Capture cuda graph failed"),
        ("[2025-01-02 10:00:00 DP0 TP3] Load weight end.", "DP0 TP3", "Load weight end."),
        ("[2025-01-02 10:00:00] INFO:     127.0.0.1 GET /health", None, "INFO:     127.0.0.1 GET /health"),
        ("[rank0]: Traceback (most recent call last):", "rank0", "Traceback (most recent call last):"),
        (
            "INFO 02-26 09:54:02 model_runner.py:1115] Loading model weights took 5.2032 GB",
            None,
            "Loading model weights took 5.2032 GB",
        ),
        ("2024-12-19 21:40:35 ERROR 56542 [async_llm_engine.py:64] RuntimeError: x", None, "RuntimeError: x"),
        ("[multiproc_executor.py:492] ValueError: Free memory", None, "ValueError: Free memory"),
        (
            "2023-07-26T09:55:39.447617Z  INFO text_generation_launcher: Args",
            None,
            "text_generation_launcher: Args",
        ),
        (
            "[2026-03-25 05:44:29,435 W 39 39] (raylet) store_runner.cc:83: System memory",
            "raylet",
            "store_runner.cc:83: System memory",
        ),
        ("vllm-1  | INFO 01-02 03:04:05 [api_server.py:1] up", "vllm-1", "up"),
        ("plain message (not a tag) [nor this]", None, "plain message (not a tag) [nor this]"),
    ],
)
def test_oom_prefixes_are_split_off(line: str, process: str | None, text: str) -> None:
    got_process, got_text = split_prefixes(line)
    assert got_process == process
    assert got_text.strip() == text


def test_oom_reader_cleans_ansi_crlf_invalid_utf8_and_no_trailing_newline() -> None:
    data = b"\x1b[1;31mERROR\x1b[0m 01-02 03:04:05 [a.py:1] red\r\nbad \xff\xfe byte\nlast line"
    lines = list(iter_log_lines(io.BytesIO(data)))
    assert [ln.number for ln in lines] == [1, 2, 3]
    assert lines[0].text == "red"
    assert lines[0].raw == "ERROR 01-02 03:04:05 [a.py:1] red"
    assert "\ufffd" in lines[1].text
    assert lines[2].text == "last line"


def test_oom_reader_bare_cr_file_and_progress_bars() -> None:
    lines = list(iter_log_lines(io.BytesIO(b"one\rtwo\rthree")))
    assert [ln.text for ln in lines] == ["one", "two", "three"]
    lines = list(iter_log_lines(io.BytesIO(b"Loading 10%\rLoading 100%\rRuntimeError: x\nnext\n")))
    assert lines[0].number == 1 and "RuntimeError: x" in lines[0].text
    assert lines[1].number == 2


def test_oom_reader_gzip_by_magic_and_multimember(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"  # no .gz suffix: detected by content
    path.write_bytes(gzip.compress(b"a\nb\n") + gzip.compress(b"c\n"))
    stats = ScanStats()
    assert [ln.text for ln in iter_log_lines(path, stats=stats)] == ["a", "b", "c"]
    assert stats.gzip and stats.lines == 3


def test_oom_reader_truncated_gzip_yields_then_raises(tmp_path: Path) -> None:
    body = "".join(f"INFO line {i}\n" for i in range(20000)).encode()
    blob = gzip.compress(body)
    path = tmp_path / "cut.log.gz"
    path.write_bytes(blob[: len(blob) // 2])
    seen: list[str] = []
    with pytest.raises(TruncatedInputError, match="truncated gzip") as err:
        for ln in iter_log_lines(path):
            seen.append(ln.text)
    assert len(seen) > 100
    assert seen[0] == "INFO line 0"
    assert err.value.lines_read >= len(seen) - 1


def test_oom_reader_directory_and_missing_path(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="is a directory"):
        list(iter_log_lines(tmp_path))
    with pytest.raises(BadInputError, match="no such file"):
        list(iter_log_lines(tmp_path / "nope.log"))


def test_oom_reader_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    assert list(iter_log_lines(path)) == []


def test_oom_reader_long_line_cut_and_memory_bounded(tmp_path: Path) -> None:
    path = tmp_path / "long.log"
    with path.open("wb") as fh:
        fh.write(b"first\n")
        block = b"x" * (1 << 20)
        for _ in range(50):  # one 50 MiB line
            fh.write(block)
        fh.write(b" tail\nRuntimeError: CUDA out of memory\n")
    tracemalloc.start()
    lines = list(iter_log_lines(path))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert [ln.number for ln in lines] == [1, 2, 3]
    assert lines[1].truncated and len(lines[1].text) == MAX_LINE_BYTES
    assert lines[2].text == "RuntimeError: CUDA out of memory"
    assert peak < 64 << 20, f"peak {peak / 2**20:.1f} MiB for a 50 MiB line"


def test_oom_matching_lines_numbers_and_context() -> None:
    body = b"".join(f"noise {i}\n".encode() for i in range(1, 100001))
    body += b"Decode out of memory. Try to lower your batch size.\nTry to allocate 148 tokens.\nAvailable tokens: 2048\n"
    stats = ScanStats()
    got = list(
        iter_matching_lines(io.BytesIO(body), re.compile(rb"out of memory"), context_after=2, stats=stats)
    )
    assert [ln.number for ln in got] == [100001, 100002, 100003]
    assert got[2].text == "Available tokens: 2048"
    assert stats.lines == 100003


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=40),
        min_size=1,
        max_size=30,
    )
)
def test_oom_matching_agrees_with_full_read(lines: list[str]) -> None:
    data = "\n".join(lines).encode()
    pattern = re.compile(rb"a|Z")
    full = [ln for ln in iter_log_lines(io.BytesIO(data)) if pattern.search(ln.raw.encode())]
    fast = list(iter_matching_lines(io.BytesIO(data), pattern))
    assert [ln.number for ln in fast] == [ln.number for ln in full]
    total = list(iter_log_lines(io.BytesIO(data)))
    assert len(total) == len(lines) - (1 if lines[-1] == "" else 0)


@pytest.mark.shared("samples/oom")
def test_oom_reader_real_sample_prefixes() -> None:
    lines = list(iter_log_lines(SAMPLES / "014.log"))
    assert lines[0].process == "VllmWorker rank=0 pid=10672"
    assert lines[0].text.startswith("torch.OutOfMemoryError: CUDA out of memory.")
