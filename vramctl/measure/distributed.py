"""Tensor parallelism: one process per rank under torch.distributed, the minimum across ranks.

As vLLM does (`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0), `vllm/distributed/parallel_state.py` (vLLM v0.33.0); `gpu_worker.py:504`), each rank initialises its
communicators *before* its init snapshot (one all-reduce makes NCCL create them), so communication buffers
are outside the budget; then every rank runs the profile sequence on its shard, and the block count is the
minimum over ranks (`kv_cache_planning.py:1580-1594`). gloo on CPU, NCCL on CUDA (rank r on cuda:index+r).

Processes are started with the `spawn` method (a clean interpreter per rank, as torchrun gives) and
report through a queue; when a rank fails, the others are terminated.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue as queue_module
import socket
import time
from datetime import timedelta
from typing import Any

from vramctl.core.errors import NoDeviceError, VramctlError
from vramctl.core.exit_codes import ExitCode
from vramctl.core.interrupts import signals_blocked
from vramctl.measure.device import DeviceInfo, open_device, parse_device
from vramctl.measure.profiler import (
    PhaseCallback,
    ProfileRequest,
    RankMeasurement,
    Resolved,
    profile_rank,
    resolve,
)

_COLLECTIVE_TIMEOUT_S = 120
_RESULT_TIMEOUT_S = 1800.0


class RankError(VramctlError):
    """A failure inside a rank process, re-raised in the parent with the rank's exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = ExitCode(exit_code)  # type: ignore[assignment]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_main(rank: int, world: int, port: int, request: ProfileRequest, out: Any) -> None:
    """Entry point of one rank process."""
    import torch
    import torch.distributed as dist

    kind, index = parse_device(request.device)
    try:
        if kind == "cuda":
            torch.cuda.set_device(index + rank)
        else:
            # ranks share the host's cores: no oversubscription
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
        dist.init_process_group(
            "nccl" if kind == "cuda" else "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=_COLLECTIVE_TIMEOUT_S),
        )
        dev = f"cuda:{index + rank}" if kind == "cuda" else "cpu"
        # Communicators are created lazily: one collective now puts them before the init snapshot.
        dist.all_reduce(torch.zeros(1, device=dev))
        backend = open_device(request.device, capacity_bytes=request.device_memory_bytes, local_rank=rank)
        info = backend.info()
        resolved = resolve(request, info, backend.snapshot().total_bytes)

        def on_phase(name: str, message: str) -> None:
            if rank == 0:
                out.put(("phase", rank, name, message))

        measurement = profile_rank(
            request, resolved, backend, rank=rank, group=dist.group.WORLD, on_phase=on_phase
        )
        out.put(("result", rank, measurement, resolved, info))
    except VramctlError as exc:
        out.put(("error", rank, str(exc), int(exc.exit_code)))
    except BaseException as exc:
        out.put(("error", rank, f"rank {rank}: {type(exc).__name__}: {exc}", int(ExitCode.INTERNAL_ERROR)))
    finally:
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()


def dead_rank_error(rank: int, exitcode: int, kind: str) -> RankError:
    """A rank process that died without reporting. SIGKILL on the cpu device is, in practice, the kernel's
    OOM killer (the host ran out of memory): reported as an out-of-memory, exit 5."""
    import signal

    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        if exitcode == -signal.SIGKILL and kind == "cpu":
            return RankError(
                f"out of memory on cpu: rank {rank} was killed by SIGKILL before reporting, most likely by the "
                "kernel's OOM killer (the host ran out of memory; see `dmesg`); cause weights-do-not-fit or "
                "batch-budget-too-large: use a smaller --device-memory, --num-layers, --max-num-batched-tokens "
                "or fewer ranks (--tensor-parallel-size)",
                ExitCode.OUT_OF_MEMORY,
            )
        return RankError(f"rank {rank} was killed by {name} before reporting", ExitCode.INTERNAL_ERROR)
    return RankError(f"rank {rank} exited with code {exitcode} before reporting", ExitCode.INTERNAL_ERROR)


def run_ranks(
    request: ProfileRequest, *, on_phase: PhaseCallback | None = None
) -> tuple[Resolved, DeviceInfo, list[RankMeasurement]]:
    """Profile every rank in its own process; returns rank 0's settings and device, and all measurements."""
    world = request.settings.tensor_parallel_size
    kind, index = parse_device(request.device)
    if kind == "cuda":
        import torch

        available = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if available < index + world:
            raise NoDeviceError(
                f"--tensor-parallel-size {world} on --device {request.device} needs {index + world} CUDA devices, "
                f"this machine has {available}: use --device cpu (gloo) or `vramctl plan`"
            )
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(target=_rank_main, args=(r, world, port, request, out), daemon=True) for r in range(world)
    ]
    with (
        signals_blocked()
    ):  # the ranks start with SIGINT / SIGTERM blocked: the parent alone answers a Ctrl-C
        for proc in procs:
            proc.start()
    results: dict[int, tuple[RankMeasurement, Resolved, DeviceInfo]] = {}
    deadline = time.monotonic() + _RESULT_TIMEOUT_S
    try:
        while len(results) < world:
            try:
                item = out.get(timeout=1.0)
            except queue_module.Empty:
                dead = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
                if dead:
                    raise dead_rank_error(dead[0][0], int(dead[0][1] or 0), kind) from None
                if time.monotonic() > deadline:
                    raise RankError(
                        "the ranks did not report within 30 minutes", ExitCode.INTERNAL_ERROR
                    ) from None
                continue
            tag = item[0]
            if tag == "phase":
                if on_phase is not None:
                    on_phase(item[2], item[3])
            elif tag == "result":
                results[item[1]] = (item[2], item[3], item[4])
            elif tag == "error":
                raise RankError(str(item[2]), int(item[3]))
    finally:
        for proc in procs:
            proc.join(timeout=10 if len(results) == world else 0.1)
        for proc in procs:
            if proc.is_alive():  # SIGKILL: the ranks block SIGTERM; the kernel releases what they held
                proc.kill()
                proc.join(timeout=5)
        out.close()
    measurements = [results[r][0] for r in range(world)]
    return results[0][1], results[0][2], measurements
