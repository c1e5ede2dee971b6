"""The disk KV tier, measured: real KV blocks written to a file and read back, every block verified.

What it does (issue 5, item 3; docs/tiers-bench.md, `vllm/v1/kv_offload/` (vLLM v0.33.0) "disk backend"):

- N blocks of `block_bytes` (one KV block of the model across its layers, or `--block-bytes`) are written
  into a NEW file in the chosen directory (created with O_EXCL, so a user's file is never touched; removed
  afterwards unless `keep`), each block in a slot rounded up to 4096 bytes so every offset and size is
  aligned for O_DIRECT (vLLM's disk backend uses 4096-aligned staging buffers the same way).
- Two ways: `direct` (O_DIRECT from page-aligned `mmap` buffers, bypassing the page cache) and
  `buffered` (through the page cache). Every write pass ends with `fsync`, inside the timed region.
  Before each buffered read the file's pages are dropped with `posix_fadvise(POSIX_FADV_DONTNEED)` and the
  residency left is measured with `mincore(2)` — so the report says whether the reads really hit the disk.
- Each block carries a 64-byte header and an identical 64-byte trailer: magic, block index, the run's
  sequence number, block size, checksum kind, and a checksum (CRC-32 or BLAKE2b-128) over those fields
  and the payload. Reading every block back verifies it: unwritten (bad magic), torn (header ≠ trailer),
  misplaced (wrong index), stale (another run's sequence), wrong size, or checksum mismatch. A block that
  fails is counted and reported and never handed to the caller (`on_block`).
- The baseline is `dd if=FILE of=/dev/null bs=IO iflag=direct` (and plain `dd` after dropping the pages
  for the buffered read) on the same file, interleaved with vramctl's passes, in the same call.

I/O is done in large aligned requests (`io_bytes`, default 8 MiB: several blocks per syscall) with a
double buffer: the next request is read while a thread pool verifies the previous one (`os.preadv`,
`zlib.crc32` and `hashlib.blake2b` release the GIL), so verification costs no disk time.

Pure python (os, mmap, hashlib, zlib, ctypes for mincore): no torch; never prints.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import math
import mmap
import os
import random
import re
import shutil
import statistics
import struct
import subprocess
import tempfile
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vramctl.core.errors import BadInputError, VramctlError
from vramctl.core.units import MiB, format_bytes

HUGE_PAGE = 2 * 1024 * 1024
ALIGN = 4096
"""Offset, size and buffer alignment for O_DIRECT (the logical block size of every common device)."""

HEADER_BYTES = 64
MIN_BLOCK_BYTES = 2 * HEADER_BYTES + 64
DEFAULT_IO_BYTES = 8 * MiB
READ_RING = 4
"""Read buffers in flight: one being read, the others being verified."""
MAGIC = b"VRAMKV01"
CHECKSUMS: tuple[str, ...] = ("crc32", "blake2b")
_CHECKSUM_ID = {"crc32": 1, "blake2b": 2}

# magic, block index, sequence, block bytes, checksum id, reserved, digest (16 bytes, crc32 zero-padded)
_HEAD = struct.Struct("<8sQQQII16s")
_FIELDS = struct.Struct("<QQQI")
assert _HEAD.size <= HEADER_BYTES

DIRECT = "direct"
BUFFERED = "buffered"
METHODS: tuple[str, ...] = (DIRECT, BUFFERED)

# Verification failure reasons (the `reason` of a BadBlock).
BAD_MAGIC = "unwritten"
TORN = "torn"
WRONG_INDEX = "wrong-index"
STALE = "stale"
WRONG_SIZE = "wrong-size"
BAD_CHECKSUM = "checksum"


class DiskFullError(BadInputError):
    """The bench directory ran out of space (or hit a size limit) mid-write; the partial file is removed."""


# --------------------------------------------------------------------------------------------- geometry


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class BlockLayout:
    """How N blocks of `block_bytes` sit in the file: slot i at offset i × slot_bytes."""

    block_bytes: int
    num_blocks: int
    checksum: str = "crc32"
    io_bytes: int = DEFAULT_IO_BYTES

    def __post_init__(self) -> None:
        if self.block_bytes < MIN_BLOCK_BYTES:
            raise BadInputError(
                f"--block-bytes {self.block_bytes}: a block must hold at least {MIN_BLOCK_BYTES} bytes "
                f"(a {HEADER_BYTES}-byte header and trailer around the payload)"
            )
        if self.num_blocks <= 0:
            raise BadInputError(f"--blocks {self.num_blocks}: must be at least 1")
        if self.checksum not in CHECKSUMS:
            raise BadInputError(f"--checksum {self.checksum!r}: use one of {', '.join(CHECKSUMS)}")
        if self.io_bytes < ALIGN:
            raise BadInputError(f"--io-size {self.io_bytes}: must be at least {ALIGN} bytes")

    @property
    def slot_bytes(self) -> int:
        return round_up(self.block_bytes, ALIGN)

    @property
    def file_bytes(self) -> int:
        return self.slot_bytes * self.num_blocks

    @property
    def payload_bytes(self) -> int:
        """Useful KV bytes (what a tier stores): blocks × block_bytes."""
        return self.block_bytes * self.num_blocks

    @property
    def blocks_per_io(self) -> int:
        """Whole slots per request; never more than the file (`--io-size 1TiB` on a 32 MiB file is one request
        of 32 MiB, not a 1 TiB buffer)."""
        return max(1, min(self.io_bytes // self.slot_bytes, self.num_blocks))

    @property
    def chunk_bytes(self) -> int:
        """Bytes per read/write syscall: whole slots, a multiple of 4096."""
        return self.blocks_per_io * self.slot_bytes

    def chunks(self) -> Iterator[tuple[int, int, int]]:
        """(first block, block count, file offset) of each I/O request, in file order."""
        per = self.blocks_per_io
        for first in range(0, self.num_blocks, per):
            count = min(per, self.num_blocks - first)
            yield first, count, first * self.slot_bytes


# ------------------------------------------------------------------------------------- block format


def _digest(checksum: str, fields: bytes, payload: memoryview) -> bytes:
    if checksum == "crc32":
        crc = zlib.crc32(payload, zlib.crc32(fields))
        return struct.pack("<I", crc) + bytes(12)
    h = hashlib.blake2b(fields, digest_size=16)
    h.update(payload)
    return h.digest()


def encode_block(buf: memoryview, *, index: int, seq: int, block_bytes: int, checksum: str) -> None:
    """Seal the block in `buf[:block_bytes]` (payload already in place): write its header and trailer."""
    payload = buf[HEADER_BYTES : block_bytes - HEADER_BYTES]
    fields = _FIELDS.pack(index, seq, block_bytes, _CHECKSUM_ID[checksum])
    head = _HEAD.pack(
        MAGIC, index, seq, block_bytes, _CHECKSUM_ID[checksum], 0, _digest(checksum, fields, payload)
    )
    buf[: _HEAD.size] = head
    buf[_HEAD.size : HEADER_BYTES] = bytes(HEADER_BYTES - _HEAD.size)
    tail = block_bytes - HEADER_BYTES
    buf[tail : tail + _HEAD.size] = head
    buf[tail + _HEAD.size : block_bytes] = bytes(HEADER_BYTES - _HEAD.size)


def check_block(buf: memoryview, *, index: int, seq: int, block_bytes: int, checksum: str) -> str | None:
    """Verify one block read back; None when it is intact, else the reason it must not be served."""
    head = bytes(buf[:HEADER_BYTES])
    tail = bytes(buf[block_bytes - HEADER_BYTES : block_bytes])
    if head[:8] != MAGIC:
        return BAD_MAGIC
    if head != tail:
        return TORN
    _, got_index, got_seq, got_bytes, got_kind, _, digest = _HEAD.unpack_from(head)
    if got_index != index:
        return WRONG_INDEX
    if got_seq != seq:
        return STALE
    if got_bytes != block_bytes or got_kind != _CHECKSUM_ID[checksum]:
        return WRONG_SIZE
    fields = _FIELDS.pack(got_index, got_seq, got_bytes, got_kind)
    if _digest(checksum, fields, buf[HEADER_BYTES : block_bytes - HEADER_BYTES]) != digest:
        return BAD_CHECKSUM
    return None


class _Content:
    """Random-looking payloads without paying for a random generator per block.

    One random pool of twice the payload length; block i's payload is a window of it at an offset that
    depends on i, so neighbouring blocks differ everywhere and a misplaced block fails its index check
    and its checksum.
    """

    def __init__(self, payload_len: int, seed: int) -> None:
        self.payload_len = payload_len
        self.pool = memoryview(random.Random(seed).randbytes(2 * payload_len + 8))

    def payload(self, index: int) -> memoryview:
        offset = (index * 2654435761 + 8 * index) % (self.payload_len + 1)
        return self.pool[offset : offset + self.payload_len]


# ---------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class BadBlock:
    index: int
    reason: str
    method: str


@dataclass(frozen=True)
class Timing:
    """Seconds of each pass; bandwidth from the median pass over `bytes_moved`."""

    bytes_moved: int
    seconds: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return float(statistics.median(self.seconds))

    @property
    def best_s(self) -> float:
        return min(self.seconds)

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_moved / self.median_s if self.median_s > 0 else 0.0

    @property
    def best_bytes_per_s(self) -> float:
        return self.bytes_moved / self.best_s if self.best_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "bytes": self.bytes_moved,
            "seconds": list(self.seconds),
            "median_s": self.median_s,
            "bytes_per_s": self.bytes_per_s,
            "best_bytes_per_s": self.best_bytes_per_s,
        }


@dataclass(frozen=True)
class MethodResult:
    """One way of reaching the disk (direct or buffered): its writes, reads and the dd baseline."""

    method: str
    measured: bool
    note: str = ""
    write: Timing | None = None
    read: Timing | None = None
    baseline: Timing | None = None
    baseline_command: str = ""
    baseline_note: str = ""
    latency_s: float | None = None
    verified_blocks: int = 0
    bad_blocks: tuple[BadBlock, ...] = ()
    page_cache_resident_after_drop: float | None = None
    """Fraction of the file's pages still cached after POSIX_FADV_DONTNEED (mincore), buffered only."""

    @property
    def ratio_to_baseline(self) -> float | None:
        if self.read is None or self.baseline is None or self.baseline.bytes_per_s <= 0:
            return None
        return self.read.bytes_per_s / self.baseline.bytes_per_s

    @property
    def tier_name(self) -> str:
        return f"disk-{self.method}"

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "tier": self.tier_name,
            "measured": self.measured,
            "note": self.note,
            "write": self.write.to_json() if self.write else None,
            "read": self.read.to_json() if self.read else None,
            "baseline": self.baseline.to_json() if self.baseline else None,
            "baseline_command": self.baseline_command,
            "baseline_note": self.baseline_note,
            "read_vs_baseline": self.ratio_to_baseline,
            "latency_s": self.latency_s,
            "verified_blocks": self.verified_blocks,
            "bad_blocks": [{"index": b.index, "reason": b.reason} for b in self.bad_blocks],
            "page_cache_resident_after_drop": self.page_cache_resident_after_drop,
        }


@dataclass(frozen=True)
class DiskBenchResult:
    directory: str
    filesystem: str
    layout: BlockLayout
    repeat: int
    methods: tuple[MethodResult, ...]
    kept_files: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def bad_blocks(self) -> tuple[BadBlock, ...]:
        return tuple(b for m in self.methods for b in m.bad_blocks)

    @property
    def verified_blocks(self) -> int:
        return sum(m.verified_blocks for m in self.methods)

    @property
    def ok(self) -> bool:
        return not self.bad_blocks

    def method(self, name: str) -> MethodResult | None:
        for result in self.methods:
            if result.method == name:
                return result
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "filesystem": self.filesystem,
            "block_bytes": self.layout.block_bytes,
            "slot_bytes": self.layout.slot_bytes,
            "blocks": self.layout.num_blocks,
            "file_bytes": self.layout.file_bytes,
            "io_bytes": self.layout.chunk_bytes,
            "checksum": self.layout.checksum,
            "repeat": self.repeat,
            "verified_blocks": self.verified_blocks,
            "bad_blocks": len(self.bad_blocks),
            "methods": [m.to_json() for m in self.methods],
            "kept_files": list(self.kept_files),
            "notes": list(self.notes),
        }


@dataclass
class ReadStats:
    """What one read pass saw (mutable accumulator, returned to the caller)."""

    verified: int = 0
    bad: list[BadBlock] = field(default_factory=list)
    seconds: float = 0.0


# ---------------------------------------------------------------------------------- environment


def filesystem_of(path: str | os.PathLike[str]) -> str:
    """`ext4 on /dev/vda at /` for the mount holding `path` (from /proc/mounts), or `unknown`."""
    target = os.path.realpath(path)
    best: tuple[int, str] = (-1, "unknown")
    try:
        with open("/proc/mounts", encoding="utf-8") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) < 3:
                    continue
                device, mount, fstype = parts[0], parts[1].replace("\\040", " "), parts[2]
                if (target == mount or target.startswith(mount.rstrip("/") + "/")) and len(mount) > best[0]:
                    best = (len(mount), f"{fstype} on {device} at {mount}")
    except OSError:
        return "unknown"
    return best[1]


def page_cache_resident_fraction(path: str | os.PathLike[str]) -> float | None:
    """Fraction of the file's pages in the page cache (mincore(2) on a private mapping), or None."""
    try:
        size = os.path.getsize(path)
        if size == 0:
            return 0.0
        libc = ctypes.CDLL(None, use_errno=True)
        mincore = libc.mincore
    except (OSError, AttributeError):
        return None
    pages = -(-size // mmap.PAGESIZE)
    vec = (ctypes.c_ubyte * pages)()
    try:
        with open(path, "rb") as handle:
            mapped = mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_COPY)
        try:
            view = (ctypes.c_char * size).from_buffer(mapped)
            try:
                rc = mincore(ctypes.c_void_p(ctypes.addressof(view)), ctypes.c_size_t(size), vec)
            finally:
                del view
        finally:
            mapped.close()
    except (OSError, ValueError, BufferError):
        return None
    if rc != 0:
        return None
    return sum(1 for v in vec if v & 1) / pages


def drop_file_pages(fd: int) -> bool:
    """Ask the kernel to drop the (clean) cached pages of this file; False where that is unsupported."""
    advise = getattr(os, "posix_fadvise", None)
    flag = getattr(os, "POSIX_FADV_DONTNEED", None)
    if advise is None or flag is None:
        return False
    try:
        os.fsync(fd)
        advise(fd, 0, 0, flag)
    except OSError:
        return False
    return True


# ------------------------------------------------------------------------------------------- I/O


def _aligned_buffer(size: int) -> mmap.mmap:
    """A page-aligned private anonymous buffer for O_DIRECT (posix_memalign in C), already faulted in.

    Private, not Python's default shared mapping (shmem pages), and backed by transparent huge pages
    where the kernel allows (`MADV_HUGEPAGE`): physically contiguous 2 MiB pieces let the block layer
    build large requests instead of one 4 KiB segment per page. On the 2-vCPU virtio VM of
    docs/perf/tiers-bench.md a shared, 4 KiB-page buffer read at 1.8–1.9 GB/s and this one at 3.1 GB/s.
    Touching every page here keeps the page faults out of the timed I/O.
    """
    length = round_up(size, HUGE_PAGE if size >= HUGE_PAGE else ALIGN)
    flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    try:
        buf = mmap.mmap(-1, length, flags=flags) if flags else mmap.mmap(-1, length)
    except (MemoryError, OverflowError, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno not in (errno.ENOMEM, errno.EINVAL, errno.EOVERFLOW):
            raise
        raise BadInputError(
            f"--io-size: cannot allocate a {format_bytes(length)} I/O buffer ({length} bytes: "
            f"{getattr(exc, 'strerror', None) or type(exc).__name__}); use a smaller --io-size"
        ) from None
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None and length >= HUGE_PAGE:
        with suppress(OSError):
            buf.madvise(advice)
    zeros = bytes(min(length, MiB))
    for at in range(0, length, len(zeros)):
        end = min(length, at + len(zeros))
        buf[at:end] = zeros[: end - at]
    return buf


def _space_error(directory: Path, path: Path, written: int, total: int, exc: OSError | None) -> DiskFullError:
    try:
        stat = os.statvfs(directory)
        free = f"; {format_bytes(stat.f_bavail * stat.f_frsize)} free now"
    except OSError:
        free = ""
    causes = {
        errno.ENOSPC: "disk full (ENOSPC)",
        errno.EDQUOT: "disk quota exceeded (EDQUOT)",
        errno.EFBIG: "file size limit reached (EFBIG)",
    }
    code = exc.errno if exc is not None and exc.errno is not None else -1
    cause = causes.get(code, "short write (out of space)")
    return DiskFullError(
        f"--dir {directory}: {cause} after writing {format_bytes(written)} ({written} bytes) of "
        f"{format_bytes(total)} to {path.name}; the partial file was removed{free} "
        f"(use a smaller --size or another --dir)"
    )


def _open_new(path: Path, *, direct: bool) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    if direct:
        flags |= os.O_DIRECT
    return os.open(path, flags, 0o600)


class DirectUnsupportedError(OSError):
    """The filesystem refused O_DIRECT (tmpfs before Linux 6.6, some FUSE and network filesystems)."""


def _full_pwrite(fd: int, view: memoryview, offset: int) -> int:
    done = 0
    while done < len(view):
        n = os.pwrite(fd, view[done:], offset + done)
        if n <= 0:
            return done
        done += n
        if done < len(view):
            # The kernel writes short only when it runs out of space or hits a size limit.
            return done
    return done


def write_blocks(
    path: str | os.PathLike[str],
    layout: BlockLayout,
    *,
    method: str,
    seq: int,
    seed: int = 0,
    workers: int | None = None,
) -> float:
    """Create `path` (O_EXCL) and write every block, sealed, then fsync; returns the seconds taken.

    The file is removed again if anything fails (disk full, EFBIG, O_DIRECT refused).
    """
    target = Path(path)
    direct = method == DIRECT
    content = _Content(layout.block_bytes - 2 * HEADER_BYTES, seed)
    try:
        fd = _open_new(target, direct=direct)
    except OSError as exc:
        if direct and exc.errno == errno.EINVAL:
            raise DirectUnsupportedError(exc.errno, f"O_DIRECT refused: {exc.strerror}") from None
        raise
    written = 0
    buffers: list[mmap.mmap] = []
    ok = False
    try:
        buffers.extend(_aligned_buffer(layout.chunk_bytes) for _ in range(2))  # ENOMEM: the file still goes
        with ThreadPoolExecutor(max_workers=1) as writer, _pool(workers) as sealer:
            pending: Future[int] | None = None
            pending_len = 0
            start = time.perf_counter()
            for k, (first, count, offset) in enumerate(layout.chunks()):
                buf = buffers[k % 2]
                view = memoryview(buf)
                futures = [
                    sealer.submit(_fill_block, view, i * layout.slot_bytes, first + i, layout, seq, content)
                    for i in range(count)
                ]
                for future in futures:
                    future.result()
                if pending is not None:
                    got = pending.result()
                    written += got
                    if got < pending_len:
                        raise _space_error(target.parent, target, written, layout.file_bytes, None)
                nbytes = count * layout.slot_bytes
                pending = writer.submit(_full_pwrite, fd, view[:nbytes], offset)
                pending_len = nbytes
            if pending is not None:
                got = pending.result()
                written += got
                if got < pending_len:
                    raise _space_error(target.parent, target, written, layout.file_bytes, None)
            os.fsync(fd)
            elapsed = time.perf_counter() - start
        ok = True
        return elapsed
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise _space_error(target.parent, target, written, layout.file_bytes, exc) from None
        if direct and exc.errno == errno.EINVAL:
            raise DirectUnsupportedError(exc.errno, f"O_DIRECT write refused: {exc.strerror}") from None
        raise
    finally:
        os.close(fd)
        # The mmaps are unmapped when the last view of them goes (closing with live views raises).
        del buffers
        if not ok:
            with suppress(FileNotFoundError):
                target.unlink()


def _fill_block(
    view: memoryview, at: int, index: int, layout: BlockLayout, seq: int, content: _Content
) -> None:
    block = view[at : at + layout.block_bytes]
    block[HEADER_BYTES : layout.block_bytes - HEADER_BYTES] = content.payload(index)
    encode_block(block, index=index, seq=seq, block_bytes=layout.block_bytes, checksum=layout.checksum)
    if layout.slot_bytes > layout.block_bytes:
        view[at + layout.block_bytes : at + layout.slot_bytes] = bytes(layout.slot_bytes - layout.block_bytes)


def default_workers() -> int:
    """Checksum threads: one core is left to the I/O path (on a 2-vCPU VM, two hashing threads slowed the
    O_DIRECT reads themselves by a quarter: docs/perf/tiers-bench.md), at most 8 (8 × 2 GB/s of CRC-32: a Gen5 NVMe)."""
    return max(1, min(8, (os.cpu_count() or 2) - 1))


@contextmanager
def _pool(workers: int | None) -> Iterator[ThreadPoolExecutor]:
    """A thread pool with its threads already started (thread start-up stays out of the timed region)."""
    count = workers if workers is not None else default_workers()
    with ThreadPoolExecutor(max_workers=count) as pool:
        barrier = threading.Barrier(count)
        for future in [pool.submit(barrier.wait, 5.0) for _ in range(count)]:
            future.result()
        yield pool


def _full_pread(fd: int, view: memoryview, offset: int) -> int:
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n <= 0:
            break
        done += n
    return done


def _verify_chunk(
    view: memoryview, first: int, count: int, got: int, layout: BlockLayout, seq: int, method: str
) -> list[tuple[int, BadBlock | None]]:
    out: list[tuple[int, BadBlock | None]] = []
    for i in range(count):
        at = i * layout.slot_bytes
        index = first + i
        if at + layout.block_bytes > got:
            out.append((index, BadBlock(index, BAD_MAGIC, method)))
            continue
        reason = check_block(
            view[at : at + layout.block_bytes],
            index=index,
            seq=seq,
            block_bytes=layout.block_bytes,
            checksum=layout.checksum,
        )
        out.append((index, None if reason is None else BadBlock(index, reason, method)))
    return out


def read_blocks(
    path: str | os.PathLike[str],
    layout: BlockLayout,
    *,
    method: str,
    seq: int,
    on_block: Callable[[int, memoryview], None] | None = None,
    workers: int | None = None,
) -> ReadStats:
    """Read every block back (O_DIRECT or buffered), verifying each; only intact blocks reach `on_block`.

    A ring of `READ_RING` buffers: request k+1 is read while the pool still verifies earlier requests, so
    verification jitter never stalls the disk. Time runs from the first read to the last block verified.
    """
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
    if method == DIRECT:
        flags |= os.O_DIRECT
    fd = os.open(path, flags)
    stats = ReadStats()
    buffers: list[mmap.mmap] = []
    try:
        buffers.extend(_aligned_buffer(layout.chunk_bytes) for _ in range(READ_RING))
        threads = workers if workers is not None else default_workers()
        with _pool(threads) as verifier:
            pending: deque[tuple[memoryview, list[Future[list[tuple[int, BadBlock | None]]]]]] = deque()
            start = time.perf_counter()
            for k, (first, count, offset) in enumerate(layout.chunks()):
                if len(pending) == READ_RING:
                    _collect(pending.popleft(), stats, layout, on_block)  # frees buffer k % READ_RING
                view = memoryview(buffers[k % READ_RING])
                got = _full_pread(fd, view[: count * layout.slot_bytes], offset)
                pending.append(
                    (view, _submit_verify(verifier, threads, view, first, count, got, layout, seq, method))
                )
            while pending:
                _collect(pending.popleft(), stats, layout, on_block)
            stats.seconds = time.perf_counter() - start
    finally:
        os.close(fd)
        # The mmaps are unmapped when the last view of them goes (closing with live views raises).
        del buffers
    return stats


def _submit_verify(
    pool: ThreadPoolExecutor,
    threads: int,
    view: memoryview,
    first: int,
    count: int,
    got: int,
    layout: BlockLayout,
    seq: int,
    method: str,
) -> list[Future[list[tuple[int, BadBlock | None]]]]:
    # Split the request into one task per worker-sized slice of blocks.
    per_task = max(1, count // threads)
    futures = []
    for lo in range(0, count, per_task):
        n = min(per_task, count - lo)
        at = lo * layout.slot_bytes
        futures.append(
            pool.submit(_verify_chunk, view[at:], first + lo, n, max(0, got - at), layout, seq, method)
        )
    return futures


def _collect(
    pending: tuple[memoryview, list[Future[list[tuple[int, BadBlock | None]]]]],
    stats: ReadStats,
    layout: BlockLayout,
    on_block: Callable[[int, memoryview], None] | None,
) -> None:
    view, futures = pending
    base_index: int | None = None
    for future in futures:
        for index, bad in future.result():
            if base_index is None:
                base_index = index
            if bad is not None:
                stats.bad.append(bad)
                continue
            stats.verified += 1
            if on_block is not None:
                at = (index - base_index) * layout.slot_bytes
                on_block(index, view[at : at + layout.block_bytes])


def read_latency_s(
    path: str | os.PathLike[str], layout: BlockLayout, *, samples: int = 32, seed: int = 0
) -> float:
    """Median time of one 4 KiB O_DIRECT read at a random aligned offset: the tier's fixed cost."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = _aligned_buffer(ALIGN)
    rng = random.Random(seed)
    times: list[float] = []
    try:
        view = memoryview(buf)[:ALIGN]
        slots = layout.file_bytes // ALIGN
        for _ in range(samples):
            offset = rng.randrange(slots) * ALIGN
            start = time.perf_counter()
            os.preadv(fd, [view], offset)
            times.append(time.perf_counter() - start)
        view.release()
    finally:
        os.close(fd)
    return float(statistics.median(times))


# ------------------------------------------------------------------------------------------- dd


_DD_RE = re.compile(r"^(\d+) bytes\b.*copied,\s*([0-9.eE+-]+)\s*s", re.M)


@dataclass(frozen=True)
class DdRun:
    seconds: float | None
    command: str
    error: str = ""


def run_dd(path: str | os.PathLike[str], *, io_bytes: int, direct: bool, expect_bytes: int) -> DdRun:
    """`dd if=FILE of=/dev/null bs=IO [iflag=direct]`: its own reported seconds (wall time as fallback)."""
    exe = shutil.which("dd")
    argv = ["dd", f"if={path}", "of=/dev/null", f"bs={io_bytes}"]
    if direct:
        argv.append("iflag=direct")
    command = " ".join(argv)
    if exe is None:
        return DdRun(None, command, "dd not found on PATH")
    argv[0] = exe
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=600, env={**os.environ, "LC_ALL": "C"}, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return DdRun(None, command, f"dd failed: {exc}")
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[0]
        return DdRun(None, command, f"dd exited {proc.returncode}: {last}")
    match = _DD_RE.search(proc.stderr)
    if match is None:
        return DdRun(wall, command, "")
    copied, seconds = int(match.group(1)), float(match.group(2))
    if copied != expect_bytes:
        return DdRun(None, command, f"dd read {copied} bytes, expected {expect_bytes}")
    return DdRun(seconds if seconds > 0 else wall, command, "")


# ------------------------------------------------------------------------------------ the bench


def check_directory(
    directory: str | os.PathLike[str], need_bytes: int, *, what: str = "the bench file"
) -> Path:
    """The bench directory exists, is a directory, is writable and has room: else one clear line (exit 2)."""
    path = Path(directory)
    if not path.exists():
        raise BadInputError(f"--dir {directory}: no such directory")
    if not path.is_dir():
        raise BadInputError(f"--dir {directory}: not a directory")
    probe = path / f".vramctl-probe-{os.getpid()}-{random.getrandbits(32):08x}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        probe.unlink()
    except OSError as exc:
        raise BadInputError(f"--dir {directory}: not writable ({exc.strerror or exc})") from None
    try:
        stat = os.statvfs(path)
        free = stat.f_bavail * stat.f_frsize
    except OSError:
        return path
    if free < need_bytes:
        raise DiskFullError(
            f"--dir {directory}: needs {format_bytes(need_bytes)} ({need_bytes} bytes) for {what}, "
            f"only {format_bytes(free)} free (use a smaller --size or another --dir)"
        )
    return path


_BENCH_FILE = re.compile(
    r"^(?:vramctl-tiers-bench-(\d+)-[0-9a-f]+\.[a-z-]+\.kv|\.vramctl-probe-(\d+)-[0-9a-f]+)$"
)


def remove_stale_bench_files(directory: Path) -> list[Path]:
    """Remove the bench data files (and probes) of runs whose process is gone: a SIGKILL gives no chance to clean
    up, so the next run does. Files of a bench still running, and anything not named like ours, stay."""
    from vramctl.core.atomic import process_alive

    removed: list[Path] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        match = _BENCH_FILE.match(name)
        if match is None or process_alive(int(match.group(1) or match.group(2))):
            continue
        leftover = directory / name
        with suppress(OSError):
            if os.path.isfile(leftover) and not os.path.islink(leftover):
                leftover.unlink()
                removed.append(leftover)
    return removed


def _new_name(directory: Path, method: str) -> Path:
    for _ in range(100):
        candidate = directory / f"vramctl-tiers-bench-{os.getpid()}-{random.getrandbits(40):010x}.{method}.kv"
        if not candidate.exists():
            return candidate
    raise VramctlError(f"--dir {directory}: could not find a free file name")  # pragma: no cover


def _bench_method(
    directory: Path,
    layout: BlockLayout,
    *,
    method: str,
    repeat: int,
    seq: int,
    keep: bool,
    kept: list[str],
    workers: int | None,
    use_dd: bool,
) -> MethodResult:
    path = _new_name(directory, method)
    direct = method == DIRECT
    if direct and not hasattr(os, "O_DIRECT"):
        return MethodResult(method, False, note="O_DIRECT is not available on this platform")
    try:
        write_s = write_blocks(path, layout, method=method, seq=seq, workers=workers)
    except DirectUnsupportedError as exc:
        return MethodResult(
            method,
            False,
            note=f"O_DIRECT refused by {filesystem_of(directory)} ({exc.strerror}); "
            "use --dir on a disk-backed filesystem to measure it",
        )
    write_times = [write_s]
    read_times: list[float] = []
    dd_times: list[float] = []
    dd_note = ""
    dd_command = ""
    verified = 0
    bad: dict[tuple[int, str], BadBlock] = {}
    resident: float | None = None
    latency: float | None = None
    try:
        for rep in range(repeat):
            # vramctl's pass and dd's alternate which goes first, so neither always reads a warmer device.
            for turn in ("ours", "dd") if rep % 2 == 0 else ("dd", "ours"):
                if turn == "ours":
                    if not direct:
                        _drop(path)
                        resident = _max_opt(resident, page_cache_resident_fraction(path))
                    stats = read_blocks(path, layout, method=method, seq=seq, workers=workers)
                    read_times.append(stats.seconds)
                    verified += stats.verified
                    for b in stats.bad:
                        bad.setdefault((b.index, b.reason), b)
                elif use_dd and not dd_note:
                    if not direct:
                        _drop(path)
                    run = run_dd(
                        path, io_bytes=layout.chunk_bytes, direct=direct, expect_bytes=layout.file_bytes
                    )
                    dd_command = run.command
                    if run.seconds is None:
                        dd_note = run.error
                    else:
                        dd_times.append(run.seconds)
        if direct:
            latency = read_latency_s(path, layout)
    finally:
        if keep:
            kept.append(str(path))
        else:
            with suppress(FileNotFoundError):
                path.unlink()
    # More write passes (a new file each time, removed at once) for a steadier write figure.
    for _ in range(max(0, min(repeat, 3) - 1)):
        extra = _new_name(directory, method)
        try:
            write_times.append(write_blocks(extra, layout, method=method, seq=seq, workers=workers))
        finally:
            with suppress(FileNotFoundError):
                extra.unlink()
    note = ""
    if not direct:
        if resident is None:
            note = "page cache dropped with posix_fadvise(DONTNEED); residency not measurable (no mincore)"
        else:
            note = (
                f"page cache dropped with posix_fadvise(DONTNEED) before each read: "
                f"{resident:.0%} of the file still cached at worst"
            )
            if resident >= 0.5:
                note += " (the pages could not be dropped: these reads came from memory, not the device)"
    else:
        note = "O_DIRECT into aligned private huge-page buffers, page cache bypassed"
    if not use_dd:
        dd_note = "dd baseline skipped"
    return MethodResult(
        method=method,
        measured=True,
        note=note,
        write=Timing(layout.file_bytes, tuple(write_times)),
        read=Timing(layout.file_bytes, tuple(read_times)),
        baseline=Timing(layout.file_bytes, tuple(dd_times)) if dd_times else None,
        baseline_command=dd_command,
        baseline_note=dd_note,
        latency_s=latency,
        verified_blocks=verified,
        bad_blocks=tuple(sorted(bad.values(), key=lambda b: (b.index, b.reason))),
        page_cache_resident_after_drop=resident,
    )


def _max_opt(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _drop(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        drop_file_pages(fd)
    finally:
        os.close(fd)


def run_disk_bench(
    *,
    block_bytes: int,
    num_blocks: int,
    directory: str | os.PathLike[str] | None = None,
    methods: Sequence[str] = METHODS,
    repeat: int = 3,
    checksum: str = "crc32",
    io_bytes: int = DEFAULT_IO_BYTES,
    keep: bool = False,
    use_dd: bool = True,
    workers: int | None = None,
    seq: int | None = None,
) -> DiskBenchResult:
    """Write, read back and verify N blocks per method; compare reads with dd on the same file."""
    if repeat < 1:
        raise BadInputError(f"--repeat {repeat}: must be at least 1")
    for method in methods:
        if method not in METHODS:
            raise BadInputError(f"disk method {method!r}: use {', '.join(METHODS)}")
    layout = BlockLayout(block_bytes=block_bytes, num_blocks=num_blocks, checksum=checksum, io_bytes=io_bytes)
    # One file at a time normally (each is removed before the next is written); with `keep` they all stay.
    need = layout.file_bytes * (len(methods) if keep else 1)
    where = check_directory(
        directory if directory is not None else tempfile.gettempdir(),
        need,
        what="the kept bench files" if keep and len(methods) > 1 else "the bench file",
    )
    stale = remove_stale_bench_files(where)
    run_seq = seq if seq is not None else random.getrandbits(63)
    try:
        load = os.getloadavg()[0]  # before the bench adds its own threads
    except OSError:
        load = 0.0
    kept: list[str] = []
    results = [
        _bench_method(
            where,
            layout,
            method=method,
            repeat=repeat,
            seq=run_seq,
            keep=keep,
            kept=kept,
            workers=workers,
            use_dd=use_dd,
        )
        for method in methods
    ]
    notes: list[str] = []
    if stale:
        notes.append(
            f"removed {len(stale)} bench file(s) left in {where} by an earlier run that was killed: "
            + ", ".join(p.name for p in stale)
        )
    cpus = os.cpu_count() or 1
    if load > 0.75 * cpus:
        notes.append(
            f"load average {load:.1f} on {cpus} CPUs: checking every block needs about 0.5 CPU-seconds per GB "
            "(CRC-32), so a busy machine slows the verified reads but not dd"
        )
    filesystem = filesystem_of(where)
    if filesystem.split(" ", 1)[0] in ("tmpfs", "ramfs"):
        notes.append(f"{where} is {filesystem.split(' ', 1)[0]}: memory, not a disk; use --dir on a disk")
    if layout.slot_bytes != layout.block_bytes:
        notes.append(
            f"each {layout.block_bytes}-byte block sits in a {layout.slot_bytes}-byte slot "
            f"(4096-aligned for O_DIRECT); GB/s are over the file's {layout.file_bytes} bytes"
        )
    return DiskBenchResult(
        directory=str(where),
        filesystem=filesystem,
        layout=layout,
        repeat=repeat,
        methods=tuple(results),
        kept_files=tuple(kept),
        notes=tuple(notes),
    )


def blocks_for_size(size_bytes: int, block_bytes: int) -> int:
    """How many whole blocks fit in `size_bytes` (at least one)."""
    return max(1, size_bytes // max(1, block_bytes))


def gbps(bytes_per_s: float) -> float:
    """Decimal GB/s, the unit link and disk bandwidths are quoted in."""
    return bytes_per_s / 1e9 if math.isfinite(bytes_per_s) else 0.0


__all__ = [
    "ALIGN",
    "BUFFERED",
    "DIRECT",
    "HEADER_BYTES",
    "BadBlock",
    "BlockLayout",
    "DiskBenchResult",
    "DiskFullError",
    "MethodResult",
    "Timing",
    "check_block",
    "encode_block",
    "read_blocks",
    "run_dd",
    "run_disk_bench",
    "write_blocks",
]
