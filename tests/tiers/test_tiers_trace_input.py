"""Trace reading is bounded and streamed: compressed traces, endless or binary inputs, oversized lines and ids.

Each bad input is one line on stderr and exit 2, quickly, whatever the size of the input.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from vramctl.tiers.trace import MAX_LINE_BYTES, load_mooncake


def _lines(n: int, *, bs: int = 16) -> list[str]:
    return [
        json.dumps(
            {"timestamp": i, "input_length": 3 * bs, "output_length": 1, "hash_ids": [i % 3, 7 + i % 5, i]}
        )
        for i in range(n)
    ]


def _cli(*args: str, timeout: float = 60) -> tuple[int, str, str, float]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "vramctl", "tiers", "simulate", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start


def test_gzip_and_zstd_traces_read_like_the_plain_file(tmp_path: Path) -> None:
    text = "\n".join(_lines(300)) + "\n"
    plain = tmp_path / "t.jsonl"
    plain.write_text(text)
    packed = tmp_path / "t.jsonl.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    want = replace(load_mooncake(plain, block_size=16), source="")
    assert replace(load_mooncake(packed, block_size=16), source="") == want
    zstandard = pytest.importorskip("zstandard", reason="zstd traces need the optional zstandard package")
    squeezed = tmp_path / "t.jsonl.zst"
    squeezed.write_bytes(zstandard.ZstdCompressor().compress(text.encode()))
    assert replace(load_mooncake(squeezed, block_size=16), source="") == want


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        ("truncated-gzip", "truncated gzip stream"),
        ("long-line", f"longer than {MAX_LINE_BYTES >> 20} MiB"),
        ("huge-id", "does not fit in 64 bits"),
        ("empty", "no requests (empty trace)"),
        ("only-blank", "no requests (empty trace)"),
        ("backwards", "not sorted by time"),
        ("binary", "not UTF-8 text"),
    ],
)
def test_bad_traces_are_one_line_and_exit_2(tmp_path: Path, make: str, needle: str) -> None:
    path = tmp_path / "bad.jsonl"
    if make == "truncated-gzip":
        data = gzip.compress(("\n".join(_lines(2000)) + "\n").encode())
        path.write_bytes(data[: len(data) // 2])
    elif make == "long-line":
        path.write_bytes(b'{"timestamp": 1, "hash_ids": [' + b"1," * (MAX_LINE_BYTES // 2 + 10) + b"1]}\n")
    elif make == "huge-id":
        path.write_text(
            json.dumps({"timestamp": 1, "input_length": 16, "output_length": 1, "hash_ids": [2**64]})
        )
    elif make == "empty":
        path.write_bytes(b"")
    elif make == "only-blank":
        path.write_text("\n\n   \n")
    elif make == "backwards":
        path.write_text("\n".join(reversed(_lines(3))) + "\n")
    else:
        path.write_bytes(bytes(range(128, 256)) * 100)
    code, out, err, _ = _cli("--trace", str(path), "--block-size", "16")
    assert code == 2, (code, out, err)
    assert err.count("\n") == 1 and needle in err, err
    assert out == ""


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_endless_devices_fail_fast_in_bounded_memory(device: str) -> None:
    if not Path(device).exists():
        pytest.skip(f"{device} is not on this system")
    code, _out, err, seconds = _cli(
        "--trace", device, "--gpu-capacity", "1e6", "--host-capacity", "1e6", timeout=60
    )
    assert code == 2 and err.count("\n") == 1 and err.startswith("vramctl: error: --trace "), err
    assert seconds < 30  # it reads at most one 16 MiB line
