"""CUDA-graph memory, measured the way vLLM's V1 runner profiles it (GPU only; isolated here).

`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0) (`gpu_model_runner.py:6268-6414`, vLLM 0.33.0):
1. a *minimal* KV cache of min(max_num_seqs, max_cudagraph_capture_size) blocks;
2. graphs captured into a throwaway pool, largest batch first;
3. the drop in `mem_get_info()[0]` around each capture is one sample;
4. estimate = first + (n − 1) × max(second, 1 MiB) (what vLLM subtracts from the KV budget);
5. everything released afterwards.
vramctl captures *every* size (not only the first two), so the same run also yields the actual pool: the
free-memory drop across the whole capture, which is what vLLM's real capture reports as
`Graph capturing finished in … took … GiB` and uses in its `--kv-cache-memory` suggestion.

The captured step is the reference model's decode step (one token per sequence, block-table gather); with
`validate` the same graphs are captured against the real KV pool and replayed.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vramctl.core.units import MiB
from vramctl.measure.model import ReferenceModel, decode_inputs

_MIN_PER_GRAPH_BYTES = 1 * MiB
"""vLLM: per_graph = max(second sample, 1 MiB)."""


@dataclass(frozen=True)
class GraphMeasurement:
    estimate_bytes: int
    """vLLM's extrapolation: first + (n − 1) × max(second, 1 MiB)."""
    actual_bytes: int
    """Free-memory drop across capturing every size into one pool."""
    samples_bytes: tuple[int, ...]
    """Per-capture free-memory drops, largest batch first."""
    sizes: tuple[int, ...]
    """Captured batch sizes, largest first."""


def vllm_estimate(samples: Sequence[int]) -> int:
    """first + (n − 1) × max(second, 1 MiB) (`gpu_model_runner.py:6268-6414`); 0 with no graphs."""
    if not samples:
        return 0
    if len(samples) == 1:
        return samples[0]
    return samples[0] + max(samples[1], _MIN_PER_GRAPH_BYTES) * (len(samples) - 1)


def _clear_cublas_workspaces(torch: Any) -> None:
    """Drop the cuBLAS / cuBLASLt workspaces torch keeps per (handle, stream): the capture stream is new on
    each call, so without this every call would leave its workspace (32 MiB or so on Hopper) in the
    caching allocator after the stream is gone."""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        torch.cuda.synchronize()
        clear()


def capture_graphs(
    model: ReferenceModel,
    kv_caches: list[Any],
    *,
    sizes: Sequence[int],
    num_blocks: int,
    block_size: int,
    replay: bool = False,
    on_graph: Callable[[int, int], None] | None = None,
) -> GraphMeasurement:
    """Capture the decode step at each size (largest first) into one pool; measure free-memory drops."""
    import torch

    device = model.device
    order = sorted({int(s) for s in sizes if s > 0}, reverse=True)
    if not order:
        return GraphMeasurement(0, 0, (), ())
    static = decode_inputs(model, order[0], num_blocks, block_size)
    stream = torch.cuda.Stream(device=device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(2):
            model.decode_step(kv_caches=kv_caches, **static)
    torch.cuda.current_stream(device).wait_stream(stream)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    pool = torch.cuda.graph_pool_handle()
    graphs: list[Any] = []
    outputs: list[Any] = []
    samples: list[int] = []
    start_free = int(torch.cuda.mem_get_info(device)[0])
    try:
        for size in order:
            inputs = {name: tensor[:size] for name, tensor in static.items()}
            # vLLM warms every size up before capturing it (cuBLAS picks its kernels and workspaces
            # outside the graph); the warm-up's temporaries go back to the driver before the reading.
            with torch.cuda.stream(stream):
                model.decode_step(kv_caches=kv_caches, **inputs)
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
            before = int(torch.cuda.mem_get_info(device)[0])
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, stream=stream):
                outputs.append(model.decode_step(kv_caches=kv_caches, **inputs))
            torch.cuda.synchronize(device)
            samples.append(before - int(torch.cuda.mem_get_info(device)[0]))
            graphs.append(graph)
            if on_graph is not None:
                on_graph(size, samples[-1])
        actual = start_free - int(torch.cuda.mem_get_info(device)[0])
        if replay:
            for graph in graphs:
                graph.replay()
            torch.cuda.synchronize(device)
    finally:
        graph = None
        del graph, graphs, outputs, static, pool
        gc.collect()
        _clear_cublas_workspaces(torch)
        torch.cuda.empty_cache()
    return GraphMeasurement(vllm_estimate(samples), actual, tuple(samples), tuple(order))


def profile_graph_memory(
    model: ReferenceModel,
    *,
    sizes: Sequence[int],
    max_num_seqs: int,
    block_size: int,
    kv_dtype: Any,
    on_graph: Callable[[int, int], None] | None = None,
) -> GraphMeasurement:
    """vLLM's profiling capture: a minimal KV cache of min(max_num_seqs, largest size) blocks, then release."""
    import torch

    num_blocks = max(1, min(max_num_seqs, max(sizes) if sizes else 1))
    caches = model.allocate_kv_cache(num_blocks, block_size, dtype=kv_dtype, touch=False)
    try:
        return capture_graphs(
            model, caches, sizes=sizes, num_blocks=num_blocks, block_size=block_size, on_graph=on_graph
        )
    finally:
        del caches
        gc.collect()
        torch.cuda.empty_cache()
