"""Measurements on a real device: the only package that imports torch / pynvml (always lazily).

- `device`: the `cuda` (torch + NVML) and `cpu` (process RSS / VmHWM, MemAvailable, cgroup limits)
  backends behind one `Snapshot` (vLLM's MemorySnapshot fields);
- `model`: the reference decoder built from a ModelSpec (dense, MoE, MLA, sliding window; TP shards;
  FP8 / 4-bit storage), its profile forward, sampler warm-up and paged-KV decode step;
- `profiler`: vLLM ≥0.28's profile sequence on one rank, and `derive` (KV residual, blocks, ledger,
  SGLang's numbers);
- `cuda_graphs`: decode-graph capture into a throwaway pool (GPU only);
- `distributed`: one process per tensor-parallel rank (gloo / NCCL), the minimum across ranks;
- `run`: what the CLI calls (`run_profile`, `run_validate`, `--compare`);
- `oom`: out-of-memory recognised, memory released, explained with explain-oom's classifier;
- `transfer`: KV-tier transfer benchmarks (`tiers bench`).
Importing this package (or any of these modules) does not import torch.
"""
