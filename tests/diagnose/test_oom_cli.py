"""`vramctl explain-oom` as a user runs it: outputs, exit codes, bad input (never a traceback)."""

from __future__ import annotations

import gzip
import io
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from vramctl.cli.main import main

SAMPLES = Path(__file__).resolve().parents[2] / ".." / "shared" / "samples" / "oom"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["explain-oom", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.shared("samples/oom")
def test_oom_cli_json_keys_and_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(SAMPLES / "001.log"), "--json")
    assert code == 0
    data = json.loads(out)
    for key in (
        "cause",
        "phase",
        "confidence",
        "evidence",
        "facts",
        "fixes",
        "other_failures",
        "engine",
        "engine_version",
    ):
        assert key in data
    assert data["cause"] == "gpu-util-exceeds-free-memory"
    assert data["evidence"][0] == {"line": 1, "text": data["evidence"][0]["text"]}
    assert isinstance(data["facts"]["free_bytes"], int)
    assert set(data["fixes"][0]) == {"action", "flag", "value", "reason"}
    assert data["fixes"][0]["value"] == 0.64


@pytest.mark.shared("samples/oom")
def test_oom_cli_panel(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(SAMPLES / "022.log"))
    assert code == 0
    assert "kv-cache-too-small-for-max-model-len" in out
    assert "--max-model-len 205728" in out
    assert "do not" in out


@pytest.mark.shared("samples/oom")
def test_oom_cli_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(SAMPLES / "037.log"), "--markdown")
    assert code == 0
    assert out.startswith("### `allocator-fragmentation`")
    assert "`PYTORCH_ALLOC_CONF=expandable_segments:True`" in out


@pytest.mark.shared("samples/oom")
def test_oom_cli_not_oom_is_a_diagnosis(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(SAMPLES / "040.log"), "--json")
    assert code == 0
    assert json.loads(out)["cause"] == "not-oom"
    assert "illegal memory access" in json.loads(out)["what"]


def test_oom_cli_no_failure_exit_3(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    log = tmp_path / "ok.log"
    log.write_text(
        "INFO 11-30 09:00:04 [api_server.py:1395] vLLM API server version 0.9.1\nINFO:     Application startup complete.\n"
    )
    code, out, _ = run(capsys, str(log), "--json")
    assert code == 3
    data = json.loads(out)
    assert data["cause"] == "no-failure" and data["engine_version"] == "0.9.1"


def test_oom_cli_empty_file_exit_3(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    log = tmp_path / "empty.log"
    log.write_bytes(b"")
    code, out, err = run(capsys, str(log), "--json")
    assert code == 3 and json.loads(out)["cause"] == "no-failure" and not err


def test_oom_cli_binary_garbage(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    log = tmp_path / "garbage.bin"
    log.write_bytes(os.urandom(3 << 20))
    code, out, err = run(capsys, str(log), "--json")
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.strip().splitlines() == [err.strip()] and "binary data, not a text log" in err
    # a log with a few garbled lines is still a log
    text = (Path(__file__).resolve().parents[2] / ".." / "shared" / "samples" / "oom" / "001.log").resolve()
    if text.exists():
        noisy = tmp_path / "noisy.log"
        noisy.write_bytes(os.urandom(200) + b"\n" + text.read_bytes())  # one garbled line
        code, out, err = run(capsys, str(noisy), "--json")
        assert code == 0 and json.loads(out)["cause"] != "no-failure", err


def test_oom_cli_directory_and_missing_file_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, str(tmp_path))
    assert code == 2 and "is a directory" in err and err.count("\n") == 1 and not out
    code, _, err = run(capsys, str(tmp_path / "missing.log"))
    assert code == 2 and "no such file" in err


def test_oom_cli_json_and_markdown_conflict(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, str(SAMPLES / "001.log"), "--json", "--markdown")
    assert code == 2 and "pick one" in err


@pytest.mark.shared("samples/oom")
def test_oom_cli_gzip_and_truncated_gzip(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    body = b"INFO:     noise line\n" * 50000 + (SAMPLES / "001.log").read_bytes()
    whole = tmp_path / "log.gz"
    whole.write_bytes(gzip.compress(body))
    code, out, _ = run(capsys, str(whole), "--json")
    assert code == 0 and json.loads(out)["cause"] == "gpu-util-exceeds-free-memory"
    assert json.loads(out)["evidence"][0]["line"] == 50001
    # cut before the failure: nothing to diagnose -> exit 2 with one line naming the cut
    cut = tmp_path / "cut.gz"
    cut.write_bytes(whole.read_bytes()[:2000])
    code, out, err = run(capsys, str(cut))
    assert code == 2 and "truncated gzip" in err and err.count("\n") == 1
    # the failure first, then the cut: diagnosed, with a warning
    early = tmp_path / "early.gz"
    blob = gzip.compress((SAMPLES / "001.log").read_bytes() + b"INFO:     noise line\n" * 200000)
    early.write_bytes(blob[: len(blob) - 200])
    code, out, _ = run(capsys, str(early), "--json")
    data = json.loads(out)
    assert code == 0 and data["cause"] == "gpu-util-exceeds-free-memory"
    assert any("truncated gzip" in w for w in data["warnings"])


@pytest.mark.shared("samples/oom")
def test_oom_cli_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeStdin(io.TextIOWrapper):
        pass

    stdin = FakeStdin(io.BytesIO((SAMPLES / "030.log").read_bytes()))
    monkeypatch.setattr(sys, "stdin", stdin)
    code, out, _ = run(capsys, "-", "--json")
    assert code == 0 and json.loads(out)["cause"] == "kv-pool-exhausted-runtime"


@pytest.mark.shared("samples/oom")
def test_oom_cli_stdin_subprocess_no_torch() -> None:
    """End to end through a pipe; explain-oom must not import torch."""
    code = (
        "import sys; from vramctl.cli.main import main; rc = main(['explain-oom', '-', '--json']);"
        "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        input=(SAMPLES / "014.log").read_bytes(),
        capture_output=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr.decode()
    assert json.loads(res.stdout)["cause"] == "sampler-warmup-oom"


@pytest.mark.shared("samples/oom")
def test_oom_cli_one_huge_line_bounded_memory(tmp_path: Path) -> None:
    """A log with one 300 MB line (no newline at all), then the failure: bounded RSS, diagnosed."""
    log = tmp_path / "huge-line.log"
    chunk = b"x" * (1 << 20)
    with log.open("wb") as fh:
        for _ in range(300):
            fh.write(chunk)
        fh.write(b"\n" + (SAMPLES / "001.log").read_bytes())
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss across fork + exec, so a child of a pytest process that
    # has imported torch would report the parent's ~280 MiB; VmHWM belongs to the child's own address space.
    code = (
        "import sys, json; from vramctl.diagnose import diagnose;"
        f"d = diagnose({str(log)!r});"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1];"
        "print(json.dumps({'cause': d.cause, 'line': d.evidence[0].line, 'warnings': list(d.warnings),"
        "'rss': int(hwm) * 1024}))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300)
    assert res.returncode == 0, res.stderr.decode()
    data = json.loads(res.stdout)
    assert data["cause"] == "gpu-util-exceeds-free-memory" and data["line"] == 2
    assert any("over-long" in w for w in data["warnings"])
    assert data["rss"] < 200 * 2**20, f"peak RSS {data['rss'] / 2**20:.0f} MiB for a 300 MB line"


def test_oom_cli_help_lists_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["explain-oom", "--help"])
    out, _ = capsys.readouterr()
    assert code == 0 and "3: the log holds no failure" in " ".join(out.split())


@pytest.mark.shared("samples/oom")
def test_oom_cli_reports_the_peak_rss_it_can(capsys: pytest.CaptureFixture[str]) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code, _, _ = run(capsys, str(SAMPLES / "059.log"), "--json")
    assert code == 0 and resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50 * 1024


@pytest.mark.shared("samples/oom")
def test_oom_parallel_scan_agrees_with_sequential(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Large regular files may be scanned by worker processes (VRAMCTL_SCAN_WORKERS): same answer."""
    from vramctl.diagnose import diagnose

    noise = b"".join(
        b'INFO:     10.0.0.%d:4%04d - "POST /v1/chat/completions HTTP/1.1" 200 OK\n' % (i % 250, i)
        for i in range(40000)
    )
    body = (
        (SAMPLES / "017.log").read_bytes()
        + noise * 2
        + (SAMPLES / "040.log").read_bytes().replace(b"\r", b"")
        + noise * 2
        + (SAMPLES / "045.log").read_bytes()
        + noise
    )
    log = tmp_path / "big.log"
    log.write_bytes(body)
    monkeypatch.setenv("VRAMCTL_SCAN_WORKERS", "1")
    seq = diagnose(log)
    monkeypatch.setenv("VRAMCTL_SCAN_WORKERS", "4")
    par = diagnose(log)
    assert seq.cause == par.cause == "no-kv-cache-memory"
    assert seq.lines_read == par.lines_read == body.count(b"\n")
    assert [e.line for e in seq.evidence] == [e.line for e in par.evidence]
    assert [(o.cause, o.line) for o in seq.other_failures] == [(o.cause, o.line) for o in par.other_failures]
    assert {o.cause for o in par.other_failures} >= {"not-oom", "non-torch-allocation-oom"}


def test_oom_cli_no_argument_on_a_terminal_is_bad_usage(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Tty())
    code = main(["explain-oom"])
    _, err = capsys.readouterr()
    assert code == 2 and "no log" in err


def test_oom_cli_markup_in_names_and_lines_is_printed_verbatim(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = tmp_path / "[red]weird.log"
    log.write_text("RuntimeError: [bold]CUDA error: an illegal memory access was encountered[/bold]\n")
    code, out, _ = run(capsys, str(log))
    assert code == 0 and "[red]weird.log" in out and "[bold]CUDA error" in out
