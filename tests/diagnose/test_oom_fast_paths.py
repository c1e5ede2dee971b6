"""The shortcuts of explain-oom's per-line work answer exactly what the slower tests they skip answer.

Each shortcut (docs/perf/explain-oom.md, issue 9, fifth round) replaces a regex search by cheaper tests that are true
whenever the regex can match: the inventory's pre-gate words as `bytes.find` calls, the control-character search behind
`str.isprintable`, the escaped-ANSI search behind substring tests. These tests compare each with the reference on the
fixture and sample-like logs and on generated lines built to hit the edges; and check the CLI's run without the cycle
collector, and line numbers and line counts across read-block boundaries (CRLF, no final newline, one line, empty).
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vramctl.diagnose import classify, reader
from vramctl.diagnose.classify import diagnose
from vramctl.diagnose.reader import clean_line

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# the pre-gate as it was: one alternation regex
_PREGATE_REFERENCE = re.compile(
    rb"emory|rror|Kill|kill|KILL|SIG|OOM|oom|lloc|ail|137|space|full|insufficient|blocks|created"
)


def _reference_clean_line(data: bytes) -> str:
    """clean_line before the shortcuts: every regex search run whenever its old guard allowed it."""
    text = data.decode("utf-8", "replace")
    if text.endswith("\r"):
        text = text.rstrip("\r")
    if "\x1b" in text or "\x9b" in text:
        text = reader._ANSI_RE.sub("", text)
    if "\r" in text:
        text = " ".join(seg for seg in text.split("\r") if seg.strip())
    if reader._CONTROL_RE.search(text) is not None:
        text = reader._CONTROL_RE.sub("", text)
    if ("#033[" in text or "\\" in text or "^[[" in text) and reader._ESCAPED_ANSI_RE.search(text) is not None:
        text = reader._ESCAPED_ANSI_RE.sub("", text)
    if "\\" in text and len(reader._JSON_ESCAPE_RE.findall(text, 0, 65536)) >= 2:
        text = text.replace("\\n", " ").replace("\\t", " ").replace('\\"', '"')
    if text[:1] == ">" and text[:3] != ">>>":
        m = reader._QUOTE_RE.match(text)
        if m is not None:
            text = text[m.end() :]
    return text


def _fixture_lines() -> list[bytes]:
    lines: list[bytes] = []
    for path in sorted(FIXTURES.rglob("*")):
        if path.is_file() and path.stat().st_size < 4 << 20:
            lines.extend(path.read_bytes().split(b"\n"))
    assert len(lines) > 2_000  # the fixtures are there
    return lines


# pieces the generated lines are built from: every escape form, control characters, breaks, JSON escapes, quotes
_PIECES = [
    "INFO 11-30 09:00:40 [logger.py:43] ",
    "torch.OutOfMemoryError: CUDA out of memory. ",
    "Tried to allocate 2.00 GiB",
    "#033[33m",
    "#033[",
    "\\u001b[0m",
    "\\u001B[1;31m",
    "\\u001",
    "\\x1b[0m",
    "\\x1B[2K",
    "\\x1",
    "\\033[0m",
    "\\033",
    "^[[0m",
    "^[",
    "\x1b[31m",
    "\x1b]0;title\x07",
    "\x9b",
    "\\n",
    "\\t",
    '\\"',
    "\\",
    "\t",
    "\r",
    "\x00",
    "\x07",
    "\x0b",
    "\x0c",
    "\x1f",
    "\x7f",
    "\x85",
    "\u2028",
    "é",
    "> ",
    ">>> ",
    " ",
    "[",
    "emory",
    "rro",
    "Kil",
    "lloc",
    "13",
    "7",
    "space",
    "insufficien",
    "t",
    "blocks",
    "created",
]


def _generated_lines(count: int, seed: int = 9) -> list[bytes]:
    rng = random.Random(seed)
    out: list[bytes] = []
    for _ in range(count):
        parts = [rng.choice(_PIECES) for _ in range(rng.randrange(1, 9))]
        raw = "".join(parts).encode("utf-8")
        if rng.random() < 0.1:  # invalid UTF-8 too
            raw += bytes([rng.randrange(0x80, 0x100)])
        out.append(raw)
    return out


def test_pregate_words_are_the_alternation() -> None:
    assert set(classify._INVENTORY_PREGATE_WORDS) == set(_PREGATE_REFERENCE.pattern.split(b"|"))


def test_pregate_answers_what_the_regex_answers() -> None:
    lines = _fixture_lines() + _generated_lines(20_000)
    hits = 0
    for raw in lines:
        expected = _PREGATE_REFERENCE.search(raw) is not None
        assert classify._has_pregate_word(raw) is expected, raw[:200]
        hits += expected
    assert 0 < hits < len(lines)  # both answers were seen


def test_clean_line_equals_the_reference() -> None:
    lines = _fixture_lines() + _generated_lines(30_000)
    changed = 0
    for raw in lines:
        got = clean_line(raw)
        assert got == _reference_clean_line(raw), raw[:200]
        changed += got != raw.decode("utf-8", "replace")
    assert changed > 1000  # the generated lines exercise the cleaning, not only the shortcuts


def test_no_printable_character_is_a_removed_control() -> None:
    """`str.isprintable()` skips the control search: it must be False for every character the search removes."""
    removed = [chr(c) for c in range(0x110000) if reader._CONTROL_RE.match(chr(c))]
    assert removed and not any(ch.isprintable() for ch in removed)


@pytest.mark.parametrize(
    "code", ["#033[33m", "\\u001b[0m", "\\u001B[0m", "\\x1b[1;31m", "\\x1B[K", "\\033[0m", "^[[0m"]
)
def test_escaped_ansi_guard_holds_for_every_form(code: str) -> None:
    for text in (code, f"a {code}b", f"{code}{code}", f'"msg": "x {code} y\\n"'):
        assert reader._ESCAPED_ANSI_RE.search(text) is not None
        assert reader._may_hold_escaped_ansi(text)
    assert not reader._may_hold_escaped_ansi('{"log": "INFO a\\nb\\tc \\"q\\""}')  # JSON escapes only


def test_escaped_ansi_guard_is_true_wherever_the_regex_matches() -> None:
    for raw in _generated_lines(30_000, seed=21):
        text = raw.decode("utf-8", "replace")
        if reader._ESCAPED_ANSI_RE.search(text) is not None:
            assert reader._may_hold_escaped_ansi(text), text


def test_lean_run_has_no_cycle_collector_then_restores_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from vramctl.cli.lean import lean_command

    log = tmp_path / "oom.log"
    log.write_text(
        "INFO start\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.00 GiB is free.\n"
    )
    during: list[bool] = []

    def watched(source: object, **kwargs: object) -> object:
        during.append(gc.isenabled())
        return diagnose(source, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(classify, "diagnose", watched)
    assert gc.isenabled()
    assert lean_command(["explain-oom", "--json", str(log)]) == 0
    assert during == [False]
    assert gc.isenabled()  # an in-process caller gets its collector back


def test_cli_process_freezes_before_exit_with_the_same_answer(tmp_path: Path) -> None:
    log = tmp_path / "oom.log"
    log.write_text(
        "INFO start\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.00 GiB is free.\n"
    )
    code = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0, file=sys.stderr))\n"
        f"sys.argv = ['vramctl', 'explain-oom', '--json', {str(log)!r}]\n"
        "from vramctl.__main__ import run\n"
        "run()\n"
    )
    lean = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert lean.returncode == 0, lean.stderr
    assert "frozen True" in lean.stderr
    typer_path = subprocess.run(
        [sys.executable, "-c", "from vramctl.cli.main import entry; entry()", "explain-oom", str(log), "--json"],
        capture_output=True,
        text=True,
    )
    assert typer_path.returncode == 0
    assert lean.stdout == typer_path.stdout


# --------------------------------------------------------------------------------------------------
# Line numbers and counts across read blocks


def _oom_log(lines: int, newline: bytes, final_newline: bool, width: int) -> tuple[bytes, int]:
    """A log of `lines` lines with the OOM near the end; (bytes, the OOM's 1-based line)."""
    rng = random.Random(lines + width)
    body = [f"INFO request {i} " + "x" * rng.randrange(0, width) for i in range(lines)]
    oom_at = max(0, lines - 3)
    body[oom_at] = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.00 GiB is free."
    )
    data = newline.join(line.encode() for line in body) + (newline if final_newline else b"")
    return data, oom_at + 1


@pytest.mark.parametrize("chunk", [8 << 20, 4096, 65536 + 7])
@pytest.mark.parametrize(
    ("lines", "newline", "final_newline"),
    [(3000, b"\n", True), (3000, b"\r\n", True), (3000, b"\n", False), (1, b"\n", False), (1, b"\n", True)],
)
def test_line_numbers_across_block_boundaries(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    chunk: int,
    lines: int,
    newline: bytes,
    final_newline: bool,
) -> None:
    monkeypatch.setattr(reader, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(reader, "PROBE_BYTES", min(reader.PROBE_BYTES, chunk // 2))
    data, oom_line = _oom_log(lines, newline, final_newline, 300)
    path = tmp_path / "log.log"
    path.write_bytes(data)
    result = diagnose(path)
    assert result.lines_read == data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    assert result.found_failure
    assert oom_line in {e.line for e in result.evidence}


def test_empty_log_reads_no_line(tmp_path: Path) -> None:
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    result = diagnose(path)
    assert result.lines_read == 0 and not result.found_failure
