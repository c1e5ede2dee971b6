"""SGLang's GPU memory sizing by version, one module per concern:

- `rules`: the versioned rule sets and the heuristic's constants;
- `options`: SGLang's knobs beyond `ServeSettings`;
- `defaults`: the card-dependent defaults (GPU tier, graph batch lists, max_running_requests);
- `reserve`: the default `mem_fraction_static` (the MiB reserve per version);
- `pool`: the cell size, SWA and mamba pools, the weights and context per rank;
- `budget`: `plan_sglang`, the sizing itself, and its result `SglangPlan`;
- `gap`: vLLM against SGLang, term by term.

Importing from `vramctl.core.engines.sglang` keeps working for every name the single module had.
"""

from __future__ import annotations

from vramctl.core.engines.sglang.budget import (
    SglangPlan,
    plan_sglang,
)
from vramctl.core.engines.sglang.defaults import (
    GpuTier,
    decode_graph_batch_sizes,
    default_max_running_requests,
    gpu_mem_mib_for,
    gpu_tier,
    prefill_graph_buckets,
)
from vramctl.core.engines.sglang.gap import (
    GapItem,
    VllmResultLike,
    explain_gap,
)
from vramctl.core.engines.sglang.options import (
    Role,
    SglangOptions,
)
from vramctl.core.engines.sglang.pool import (
    MAMBA_RATIO_RADIX,
    MambaPool,
    cell_size,
    context_estimate_bytes,
    is_hybrid_swa,
    layers_per_stage,
    mamba_pool,
    stage_layout,
    weights_per_rank_bytes,
)
from vramctl.core.engines.sglang.reserve import (
    ReserveBreakdown,
    post_capture_kv_sizing_planned,
    reserve_for_graph_mib,
    worked_defaults,
)
from vramctl.core.engines.sglang.rules import (
    ACTIVATION_MIB_PER_TOKEN,
    BACKEND_PAGE_SIZE,
    CONTEXT_BYTES,
    CONTEXT_UNCERTAINTY_BYTES,
    DECODE_GRAPH_MIB_PER_BS,
    DEEPEP_RESERVE_MIB,
    DEFAULT_MAX_PREFILL_TOKENS,
    DEFAULT_SWA_FULL_TOKENS_RATIO,
    FLOOR_ABOVE_MIB,
    FLOOR_RESERVE_MIB,
    HYBRID_SWA_ARCHITECTURES,
    METADATA_RESERVE_MIB,
    MIN_ACTIVATION_TOKENS,
    MLA_PREFILL_GRAPH_RESERVE_MIB,
    NCCL_MULTI_NODE_BYTES,
    NCCL_SINGLE_NODE_BYTES,
    NCCL_UNCERTAINTY_BYTES,
    OLD_DEFAULT_CUDA_GRAPH_MAX_BS,
    OLDEST_SGLANG_VERSION,
    POST_CAPTURE_FLOOR_MIB,
    PREFILL_GRAPH_MIB_PER_BUCKET,
    RULES_0_4_6,
    RULES_0_5_2,
    RULES_0_5_9,
    RULES_0_5_17,
    RULES_0_5_18,
    RULES_0_5_23,
    SGLANG_REF,
    UNKNOWN_GPU_FRACTION,
    XPU_RESERVE_MIB,
    rules_for_version,
)

__all__ = [
    "ACTIVATION_MIB_PER_TOKEN",
    "BACKEND_PAGE_SIZE",
    "CONTEXT_BYTES",
    "CONTEXT_UNCERTAINTY_BYTES",
    "DECODE_GRAPH_MIB_PER_BS",
    "DEEPEP_RESERVE_MIB",
    "DEFAULT_MAX_PREFILL_TOKENS",
    "DEFAULT_SWA_FULL_TOKENS_RATIO",
    "FLOOR_ABOVE_MIB",
    "FLOOR_RESERVE_MIB",
    "HYBRID_SWA_ARCHITECTURES",
    "MAMBA_RATIO_RADIX",
    "METADATA_RESERVE_MIB",
    "MIN_ACTIVATION_TOKENS",
    "MLA_PREFILL_GRAPH_RESERVE_MIB",
    "NCCL_MULTI_NODE_BYTES",
    "NCCL_SINGLE_NODE_BYTES",
    "NCCL_UNCERTAINTY_BYTES",
    "OLDEST_SGLANG_VERSION",
    "OLD_DEFAULT_CUDA_GRAPH_MAX_BS",
    "POST_CAPTURE_FLOOR_MIB",
    "PREFILL_GRAPH_MIB_PER_BUCKET",
    "RULES_0_4_6",
    "RULES_0_5_2",
    "RULES_0_5_9",
    "RULES_0_5_17",
    "RULES_0_5_18",
    "RULES_0_5_23",
    "SGLANG_REF",
    "UNKNOWN_GPU_FRACTION",
    "XPU_RESERVE_MIB",
    "GapItem",
    "GpuTier",
    "MambaPool",
    "ReserveBreakdown",
    "Role",
    "SglangOptions",
    "SglangPlan",
    "VllmResultLike",
    "cell_size",
    "context_estimate_bytes",
    "decode_graph_batch_sizes",
    "default_max_running_requests",
    "explain_gap",
    "gpu_mem_mib_for",
    "gpu_tier",
    "is_hybrid_swa",
    "layers_per_stage",
    "mamba_pool",
    "plan_sglang",
    "post_capture_kv_sizing_planned",
    "prefill_graph_buckets",
    "reserve_for_graph_mib",
    "rules_for_version",
    "stage_layout",
    "weights_per_rank_bytes",
    "worked_defaults",
]
