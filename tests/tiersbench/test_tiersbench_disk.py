"""The disk tier bench: blocks written, read back and verified; every kind of damage detected, never served."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl.core.errors import BadInputError
from vramctl.tiers import disk_bench
from vramctl.tiers.disk_bench import (
    BAD_CHECKSUM,
    BAD_MAGIC,
    BUFFERED,
    DIRECT,
    HEADER_BYTES,
    STALE,
    TORN,
    WRONG_INDEX,
    BlockLayout,
    DiskFullError,
    check_block,
    encode_block,
    read_blocks,
    run_disk_bench,
    write_blocks,
)

SEQ = 0x1234_5678_9ABC


def _direct_ok(directory: Path) -> bool:
    probe = directory / "probe"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    except (OSError, AttributeError):
        return False
    os.close(fd)
    probe.unlink()
    return True


def _tamper(path: Path, offset: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
        os.fsync(fd)
    finally:
        os.close(fd)


@pytest.fixture(params=[DIRECT, BUFFERED])
def method(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == DIRECT and not _direct_ok(tmp_path):
        pytest.skip("O_DIRECT unsupported on the test filesystem")
    return str(request.param)


def test_round_trip_verifies_every_block(tmp_path: Path, method: str) -> None:
    layout = BlockLayout(block_bytes=64 * 1024, num_blocks=37, io_bytes=256 * 1024)
    path = tmp_path / "kv.bin"
    seconds = write_blocks(path, layout, method=method, seq=SEQ)
    assert seconds > 0
    assert path.stat().st_size == layout.file_bytes
    served: list[int] = []
    stats = read_blocks(path, layout, method=method, seq=SEQ, on_block=lambda i, view: served.append(i))
    assert stats.verified == 37 and stats.bad == []
    assert served == list(range(37))


def test_unaligned_block_bytes_use_aligned_slots(tmp_path: Path, method: str) -> None:
    layout = BlockLayout(block_bytes=5000, num_blocks=9, io_bytes=3 * 8192)
    assert layout.slot_bytes == 8192 and layout.chunk_bytes % 4096 == 0
    path = tmp_path / "kv.bin"
    write_blocks(path, layout, method=method, seq=SEQ)
    stats = read_blocks(path, layout, method=method, seq=SEQ)
    assert stats.verified == 9 and not stats.bad


def _damage(path: Path, layout: BlockLayout) -> dict[int, str]:
    """Corrupt / tear / misplace / zero blocks in the file; returns index → expected reason."""
    slot = layout.slot_bytes
    # 1. one payload byte flipped
    with open(path, "rb") as handle:
        handle.seek(1 * slot + HEADER_BYTES + 1000)
        byte = handle.read(1)
    _tamper(path, 1 * slot + HEADER_BYTES + 1000, bytes([byte[0] ^ 0x40]))
    # 3. torn: the header of a newer write (another sequence), the old trailer
    _tamper(path, 3 * slot + 16, struct.pack("<Q", SEQ + 1))
    # 4. misplaced: block 5's bytes land in slot 4
    with open(path, "rb") as handle:
        handle.seek(5 * slot)
        five = handle.read(slot)
    _tamper(path, 4 * slot, five)
    # 6. lost write: zeros
    _tamper(path, 6 * slot, bytes(slot))
    return {1: BAD_CHECKSUM, 3: TORN, 4: WRONG_INDEX, 6: BAD_MAGIC}


def test_damaged_blocks_are_detected_and_never_served(tmp_path: Path, method: str) -> None:
    layout = BlockLayout(block_bytes=16 * 1024, num_blocks=12, io_bytes=64 * 1024)
    path = tmp_path / "kv.bin"
    write_blocks(path, layout, method=method, seq=SEQ)
    expected = _damage(path, layout)
    served: dict[int, bytes] = {}
    stats = read_blocks(
        path, layout, method=method, seq=SEQ, on_block=lambda i, v: served.update({i: bytes(v)})
    )
    assert {b.index: b.reason for b in stats.bad} == expected
    assert stats.verified == 12 - len(expected)
    assert not set(served) & set(expected)
    assert sorted(served) == [i for i in range(12) if i not in expected]


def test_stale_block_from_another_run(tmp_path: Path, method: str) -> None:
    layout = BlockLayout(block_bytes=8192, num_blocks=4, io_bytes=8192)
    path = tmp_path / "kv.bin"
    write_blocks(path, layout, method=method, seq=SEQ)
    stats = read_blocks(path, layout, method=method, seq=SEQ + 7)
    assert [b.reason for b in stats.bad] == [STALE] * 4 and stats.verified == 0


def test_truncated_file_reports_missing_blocks(tmp_path: Path) -> None:
    layout = BlockLayout(block_bytes=8192, num_blocks=6, io_bytes=4 * 8192)
    path = tmp_path / "kv.bin"
    write_blocks(path, layout, method=BUFFERED, seq=SEQ)
    os.truncate(path, 4 * 8192 + 100)
    stats = read_blocks(path, layout, method=BUFFERED, seq=SEQ)
    assert stats.verified == 4
    assert [(b.index, b.reason) for b in stats.bad] == [(4, BAD_MAGIC), (5, BAD_MAGIC)]


@settings(max_examples=60, deadline=None)
@given(
    block_bytes=st.integers(min_value=disk_bench.MIN_BLOCK_BYTES, max_value=12_000),
    index=st.integers(min_value=0, max_value=2**40),
    position=st.integers(min_value=0),
    flip=st.integers(min_value=1, max_value=255),
    checksum=st.sampled_from(["crc32", "blake2b"]),
)
def test_any_single_byte_change_is_caught(
    block_bytes: int, index: int, position: int, flip: int, checksum: str
) -> None:
    buf = bytearray(os.urandom(block_bytes))
    view = memoryview(buf)
    encode_block(view, index=index, seq=SEQ, block_bytes=block_bytes, checksum=checksum)
    assert check_block(view, index=index, seq=SEQ, block_bytes=block_bytes, checksum=checksum) is None
    where = position % block_bytes
    buf[where] ^= flip
    assert check_block(view, index=index, seq=SEQ, block_bytes=block_bytes, checksum=checksum) is not None


def test_write_never_overwrites_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "precious"
    path.write_bytes(b"user data")
    with pytest.raises(FileExistsError):
        write_blocks(path, BlockLayout(block_bytes=8192, num_blocks=2), method=BUFFERED, seq=SEQ)
    assert path.read_bytes() == b"user data"


def test_disk_full_mid_write_removes_the_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_pwrite = os.pwrite
    calls = {"n": 0}

    def filling_pwrite(fd: int, data: bytes, offset: int) -> int:
        calls["n"] += 1
        if calls["n"] >= 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(disk_bench.os, "pwrite", filling_pwrite)
    layout = BlockLayout(block_bytes=8192, num_blocks=10, io_bytes=8192)
    path = tmp_path / "kv.bin"
    with pytest.raises(DiskFullError) as info:
        write_blocks(path, layout, method=BUFFERED, seq=SEQ)
    message = str(info.value)
    assert "disk full (ENOSPC)" in message and str(tmp_path) in message
    assert "16384 bytes" in message and "removed" in message
    assert "\n" not in message
    assert not path.exists()


def test_short_write_is_out_of_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_pwrite = os.pwrite

    def short_pwrite(fd: int, data: bytes, offset: int) -> int:
        return real_pwrite(fd, bytes(data)[: len(data) // 2], offset)

    monkeypatch.setattr(disk_bench.os, "pwrite", short_pwrite)
    path = tmp_path / "kv.bin"
    with pytest.raises(DiskFullError, match="short write"):
        write_blocks(
            path, BlockLayout(block_bytes=8192, num_blocks=4, io_bytes=8192), method=BUFFERED, seq=SEQ
        )
    assert not path.exists()


def test_real_file_size_limit_is_reported(tmp_path: Path) -> None:
    """A real kernel refusal (RLIMIT_FSIZE → EFBIG) in a child process: clean error, no file left."""
    import subprocess
    import sys

    code = f"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
from vramctl.tiers.disk_bench import BlockLayout, write_blocks, DiskFullError, BUFFERED
try:
    write_blocks({str(tmp_path / "kv.bin")!r}, BlockLayout(block_bytes=16384, num_blocks=16, io_bytes=16384),
                 method=BUFFERED, seq=1)
except DiskFullError as exc:
    print(exc)
    sys.exit(2)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "file size limit reached (EFBIG)" in proc.stdout or "short write" in proc.stdout
    assert not (tmp_path / "kv.bin").exists()


def test_directory_checks(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="no such directory"):
        disk_bench.check_directory(tmp_path / "missing", 1)
    afile = tmp_path / "f"
    afile.write_text("x")
    with pytest.raises(BadInputError, match="not a directory"):
        disk_bench.check_directory(afile, 1)
    with pytest.raises(DiskFullError, match=r"only .* free"):
        disk_bench.check_directory(tmp_path, 2**62)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_directory(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(BadInputError, match="not writable"):
            disk_bench.check_directory(ro, 1)
    finally:
        ro.chmod(0o700)


def test_run_disk_bench_end_to_end(tmp_path: Path) -> None:
    result = run_disk_bench(
        block_bytes=128 * 1024, num_blocks=24, directory=tmp_path, repeat=2, io_bytes=512 * 1024
    )
    assert result.ok and result.verified_blocks > 0
    assert list(tmp_path.iterdir()) == []  # nothing left behind
    buffered = result.method(BUFFERED)
    assert buffered is not None and buffered.measured
    assert buffered.read is not None and buffered.read.bytes_per_s > 0
    assert buffered.write is not None and len(buffered.write.seconds) == 2
    assert buffered.verified_blocks == 2 * 24
    direct = result.method(DIRECT)
    assert direct is not None
    if direct.measured:
        assert direct.verified_blocks == 48 and direct.latency_s is not None
        if direct.baseline is not None:
            assert "iflag=direct" in direct.baseline_command
            assert direct.ratio_to_baseline is not None and direct.ratio_to_baseline > 0
    data = result.to_json()
    assert data["bad_blocks"] == 0 and data["blocks"] == 24 and data["checksum"] == "crc32"


def test_keep_leaves_the_files(tmp_path: Path) -> None:
    result = run_disk_bench(
        block_bytes=8192,
        num_blocks=4,
        directory=tmp_path,
        repeat=1,
        keep=True,
        methods=[BUFFERED],
        use_dd=False,
    )
    assert len(result.kept_files) == 1
    assert Path(result.kept_files[0]).stat().st_size == 4 * 8192
    assert result.methods[0].baseline is None and "skipped" in result.methods[0].baseline_note


def test_direct_refused_is_a_note_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def refusing_open(path: object, flags: int, *args: int) -> int:
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(disk_bench.os, "open", refusing_open)
    result = run_disk_bench(block_bytes=8192, num_blocks=4, directory=tmp_path, repeat=1, use_dd=False)
    direct = result.method(DIRECT)
    assert direct is not None and not direct.measured and "O_DIRECT refused" in direct.note
    assert result.method(BUFFERED) is not None and result.ok
    assert list(tmp_path.iterdir()) == []


def test_bad_layouts() -> None:
    with pytest.raises(BadInputError, match="--block-bytes 100"):
        BlockLayout(block_bytes=100, num_blocks=1)
    with pytest.raises(BadInputError, match="--blocks 0"):
        BlockLayout(block_bytes=8192, num_blocks=0)
    with pytest.raises(BadInputError, match="--checksum"):
        BlockLayout(block_bytes=8192, num_blocks=1, checksum="md5")


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs procfs")
def test_unwritable_directory_even_for_root() -> None:
    with pytest.raises(BadInputError, match=r"--dir /proc: not writable"):
        disk_bench.check_directory("/proc", 1)


@pytest.mark.skipif(
    not disk_bench.filesystem_of("/dev/shm").startswith("tmpfs"), reason="needs /dev/shm on tmpfs"
)
def test_tmpfs_is_called_memory_and_residency_is_measured() -> None:
    result = run_disk_bench(
        block_bytes=8192, num_blocks=4, directory="/dev/shm", repeat=1, methods=[BUFFERED], use_dd=False
    )
    assert any("memory, not a disk" in note for note in result.notes)
    buffered = result.methods[0]
    assert buffered.page_cache_resident_after_drop is not None
    assert buffered.page_cache_resident_after_drop >= 0.5 and "came from memory" in buffered.note


def test_page_cache_residency_drops_on_a_disk(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(os.urandom(1 << 20))
    fraction = disk_bench.page_cache_resident_fraction(path)
    if fraction is None or disk_bench.filesystem_of(tmp_path).startswith("tmpfs"):
        pytest.skip("mincore unavailable or tmp is tmpfs")
    assert fraction > 0.5  # just written: cached
    fd = os.open(path, os.O_RDONLY)
    try:
        assert disk_bench.drop_file_pages(fd)
    finally:
        os.close(fd)
    after = disk_bench.page_cache_resident_fraction(path)
    assert after is not None and after < 0.5


@settings(max_examples=200, deadline=None)
@given(
    block_bytes=st.integers(min_value=disk_bench.MIN_BLOCK_BYTES, max_value=3 * 2**20),
    num_blocks=st.integers(min_value=1, max_value=2000),
    io_bytes=st.integers(min_value=4096, max_value=16 * 2**20),
)
def test_layout_chunks_cover_every_block_once_aligned(
    block_bytes: int, num_blocks: int, io_bytes: int
) -> None:
    layout = BlockLayout(block_bytes=block_bytes, num_blocks=num_blocks, io_bytes=io_bytes)
    seen: list[int] = []
    for first, count, offset in layout.chunks():
        assert offset == first * layout.slot_bytes
        assert offset % disk_bench.ALIGN == 0 and (count * layout.slot_bytes) % disk_bench.ALIGN == 0
        assert count * layout.slot_bytes <= max(layout.chunk_bytes, layout.slot_bytes)
        seen.extend(range(first, first + count))
    assert seen == list(range(num_blocks))
    assert layout.slot_bytes >= block_bytes and layout.slot_bytes - block_bytes < disk_bench.ALIGN


def test_keep_checks_room_for_every_kept_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # With --keep both methods' files stay, so the room check asks for both before anything is written
    # (otherwise the second file would fill the disk mid-bench).
    layout_bytes = 4 * 8192
    real_statvfs = os.statvfs

    class Fake:
        def __init__(self, free: int) -> None:
            self.f_bavail, self.f_frsize = free, 1

    monkeypatch.setattr(os, "statvfs", lambda path: Fake(layout_bytes + 1))
    with pytest.raises(DiskFullError, match=r"needs 64\.00 KiB \(65536 bytes\) for the kept bench files"):
        run_disk_bench(block_bytes=8192, num_blocks=4, directory=tmp_path, repeat=1, keep=True, use_dd=False)
    assert list(tmp_path.iterdir()) == []
    # Without --keep one file at a time fits.
    result = run_disk_bench(block_bytes=8192, num_blocks=4, directory=tmp_path, repeat=1, use_dd=False)
    assert result.methods and list(tmp_path.iterdir()) == []
    monkeypatch.setattr(os, "statvfs", real_statvfs)
