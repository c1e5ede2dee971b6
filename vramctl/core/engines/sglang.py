"""SGLang's GPU memory sizing, by version: the default `mem_fraction_static`, the KV pool and its limits.

Every rule here is SGLang's own, read from its released wheels and written up in
`python/sglang/srt/server_args.py` (SGLang v0.5.23) (with the engine file:line below).

The sizing, in SGLang's units (`python/sglang/srt/server_args.py` (SGLang v0.5.23), `python/sglang/srt/arg_groups/memory_hook.py` (SGLang v0.5.23), `python/sglang/srt/model_executor/model_runner.py` (SGLang v0.5.23)):
1. `gpu_mem` = the nvidia-smi total in **MiB**, the minimum over the ranks (`get_nvgpu_memory_capacity`,
   0.5.18 `srt/utils/common.py` L655). vramctl reads it from `GpuSpec.nvidia_smi_total_mib`.
2. When `--mem-fraction-static` is unset, a reserve in MiB gives `mfs = round((gpu_mem − reserved) / gpu_mem, 3)`
   (0.5.18 `server_args.py` L4948–L4996). The reserve's rules changed by version (`RULES` below).
3. `pre` = free GiB before the weights load (after CUDA context and NCCL), `avail` = free GiB after the load;
   KV GiB = `avail − pre × (1 − mfs)` (0.5.18 `kv_cache_configurator.py::_profile_available_bytes` L1764–L1811).
4. tokens = floor(KV bytes / cell size), floored to the page size, capped by `--max-total-tokens`
   (`calculate_pool_sizes` L415–L423, `_apply_token_constraints` L1844).

Planning cannot read `pre` and `avail` off a device, so they are estimated: `pre` = CUDA total − the CUDA
context and NCCL buffers (`context_estimate_bytes`, calibrated on the collected real start-up logs, docs/sglang.md
"Accuracy"), `avail` = `pre` − the weights per rank. Both can be given instead (`SglangOptions`), e.g. the
`Load weight begin/end. avail mem=` numbers of a log, which reproduces SGLang's pool to the token.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from vramctl.core.errors import BadInputError
from vramctl.core.kv import pp_partition
from vramctl.core.ledger import (
    ACTIVATION_PEAK,
    CUDA_GRAPH,
    KV_CACHE,
    MAMBA_STATE,
    NON_TORCH,
    OTHER_PROCESSES,
    SLACK,
    WEIGHTS,
    Ledger,
    Term,
    TermSource,
)
from vramctl.core.settings import LATEST_SGLANG_VERSION, ServeSettings, parse_version
from vramctl.core.specs import GpuSpec, ModelSpec
from vramctl.core.units import GiB, MiB, format_bytes, format_count
from vramctl.core.weights import stage_rank_weight_bytes

SGLANG_REF = "`python/sglang/srt/server_args.py` (SGLang v0.5.23)"

Role = Literal["null", "prefill", "decode"]

# --- version rule sets (`python/sglang/srt/server_args.py` (SGLang v0.5.23)) -----------------------------------------------------------
RULES_0_4_6 = "0.4.6.post5"
"""tp×pp table (server_args.py L244–L306). Used for every version before 0.4.7."""
RULES_0_5_2 = "0.5.2"
"""Per-GPU-size reserved table (server_args.py L449–L527). Used for 0.4.7 – 0.5.8: startup sample 111
(0.4.7.post1, H100, mfs 0.874 = round((81559 − 10·1024) / 81559, 3)) shows the table already in 0.4.7."""
RULES_0_5_9 = "0.5.9"
"""First activation-token heuristic (server_args.py L911–L1071). Used for 0.5.9 – 0.5.15."""
RULES_0_5_17 = "0.5.17"
"""As 0.5.18 with a 512 MiB post-capture floor. Used for 0.5.16 – 0.5.17 (0.5.16 was not read)."""
RULES_0_5_18 = "0.5.18"
"""The primary reference (server_args.py L4802–L5203). Used for 0.5.18 – 0.5.22."""
RULES_0_5_23 = "0.5.23"
"""memory_hook.py / overrides.py (the latest read). Used for 0.5.23 and later."""


def rules_for_version(version: str) -> str:
    """The rule set vramctl applies for an SGLang version (`0.5.18` → `0.5.18`, `0.5.20` → `0.5.18`)."""
    try:
        v = parse_version(version)
    except ValueError as exc:
        raise BadInputError(f"--engine-version: {version!r} is not a version (e.g. 0.5.18)") from exc
    if v < (0, 4, 7):
        return RULES_0_4_6
    if v < (0, 5, 9):
        return RULES_0_5_2
    if v < (0, 5, 16):
        return RULES_0_5_9
    if v < (0, 5, 18):
        return RULES_0_5_17
    if v < (0, 5, 23):
        return RULES_0_5_18
    return RULES_0_5_23


# --- constants -----------------------------------------------------------------------------------------
DEFAULT_MAX_PREFILL_TOKENS = 16384
"""`max_prefill_tokens` default (0.5.18 server_args.py L811)."""
METADATA_RESERVE_MIB = 512
"""'Constant meta data (e.g., from attention backend)' (0.5.18 L4948–L4983)."""
ACTIVATION_MIB_PER_TOKEN = 1.5
"""'The coefficient 1.5 is a heuristic value' (0.5.18 L4839–L4862, quoted in the textbook example)."""
MIN_ACTIVATION_TOKENS = 2048
FLOOR_RESERVE_MIB = 10 * 1024
"""reserved = max(reserved, 10 GiB) when gpu_mem > 60·1024 MiB (0.5.9+, `python/sglang/srt/arg_groups/memory_hook.py` (SGLang v0.5.23))."""
FLOOR_ABOVE_MIB = 60 * 1024
DEEPEP_RESERVE_MIB = 2048
"""`reserve_for_deepep_a2a_mb` (0.5.18 L5120), added after the floor."""
XPU_RESERVE_MIB = 2048
POST_CAPTURE_FLOOR_MIB = {RULES_0_5_17: 512, RULES_0_5_18: 1536, RULES_0_5_23: 1536}
"""`python/sglang/srt/model_executor/model_runner.py` (SGLang v0.5.23): 512 MB in 0.5.17, 1536 MB from 0.5.18 on."""
MLA_PREFILL_GRAPH_RESERVE_MIB = 1536
PREFILL_GRAPH_MIB_PER_BUCKET = 8
DECODE_GRAPH_MIB_PER_BS = 2
UNKNOWN_GPU_FRACTION = {
    RULES_0_4_6: 0.88,
    RULES_0_5_2: 0.88,
    RULES_0_5_9: 0.88,
    RULES_0_5_17: 0.88,
    RULES_0_5_18: 0.88,
    RULES_0_5_23: 0.95,
}
"""mfs when gpu_mem is unknown (`python/sglang/srt/arg_groups/memory_hook.py` (SGLang v0.5.23) item 3; 0.4.6 and 0.5.2 also fall back to 0.88)."""
OLD_DEFAULT_CUDA_GRAPH_MAX_BS = 160
"""Before 0.5.9 the decode graph max_bs was 160 except on < 25,000 MiB cards: startup samples 021, 107, 108,
109 and 112 (0.4.x) log `cuda_graph_max_bs=160`. Not read from the 0.5.2 source."""
DEFAULT_SWA_FULL_TOKENS_RATIO = 0.8
"""`--swa-full-tokens-ratio` default (SGLang server_args.py `swa_full_tokens_ratio: float = 0.8`; not in
sglang.md, read from the public SGLang source)."""
HYBRID_SWA_ARCHITECTURES = frozenset(
    {
        "Llama4ForConditionalGeneration",
        "GptOssForCausalLM",
        "MiMoV2FlashForCausalLM",
        "MiMoV2MTP",
        "Step3p5ForCausalLM",
        "Step3p5MTP",
        "Gemma4ForCausalLM",
        "Gemma4ForConditionalGeneration",
    }
)
"""SGLang `configs/model_config.py::is_hybrid_swa_model`: only these get a separate SWA pool. Every other
sliding-window model (Mistral, Gemma-2/3) gets full-length KV in every layer (startup sample 106)."""

# CUDA context + NCCL before the weights load, calibrated on the collected real start-up logs (docs/sglang.md):
# TP1 samples 021/106/107/110/112/116 show 0.39–0.61 GiB between the CUDA total and `Load weight begin`.
CONTEXT_BYTES = 480 * MiB
CONTEXT_UNCERTAINTY_BYTES = 160 * MiB
NCCL_SINGLE_NODE_BYTES = 288 * MiB
"""TP2 samples 108/113 show 0.7–0.8 GiB in total."""
NCCL_MULTI_NODE_BYTES = 1600 * MiB
"""TP16 over two nodes (sample 109) shows about 2.1 GiB in total."""
NCCL_UNCERTAINTY_BYTES = 512 * MiB

# Page size forced by attention backends (`python/sglang/srt/server_args.py` (SGLang v0.5.23)); the CUDA default is 1.
BACKEND_PAGE_SIZE: Mapping[str, int] = {
    "flashmla": 64,
    "cutlass_mla": 128,
    "trtllm_mla": 64,
    "fa4": 128,
    "hpc_ops": 64,
}


@dataclass(frozen=True)
class SglangOptions:
    """SGLang knobs that ServeSettings does not carry (server args / env vars), and measured overrides."""

    version: str | None = None
    """The SGLang version when ServeSettings.engine is `both` (its engine_version is then vLLM's)."""
    disaggregation_mode: Role = "null"
    dp_size: int = 1
    enable_dp_attention: bool = False
    moe_a2a_backend: str | None = None
    """`--moe-a2a-backend deepep` adds the DeepEP reserve."""
    speculative_algorithm: str | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_draft_layers: int | None = None
    """Layers of an EAGLE / standalone draft that reuses the target's attention shape (EAGLE: usually 1)."""
    speculative_draft_weight_bytes: int | None = None
    """The draft model's checkpoint bytes (charged to the KV budget from 0.5.18)."""
    post_capture_kv_sizing: bool = False
    """Env `SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1` (default off; `python/sglang/srt/model_executor/model_runner.py` (SGLang v0.5.23))."""
    attention_backend: str | None = None
    disable_prefill_graph: bool = False
    """`--cuda-graph-backend-prefill disabled`."""
    enable_piecewise_cuda_graph: bool = False
    """0.5.9 – 0.5.15 `--enable-piecewise-cuda-graph`."""
    prefill_graph_breakable: bool = True
    """The prefill graph backend is BREAKABLE (BCG), the CUDA default in 0.5.18 / 0.5.23."""
    device: str = "cuda"
    dcp_size: int = 1
    enable_memory_saver: bool = False
    swa_full_tokens_ratio: float = DEFAULT_SWA_FULL_TOKENS_RATIO
    disable_hybrid_swa_memory: bool = False
    vit_layers: int | None = None
    """Vision tower depth of a multimodal model (VLM adjustment, `python/sglang/srt/arg_groups/memory_hook.py` (SGLang v0.5.23) item 4); None = text model."""
    vit_hidden_size: int | None = None
    free_before_load_bytes: int | None = None
    """Measured `Load weight begin. avail mem=` (pre_model_load_memory); replaces the estimate."""
    free_after_load_bytes: int | None = None
    """Measured `Load weight end. avail mem=`; replaces pre − weights."""
    # Hybrid (Mamba2 / Gated DeltaNet) models: SGLang's mamba pool flags (see `mamba_pool`, docs/hybrid.md).
    max_mamba_cache_size: int | None = None
    """`--max-mamba-cache-size`: state slots; None = the ratio split of the rest memory."""
    mamba_ssm_dtype: str | None = None
    """`--mamba-ssm-dtype` (SGLANG_MAMBA_SSM_DTYPE): float32, bfloat16 or float16; None = the config's, else float32."""
    mamba_full_memory_ratio: float = 0.9
    """`--mamba-full-memory-ratio`: the mamba pool gets rest × r / (1 + r)."""
    disable_radix_cache: bool = False
    """`--disable-radix-cache`: one state slot per request (ratio 1) and --max-running-requests sizes the pool."""

    def with_changes(self, **changes: Any) -> SglangOptions:
        return replace(self, **changes)


@dataclass(frozen=True)
class ReserveBreakdown:
    """The MiB reserve behind the default `mem_fraction_static` (`python/sglang/srt/arg_groups/memory_hook.py` (SGLang v0.5.23))."""

    rules: str
    branch: str
    """`normal`, `post-capture`, `table` (0.5.2), `tp-pp-table` (0.4.6) or `unknown-gpu`."""
    activation_tokens: int = 0
    activation_mib: float = 0.0
    metadata_mib: float = 0.0
    parallel_mib: float = 0.0
    graph_mib: float = 0.0
    graph_parts: tuple[tuple[str, float], ...] = ()
    floor_applied: bool = False
    floor_extra_mib: float = 0.0
    after_floor_mib: float = 0.0
    """DeepEP / speculative / XPU add-ons that come after the floor."""
    table_mib: float = 0.0
    """The 0.5.2 table value (0 for other rules)."""
    total_mib: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "rules": self.rules,
            "branch": self.branch,
            "activation_tokens": self.activation_tokens,
            "activation_mib": self.activation_mib,
            "metadata_mib": self.metadata_mib,
            "parallel_mib": self.parallel_mib,
            "graph_mib": self.graph_mib,
            "graph_parts": {name: mib for name, mib in self.graph_parts},
            "floor_applied": self.floor_applied,
            "floor_extra_mib": self.floor_extra_mib,
            "after_floor_mib": self.after_floor_mib,
            "table_mib": self.table_mib,
            "total_mib": self.total_mib,
        }


@dataclass(frozen=True)
class SglangPlan:
    """SGLang's start-up sizing for one model on one card, in SGLang's own semantics."""

    version: str
    rules: str
    gpu_mem_mib: int | None
    capacity_bytes: int
    mem_fraction_static: float
    mem_fraction_source: Literal["given", "heuristic", "fallback"]
    reserve: ReserveBreakdown | None
    chunked_prefill_size: int
    max_prefill_tokens: int
    cuda_graph_max_bs: int
    cuda_graph_bs: tuple[int, ...]
    prefill_graph_max_bs: int
    prefill_graph_buckets: int
    page_size: int
    post_capture: bool
    context_bytes: int
    free_before_load_bytes: int
    weights_bytes: int
    free_after_load_bytes: int
    held_back_bytes: int
    """pre × (1 − mfs) (plus the post-capture graph estimate): not available to the KV pool."""
    kv_budget_bytes: int
    """avail − pre × (1 − mfs), as SGLang computes it in GiB (may be negative)."""
    bytes_per_token: int
    """SGLang's cell size: per rank, every layer of this PP stage."""
    max_total_num_tokens: int
    profiled_tokens: int
    """Tokens before the `--max-total-tokens` cap."""
    kv_cache_bytes: int
    full_layer_tokens: int | None
    swa_layer_tokens: int | None
    max_running_requests: int
    context_len: int
    verdict: str
    message: str
    branch: tuple[str, ...]
    """The branches taken, in words, in order."""
    ledger: Ledger
    notes: tuple[str, ...] = ()
    log_lines: tuple[str, ...] = ()
    """What SGLang would print (KV allocation, scheduler summary)."""
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def concurrency_at_context(self) -> float:
        """Full-length sequences of `context_len` the pool holds at once."""
        return self.max_total_num_tokens / self.context_len if self.context_len else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": "sglang",
            "version": self.version,
            "rules": self.rules,
            "gpu_mem_mib": self.gpu_mem_mib,
            "capacity_bytes": self.capacity_bytes,
            "mem_fraction_static": self.mem_fraction_static,
            "mem_fraction_source": self.mem_fraction_source,
            "reserve": None if self.reserve is None else self.reserve.to_json(),
            "reserved_mib": None if self.reserve is None else self.reserve.total_mib,
            "chunked_prefill_size": self.chunked_prefill_size,
            "max_prefill_tokens": self.max_prefill_tokens,
            "cuda_graph_max_bs": self.cuda_graph_max_bs,
            "cuda_graph_bs": list(self.cuda_graph_bs),
            "prefill_graph_max_bs": self.prefill_graph_max_bs,
            "prefill_graph_buckets": self.prefill_graph_buckets,
            "page_size": self.page_size,
            "post_capture_kv_sizing": self.post_capture,
            "context_bytes": self.context_bytes,
            "free_before_load_bytes": self.free_before_load_bytes,
            "weights_bytes": self.weights_bytes,
            "free_after_load_bytes": self.free_after_load_bytes,
            "held_back_bytes": self.held_back_bytes,
            "kv_budget_bytes": self.kv_budget_bytes,
            "bytes_per_token": self.bytes_per_token,
            "max_total_num_tokens": self.max_total_num_tokens,
            "profiled_tokens": self.profiled_tokens,
            "kv_cache_bytes": self.kv_cache_bytes,
            "full_layer_tokens": self.full_layer_tokens,
            "swa_layer_tokens": self.swa_layer_tokens,
            "max_running_requests": self.max_running_requests,
            "context_len": self.context_len,
            "concurrency_at_context": round(self.concurrency_at_context, 2),
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "verdict": self.verdict,
            "message": self.message,
            "branch": list(self.branch),
            "terms": self.ledger.to_json(),
            "notes": list(self.notes),
            "log_lines": list(self.log_lines),
            **({"mamba": self.extra["mamba"]} if "mamba" in self.extra else {}),
        }


# --- GPU tiers and CUDA-graph batch lists (`python/sglang/srt/server_args.py` (SGLang v0.5.23)) ---------------------------------------------
@dataclass(frozen=True)
class GpuTier:
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    label: str


def gpu_tier(gpu_mem_mib: int | None, tp: int, rules: str) -> GpuTier:
    """chunked_prefill_size and decode graph max_bs for a card (0.5.18 L4829–L4889; 0.5.23 L89–L180)."""
    big_tp = tp >= 4
    if rules == RULES_0_4_6:
        # 0.4.6.post5 L244–L306: only < 25,000 MiB cards get a graph cap; chunked 2048 there, else 8192.
        if gpu_mem_mib is not None and gpu_mem_mib < 25_000:
            return GpuTier(2048, 80 if big_tp else 8, "< 25,000 MiB")
        return GpuTier(8192, OLD_DEFAULT_CUDA_GRAPH_MAX_BS, ">= 25,000 MiB")
    if rules == RULES_0_5_2:
        # 0.5.2 L449–L527: chunked 2048 (< 35 GiB), 8192 (< 160 GiB), 16384; 4096 if unknown.
        if gpu_mem_mib is None:
            return GpuTier(4096, OLD_DEFAULT_CUDA_GRAPH_MAX_BS, "unknown")
        if gpu_mem_mib < 35 * 1024:
            graph = (80 if big_tp else 8) if gpu_mem_mib < 25_000 else OLD_DEFAULT_CUDA_GRAPH_MAX_BS
            return GpuTier(2048, graph, "< 35 GiB")
        if gpu_mem_mib < 160 * 1024:
            return GpuTier(8192, OLD_DEFAULT_CUDA_GRAPH_MAX_BS, "< 160 GiB")
        return GpuTier(16384, OLD_DEFAULT_CUDA_GRAPH_MAX_BS, ">= 160 GiB")
    if gpu_mem_mib is None:
        return GpuTier(4096, 160, "unknown")
    if gpu_mem_mib < 20 * 1024:
        return GpuTier(2048, 8, "< 20 GiB (T4, 4080)")
    if gpu_mem_mib < 35 * 1024:
        if rules == RULES_0_5_23:
            return GpuTier(4096, 160 if big_tp else 48, "< 35 GiB (A10, 4090, 5090; 0.5.23 values)")
        return GpuTier(2048, 80 if big_tp else 24, "< 35 GiB (A10, 4090, 5090)")
    if gpu_mem_mib < 60 * 1024:
        return GpuTier(4096, 160 if big_tp else 32, "< 60 GiB (A100-40G, L40)")
    if gpu_mem_mib < 90 * 1024:
        return GpuTier(8192, 512 if big_tp else 256, "< 90 GiB (H100, A100-80G)")
    if gpu_mem_mib < 160 * 1024:
        return GpuTier(8192, 512 if big_tp else 256, "< 160 GiB (H20, H200)")
    return GpuTier(16384, 512, ">= 160 GiB (B200, MI300)")


def decode_graph_batch_sizes(max_bs: int) -> tuple[int, ...]:
    """Decode capture sizes without speculative decoding (0.5.18 L5133–L5164)."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 497, 16), *range(512, max_bs + 1, 32)]
    clipped = [s for s in sizes if s <= max_bs]
    if max_bs >= 1 and (not clipped or clipped[-1] != max_bs):
        clipped.append(max_bs)
    return tuple(clipped)


def prefill_graph_buckets(max_bs: int) -> tuple[int, ...]:
    """Prefill token buckets (0.5.18 L5186–L5203): 42 for 2048, 50 for 4096, 58 for 8192, 74 for 16384."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_bs + 1, 512),
    ]
    return tuple(s for s in sizes if s <= max_bs)


# --- the default mem_fraction_static ------------------------------------------------------------------
@dataclass(frozen=True)
class _Resolved:
    """Flags after SGLang's defaults, the input to the reserve."""

    rules: str
    gpu_mem: int | None
    tp: int
    pp: int
    role: Role
    chunked: int
    max_prefill_tokens: int
    max_bs: int
    decode_graph: bool
    prefill_graph: bool
    prefill_max_bs: int
    buckets: int
    is_mla: bool
    max_running_requests: int | None
    options: SglangOptions


def _activation_tokens(r: _Resolved) -> tuple[int, str]:
    if r.role == "decode" and r.rules in (RULES_0_5_17, RULES_0_5_18, RULES_0_5_23):
        running = r.max_running_requests or r.max_bs or 1
        draft = r.options.speculative_num_draft_tokens or 1
        return max(running * draft, MIN_ACTIVATION_TOKENS), (
            f"disaggregation decode: max({running} running × {draft} draft tokens, 2048)"
        )
    if r.chunked > 0:
        return max(
            r.chunked, MIN_ACTIVATION_TOKENS
        ), f"chunked prefill: max(chunked_prefill_size {r.chunked}, 2048)"
    return max(r.max_prefill_tokens, MIN_ACTIVATION_TOKENS), (
        f"no chunked prefill: max(max_prefill_tokens {r.max_prefill_tokens}, 2048)"
    )


def reserve_for_graph_mib(r: _Resolved) -> tuple[float, tuple[tuple[str, float], ...]]:
    """`reserve_for_graph_mb` (0.5.18 L5078–L5118; 0.5.23 memory_hook.py L357–L399), in MiB, with its parts."""
    parts: list[tuple[str, float]] = []
    dp = r.options.dp_size if r.options.enable_dp_attention else 1
    if r.role != "prefill" and r.decode_graph:
        parts.append(("decode_graph", float(DECODE_GRAPH_MIB_PER_BS * r.max_bs)))
    if r.options.enable_dp_attention and r.role != "prefill":
        dp_mib = r.max_bs * dp * 3.0
        if r.max_bs > 300:
            dp_mib += r.max_bs * dp * 1.5
        parts.append(("dp_attention", dp_mib))
    if r.role != "decode" and r.prefill_graph:
        if r.is_mla:
            parts.append(("prefill_graph_mla", float(MLA_PREFILL_GRAPH_RESERVE_MIB)))
        else:
            parts.append(("prefill_graph", float(PREFILL_GRAPH_MIB_PER_BUCKET * r.buckets)))
        if r.options.prefill_graph_breakable and r.options.moe_a2a_backend == "deepep":
            parts.append(("prefill_graph_deepep", 1024.0))
    return sum(mib for _, mib in parts), tuple(parts)


def _reserve_0_5_9(r: _Resolved) -> ReserveBreakdown:
    """0.5.9 (server_args.py L911–L1071): no prefill-graph reserve unless piecewise graphs are on."""
    act_tokens, _ = _activation_tokens(r)
    parts: list[tuple[str, float]] = [("decode_graph", float(DECODE_GRAPH_MIB_PER_BS * r.max_bs))]
    dp = r.options.dp_size if r.options.enable_dp_attention else 1
    if r.options.enable_dp_attention:
        dp_mib = r.max_bs * dp * 3.0 + (r.max_bs * dp * 1.5 if r.max_bs > 300 else 0.0)
        parts.append(("dp_attention", dp_mib))
    if r.options.enable_piecewise_cuda_graph:
        parts.append(("piecewise_graph", float(PREFILL_GRAPH_MIB_PER_BUCKET * r.buckets)))
    graph = sum(mib for _, mib in parts)
    activation = act_tokens * ACTIVATION_MIB_PER_TOKEN
    parallel = r.tp * r.pp / 8 * 1024
    raw = METADATA_RESERVE_MIB + activation + parallel + graph
    floored = max(raw, FLOOR_RESERVE_MIB) if r.gpu_mem is not None and r.gpu_mem > FLOOR_ABOVE_MIB else raw
    after = 0.0
    algo = (r.options.speculative_algorithm or "").upper()
    if algo == "STANDALONE":
        after += 6 * 1024
    elif algo and algo != "NGRAM":
        after += 2 * 1024
    return ReserveBreakdown(
        rules=r.rules,
        branch="normal",
        activation_tokens=act_tokens,
        activation_mib=activation,
        metadata_mib=float(METADATA_RESERVE_MIB),
        parallel_mib=parallel,
        graph_mib=graph,
        graph_parts=tuple(parts),
        floor_applied=floored > raw,
        floor_extra_mib=floored - raw,
        after_floor_mib=after,
        total_mib=floored + after,
    )


def _reserve_0_5_18(r: _Resolved, post_capture: bool) -> ReserveBreakdown:
    """0.5.17 / 0.5.18 / 0.5.23 (0.5.18 L4948–L4983; 0.5.23 memory_hook.py L281–L328)."""
    parallel = r.tp * r.pp / 8 * 1024
    if post_capture:
        floor = float(POST_CAPTURE_FLOOR_MIB[r.rules])
        return ReserveBreakdown(
            rules=r.rules,
            branch="post-capture",
            metadata_mib=floor,
            parallel_mib=parallel,
            total_mib=floor + parallel,
        )
    act_tokens, _ = _activation_tokens(r)
    activation = act_tokens * ACTIVATION_MIB_PER_TOKEN
    graph, parts = reserve_for_graph_mib(r)
    raw = METADATA_RESERVE_MIB + activation + parallel + graph
    floored = max(raw, FLOOR_RESERVE_MIB) if r.gpu_mem is not None and r.gpu_mem > FLOOR_ABOVE_MIB else raw
    after = 0.0
    if r.decode_graph and r.role != "prefill" and r.options.moe_a2a_backend == "deepep":
        after += DEEPEP_RESERVE_MIB
    if r.rules == RULES_0_5_23 and r.options.device == "xpu":
        after += XPU_RESERVE_MIB
    return ReserveBreakdown(
        rules=r.rules,
        branch="normal",
        activation_tokens=act_tokens,
        activation_mib=activation,
        metadata_mib=float(METADATA_RESERVE_MIB),
        parallel_mib=parallel,
        graph_mib=graph,
        graph_parts=parts,
        floor_applied=floored > raw,
        floor_extra_mib=floored - raw,
        after_floor_mib=after,
        total_mib=floored + after,
    )


def _reserve_0_5_2(r: _Resolved) -> ReserveBreakdown:
    """0.5.2 table (server_args.py L449–L527), all in GiB × 1024."""
    assert r.gpu_mem is not None
    p = r.tp * r.pp
    g = r.gpu_mem
    if g < 35 * 1024:
        gib = 2.8 + p / 10
    elif g < 90 * 1024:
        gib = 9.5 + p / 2
    elif g < 160 * 1024:
        gib = 12 + p / 2
    else:
        gib = 32.0
    table = gib * 1024
    after = 0.0
    algo = (r.options.speculative_algorithm or "").upper()
    if algo == "STANDALONE":
        after += 6 * 1024
    elif algo:
        after += 2 * 1024
    if r.options.enable_dp_attention:
        after += 4 * 1024
    return ReserveBreakdown(
        rules=r.rules, branch="table", table_mib=table, after_floor_mib=after, total_mib=table + after
    )


def _fraction_0_4_6(gpu_mem: int, tp: int, pp: int) -> float:
    """0.4.6.post5 (server_args.py L244–L306); not rounded (sample 110 logs 0.8717961202189594 on H200)."""
    parallel = tp * pp
    if gpu_mem <= 81920:
        if parallel >= 16:
            mfs = 0.79
        elif parallel >= 8:
            mfs = 0.81
        elif parallel >= 4:
            mfs = 0.85
        elif parallel >= 2:
            mfs = 0.87
        else:
            mfs = 0.88
    else:
        mfs = 0.88
    if gpu_mem > 96 * 1024:
        mfs = min(mfs + 48 * 1024 * (1 - mfs) / gpu_mem, (gpu_mem - 18 * 1024) / gpu_mem)
    return mfs


def post_capture_kv_sizing_planned(r: _Resolved, model: ModelSpec, kv_cache_dtype: str) -> tuple[bool, str]:
    """`post_capture_kv_sizing_planned()` (0.5.18 L5006–L5055; 0.5.23 overrides.py L1791–L1862)."""
    o = r.options
    arch_on = r.rules == RULES_0_5_23 and model.architecture == "MuseSparkForConditionalGeneration"
    if r.rules not in POST_CAPTURE_FLOOR_MIB:
        return False, f"no post-capture sizing before 0.5.16 (rules {r.rules})"
    if not (o.post_capture_kv_sizing or arch_on):
        return False, "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING is not set (default off)"
    if o.device != "cuda":
        return False, f"post-capture sizing excluded: device {o.device} is not cuda"
    if o.dcp_size != 1:
        return False, "post-capture sizing excluded: dcp_size != 1"
    if r.is_mla:
        return False, "post-capture sizing excluded: MLA attention backend"
    if r.rules != RULES_0_5_23 and kv_cache_dtype == "fp4_e2m1":
        return False, "post-capture sizing excluded: kv_cache_dtype fp4_e2m1"
    if o.enable_memory_saver:
        return False, "post-capture sizing excluded: --enable-memory-saver"
    if r.role != "prefill" and not r.decode_graph:
        return False, "post-capture sizing excluded: decode CUDA graph disabled"
    if r.role != "decode":
        if not r.prefill_graph:
            return False, "post-capture sizing excluded: prefill CUDA graph disabled"
        if r.chunked <= 0:
            return False, "post-capture sizing excluded: chunked prefill disabled"
        if r.chunked > r.prefill_max_bs:
            return False, (
                f"post-capture sizing excluded: prefill buffer {r.chunked} tokens > largest captured "
                f"prefill bucket {r.prefill_max_bs}"
            )
    name = f"{model.architecture} {model.name}".lower()
    if "deepseekv4" in name or "deepseek-v4" in name or ("minimax" in name and "sparse" in name):
        return False, "post-capture sizing excluded: DeepSeek-V4 / MiniMax-sparse model"
    why = (
        "architecture MuseSparkForConditionalGeneration"
        if arch_on
        else "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1"
    )
    return True, f"post-capture KV sizing ({why})"


# --- cell size -----------------------------------------------------------------------------------------
def _kv_dtype_bytes(model: ModelSpec, settings: ServeSettings) -> float:
    kv = settings.kv_cache_dtype.lower()
    if kv in ("auto", ""):
        dtype = settings.dtype if settings.dtype not in ("auto", "") else model.torch_dtype
        kv = dtype.lower().removeprefix("torch.")
    table = {
        "bfloat16": 2.0,
        "bf16": 2.0,
        "float16": 2.0,
        "fp16": 2.0,
        "half": 2.0,
        "float32": 4.0,
        "fp32": 4.0,
        "fp8": 1.0,
        "fp8_e4m3": 1.0,
        "fp8_e5m2": 1.0,
        "float8_e4m3fn": 1.0,
        "float8_e5m2": 1.0,
    }
    if kv not in table:
        raise BadInputError(
            f"--kv-cache-dtype {settings.kv_cache_dtype!r}: SGLang sizing knows auto, bf16, fp16, fp32, "
            "fp8_e4m3, fp8_e5m2"
        )
    return table[kv]


def layers_per_stage(num_layers: int, pp: int) -> int:
    """The largest PP stage's layer count: the stage whose cell is largest sets the MIN token count."""
    return math.ceil(num_layers / pp)


def cell_size(
    model: ModelSpec,
    settings: ServeSettings,
    options: SglangOptions | None = None,
    *,
    layers: int | None = None,
) -> int:
    """SGLang bytes per token per rank (0.5.18 `pool_configurator.py::_compute_cell_size` L235).

    MHA/GQA: max(1, kv_heads // attn_tp) × 2 × head_dim × layers × dtype. MLA: (kv_lora_rank +
    qk_rope_head_dim) × layers × dtype, not divided by TP (every rank stores the full latent).
    """
    opts = options or SglangOptions()
    if layers is None:
        layers = layers_per_stage(model.num_hidden_layers, settings.pipeline_parallel_size)
    dtype_bytes = _kv_dtype_bytes(model, settings)
    if model.mla is not None:
        return int((model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * layers * dtype_bytes)
    attn_tp = settings.tensor_parallel_size
    if opts.enable_dp_attention and opts.dp_size > 1:
        attn_tp = max(1, settings.tensor_parallel_size // opts.dp_size)
    attn_tp = max(1, attn_tp // max(1, opts.dcp_size))
    heads = max(1, model.num_key_value_heads // attn_tp)
    return int(heads * 2 * model.head_dim * layers * dtype_bytes)


def is_hybrid_swa(model: ModelSpec, options: SglangOptions) -> bool:
    """SGLang sizes separate full / SWA pools only for the architectures in HYBRID_SWA_ARCHITECTURES."""
    return (
        model.architecture in HYBRID_SWA_ARCHITECTURES
        and not options.disable_hybrid_swa_memory
        and 0 < model.num_sliding_layers < model.num_hidden_layers
    )


# --- max_running_requests (`python/sglang/srt/server_args.py` (SGLang v0.5.23)) --------------------------------------------------------------
def default_max_running_requests(
    tokens: int, context_len: int, rules: str, user_value: int | None = None, dp_size: int = 1
) -> int:
    """0.5.18 `resolve_max_num_reqs` L1873–L1926; 0.4.6 / 0.5.9 req pool size (+1 before 0.5.9)."""
    estimate = min(max(int(tokens / max(1, context_len) * 512), 2048), 4096)
    if rules in (RULES_0_4_6, RULES_0_5_2):
        estimate += 1
    cap = tokens // 2
    if user_value is not None:
        per_worker = user_value // max(1, dp_size)
        if rules in (RULES_0_4_6, RULES_0_5_2, RULES_0_5_9):
            return max(0, min(per_worker, estimate))
        return max(0, min(per_worker, cap))
    if rules in (RULES_0_4_6, RULES_0_5_2, RULES_0_5_9):
        return max(0, min(cap, estimate))
    return max(0, min(estimate, cap))


# --- the plan -------------------------------------------------------------------------------------------
def context_estimate_bytes(world_size: int) -> tuple[int, int, str]:
    """CUDA context + NCCL before the weights load: (bytes, uncertainty, formula)."""
    if world_size <= 1:
        return (
            CONTEXT_BYTES,
            CONTEXT_UNCERTAINTY_BYTES,
            "CUDA context ≈ 480 MiB (samples: 0.39–0.61 GiB at TP1)",
        )
    if world_size <= 8:
        return (
            CONTEXT_BYTES + NCCL_SINGLE_NODE_BYTES,
            CONTEXT_UNCERTAINTY_BYTES + NCCL_UNCERTAINTY_BYTES,
            "CUDA context 480 MiB + NCCL 288 MiB (samples: 0.7–0.8 GiB at TP2)",
        )
    return (
        CONTEXT_BYTES + NCCL_MULTI_NODE_BYTES,
        CONTEXT_UNCERTAINTY_BYTES + 2 * NCCL_UNCERTAINTY_BYTES,
        "CUDA context 480 MiB + multi-node NCCL 1.6 GiB (sample 109: ~2.1 GiB at TP16)",
    )


def weights_per_rank_bytes(model: ModelSpec, tp: int, pp: int) -> int:
    """Weights on one rank of the heaviest pipeline stage (see `stage_layout`)."""
    return max(weights for _, weights in stage_layout(model, tp, pp))


def stage_layout(model: ModelSpec, tp: int, pp: int) -> tuple[tuple[int, int], ...]:
    """(layers, weight bytes per rank) of each pipeline stage.

    Layers split as `get_pp_indices` splits them (vramctl.core.kv.pp_partition); the embedding sits on the first
    stage and the lm_head on the last (a tied head is materialised there too when pp > 1). Per rank exactly
    (`vramctl.core.weights.stage_rank_weight_bytes`): column/row-parallel layers and the vocab-parallel
    embedding (rows padded to 64, as SGLang's `VocabParallelEmbedding`) split over TP, norms, routers and MLA's
    q_a / kv_a replicated on every rank.
    """
    parts = pp_partition(model.num_hidden_layers, pp)
    weights = stage_rank_weight_bytes(model, tp=tp, pp=pp)
    return tuple(zip(parts, weights, strict=True))


def gpu_mem_mib_for(gpu: GpuSpec, settings: ServeSettings) -> tuple[int | None, int]:
    """(SGLang's gpu_mem in MiB or None, the CUDA total in bytes) for this card and settings."""
    capacity = settings.gpu_memory_bytes or gpu.cuda_total_bytes
    smi = gpu.nvidia_smi_total_mib if gpu.nvidia_smi_total_mib > 0 else None
    if smi is not None and settings.gpu_memory_bytes and settings.gpu_memory_bytes != gpu.cuda_total_bytes:
        # --gpu-memory moves the CUDA total; keep the card's nvidia-smi − CUDA offset.
        smi = max(1, smi + round((settings.gpu_memory_bytes - gpu.cuda_total_bytes) / MiB))
    return smi, capacity


_ABSURD_TOKENS = 1 << 26
"""A token count above 67,108,864 is a typo (vramctl.core.plan uses the same bound for vLLM)."""
_ABSURD_REQUESTS = 1 << 20


def _validate(settings: ServeSettings, options: SglangOptions) -> None:
    if settings.tensor_parallel_size < 1:
        raise BadInputError(f"--tp-size {settings.tensor_parallel_size}: must be ≥ 1")
    if settings.pipeline_parallel_size < 1:
        raise BadInputError(f"--pp-size {settings.pipeline_parallel_size}: must be ≥ 1")
    mfs = settings.mem_fraction_static
    if mfs is not None and not (0 < mfs < 1):
        raise BadInputError(f"--mem-fraction-static {mfs}: must be in (0, 1)")
    for name, value in (
        ("--max-total-tokens", settings.max_total_tokens),
        ("--max-running-requests", settings.max_running_requests),
        ("--cuda-graph-max-bs", settings.cuda_graph_max_bs),
        ("--page-size", settings.page_size),
        ("--max-prefill-tokens", settings.max_prefill_tokens),
        ("--context-length", settings.max_model_len),
    ):
        if value is not None and value < 1:
            raise BadInputError(f"{name} {value}: must be ≥ 1")
    for name, value, upper in (
        ("--max-total-tokens", settings.max_total_tokens, _ABSURD_TOKENS),
        ("--chunked-prefill-size", settings.chunked_prefill_size, _ABSURD_TOKENS),
        ("--max-prefill-tokens", settings.max_prefill_tokens, _ABSURD_TOKENS),
        ("--page-size", settings.page_size, _ABSURD_TOKENS),
        ("--max-running-requests", settings.max_running_requests, _ABSURD_REQUESTS),
        ("--cuda-graph-max-bs", settings.cuda_graph_max_bs, _ABSURD_REQUESTS),
    ):
        if value is not None and value > upper:
            raise BadInputError(f"{name} {value}: absurdly large (at most {upper:,})")
    if options.dp_size < 1:
        raise BadInputError(f"--dp-size {options.dp_size}: must be ≥ 1")
    if not 0 < options.swa_full_tokens_ratio <= 1:
        raise BadInputError(f"--swa-full-tokens-ratio {options.swa_full_tokens_ratio}: must be in (0, 1]")


def _vlm_factor(options: SglangOptions) -> float | None:
    if options.vit_layers is None and options.vit_hidden_size is None:
        return None
    layers = options.vit_layers or 24
    hidden = options.vit_hidden_size or 1024
    complexity = layers * hidden**2 / (24 * 1024**2)
    return 0.95 * min(max(1 - 0.1 * (complexity - 1), 0.8), 1.05)


OLDEST_SGLANG_VERSION = "0.4.0"
"""The oldest SGLang whose memory rules vramctl models (`python/sglang/srt/server_args.py` (SGLang v0.5.23))."""


def plan_sglang(
    model: ModelSpec, gpu: GpuSpec, settings: ServeSettings, *, options: SglangOptions | None = None
) -> SglangPlan:
    """Size SGLang's KV pool for `model` on `gpu` with `settings`, in the semantics of the chosen version."""
    opts = options or SglangOptions()
    if opts.vit_layers is None and opts.vit_hidden_size is None and model.is_multimodal:
        # A multimodal checkpoint gets SGLang's VLM adjustment (`python/sglang/srt/arg_groups/memory_hook.py` (SGLang v0.5.23) item 4; 0.5.18 L9527
        # `adjust_mem_fraction_for_vlm`), the tower's shape from its vision_config (defaults 24 × 1024).
        opts = opts.with_changes(
            vit_layers=model.vision_layers or 24, vit_hidden_size=model.vision_hidden_size or 1024
        )
    _validate(settings, opts)
    if settings.max_model_len is not None and settings.max_model_len > model.max_position_embeddings:
        raise BadInputError(
            f"--context-length {settings.max_model_len}: above the model's max_position_embeddings "
            f"{model.max_position_embeddings}; SGLang refuses it unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
        )
    version = opts.version or (
        settings.engine_version
        if settings.engine_version and settings.engine == "sglang"
        else LATEST_SGLANG_VERSION
    )
    rules = rules_for_version(version)
    tp, pp = settings.tensor_parallel_size, settings.pipeline_parallel_size
    gpu_mem, capacity = gpu_mem_mib_for(gpu, settings)
    branch: list[str] = [f"SGLang {version}: rules of {rules} ({SGLANG_REF}, the version history of its defaults)"]
    notes: list[str] = []
    if parse_version(version) > parse_version(LATEST_SGLANG_VERSION):
        notes.append(
            f"SGLang {version} is newer than the latest version vramctl models ({LATEST_SGLANG_VERSION}): planned "
            f"with {rules}'s rules"
        )
    elif parse_version(version) < parse_version(OLDEST_SGLANG_VERSION):
        notes.append(
            f"SGLang {version} predates the oldest version vramctl models ({OLDEST_SGLANG_VERSION}): planned with "
            f"{rules}'s rules, which may not be this version's"
        )
    role = opts.disaggregation_mode
    is_mla = model.mla is not None

    # 1. GPU-tier defaults.
    tier = gpu_tier(gpu_mem, tp, rules)
    gpu_desc = (
        "unknown (nvidia-smi total not available)" if gpu_mem is None else f"{format_count(gpu_mem)} MiB"
    )
    branch.append(f"gpu_mem = {gpu_desc} → tier {tier.label}")
    chunked = (
        settings.chunked_prefill_size
        if settings.chunked_prefill_size is not None
        else tier.chunked_prefill_size
    )
    if settings.chunked_prefill_size is None and rules == RULES_0_4_6:
        if role != "null":
            chunked = 16384
        if opts.enable_dp_attention and opts.dp_size > 1:
            chunked //= opts.dp_size
    max_prefill = settings.max_prefill_tokens or DEFAULT_MAX_PREFILL_TOKENS
    max_bs = settings.cuda_graph_max_bs if settings.cuda_graph_max_bs is not None else tier.cuda_graph_max_bs
    if (
        rules == RULES_0_5_23
        and settings.cuda_graph_max_bs is None
        and settings.max_running_requests is not None
    ):
        max_bs = min(max_bs, settings.max_running_requests)
        branch.append(f"0.5.23: decode graph max_bs capped at --max-running-requests {max_bs}")
    decode_graph = not settings.disable_cuda_graph and role != "prefill"
    if rules in (RULES_0_5_17, RULES_0_5_18, RULES_0_5_23):
        prefill_graph = (
            not settings.disable_cuda_graph and not opts.disable_prefill_graph and role != "decode"
        )
        if rules == RULES_0_5_23 and opts.device != "cuda":
            prefill_graph = False
    else:
        prefill_graph = opts.enable_piecewise_cuda_graph and not settings.disable_cuda_graph
    if is_mla:
        prefill_max_bs = min(8192, chunked) if rules == RULES_0_5_23 else 2048
    else:
        prefill_max_bs = chunked if chunked > 0 else max_prefill
    if settings.max_total_tokens is not None:
        prefill_max_bs = min(prefill_max_bs, settings.max_total_tokens)
    if "llama-2" in model.name.lower():
        prefill_max_bs = min(prefill_max_bs, 4096)
    buckets = len(prefill_graph_buckets(prefill_max_bs)) if prefill_graph else 0
    resolved = _Resolved(
        rules=rules,
        gpu_mem=gpu_mem,
        tp=tp,
        pp=pp,
        role=role,
        chunked=chunked,
        max_prefill_tokens=max_prefill,
        max_bs=max_bs,
        decode_graph=decode_graph,
        prefill_graph=prefill_graph,
        prefill_max_bs=prefill_max_bs,
        buckets=buckets,
        is_mla=is_mla,
        max_running_requests=settings.max_running_requests,
        options=opts,
    )
    post_capture, post_why = post_capture_kv_sizing_planned(resolved, model, settings.kv_cache_dtype)
    if rules in POST_CAPTURE_FLOOR_MIB:
        branch.append(post_why)

    # 2. mem_fraction_static.
    reserve: ReserveBreakdown | None = None
    source: Literal["given", "heuristic", "fallback"]
    if settings.mem_fraction_static is not None:
        mfs = settings.mem_fraction_static
        source = "given"
        branch.append(f"--mem-fraction-static {mfs} given: no heuristic")
        # What the heuristic would have reserved still explains the held-back memory's parts.
        reserve = _reserve_for(resolved, post_capture, gpu_mem)
    elif gpu_mem is None:
        mfs = UNKNOWN_GPU_FRACTION[rules]
        source = "fallback"
        branch.append(f"gpu_mem unknown → mem_fraction_static {mfs} ({rules} fallback)")
    else:
        source = "heuristic"
        reserve = _reserve_for(resolved, post_capture, gpu_mem)
        if rules == RULES_0_4_6:
            mfs = _fraction_0_4_6(gpu_mem, tp, pp)
            branch.append(f"0.4.6.post5 tp×pp table (tp·pp = {tp * pp}) → mem_fraction_static {mfs:.4f}")
        else:
            mfs = round((gpu_mem - reserve.total_mib) / gpu_mem, 3)
            branch.append(_reserve_words(reserve, gpu_mem, mfs))
        vlm = _vlm_factor(opts)
        if vlm is not None and role != "decode":
            if post_capture and rules == RULES_0_5_23:
                mfs = mfs - 8 * 1024 / gpu_mem
                branch.append("VLM with post-capture sizing (0.5.23): − 8 GiB / gpu_mem")
            else:
                mfs = mfs * vlm
                branch.append(f"VLM adjustment: × {vlm:.4f}")
    if not 0 < mfs < 1:
        notes.append(
            f"mem_fraction_static came out {mfs:.3f}: outside (0, 1); the card is too small for the reserve"
        )

    # 3. Free memory before and after the weights load.
    ctx_bytes, ctx_unc, ctx_formula = context_estimate_bytes(tp * pp)
    start_free = capacity if settings.free_memory_bytes is None else min(capacity, settings.free_memory_bytes)
    other = capacity - start_free
    stages = stage_layout(model, tp, pp)
    stage_index = 0
    stage_layers, weights = stages[0]
    weights_source = TermSource.ESTIMATED
    weights_formula = (
        f"checkpoint {format_bytes(model.weight_bytes)} on tp {tp}: split tensors / tp + replicated ones"
    )
    if opts.free_before_load_bytes is not None:
        pre = opts.free_before_load_bytes
        ctx_bytes = max(0, start_free - pre)
        ctx_source, ctx_unc = TermSource.GIVEN, 0
        ctx_formula = "free at start − Load weight begin avail mem (given)"
    else:
        pre = start_free - ctx_bytes
        ctx_source = TermSource.ESTIMATED
    if opts.free_after_load_bytes is not None:
        avail = opts.free_after_load_bytes
        weights = pre - avail
        weights_source = TermSource.GIVEN
        weights_formula = "Load weight begin − end avail mem (given)"
    else:
        # PP ranks all-reduce MIN the token count: the binding stage has the fewest tokens.
        def stage_tokens(layers_weights: tuple[int, int]) -> int:
            layers, stage_weights = layers_weights
            rest = (pre - stage_weights) / GiB - pre / GiB * (1 - mfs)
            return int(rest * GiB) // cell_size(model, settings, opts, layers=layers)

        if pp > 1:
            stage_index = min(range(pp), key=lambda i: stage_tokens(stages[i]))
            stage_layers, weights = stages[stage_index]
            weights_formula = (
                f"stage {stage_index} of {pp} ({stage_layers} layers"
                f"{', embedding' if stage_index == 0 else ''}{', lm_head' if stage_index == pp - 1 else ''}) / tp {tp}"
            )
            branch.append(f"pipeline stage {stage_index} binds (fewest tokens; PP ranks take the MIN)")
        draft = opts.speculative_draft_weight_bytes or 0
        if draft and rules in (RULES_0_5_18, RULES_0_5_23):
            # 0.5.18+: draft weights load before profiling and are charged to the KV budget (`python/sglang/srt/server_args.py` (SGLang v0.5.23)).
            weights += -(-draft // tp)
            weights_formula += f" + draft model {format_bytes(draft)} / tp {tp}"
            branch.append("speculative decoding: the draft model's weights are charged to the KV budget")
        avail = pre - weights
    if opts.free_after_load_bytes is not None or pp == 1:
        stage_layers = layers_per_stage(model.num_hidden_layers, pp)
    branch.append(
        f"pre_model_load_memory = {pre / GiB:.2f} GiB, after load {avail / GiB:.2f} GiB "
        f"(weights {weights / GiB:.2f} GiB per rank)"
    )

    # 4. KV budget: avail − pre × (1 − mfs), in GiB as SGLang computes it.
    pre_gib, avail_gib = pre / GiB, avail / GiB
    slack_gib = pre_gib * (1 - mfs)
    graph_estimate = 0
    if post_capture:
        # The pool is sized after capture: the graphs' memory is measured then; planning estimates it.
        graph_mib, _ = reserve_for_graph_mib(resolved)
        graph_estimate = int(graph_mib * MiB)
    rest_gib = avail_gib - slack_gib
    mamba: MambaPool | None = None
    if model.state_space is not None:  # hybrid: carve the state pool out of rest first (`mamba_pool`)
        mamba = mamba_pool(model, settings, opts, rest_gib, rules, version=version)
        rest_gib = mamba.rest_after_gib
        stage_layers = model.num_full_layers
        branch.append(mamba.words)
        notes.append(
            f"Hybrid: {mamba.words}; the token pool counts the {stage_layers} full-attention layers only"
        )
    budget = int(rest_gib * GiB) - graph_estimate
    cell = cell_size(model, settings, opts, layers=stage_layers)
    algo = (opts.speculative_algorithm or "").upper()
    if opts.speculative_draft_layers and algo in ("EAGLE", "EAGLE3", "STANDALONE"):
        # One token count serves the target and draft pools (`python/sglang/srt/model_executor/pool_configurator.py` (SGLang v0.5.23)).
        cell += cell * opts.speculative_draft_layers // model.num_hidden_layers
        branch.append(
            f"{algo} draft KV shares the token count: cell × (1 + {opts.speculative_draft_layers} / "
            f"{model.num_hidden_layers}) = {cell} B"
        )
    page = settings.page_size or BACKEND_PAGE_SIZE.get((opts.attention_backend or "").lower(), 1)
    if opts.device == "musa" and settings.page_size is None:
        page = 64
    hybrid = is_hybrid_swa(model, opts) and rules not in (RULES_0_4_6,)
    profiled = max(0, budget // cell) if budget > 0 else 0
    profiled -= profiled % page
    if post_capture:
        pre_capture_tokens = max(0, int(rest_gib * GiB) // cell)
        pre_capture_tokens -= pre_capture_tokens % page
        eager_gap = max_bs < default_max_running_requests(
            pre_capture_tokens,
            settings.max_model_len or model.max_position_embeddings,
            rules,
            settings.max_running_requests,
            opts.dp_size if opts.enable_dp_attention else 1,
        )
        if eager_gap:
            act_tokens, _ = _activation_tokens(resolved)
            reserve_mib = METADATA_RESERVE_MIB + act_tokens * ACTIVATION_MIB_PER_TOKEN + tp * pp / 8 * 1024
            if gpu_mem is not None and gpu_mem > FLOOR_ABOVE_MIB:
                reserve_mib = max(reserve_mib, FLOOR_RESERVE_MIB)
            if reserve_mib / 1024 > slack_gib:
                slack_gib = reserve_mib / 1024
                budget = int((avail_gib - slack_gib) * GiB) - graph_estimate
                branch.append(
                    f"post-capture headroom raised to pre_capture_activation_reserve {reserve_mib:.0f} MiB "
                    f"(eager decode gap: graph max_bs {max_bs} < max_running_requests)"
                )
        profiled = min(pre_capture_tokens, max(0, budget // cell) if budget > 0 else 0)
        profiled -= profiled % page
        branch.append("post-capture: tokens capped at the pre-capture value")
    tokens = profiled
    if settings.max_total_tokens is not None and settings.max_total_tokens < tokens:
        tokens = settings.max_total_tokens - settings.max_total_tokens % page
        branch.append(f"--max-total-tokens {settings.max_total_tokens} caps the pool (profiled {profiled})")
    elif settings.max_total_tokens is not None:
        notes.append(
            f"max_total_tokens={settings.max_total_tokens} is larger than the profiled value {profiled}. "
            "Use the profiled value instead."
        )
    full_tokens: int | None = None
    swa_tokens: int | None = None
    kv_bytes = tokens * cell
    if hybrid and tokens > 0:
        full_layers, swa_layers = model.num_full_layers, model.num_sliding_layers
        ratio = opts.swa_full_tokens_ratio
        total = tokens * model.num_hidden_layers
        full_tokens = int(total / (ratio * swa_layers + full_layers))
        swa_tokens = int(full_tokens * ratio)
        full_tokens -= full_tokens % page
        swa_tokens -= swa_tokens % page
        per_layer = cell // model.num_hidden_layers
        kv_bytes = per_layer * (full_tokens * full_layers + swa_tokens * swa_layers)
        branch.append(
            f"hybrid SWA pools ({model.architecture}): full_layer_tokens={full_tokens}, "
            f"swa_layer_tokens={swa_tokens} (swa_full_tokens_ratio {ratio})"
        )
        tokens = full_tokens
    elif model.num_sliding_layers and not hybrid:
        notes.append(
            "sliding-window layers get full-length KV: SGLang sizes a separate SWA pool only for "
            + ", ".join(sorted(HYBRID_SWA_ARCHITECTURES))
        )
    context_len = settings.max_model_len or model.max_position_embeddings
    dp_workers = opts.dp_size if opts.enable_dp_attention else 1
    mrr = default_max_running_requests(tokens, context_len, rules, settings.max_running_requests, dp_workers)
    if mamba is not None and mamba.slots > 0:
        capped = min(mrr, mamba.slots // mamba.ratio)
        if capped < mrr:
            branch.append(
                f"max_running_requests capped to {capped} by the mamba state cache (max_mamba_cache_size "
                f"{mamba.slots} // ratio {mamba.ratio})"
            )
        mrr = capped

    # 5. Verdict and the failure SGLang would raise.
    verdict, message = "fits", ""
    current = f"mem_fraction_static={mfs:.3f}"
    if mamba is not None and mamba.slots <= 0 and weights < pre:
        verdict = "no-kv-cache-memory"
        message = mamba.error
    elif weights >= pre:
        verdict = "weights-do-not-fit"
        message = (
            f"the weights ({weights / GiB:.2f} GiB per rank) do not fit in the {pre / GiB:.2f} GiB free before "
            f"load: add GPUs (--tp-size {tp * 2}) or load a quantised checkpoint"
        )
    elif rest_gib <= 0 or tokens <= 0:
        verdict = "no-kv-cache-memory"
        minimum = 1 - avail_gib / pre_gib if pre_gib > 0 else 1.0
        if rest_gib <= 0 and rules in (RULES_0_5_18, RULES_0_5_23):
            message = (
                f"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={mfs:.3f}. "
                f"Raise --mem-fraction-static above {minimum:.3f} (minimum viable = 1 - available/pre = "
                f"{minimum:.4f})."
            )
        else:
            message = (
                "Not enough memory. Please try to increase --mem-fraction-static. "
                f"Current value: {current} (needs more than {minimum:.3f})"
            )
    if 0 < tokens < context_len:
        notes.append(
            f"the pool holds {format_count(tokens)} tokens, fewer than one context_len={context_len} request"
        )

    # 6. Ledger (capacity = the CUDA total).
    held = int(slack_gib * GiB)
    terms: list[Term] = []
    if other:
        terms.append(Term(OTHER_PROCESSES, other, TermSource.GIVEN, "CUDA total − --free-memory"))
    terms.append(Term(NON_TORCH, ctx_bytes, ctx_source, ctx_formula, ctx_unc))
    terms.append(Term(WEIGHTS, weights, weights_source, weights_formula, 0))
    act_bytes = graph_bytes = 0
    if reserve is not None and reserve.branch in ("normal", "table", "tp-pp-table"):
        act_bytes = max(0, min(int(reserve.activation_mib * MiB), held))
        graph_bytes = max(0, min(int(reserve.graph_mib * MiB), held - act_bytes))
    elif post_capture and reserve is not None:
        graph_bytes = graph_estimate
        act_bytes = max(0, held)
    if act_bytes:
        terms.append(
            Term(
                ACTIVATION_PEAK,
                act_bytes,
                TermSource.ESTIMATED,
                f"reserve's activation part: {reserve.activation_tokens if reserve else 0} tokens × 1.5 MiB"
                + (
                    " (clipped to the held-back pre × (1 − mfs))"
                    if reserve is not None and act_bytes < int(reserve.activation_mib * MiB)
                    else ""
                )
                if not post_capture
                else "post-capture headroom pre × (1 − mfs)",
                note="SGLang does not measure the activation peak; its reserve is a heuristic",
            )
        )
    if graph_bytes:
        terms.append(
            Term(
                CUDA_GRAPH,
                graph_bytes,
                TermSource.ESTIMATED,
                "reserve_for_graph_mb: 2 MiB × decode max_bs + 8 MiB × prefill buckets (1536 MiB for MLA)",
                note="SGLang's own estimate of the graphs' non-torch memory",
            )
        )
    if mamba is not None and mamba.slots > 0:
        terms.append(
            Term(
                MAMBA_STATE,
                mamba.pool_bytes,
                TermSource.DERIVED,
                f"max_mamba_cache_size {mamba.slots} × {mamba.per_request_bytes:,} B per request "
                f"({mamba.state_layers} state layers × (conv + SSM))",
                note="SGLang's MambaPool: fixed-size states, separate from the token KV pool",
            )
        )
    terms.append(Term(KV_CACHE, kv_bytes, TermSource.DERIVED, f"{format_count(tokens)} tokens × {cell} B"))
    ledger = Ledger.with_residual(
        capacity,
        terms,
        residual=SLACK,
        residual_formula=(
            "pre × (1 − mfs) not counted above (512 MiB metadata, 128 MiB per tp·pp rank, floor excess) "
            "+ page/cell rounding + any --max-total-tokens cap"
        ),
    )

    log_lines = (
        _log_lines(
            model,
            settings,
            tokens,
            page,
            cell,
            kv_bytes,
            chunked,
            max_prefill,
            mrr,
            context_len,
            rules,
            post_capture,
        )
        if tokens > 0
        else ()
    )
    return SglangPlan(
        version=version,
        rules=rules,
        gpu_mem_mib=gpu_mem,
        capacity_bytes=capacity,
        mem_fraction_static=mfs,
        mem_fraction_source=source,
        reserve=reserve,
        chunked_prefill_size=chunked,
        max_prefill_tokens=max_prefill,
        cuda_graph_max_bs=max_bs,
        cuda_graph_bs=decode_graph_batch_sizes(max_bs) if decode_graph else (),
        prefill_graph_max_bs=prefill_max_bs if prefill_graph else 0,
        prefill_graph_buckets=buckets,
        page_size=page,
        post_capture=post_capture,
        context_bytes=ctx_bytes,
        free_before_load_bytes=pre,
        weights_bytes=weights,
        free_after_load_bytes=avail,
        held_back_bytes=held + graph_estimate,
        kv_budget_bytes=budget,
        bytes_per_token=cell,
        max_total_num_tokens=tokens,
        profiled_tokens=profiled,
        kv_cache_bytes=kv_bytes,
        full_layer_tokens=full_tokens,
        swa_layer_tokens=swa_tokens,
        max_running_requests=mrr,
        context_len=context_len,
        verdict=verdict,
        message=message,
        branch=tuple(branch),
        ledger=ledger,
        notes=tuple(notes),
        log_lines=log_lines,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        extra={"mamba": mamba.to_json()} if mamba is not None else {},
    )


# --- hybrid (Mamba2 / Gated DeltaNet) models: the mamba state pool (docs/hybrid.md) ------------------------------
#
# SGLang (`python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py` as stored by the search index, the
# 0.5.x line; `python/sglang/srt/server_args.py` (SGLang v0.5.23) for 0.5.18 / 0.5.23):
# - `_profile_available_bytes`: rest = post_load − pre × (1 − mfs); for a "mambaish" model rest =
#   `_handle_max_mamba_cache(rest)` before the token pool is sized from it;
# - `_handle_max_mamba_cache`: --max-mamba-cache-size given → that many slots (÷ attention DP size); else with
#   --disable-radix-cache and --max-running-requests → that many; else mamba budget = rest × r / (1 + r), r =
#   --mamba-full-memory-ratio (0.9), slots = int(budget_bytes // mamba_cache_per_req); a non-positive count raises
#   "Not enough GPU memory for hybrid (mamba/linear-attention) state cache…"; rest −= slots × per_req;
# - `Mamba2CacheParams.mamba_cache_per_req` = (prod(conv) × conv dtype + prod(temporal) × SSM dtype) × state layers,
#   shapes from `Mamba2StateShape.create` (conv (conv_dim / tp, kernel − 1), temporal (heads / tp, head_dim,
#   state)); `mamba2_state_dtype`: conv bf16, SSM = SGLANG_MAMBA_SSM_DTYPE / --mamba-ssm-dtype, else the config's
#   `mamba_ssm_dtype`, else float32;
# - `_resolve_max_num_reqs`: max_running_requests = min(…, max_mamba_cache_size // `_calculate_mamba_ratio`), the
#   ratio 1 with --disable-radix-cache, else 3 (+1 / +2 with the extra-buffer scheduler strategy, not modelled).
MAMBA_RATIO_RADIX = 3
"""`MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO`: state slots per running request with the radix cache on."""
_SGLANG_SSM_DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class MambaPool:
    """SGLang's mamba state pool for one hybrid model on one rank."""

    state_layers: int
    conv_shape: tuple[int, int]
    ssm_shape: tuple[int, int, int]
    ssm_dtype: str
    per_request_bytes: int
    slots: int
    """max_mamba_cache_size after the split."""
    ratio: int
    source: str
    """`given`, `max-running-requests` or `ratio`."""
    rest_before_gib: float
    rest_after_gib: float
    words: str
    error: str = ""

    @property
    def pool_bytes(self) -> int:
        return max(0, self.slots) * self.per_request_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "state_layers": self.state_layers,
            "conv_state_shape": list(self.conv_shape),
            "ssm_state_shape": list(self.ssm_shape),
            "ssm_dtype": self.ssm_dtype,
            "mamba_cache_per_req_bytes": self.per_request_bytes,
            "max_mamba_cache_size": self.slots,
            "mamba_pool_bytes": self.pool_bytes,
            "mamba_ratio": self.ratio,
            "source": self.source,
            "rest_before_gib": round(self.rest_before_gib, 4),
            "rest_after_gib": round(self.rest_after_gib, 4),
        }


def mamba_pool(
    model: ModelSpec,
    settings: ServeSettings,
    options: SglangOptions,
    rest_gib: float,
    rules: str,
    *,
    version: str | None = None,
) -> MambaPool:
    """The state pool SGLang carves out of `rest_gib` before sizing the token pool (see the sources above)."""
    from vramctl.core.kv import state_shapes

    st = model.state_space
    assert st is not None
    if rules in (RULES_0_4_6, RULES_0_5_2):
        raise BadInputError(
            f"--engine-version {version or rules}: {model.name} is a Mamba / linear-attention hybrid; vramctl plans SGLang's mamba pool "
            f"from the 0.5.9 rules on, not {rules}'s"
        )
    if settings.pipeline_parallel_size > 1:
        raise BadInputError(
            f"--pipeline-parallel-size {settings.pipeline_parallel_size}: SGLang's per-stage mamba pool of "
            f"{model.name} is not modelled (plan it with pipeline parallelism 1)"
        )
    ssm = (options.mamba_ssm_dtype or st.ssm_dtype or "float32").lower().removeprefix("torch.")
    if ssm not in _SGLANG_SSM_DTYPES:
        raise BadInputError(f"--mamba-ssm-dtype {ssm}: SGLang accepts float32, bfloat16, float16")
    tp = settings.tensor_parallel_size
    shapes = state_shapes(model, tp=tp, element_bytes=2, mamba_ssm_cache_dtype=ssm)
    layers = model.num_state_layers
    per_req = shapes.page_bytes * layers
    dp = options.dp_size if options.enable_dp_attention else 1
    ratio = 1 if options.disable_radix_cache else MAMBA_RATIO_RADIX
    r = options.mamba_full_memory_ratio
    if options.max_mamba_cache_size is not None:
        slots, source = options.max_mamba_cache_size // dp, "given"
        how = f"--max-mamba-cache-size {options.max_mamba_cache_size}"
    elif options.disable_radix_cache and settings.max_running_requests is not None:
        slots, source = settings.max_running_requests // dp, "max-running-requests"
        how = f"--disable-radix-cache with --max-running-requests {settings.max_running_requests}"
    else:
        budget = rest_gib * r / (1 + r)
        slots, source = int(budget * GiB // per_req), "ratio"
        how = f"rest {rest_gib:.2f} GiB × {r} / (1 + {r}) = {budget:.2f} GiB"
    after = rest_gib - slots * per_req / GiB
    error = ""
    if slots <= 0:
        error = (
            "Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
            f"max_mamba_cache_size={slots} (total_rest_memory={rest_gib:.2f} GB, mamba_cache_per_req="
            f"{per_req / MiB:.2f} MB). Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, "
            "(3) reduce --speculative-num-draft-tokens, or (4) use GPUs with more memory."
        )
    words = (
        f"mamba pool: {layers} state layers × (conv {shapes.conv} bf16 + SSM {shapes.ssm} {ssm}) = "
        f"{per_req / MiB:.2f} MiB per request; {how} → max_mamba_cache_size {slots} "
        f"({max(0, slots) * per_req / GiB:.2f} GiB); rest for the token pool {after:.2f} GiB"
    )
    return MambaPool(
        layers, shapes.conv, shapes.ssm, ssm, per_req, slots, ratio, source, rest_gib, after, words, error
    )


def _reserve_for(r: _Resolved, post_capture: bool, gpu_mem: int | None) -> ReserveBreakdown:
    if r.rules == RULES_0_4_6:
        # The table has no reserve; report the 0.5.x parts for the ledger split only.
        # The table has no reserve: report what its fraction implies, split like 0.5.9 for the ledger.
        base = _reserve_0_5_9(r)
        implied = 0.0 if gpu_mem is None else gpu_mem * (1 - _fraction_0_4_6(gpu_mem, r.tp, r.pp))
        return replace(
            base, branch="tp-pp-table", total_mib=implied, floor_applied=False, floor_extra_mib=0.0
        )
    if r.rules == RULES_0_5_2:
        if gpu_mem is None:
            return ReserveBreakdown(rules=r.rules, branch="unknown-gpu")
        table = _reserve_0_5_2(r)
        act_tokens, _ = _activation_tokens(r)
        return replace(
            table,
            activation_tokens=act_tokens,
            activation_mib=act_tokens * ACTIVATION_MIB_PER_TOKEN,
            graph_mib=float(DECODE_GRAPH_MIB_PER_BS * r.max_bs),
        )
    if r.rules == RULES_0_5_9:
        return _reserve_0_5_9(r)
    return _reserve_0_5_18(r, post_capture)


def _reserve_words(reserve: ReserveBreakdown, gpu_mem: int, mfs: float) -> str:
    if reserve.branch == "table":
        return (
            f"0.5.2 reserved table: {reserve.table_mib:.0f} MiB + {reserve.after_floor_mib:.0f} MiB add-ons "
            f"→ mfs = round(({gpu_mem} − {reserve.total_mib:.0f}) / {gpu_mem}, 3) = {mfs}"
        )
    if reserve.branch == "post-capture":
        return (
            f"post-capture reserve {reserve.metadata_mib:.0f} + {reserve.parallel_mib:.0f} MiB (no activation, "
            f"graph or 10 GiB floor) → mfs = {mfs}"
        )
    graph = " + ".join(f"{name} {mib:.0f}" for name, mib in reserve.graph_parts) or "0"
    floor = f", floored to {FLOOR_RESERVE_MIB} MiB" if reserve.floor_applied else ""
    after = f", + {reserve.after_floor_mib:.0f} MiB after the floor" if reserve.after_floor_mib else ""
    return (
        f"reserved = 512 + {reserve.activation_tokens} × 1.5 + {reserve.parallel_mib:.0f} + graph ({graph})"
        f"{floor}{after} = {reserve.total_mib:.0f} MiB → mfs = round(({gpu_mem} − {reserve.total_mib:.0f}) / "
        f"{gpu_mem}, 3) = {mfs}"
    )


def _log_lines(
    model: ModelSpec,
    settings: ServeSettings,
    tokens: int,
    page: int,
    cell: int,
    kv_bytes: int,
    chunked: int,
    max_prefill: int,
    mrr: int,
    context_len: int,
    rules: str,
    post_capture: bool,
) -> tuple[str, ...]:
    """The start-up lines SGLang would print (`python/sglang/srt/model_executor/model_runner.py` (SGLang v0.5.23)); K/V buffers hold one padding page."""
    dtype = settings.kv_cache_dtype if settings.kv_cache_dtype != "auto" else model.torch_dtype
    dtype = "torch." + dtype.removeprefix("torch.")
    allocated = "VA upper bound" if post_capture else "is allocated"
    padded = (tokens + page) * cell / GiB
    dtype_part = "" if rules in (RULES_0_4_6, RULES_0_5_2, RULES_0_5_9) else f"dtype: {dtype}, "
    if model.mla is not None:
        kv_line = f"KV Cache {allocated}. {dtype_part}#tokens: {tokens}, KV size: {padded:.2f} GB"
    else:
        kv_line = (
            f"KV Cache {allocated}. {dtype_part}#tokens: {tokens}, K size: {padded / 2:.2f} GB, "
            f"V size: {padded / 2:.2f} GB"
        )
    summary = (
        f"max_total_num_tokens={tokens}, chunked_prefill_size={chunked}, max_prefill_tokens={max_prefill}, "
        f"max_running_requests={mrr}, context_len={context_len}"
    )
    return kv_line, summary


# --- vLLM vs SGLang, term by term -----------------------------------------------------------------------
class VllmResultLike(Protocol):
    """What explain_gap reads from vramctl.core.plan.PlanResult (duck-typed to keep engines independent)."""

    @property
    def kv_cache_bytes(self) -> int: ...


@dataclass(frozen=True)
class GapItem:
    """One reason vLLM's KV pool differs from SGLang's; `bytes` > 0 means vLLM has that much more KV."""

    name: str
    bytes: int
    sentence: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "sentence": self.sentence}


def _vllm_ledger(result: Any) -> Ledger | None:
    for attr in ("ledger", "terms"):
        value = getattr(result, attr, None)
        if isinstance(value, Ledger):
            return value
    return None


def explain_gap(vllm_result: VllmResultLike, sglang_plan: SglangPlan) -> tuple[GapItem, ...]:
    """Why vLLM's KV differs from SGLang's for the same model and card, term by term.

    The items' bytes sum exactly to vLLM KV − SGLang KV. Each compares the two ledgers' term of the same
    name (both sum to their capacity), so the difference of the KV residuals is the sum of the differences
    of every other term, plus any difference in the capacity each engine starts from.
    """
    s = sglang_plan
    v_kv = int(vllm_result.kv_cache_bytes)
    v_ledger = _vllm_ledger(vllm_result)
    if v_ledger is None:
        return (
            GapItem(
                "total",
                v_kv - s.kv_cache_bytes,
                f"vLLM plans {format_bytes(v_kv)} of KV, SGLang {format_bytes(s.kv_cache_bytes)} "
                "(no vLLM ledger to split the difference)",
            ),
        )
    s_terms = s.ledger.as_mapping()
    v_terms = v_ledger.as_mapping()
    items: list[GapItem] = []
    cap_diff = v_ledger.capacity_bytes - s.ledger.capacity_bytes
    v_kv_term = v_ledger.bytes_of(KV_CACHE)
    if cap_diff:
        items.append(
            GapItem(
                "capacity",
                cap_diff,
                f"vLLM starts from the CUDA total {format_bytes(v_ledger.capacity_bytes)}, SGLang from "
                f"{format_bytes(s.ledger.capacity_bytes)}",
            )
        )
    reserve = s.reserve
    u = _vllm_utilization(vllm_result)
    sentences = {
        SLACK: (
            f"vLLM holds back (1 − u)·C{'' if u is None else f' with u = {u}'}; SGLang holds back "
            f"pre_model_load × (1 − {s.mem_fraction_static:.3f}) = {format_bytes(s.held_back_bytes)} of the "
            f"free memory before load (not of the {s.gpu_mem_mib} MiB nvidia-smi total its fraction was computed "
            "from); what is not its activation or graph part (512 MiB metadata, 128 MiB per rank, the 10 GiB "
            f"floor, page rounding to {s.page_size}) is slack"
        ),
        ACTIVATION_PEAK: (
            "vLLM profiles (here: estimates) the peak of a max_num_batched_tokens forward and the sampler; "
            + (
                f"SGLang reserves 1.5 MiB × {reserve.activation_tokens} tokens = {reserve.activation_mib:.0f} MiB "
                "(max(chunked_prefill_size, 2048))"
                if reserve is not None and reserve.activation_tokens
                else "SGLang's reserve has no separate activation part here"
            )
        ),
        CUDA_GRAPH: (
            "vLLM estimates the graph pool over its capture sizes; SGLang reserves 2 MiB per decode max_bs "
            "+ 8 MiB per prefill bucket (reserve_for_graph_mb)"
            + (f" = {reserve.graph_mib:.0f} MiB" if reserve is not None else "")
        ),
        NON_TORCH: (
            "vLLM counts non-torch memory after profiling (context, NCCL, workspaces); SGLang's context is "
            "whatever is not free before the weights load"
        ),
        WEIGHTS: "weights are the same checkpoint split over the same ranks in both engines",
        OTHER_PROCESSES: "memory other tenants hold on the card",
        MAMBA_STATE: (
            "SGLang keeps a hybrid's Mamba / linear-attention state in its own pool, rest × r / (1 + r) "
            "(--mamba-full-memory-ratio); vLLM pages the state inside its KV pool, one block per request and state "
            "group (docs/hybrid.md)"
        ),
    }
    names = [t.name for t in v_ledger.terms] + [t.name for t in s.ledger.terms]
    seen: set[str] = set()
    for name in names:
        if name in seen or name == KV_CACHE:
            continue
        seen.add(name)
        diff = (s_terms[name].bytes if name in s_terms else 0) - (
            v_terms[name].bytes if name in v_terms else 0
        )
        if diff == 0:
            continue
        v_bytes = v_terms[name].bytes if name in v_terms else 0
        s_bytes = s_terms[name].bytes if name in s_terms else 0
        if name == SLACK:
            split = _slack_items(s, v_bytes, s_bytes, u)
            if split:
                items.extend(split)
                continue
        sentence = sentences.get(name, f"vLLM term {name!r} has no SGLang counterpart")
        sentence = f"{name}: vLLM {format_bytes(v_bytes)}, SGLang {format_bytes(s_bytes)}. {sentence}"
        items.append(GapItem(name, diff, sentence))
    rest = v_kv - v_kv_term
    if rest:
        items.append(
            GapItem("vllm_kv_rounding", rest, "vLLM's kv_cache_bytes differs from its ledger's KV term")
        )
    total = sum(i.bytes for i in items)
    assert total == v_kv - s.kv_cache_bytes, (total, v_kv - s.kv_cache_bytes)
    items.sort(key=lambda i: -abs(i.bytes))
    return tuple(items)


def _slack_items(s: SglangPlan, v_slack: int, s_slack: int, u: float | None) -> list[GapItem]:
    """The slack difference split into what makes up SGLang's held-back memory (empty when not separable)."""
    r = s.reserve
    if r is None or r.branch != "normal" or s.post_capture:
        return []
    act = s.ledger.bytes_of(ACTIVATION_PEAK)
    graph = s.ledger.bytes_of(CUDA_GRAPH)
    if act != int(r.activation_mib * MiB) or graph != int(r.graph_mib * MiB):
        return []  # the parts were clipped to a small held-back amount
    held = s.held_back_bytes
    reserved = int(r.total_mib * MiB)
    parts: list[GapItem] = [
        GapItem(
            "vllm_headroom",
            -v_slack,
            f"vLLM leaves {format_bytes(v_slack)} on the card beyond its estimated terms: (1 − u)·C"
            + ("" if u is None else f" with u = {u}")
            + " minus what lives outside its request",
        ),
        GapItem(
            "sglang_metadata",
            int(r.metadata_mib * MiB),
            "SGLang reserves a constant 512 MiB of 'meta data (e.g., from attention backend)'",
        ),
        GapItem(
            "sglang_parallel",
            int(r.parallel_mib * MiB),
            f"SGLang reserves tp·pp/8 × 1024 MiB = {r.parallel_mib:.0f} MiB for large parallel sizes",
        ),
    ]
    if r.floor_extra_mib:
        parts.append(
            GapItem(
                "sglang_floor",
                int(r.floor_extra_mib * MiB),
                f"the reserve is floored at 10 GiB on cards above 60 GiB: {r.floor_extra_mib:.0f} MiB above its parts",
            )
        )
    if r.after_floor_mib:
        parts.append(
            GapItem(
                "sglang_after_floor",
                int(r.after_floor_mib * MiB),
                f"{r.after_floor_mib:.0f} MiB added after the floor (DeepEP / speculative / XPU)",
            )
        )
    base_sentence = (
        f"SGLang applies 1 − {s.mem_fraction_static:.3f} to the free memory before load "
        f"({format_bytes(s.free_before_load_bytes)}), not to the {s.gpu_mem_mib} MiB nvidia-smi total the reserve "
        "was computed on, and rounds the fraction to 3 decimals"
    )
    if s.mem_fraction_source == "given":
        base_sentence = (
            f"--mem-fraction-static {s.mem_fraction_static} holds back {format_bytes(held)} of the free memory "
            f"before load, against the {format_bytes(reserved)} the default heuristic would reserve"
        )
    parts.append(GapItem("sglang_fraction_base", held - reserved, base_sentence))
    rounding = s_slack - held + act + graph
    if rounding:
        parts.append(
            GapItem(
                "sglang_page_rounding",
                rounding,
                f"the pool is whole tokens of {s.bytes_per_token} B floored to pages of {s.page_size}"
                + (" and capped by --max-total-tokens" if s.max_total_num_tokens < s.profiled_tokens else ""),
            )
        )
    assert sum(p.bytes for p in parts) == s_slack - v_slack
    return [p for p in parts if p.bytes]


def _vllm_utilization(result: Any) -> float | None:
    for attr in ("gpu_memory_utilization", "utilization"):
        value = getattr(result, attr, None)
        if isinstance(value, float):
            return value
    settings = getattr(result, "settings", None)
    value = getattr(settings, "gpu_memory_utilization", None)
    return value if isinstance(value, float) else None


def worked_defaults(
    gpu_mem_mib: int, tp: int = 1, *, version: str = "0.5.18", mla: bool = False, post_capture: bool = False
) -> tuple[float, ReserveBreakdown]:
    """The default mem_fraction_static for a card alone (`python/sglang/srt/server_args.py` (SGLang v0.5.23)): (mfs, reserve). For docs and tests."""
    rules = rules_for_version(version)
    tier = gpu_tier(gpu_mem_mib, tp, rules)
    prefill_max_bs = (
        (min(8192, tier.chunked_prefill_size) if rules == RULES_0_5_23 else 2048)
        if mla
        else (tier.chunked_prefill_size)
    )
    prefill_graph = rules in (RULES_0_5_17, RULES_0_5_18, RULES_0_5_23)
    r = _Resolved(
        rules=rules,
        gpu_mem=gpu_mem_mib,
        tp=tp,
        pp=1,
        role="null",
        chunked=tier.chunked_prefill_size,
        max_prefill_tokens=DEFAULT_MAX_PREFILL_TOKENS,
        max_bs=tier.cuda_graph_max_bs,
        decode_graph=True,
        prefill_graph=prefill_graph,
        prefill_max_bs=prefill_max_bs,
        buckets=len(prefill_graph_buckets(prefill_max_bs)) if prefill_graph else 0,
        is_mla=mla,
        max_running_requests=None,
        options=SglangOptions(post_capture_kv_sizing=post_capture),
    )
    if rules == RULES_0_4_6:
        return _fraction_0_4_6(gpu_mem_mib, tp, 1), _reserve_for(r, False, gpu_mem_mib)
    reserve = _reserve_for(r, post_capture, gpu_mem_mib)
    return round((gpu_mem_mib - reserve.total_mib) / gpu_mem_mib, 3), reserve


__all__: Sequence[str] = (
    "GapItem",
    "ReserveBreakdown",
    "SglangOptions",
    "SglangPlan",
    "cell_size",
    "decode_graph_batch_sizes",
    "default_max_running_requests",
    "explain_gap",
    "gpu_tier",
    "plan_sglang",
    "prefill_graph_buckets",
    "rules_for_version",
    "worked_defaults",
)
