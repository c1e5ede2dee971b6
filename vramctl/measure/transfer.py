"""KV blocks between a device pool and host memory, moved for real and verified (the host tier's speed).

The pool is laid out as the engines lay out their paged KV caches (layer-first, one page per layer and
block: vLLM's per-layer KV tensors, SGLang's `layer_first` host layout; `python/sglang/srt/mem_cache/memory_pool_host.py` (SGLang v0.5.23)): `pool[layer, block, page]`. A transfer moves N blocks scattered at random over the pool (all of
their layers) between the pool and a host buffer, three ways (docs/tiers-bench.md):

- `per-block`: one `tensor.copy_(non_blocking=True)` per (layer, block) page — vLLM's legacy
  `swap_blocks` loop and SGLang's `direct` IO backend (`transfer_kv_direct`): layers × N copy calls;
- `gather`: `index_select` of the N pages of every layer into a contiguous device staging buffer, then
  a copy to host (offload); a copy into staging then `index_copy_` into the pool (load) — the
  gather/scatter kernel path (SGLang `kernel` backend, LMCache `multi_layer_kv_transfer`). On CUDA it is
  pipelined in 8 chunks over two streams, so the gather of chunk c+1 runs while chunk c crosses PCIe;
- `contiguous`: one copy of a contiguous buffer of the same bytes: the baseline (the link's best).

Host memory is pinned (`host-pinned`) and pageable (`host-pageable`) on CUDA. Without CUDA the same code
runs host → host (`host-memcpy`: memory bandwidth, NOT a PCIe figure) so the path is exercised in CI;
pinned memory needs CUDA there (torch raises) and is reported as unavailable.

Every transfer is verified against its source (exact comparison, per block); a mismatch is counted per
block and fails the command. On CUDA a per-layer load-back runs on a side stream while the compute
stream does two layer-sized matmuls per layer, waiting only for its layer's event (SGLang's
`LayerDoneCounter`, `python/sglang/srt/mem_cache/memory_pool_host.py` (SGLang v0.5.23)); the overlap fraction is 1 − (t_overlapped − t_compute)/t_transfer.

torch is imported inside the functions, never at module import.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vramctl.core.errors import BadInputError, DeviceOutOfMemoryError, NoDeviceError
from vramctl.core.units import format_bytes

if TYPE_CHECKING:  # pragma: no cover
    import torch

HOST_PINNED = "host-pinned"
HOST_PAGEABLE = "host-pageable"
HOST_MEMCPY = "host-memcpy"

PER_BLOCK = "per-block"
GATHER = "gather"
CONTIGUOUS = "contiguous"
TRANSFER_METHODS: tuple[str, ...] = (PER_BLOCK, GATHER, CONTIGUOUS)

OFFLOAD = "offload"
"""Pool → host (GPU → host on CUDA): a tier's write direction."""
LOAD = "load"
"""Host → pool (host → GPU on CUDA): a tier's read direction, the one a prefix fetch waits on."""


@dataclass(frozen=True)
class TransferRow:
    """One (tier, direction, method): seconds of each verified pass over `bytes_moved`."""

    tier: str
    direction: str
    method: str
    bytes_moved: int
    seconds: tuple[float, ...]
    copies: int
    """Copy (or kernel) calls per transfer."""
    verified_blocks: int
    bad_blocks: int

    @property
    def median_s(self) -> float:
        return float(statistics.median(self.seconds))

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_moved / self.median_s if self.median_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "tier": self.tier,
            "direction": self.direction,
            "method": self.method,
            "bytes": self.bytes_moved,
            "seconds": list(self.seconds),
            "median_s": self.median_s,
            "bytes_per_s": self.bytes_per_s,
            "copies": self.copies,
            "verified_blocks": self.verified_blocks,
            "bad_blocks": self.bad_blocks,
        }


@dataclass(frozen=True)
class OverlapResult:
    """Per-layer load-back on a side stream against layer-sized compute on the compute stream."""

    layers: int
    tokens: int
    hidden_size: int
    intermediate_size: int
    transfer_s: float
    compute_s: float
    overlapped_s: float
    verified_blocks: int
    bad_blocks: int

    @property
    def overlap_fraction(self) -> float:
        """Share of the transfer hidden behind compute: 1 − (t_overlapped − t_compute) / t_transfer."""
        if self.transfer_s <= 0:
            return 1.0
        return max(0.0, min(1.0, 1.0 - (self.overlapped_s - self.compute_s) / self.transfer_s))

    def to_json(self) -> dict[str, Any]:
        return {
            "layers": self.layers,
            "tokens": self.tokens,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "transfer_s": self.transfer_s,
            "compute_s": self.compute_s,
            "overlapped_s": self.overlapped_s,
            "overlap_fraction": self.overlap_fraction,
            "verified_blocks": self.verified_blocks,
            "bad_blocks": self.bad_blocks,
        }


@dataclass(frozen=True)
class TransferBenchResult:
    device: str
    device_name: str
    layers: int
    page_bytes: int
    num_blocks: int
    pool_blocks: int
    repeat: int
    rows: tuple[TransferRow, ...]
    overlap: OverlapResult | None = None
    latency_s: float | None = None
    """Median time of one page host → device copy with a sync (pinned): the fixed cost per fetch."""
    notes: tuple[str, ...] = ()
    torch_version: str = ""

    @property
    def block_bytes(self) -> int:
        return self.page_bytes * self.layers

    @property
    def bad_blocks(self) -> int:
        total = sum(r.bad_blocks for r in self.rows)
        return total + (self.overlap.bad_blocks if self.overlap else 0)

    @property
    def verified_blocks(self) -> int:
        total = sum(r.verified_blocks for r in self.rows)
        return total + (self.overlap.verified_blocks if self.overlap else 0)

    @property
    def ok(self) -> bool:
        return self.bad_blocks == 0

    def row(self, tier: str, direction: str, method: str) -> TransferRow | None:
        for row in self.rows:
            if (row.tier, row.direction, row.method) == (tier, direction, method):
                return row
        return None

    def baseline_ratio(self, row: TransferRow) -> float | None:
        """This row's bandwidth over the contiguous copy of the same tier and direction."""
        base = self.row(row.tier, row.direction, CONTIGUOUS)
        if base is None or base.bytes_per_s <= 0:
            return None
        return row.bytes_per_s / base.bytes_per_s

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "device_name": self.device_name,
            "torch_version": self.torch_version,
            "layers": self.layers,
            "page_bytes": self.page_bytes,
            "block_bytes": self.block_bytes,
            "blocks": self.num_blocks,
            "pool_blocks": self.pool_blocks,
            "repeat": self.repeat,
            "verified_blocks": self.verified_blocks,
            "bad_blocks": self.bad_blocks,
            "rows": [{**r.to_json(), "vs_contiguous": self.baseline_ratio(r)} for r in self.rows],
            "overlap": self.overlap.to_json() if self.overlap else None,
            "latency_s": self.latency_s,
            "notes": list(self.notes),
        }


# ------------------------------------------------------------------------------------------ helpers


def _element_dtype(page_bytes: int) -> tuple[Any, int]:
    import torch

    for dtype, size in ((torch.int64, 8), (torch.int32, 4), (torch.int16, 2)):
        if page_bytes % size == 0:
            return dtype, size
    return torch.uint8, 1


def _fill_pattern(t: torch.Tensor, seed: int) -> None:
    """Random-looking, position-dependent content (a hash of the element index), cheap on any device."""
    import torch

    flat = t.view(-1)
    if flat.dtype != torch.int64:
        tmp = torch.arange(flat.numel(), dtype=torch.int64, device=flat.device)
        _mix(tmp, seed)
        flat.copy_(tmp.to(flat.dtype))
        return
    torch.arange(flat.numel(), dtype=torch.int64, device=flat.device, out=flat)
    _mix(flat, seed)


def _mix(x: torch.Tensor, seed: int) -> None:
    x.add_(seed * 2 + 1)
    x.mul_(0x5851F42D4C957F2D)
    x.bitwise_xor_(x >> 29)
    x.mul_(0x2545F4914F6CDD1D)
    x.bitwise_xor_(x >> 32)


def _bad_blocks(got: torch.Tensor, expected: torch.Tensor, layers: int, blocks: int) -> int:
    """Blocks (any of their layers' pages) that differ from the source."""
    diff = (got != expected).any(dim=1).view(layers, blocks).any(dim=0)
    return int(diff.sum().item())


def _sync_for(device: Any) -> Callable[[], None]:
    import torch

    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


# --------------------------------------------------------------------------------------- the bench


def run_transfer_bench(
    *,
    device: str,
    page_bytes: int,
    layers: int,
    num_blocks: int,
    repeat: int = 5,
    pool_factor: int = 2,
    seed: int = 0,
    tokens: int | None = None,
    hidden_size: int = 4096,
    intermediate_size: int = 14336,
    overlap: bool = True,
    methods: tuple[str, ...] = TRANSFER_METHODS,
) -> TransferBenchResult:
    """Move N scattered KV blocks (layers × page_bytes each) pool ↔ host by each method, verified."""
    import torch

    if page_bytes <= 0 or layers <= 0 or num_blocks <= 0:
        raise BadInputError(
            f"transfer bench: page {page_bytes} B × {layers} layers × {num_blocks} blocks is empty"
        )
    if repeat < 1:
        raise BadInputError(f"--repeat {repeat}: must be at least 1")
    if device == "cuda":
        if not torch.cuda.is_available():
            raise NoDeviceError(
                "--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False)"
            )
        dev = torch.device("cuda", torch.cuda.current_device())
        device_name = torch.cuda.get_device_name(dev)
    elif device == "cpu":
        dev = torch.device("cpu")
        device_name = "cpu"
    else:
        raise BadInputError(f"--device {device!r}: use cuda or cpu")
    moved = page_bytes * layers * num_blocks
    # host buffers: CPU holds pool (pool_factor×), expected, staging and the host tier (4 + pool_factor
    # transfers, plus a verification copy); CUDA holds pinned + pageable host copies.
    host_need = moved * (pool_factor + 4) if dev.type == "cpu" else 2 * moved
    available = _mem_available_bytes()
    if available is not None and host_need > 0.8 * available:
        raise BadInputError(
            f"transfer bench: {num_blocks} blocks of {format_bytes(page_bytes * layers)} need about "
            f"{format_bytes(host_need)} of host memory, {format_bytes(available)} available: "
            "use a smaller --size or --blocks"
        )
    try:
        return _run(
            torch,
            dev,
            device_name,
            page_bytes=page_bytes,
            layers=layers,
            num_blocks=num_blocks,
            repeat=repeat,
            pool_factor=max(1, pool_factor),
            seed=seed,
            tokens=tokens,
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            overlap=overlap,
            methods=methods,
        )
    except MemoryError:
        raise DeviceOutOfMemoryError(
            f"transfer bench: out of host memory for {num_blocks} blocks of {page_bytes * layers} bytes: "
            "use a smaller --size"
        ) from None
    except torch.OutOfMemoryError as exc:
        need = page_bytes * layers * num_blocks
        raise DeviceOutOfMemoryError(
            f"transfer bench: out of device memory for {num_blocks} blocks of {page_bytes * layers} bytes "
            f"({need} bytes moved, about {need * (pool_factor + 2)} allocated): use a smaller --size "
            f"({str(exc).splitlines()[0][:120]})"
        ) from None


class _Pipeline:
    """Chunked two-stage transfer: stage one of chunk c+1 runs while stage two of chunk c does.

    On CUDA, stage one (the gather kernel, or the host → device copy) runs on a side stream and records
    an event per chunk; stage two (the device → host copy, or the scatter kernel) runs on the current
    stream after its chunk's event. So the gather's HBM pass hides behind the PCIe copy (the way
    LMCache and SGLang's kernel backend chunk their transfers) instead of adding to it. On CPU the
    chunks run one after the other (same code path, no overlap).
    """

    def __init__(self, torch: Any, dev: Any, rows: int, chunks: int) -> None:
        chunks = max(1, min(chunks, rows))
        self.torch = torch
        self.bounds = [(rows * i // chunks, rows * (i + 1) // chunks) for i in range(chunks)]
        self.side = torch.cuda.Stream(device=dev) if dev.type == "cuda" else None
        self.main = torch.cuda.current_stream(dev) if dev.type == "cuda" else None

    def run(self, first: Callable[[int, int], None], second: Callable[[int, int], None]) -> None:
        if self.side is None:
            for lo, hi in self.bounds:
                first(lo, hi)
                second(lo, hi)
            return
        cuda = self.torch.cuda
        assert self.main is not None
        events = [cuda.Event() for _ in self.bounds]
        self.side.wait_stream(self.main)
        with cuda.stream(self.side):
            for (lo, hi), event in zip(self.bounds, events, strict=True):
                first(lo, hi)
                event.record(self.side)
        for (lo, hi), event in zip(self.bounds, events, strict=True):
            self.main.wait_event(event)
            second(lo, hi)
        # the side stream's buffers are reused by the next pass: make the current stream the last user
        self.main.wait_stream(self.side)


GATHER_CHUNKS_CUDA = 8
"""Pipeline depth of the gather path on CUDA (256 MiB per transfer → 32 MiB chunks)."""
GATHER_CHUNKS_CPU = 4
"""On CPU the chunks only exercise the same code path."""


def _mem_available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (None where there is none)."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass
class _Buffers:
    pool: Any  # [layers * pool_blocks, W] device
    flat_ids: Any  # [layers * N] int64 on device
    flat_ids_list: list[int]
    expected: Any  # [layers * N, W] device: the N blocks' pages, layer-major
    staging: Any  # [layers * N, W] device
    pipe: _Pipeline
    hosts: dict[str, Any] = field(default_factory=dict)  # tier → [layers * N, W] host


def _run(
    torch: Any,
    dev: Any,
    device_name: str,
    *,
    page_bytes: int,
    layers: int,
    num_blocks: int,
    repeat: int,
    pool_factor: int,
    seed: int,
    tokens: int | None,
    hidden_size: int,
    intermediate_size: int,
    overlap: bool,
    methods: tuple[str, ...],
) -> TransferBenchResult:
    notes: list[str] = []
    dtype, elem = _element_dtype(page_bytes)
    width = page_bytes // elem
    pool_blocks = num_blocks * pool_factor
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    ids = torch.randperm(pool_blocks, generator=gen)[:num_blocks]
    flat_cpu = (torch.arange(layers).unsqueeze(1) * pool_blocks + ids.unsqueeze(0)).reshape(-1)
    pool = torch.empty((layers * pool_blocks, width), dtype=dtype, device=dev)
    _fill_pattern(pool, seed)
    flat_ids = flat_cpu.to(dev)
    expected = torch.index_select(pool, 0, flat_ids)
    staging = torch.empty_like(expected)
    chunks = GATHER_CHUNKS_CUDA if dev.type == "cuda" else GATHER_CHUNKS_CPU
    pipe = _Pipeline(torch, dev, layers * num_blocks, chunks)
    bufs = _Buffers(pool, flat_ids, flat_cpu.tolist(), expected, staging, pipe)
    sync = _sync_for(dev)

    if dev.type == "cuda":
        try:
            bufs.hosts[HOST_PINNED] = torch.empty(expected.shape, dtype=dtype, pin_memory=True)
        except RuntimeError as exc:  # cudaHostAlloc refused (memlock limits in containers, low RAM)
            first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            notes.append(
                f"could not pin {expected.numel() * elem} bytes of host memory ({first}): host-pinned not measured"
            )
        bufs.hosts[HOST_PAGEABLE] = torch.empty(expected.shape, dtype=dtype)
    else:
        try:
            torch.empty((1,), dtype=torch.uint8, pin_memory=True)
            notes.append("pinned memory is allocatable but there is no CUDA device: host-memcpy only")
        except RuntimeError as exc:
            first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            notes.append(f"pinned host memory needs CUDA (torch: {first}); measured host-memcpy only")
        notes.append("no CUDA device: host-memcpy is host memory bandwidth, not a PCIe figure")
        bufs.hosts[HOST_MEMCPY] = torch.empty(expected.shape, dtype=dtype)

    rows: list[TransferRow] = []
    for tier, host in bufs.hosts.items():
        for direction in (OFFLOAD, LOAD):
            for method in methods:
                rows.append(
                    _measure(torch, bufs, host, tier, direction, method, layers, num_blocks, repeat, sync)
                )

    overlap_result: OverlapResult | None = None
    latency: float | None = None
    if dev.type == "cuda" and HOST_PINNED in bufs.hosts:
        latency = _latency(torch, bufs, sync)
        if overlap:
            overlap_result = _overlap(
                torch,
                bufs,
                dev,
                layers=layers,
                num_blocks=num_blocks,
                tokens=tokens if tokens is not None else max(256, min(8192, num_blocks * 16)),
                hidden_size=hidden_size,
                intermediate_size=intermediate_size,
                repeat=repeat,
                sync=sync,
            )
    elif overlap:
        notes.append("per-layer load-back overlap needs CUDA streams: not measured")
    return TransferBenchResult(
        device=dev.type,
        device_name=device_name,
        layers=layers,
        page_bytes=page_bytes,
        num_blocks=num_blocks,
        pool_blocks=pool_blocks,
        repeat=repeat,
        rows=tuple(rows),
        overlap=overlap_result,
        latency_s=latency,
        notes=tuple(notes),
        torch_version=str(torch.__version__),
    )


def _measure(
    torch: Any,
    bufs: _Buffers,
    host: Any,
    tier: str,
    direction: str,
    method: str,
    layers: int,
    num_blocks: int,
    repeat: int,
    sync: Callable[[], None],
) -> TransferRow:
    pool, staging, expected = bufs.pool, bufs.staging, bufs.expected
    rows = layers * num_blocks
    copies = 1
    transfer: Callable[[], None]
    if direction == OFFLOAD:
        if method == CONTIGUOUS:

            def transfer() -> None:
                host.copy_(expected, non_blocking=True)

        elif method == GATHER:
            pipe = bufs.pipe
            copies = 2 * len(pipe.bounds)

            def gather(lo: int, hi: int) -> None:
                torch.index_select(pool, 0, bufs.flat_ids[lo:hi], out=staging[lo:hi])

            def copy_out(lo: int, hi: int) -> None:
                host[lo:hi].copy_(staging[lo:hi], non_blocking=True)

            def transfer() -> None:
                pipe.run(gather, copy_out)

        else:
            copies = rows
            pairs = [(host[r], pool[i]) for r, i in enumerate(bufs.flat_ids_list)]

            def transfer() -> None:
                for dst, src in pairs:
                    dst.copy_(src, non_blocking=True)

        def clear() -> None:
            host.zero_()

        def verify() -> int:
            if host.device == expected.device:
                return _bad_blocks(host, expected, layers, num_blocks)
            staging.copy_(host)
            return _bad_blocks(staging, expected, layers, num_blocks)

    else:
        host.copy_(expected)  # the tier holds the blocks to load
        if method == CONTIGUOUS:

            def transfer() -> None:
                staging.copy_(host, non_blocking=True)

            def clear() -> None:
                staging.zero_()

            def verify() -> int:
                return _bad_blocks(staging, expected, layers, num_blocks)

        else:
            if method == GATHER:
                pipe = bufs.pipe
                copies = 2 * len(pipe.bounds)

                def copy_in(lo: int, hi: int) -> None:
                    staging[lo:hi].copy_(host[lo:hi], non_blocking=True)

                def scatter(lo: int, hi: int) -> None:
                    pool.index_copy_(0, bufs.flat_ids[lo:hi], staging[lo:hi])

                def transfer() -> None:
                    pipe.run(copy_in, scatter)

            else:
                copies = rows
                pairs = [(pool[i], host[r]) for r, i in enumerate(bufs.flat_ids_list)]

                def transfer() -> None:
                    for dst, src in pairs:
                        dst.copy_(src, non_blocking=True)

            def clear() -> None:
                pool.index_fill_(0, bufs.flat_ids, 0)
                staging.zero_()

            def verify() -> int:
                return _bad_blocks(torch.index_select(pool, 0, bufs.flat_ids), expected, layers, num_blocks)

    # One untimed pass first (first-touch, allocator, driver mappings), verified like the rest.
    clear()
    sync()
    transfer()
    sync()
    bad = verify()
    verified = num_blocks - bad
    seconds: list[float] = []
    for _ in range(repeat):
        clear()
        sync()
        start = time.perf_counter()
        transfer()
        sync()
        seconds.append(time.perf_counter() - start)
        failed = verify()
        bad += failed
        verified += num_blocks - failed
    if direction == LOAD and method != CONTIGUOUS:
        pool.index_copy_(0, bufs.flat_ids, expected)  # leave the pool as it was
    return TransferRow(
        tier=tier,
        direction=direction,
        method=method,
        bytes_moved=rows * expected.shape[1] * expected.element_size(),
        seconds=tuple(seconds),
        copies=copies,
        verified_blocks=verified,
        bad_blocks=bad,
    )


def _latency(torch: Any, bufs: _Buffers, sync: Callable[[], None], samples: int = 50) -> float:
    """Median seconds of one page host → device copy, synchronised: the fixed cost of a fetch."""
    host = bufs.hosts[HOST_PINNED]
    times: list[float] = []
    for i in range(samples):
        row = i % host.shape[0]
        sync()
        start = time.perf_counter()
        bufs.staging[row].copy_(host[row], non_blocking=True)
        sync()
        times.append(time.perf_counter() - start)
    return float(statistics.median(times))


def _overlap(
    torch: Any,
    bufs: _Buffers,
    dev: Any,
    *,
    layers: int,
    num_blocks: int,
    tokens: int,
    hidden_size: int,
    intermediate_size: int,
    repeat: int,
    sync: Callable[[], None],
) -> OverlapResult:
    host = bufs.hosts[HOST_PINNED]
    host.copy_(bufs.expected)
    host_layers = host.view(layers, -1)
    dst_layers = bufs.staging.view(layers, -1)
    load_stream = torch.cuda.Stream(device=dev)
    compute_stream = torch.cuda.current_stream(dev)
    x = torch.randn((tokens, hidden_size), device=dev, dtype=torch.bfloat16)
    w_up = torch.randn((hidden_size, intermediate_size), device=dev, dtype=torch.bfloat16) * 0.01
    w_down = torch.randn((intermediate_size, hidden_size), device=dev, dtype=torch.bfloat16) * 0.01
    mid = torch.empty((tokens, intermediate_size), device=dev, dtype=torch.bfloat16)
    out = torch.empty((tokens, hidden_size), device=dev, dtype=torch.bfloat16)

    def compute_layer() -> None:
        torch.matmul(x, w_up, out=mid)
        torch.matmul(mid, w_down, out=out)

    def load_all(events: list[Any] | None) -> None:
        with torch.cuda.stream(load_stream):
            for layer in range(layers):
                dst_layers[layer].copy_(host_layers[layer], non_blocking=True)
                if events is not None:
                    events[layer].record(load_stream)

    def transfer_only() -> None:
        load_all(None)

    def compute_only() -> None:
        for _ in range(layers):
            compute_layer()

    def overlapped() -> None:
        events = [torch.cuda.Event() for _ in range(layers)]
        load_stream.wait_stream(compute_stream)
        load_all(events)
        for layer in range(layers):
            compute_stream.wait_event(events[layer])
            compute_layer()

    def timed(fn: Callable[[], None]) -> float:
        bufs.staging.zero_()
        sync()
        start = time.perf_counter()
        fn()
        sync()
        return time.perf_counter() - start

    for fn in (transfer_only, compute_only, overlapped):  # warm-up (cuBLAS handles, autotuning)
        timed(fn)
    t_transfer: list[float] = []
    t_compute: list[float] = []
    t_overlap: list[float] = []
    bad = 0
    verified = 0
    for _ in range(repeat):
        t_transfer.append(timed(transfer_only))
        t_compute.append(timed(compute_only))
        t_overlap.append(timed(overlapped))
        failed = _bad_blocks(bufs.staging, bufs.expected, layers, num_blocks)
        bad += failed
        verified += num_blocks - failed
    return OverlapResult(
        layers=layers,
        tokens=tokens,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        transfer_s=float(statistics.median(t_transfer)),
        compute_s=float(statistics.median(t_compute)),
        overlapped_s=float(statistics.median(t_overlap)),
        verified_blocks=verified,
        bad_blocks=bad,
    )


def torch_available() -> bool:
    """Whether torch can be imported (the `measure` extra)."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def cuda_available() -> bool:
    """Whether torch sees a CUDA device (False when torch is missing)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def cuda_device_name() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return str(torch.cuda.get_device_name(torch.cuda.current_device()))


# ------------------------------------------------------------------------------ the whole bench


@dataclass(frozen=True)
class BenchGeometry:
    """What one KV block is: `layers` pages of `page_bytes` (one block of `block_size` tokens per layer)."""

    label: str
    """`meta-llama/Meta-Llama-3-8B-Instruct, 16 tokens/block` or `--block-bytes 1048576`."""
    page_bytes: int
    layers: int
    block_size: int | None = None
    hidden_size: int = 4096
    intermediate_size: int = 14336

    @property
    def block_bytes(self) -> int:
        return self.page_bytes * self.layers


@dataclass(frozen=True)
class TiersBenchReport:
    """Everything `vramctl tiers bench` measured; `to_json()` is a `vramctl.tiers.bench/1` bandwidths file."""

    geometry: BenchGeometry
    disk: Any  # vramctl.tiers.disk_bench.DiskBenchResult | None
    device: TransferBenchResult | None
    environment: dict[str, Any]
    link_bytes_per_s: float | None = None
    link_source: str = ""
    notes: tuple[str, ...] = ()

    @property
    def bad_blocks(self) -> int:
        disk_bad = len(self.disk.bad_blocks) if self.disk is not None else 0
        return disk_bad + (self.device.bad_blocks if self.device is not None else 0)

    @property
    def verified_blocks(self) -> int:
        disk_ok = self.disk.verified_blocks if self.disk is not None else 0
        return disk_ok + (self.device.verified_blocks if self.device is not None else 0)

    @property
    def ok(self) -> bool:
        return self.bad_blocks == 0

    def link_ratio(self, row: TransferRow) -> float | None:
        if self.link_bytes_per_s is None or row.tier == HOST_MEMCPY or self.link_bytes_per_s <= 0:
            return None
        return row.bytes_per_s / self.link_bytes_per_s

    def bandwidths(self) -> Any:
        """The tiers `tiers plan --bandwidths` reads (vramctl.tiers.bandwidths.BenchBandwidths)."""
        from vramctl.tiers.bandwidths import BenchBandwidths, MeasuredTier

        tiers: list[MeasuredTier] = []
        dev = self.device
        if dev is not None:
            for tier in (HOST_PINNED, HOST_PAGEABLE):
                read = dev.row(tier, LOAD, GATHER)
                write = dev.row(tier, OFFLOAD, GATHER)
                if read is None or write is None or read.bytes_per_s <= 0 or write.bytes_per_s <= 0:
                    continue
                good = read.bad_blocks == 0 and write.bad_blocks == 0
                tiers.append(
                    MeasuredTier(
                        name=tier,
                        read_bytes_per_s=read.bytes_per_s,
                        write_bytes_per_s=write.bytes_per_s,
                        method=(
                            f"gather/scatter (index_select/index_copy_) + copy, pipelined in chunks, {dev.num_blocks} blocks × "
                            f"{dev.layers} layers × {dev.page_bytes} B pages, {dev.device_name}"
                        ),
                        verified=good and read.verified_blocks > 0,
                        latency_s=dev.latency_s if tier == HOST_PINNED else None,
                    )
                )
        disk = self.disk
        if disk is not None:
            for method in disk.methods:
                if not method.measured or method.read is None or method.write is None:
                    continue
                if method.read.bytes_per_s <= 0 or method.write.bytes_per_s <= 0:
                    continue
                what = "O_DIRECT" if method.method == "direct" else "page cache (dropped before reads)"
                tiers.append(
                    MeasuredTier(
                        name=method.tier_name,
                        read_bytes_per_s=method.read.bytes_per_s,
                        write_bytes_per_s=method.write.bytes_per_s,
                        method=(
                            f"{what}, {disk.layout.chunk_bytes} B per I/O, fsync'd writes, "
                            f"{disk.layout.checksum} per block, {disk.filesystem}"
                        ),
                        verified=not method.bad_blocks and method.verified_blocks > 0,
                        latency_s=method.latency_s,
                    )
                )
        return BenchBandwidths(tiers=tuple(tiers), environment=dict(self.environment))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.bandwidths().to_json())
        geometry = self.geometry
        out["ok"] = self.ok
        out["verified_blocks"] = self.verified_blocks
        out["bad_blocks"] = self.bad_blocks
        out["geometry"] = {
            "label": geometry.label,
            "page_bytes": geometry.page_bytes,
            "layers": geometry.layers,
            "block_bytes": geometry.block_bytes,
            "block_size": geometry.block_size,
        }
        out["link"] = {"nominal_bytes_per_s": self.link_bytes_per_s, "source": self.link_source}
        device_json: dict[str, Any] | None = None
        if self.device is not None:
            device_json = self.device.to_json()
            for row_json, row in zip(device_json["rows"], self.device.rows, strict=True):
                row_json["vs_link"] = self.link_ratio(row)
        out["device"] = device_json
        out["disk"] = self.disk.to_json() if self.disk is not None else None
        out["notes"] = list(self.notes)
        return out


def _environment(extra: dict[str, Any]) -> dict[str, Any]:
    import datetime
    import os
    import platform
    import socket

    from vramctl import __version__

    env: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "vramctl": __version__,
        "cpu_count": os.cpu_count(),
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    env["host_memory_bytes"] = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    env.update(extra)
    return env


def link_for_device(device_name: str | None, gpu: str | None) -> tuple[float | None, str]:
    """The host link's nominal bytes/s per direction from the registry (`--gpu` or the device's name)."""
    from vramctl.core.errors import VramctlError
    from vramctl.registry import load_gpu

    name = gpu or device_name
    if not name:
        return None, ""
    try:
        spec = load_gpu(name)
    except VramctlError:
        if gpu:
            raise
        return None, f"{device_name!r} is not in the GPU registry (pass --gpu NAME for the link's nominal)"
    return (
        spec.host_link_bytes_per_s,
        f"{spec.name}: PCIe Gen{spec.pcie_generation} x{spec.pcie_lanes}, nominal per direction (registry)",
    )


def run_tiers_bench(
    *,
    geometry: BenchGeometry,
    device: str | None,
    device_blocks: int,
    disk_blocks: int,
    directory: str | None = None,
    repeat: int = 3,
    skip_disk: bool = False,
    skip_device: bool = False,
    io_bytes: int | None = None,
    checksum: str = "crc32",
    keep: bool = False,
    gpu: str | None = None,
    overlap: bool = True,
    environment: dict[str, Any] | None = None,
) -> TiersBenchReport:
    """The disk tier (any machine) and the host tier (CUDA, or host-memcpy on CPU), measured and verified.

    `device` None means CUDA when torch sees one, else cpu. The disk part never imports torch.
    """
    from vramctl.tiers import disk_bench

    notes: list[str] = []
    disk_result = None
    if not skip_disk:
        disk_result = disk_bench.run_disk_bench(
            block_bytes=geometry.block_bytes,
            num_blocks=disk_blocks,
            directory=directory,
            repeat=repeat,
            checksum=checksum,
            io_bytes=io_bytes if io_bytes is not None else disk_bench.DEFAULT_IO_BYTES,
            keep=keep,
        )
    device_result: TransferBenchResult | None = None
    link: float | None = None
    link_source = ""
    extra: dict[str, Any] = {"block": geometry.label}
    if not skip_device and not torch_available():
        if device is not None:
            raise NoDeviceError(
                f"--device {device}: torch is not installed (pip install 'vramctl[measure]'), or use --skip-device"
            )
        skip_device = True
        notes.append(
            "torch is not installed: the host tier was not measured (pip install 'vramctl[measure]')"
        )
    if not skip_device:
        chosen = device or ("cuda" if cuda_available() else "cpu")
        device_result = run_transfer_bench(
            device=chosen,
            page_bytes=geometry.page_bytes,
            layers=geometry.layers,
            num_blocks=device_blocks,
            repeat=repeat,
            tokens=max(256, min(8192, device_blocks * (geometry.block_size or 16))),
            hidden_size=geometry.hidden_size,
            intermediate_size=geometry.intermediate_size,
            overlap=overlap,
        )
        extra["device"] = device_result.device_name
        extra["torch"] = device_result.torch_version
        if device_result.device == "cuda":
            link, link_source = link_for_device(device_result.device_name, gpu)
            if link is None and link_source:
                notes.append(link_source)
    elif gpu:
        link, link_source = link_for_device(None, gpu)
    if disk_result is not None:
        extra["disk_dir"] = disk_result.directory
        extra["filesystem"] = disk_result.filesystem
    return TiersBenchReport(
        geometry=geometry,
        disk=disk_result,
        device=device_result,
        environment=_environment(extra),
        link_bytes_per_s=link,
        link_source=link_source,
        notes=tuple(notes),
    )
