"""SGLang's KV pool: the cell size (bytes per token per rank), hybrid SWA pools, the per-rank weights and the
context before the load, and the mamba state pool of hybrid (Mamba2 / Gated DeltaNet) models."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vramctl.core.engines.sglang.options import SglangOptions
from vramctl.core.engines.sglang.rules import (
    CONTEXT_BYTES,
    CONTEXT_UNCERTAINTY_BYTES,
    HYBRID_SWA_ARCHITECTURES,
    NCCL_MULTI_NODE_BYTES,
    NCCL_SINGLE_NODE_BYTES,
    NCCL_UNCERTAINTY_BYTES,
    RULES_0_4_6,
    RULES_0_5_2,
    RULES_0_5_9,
    RULES_0_5_17,
    RULES_0_5_18,
    RULES_0_5_23,
    SGLANG_KV_DTYPE_FROM,
)
from vramctl.core.errors import BadInputError
from vramctl.core.kv import pp_partition
from vramctl.core.settings import ServeSettings, parse_version
from vramctl.core.specs import ModelSpec
from vramctl.core.units import GiB, MiB
from vramctl.core.weights import stage_rank_weight_bytes


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
        # torch.float4_e2m1fn_x2: one element = two values; cell_size adds the halving and scales
        **dict.fromkeys(FP4_KV_DTYPES, 1.0),
        MXFP8_KV_DTYPE: 1.0,  # torch.float8_e4m3fn data; cell_size adds the 1/32 block scales
    }
    if kv not in table:
        raise BadInputError(
            f"--kv-cache-dtype {settings.kv_cache_dtype!r}: not an SGLang KV cache dtype (SGLang 0.5.x accepts auto, "
            "fp8_e5m2, fp8_e4m3, mxfp8, bf16, bfloat16, nvfp4, fp4_mx_block16, fp4_e2m1)"
        )
    return table[kv]


# --- fp4_e2m1: SGLang's FP4 KV pools ---------------------------------------------------------------------------------
#
# `--kv-cache-dtype fp4_e2m1` stores two E2M1 values per byte (torch.float4_e2m1fn_x2, whose element size is 1) and one
# uint8 scale per 16 values beside them: `MLATokenToKVPoolFP4` (sglang PR #10078, autumn 2025) and
# `MHATokenToKVPoolFP4` (PR #12612, November 2025) in `python/sglang/srt/mem_cache/memory_pool.py`. The cell the token
# count divides by (`_compute_cell_size`, `python/sglang/srt/model_executor/pool_configurator.py`; before the
# configurator, `get_cell_size_per_token` in model_runner_kv_cache_mixin.py, the same arithmetic):
#   MHA: heads × (head_dim + v_head_dim) × layers × 1 // 2 + heads × head_dim × layers × 2 × 1 // 16
#   MLA: (kv_lora_rank + qk_rope_head_dim) × layers × 1 // 2 + (kv_lora_rank + qk_rope_head_dim) // 16 × layers × 1
# The hybrid pools (sliding-window `HybridSWAPoolConfigurator`, which counts one byte per element with no scales, and
# the hybrid linear / Mamba pool, which builds no FP4 class) are not modelled, nor releases before 0.5.9 (the rule sets
# vramctl has read that carry both FP4 pools).
#
# Later 0.5.x releases name the FP4 recipes: `nvfp4` (E2M1 data + an FP8 E4M3 scale per 16 values) and
# `fp4_mx_block16` (E2M1 data + a uint8 biased-exponent scale per 16 values; the recipe `fp4_e2m1` selected, which the
# newest source deprecates in its favour). Both are stored as torch.float4_e2m1fn_x2 (`configure_kv_cache_dtype`,
# python/sglang/srt/mem_cache/kv_cache_dtype.py) and sized by the same `is_float4_e2m1fn_x2` branch of
# `_compute_cell_size`, so their cell is fp4_e2m1's. `mxfp8` (FA4 backend) stores float8_e4m3fn plus one scale byte per
# 32 values: `cell += kv_heads × (head_dim + v_head_dim) × layers // 32` (`_compute_cell_size`, the `mxfp8` branch;
# the MLA branch adds no scale term). The first releases that accept them are in SGLANG_KV_DTYPE_FROM.
FP4_KV_DTYPE = "fp4_e2m1"
FP4_KV_DTYPES = frozenset({FP4_KV_DTYPE, "fp4_mx_block16", "nvfp4"})
MXFP8_KV_DTYPE = "mxfp8"
FP4_SCALE_BLOCK = 16
SGLANG_ONLY_KV_DTYPES = frozenset({FP4_KV_DTYPE, "fp4_mx_block16", MXFP8_KV_DTYPE})
"""SGLang `--kv-cache-dtype` values vLLM has no choice of that name for."""
MXFP8_SCALE_BLOCK = 32


def is_fp4_kv(settings: ServeSettings) -> bool:
    return settings.kv_cache_dtype.strip().lower() in FP4_KV_DTYPES


def is_scaled_kv(settings: ServeSettings) -> bool:
    """An SGLang KV dtype stored with block scales beside the data (FP4 recipes, mxfp8)."""
    return is_fp4_kv(settings) or settings.kv_cache_dtype.strip().lower() == MXFP8_KV_DTYPE


def scaled_kv_refusal(
    model: ModelSpec, options: SglangOptions, rules: str, kv_cache_dtype: str = FP4_KV_DTYPE, version: str | None = None
) -> str | None:
    """Why vramctl cannot size this block-scaled `--kv-cache-dtype` (fp4_e2m1, nvfp4, fp4_mx_block16, mxfp8) for
    this model and release, or None when it can."""
    kv = kv_cache_dtype.strip().lower()
    since = SGLANG_KV_DTYPE_FROM.get(kv)
    if since is not None and version is not None and parse_version(version) < since:
        first = ".".join(map(str, since))
        return (
            f"--kv-cache-dtype {kv}: SGLang {version} does not accept it (the first release read that lists it is "
            f"{first}: server_args.py kv_cache_dtype choices); pass --engine-version {first} or later if your build has it"
        )
    if kv in FP4_KV_DTYPES and rules in (RULES_0_4_6, RULES_0_5_2):
        return (
            f"--kv-cache-dtype {kv}: vramctl sizes SGLang's FP4 KV pools from 0.5.9 on (they arrived in late "
            "2025, sglang PRs #10078 and #12612); pass --engine-version 0.5.9 or later if your build has them"
        )
    if is_hybrid_swa(model, options) or model.state_space is not None:
        return (
            f"--kv-cache-dtype {kv}: {model.name} is a hybrid (sliding-window or linear-attention) model; "
            "SGLang's hybrid pools size block-scaled KV dtypes their own way, and vramctl does not plan it; "
            "use fp8_e4m3 or auto"
        )
    return None


# --- DeepSeek-V3.2 (DSA: MLA + a lightning-indexer key cache) -----------------------------------------------------
#
# SGLang sizes DSA models in its own way (CUDA / ROCm; the NPU pools are not modelled):
# - defaults (0.5.9 `server_args.py` `_set_default_nsa_kv_cache_dtype` / `_set_default_nsa_backends`; 0.5.18
#   `arg_groups/overrides.py` `_dsa_kv_cache_dtype_default` / `_dsa_split_backend_resolution` and
#   `_deepseek_family_overrides`): --kv-cache-dtype auto → fp8_e4m3 on SM ≥ 10 (Blackwell), bfloat16 below; only
#   bf16 / bfloat16 / fp8_e4m3 are accepted; page size 64; the decode backend: fp8 → trtllm on SM ≥ 10, flashmla_kv
#   below; bf16 → trtllm on SM ≥ 10, fa3 below;
# - the latent per token and layer (0.5.18 `mem_cache/kv_cache_configurator.py` `calculate_mla_kv_cache_dim`):
#   fp8 with a non-trtllm backend stores kv_lora_rank FP8 + kv_lora_rank / 128 float32 scales + the rope in bf16
#   (512 + 16 + 128 = 656 B); otherwise (kv_lora_rank + qk_rope_head_dim) × the KV dtype;
# - the indexer (`DSATokenToKVPool`: index_head_dim + index_head_dim / 128 × 4 uint8 per token and layer, 132 B)
#   in every layer that computes its own top-k (0.5.18 `pool_configurator.py` `_compute_dsa_indexer_cell_size`);
# - the cell: 0.5.18 `pool_configurator.py::_compute_cell_size` adds the latent of `calculate_mla_kv_cache_dim`
#   and the indexer; 0.5.9 `model_executor/model_runner_kv_cache_mixin.py` `get_cell_size_per_token` adds the
#   indexer to (kv_lora_rank + qk_rope_head_dim) × dtype — the 656 B FP8 layout is allocated but not counted.
DSA_PAGE_SIZE = 64
_DSA_KV_DTYPES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp8_e4m3": "fp8_e4m3"}


@dataclass(frozen=True)
class DsaDefaults:
    """What SGLang resolves for a DSA model on a GPU: KV dtype, decode backend, page size, and the words."""

    kv_cache_dtype: str
    decode_backend: str
    page_size: int
    words: str


def is_dsa(model: ModelSpec) -> bool:
    """DeepSeek-V3.2-style sparse attention: MLA with an indexer (SGLang `is_deepseek_dsa`: config `index_topk`)."""
    return model.mla is not None and model.mla.indexer_head_dim > 0


def dsa_defaults(
    settings: ServeSettings, options: SglangOptions, rules: str, compute_capability: str | None, version: str
) -> DsaDefaults:
    """SGLang's KV dtype, decode backend and page size for a DSA model (see the sources above); BadInputError for a
    KV dtype SGLang refuses or a version whose DSA pool vramctl does not model."""
    if rules in (RULES_0_4_6, RULES_0_5_2):
        raise BadInputError(
            f"--engine-version {version}: SGLang's DeepSeek-V3.2 (DSA) pool before 0.5.9 (0.5.3 forced DP attention "
            "and mem_fraction_static 0.8) is not modelled; plan it with --engine-version 0.5.9 or later"
        )
    major = None
    if compute_capability:
        try:
            major = int(compute_capability.split(".")[0])
        except ValueError:
            major = None
    blackwell = major is not None and major >= 10
    asked = settings.kv_cache_dtype.strip().lower()
    kv = ("fp8_e4m3" if blackwell else "bfloat16") if asked in ("auto", "") else _DSA_KV_DTYPES.get(asked, "")
    if not kv:
        raise BadInputError(
            f"--kv-cache-dtype {settings.kv_cache_dtype}: DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 "
            "kv_cache_dtype (SGLang)"
        )
    fp8 = kv == "fp8_e4m3"
    backend = (options.dsa_decode_backend or "").lower() or (
        "flashmla_kv" if fp8 and (rules == RULES_0_5_9 or not blackwell) else "trtllm" if blackwell else "fa3"
    )
    page = settings.page_size or DSA_PAGE_SIZE
    gpu = f"SM{major}" if major is not None else "an unknown GPU architecture (taken as below SM10)"
    words = (
        f"DeepSeek DSA on {gpu}: kv_cache_dtype {kv}"
        + (" (SGLang's default for auto)" if asked in ("auto", "") else "")
        + f", decode backend {backend}, page size {page}"
        + (
            "; 0.5.9's cell counts the FP8 latent as 576 B while the pool allocates 656 B per token and layer "
            "(the pool outgrows its budget by 80 B per token and layer)"
            if fp8 and rules == RULES_0_5_9
            else ""
        )
    )
    return DsaDefaults(kv, backend, page, words)


def dsa_latent_bytes(model: ModelSpec, kv_cache_dtype: str, decode_backend: str | None, rules: str) -> int:
    """Bytes of one token's MLA latent in one layer as the cell counts it (0.5.18 `calculate_mla_kv_cache_dim` ×
    dtype; 0.5.9 the plain latent × dtype)."""
    assert model.mla is not None
    mla = model.mla
    fp8 = kv_cache_dtype.lower() in ("fp8_e4m3", "fp8")
    if fp8 and rules in (RULES_0_5_17, RULES_0_5_18, RULES_0_5_23) and (decode_backend or "") != "trtllm":
        return mla.kv_lora_rank + mla.kv_lora_rank // 128 * 4 + mla.qk_rope_head_dim * 2
    return (mla.kv_lora_rank + mla.qk_rope_head_dim) * (1 if fp8 else 2)


def layers_per_stage(num_layers: int, pp: int) -> int:
    """The largest PP stage's layer count: the stage whose cell is largest sets the MIN token count."""
    return math.ceil(num_layers / pp)


def cell_size(
    model: ModelSpec,
    settings: ServeSettings,
    options: SglangOptions | None = None,
    *,
    layers: int | None = None,
    rules: str = RULES_0_5_18,
) -> int:
    """SGLang bytes per token per rank (0.5.18 `pool_configurator.py::_compute_cell_size` L235).

    MHA/GQA: max(1, kv_heads // attn_tp) × 2 × head_dim × layers × dtype. MLA: (kv_lora_rank +
    qk_rope_head_dim) × layers × dtype, not divided by TP (every rank stores the full latent). DeepSeek-V3.2 (DSA):
    the latent as `dsa_latent_bytes` counts it under `rules` + the indexer's 132 B, per layer (`settings` carry the
    KV dtype `dsa_defaults` resolved).
    """
    opts = options or SglangOptions()
    if layers is None:
        layers = layers_per_stage(model.num_hidden_layers, settings.pipeline_parallel_size)
    if is_dsa(model):
        assert model.mla is not None
        latent = dsa_latent_bytes(model, settings.kv_cache_dtype, opts.dsa_decode_backend, rules)
        return (latent + model.mla.indexer_bytes_per_token) * layers
    dtype_bytes = _kv_dtype_bytes(model, settings)
    fp4 = is_fp4_kv(settings)
    mx_scales = settings.kv_cache_dtype.strip().lower() == MXFP8_KV_DTYPE
    if model.mla is not None:
        latent = model.mla.kv_lora_rank + model.mla.qk_rope_head_dim
        if fp4:
            return latent * layers // 2 + latent // FP4_SCALE_BLOCK * layers
        return int(latent * layers * dtype_bytes)
    attn_tp = settings.tensor_parallel_size
    if opts.enable_dp_attention and opts.dp_size > 1:
        attn_tp = max(1, settings.tensor_parallel_size // opts.dp_size)
    attn_tp = max(1, attn_tp // max(1, opts.dcp_size))
    heads = max(1, model.num_key_value_heads // attn_tp)
    if fp4:
        return heads * 2 * model.head_dim * layers // 2 + heads * model.head_dim * layers * 2 // FP4_SCALE_BLOCK
    if mx_scales:
        return heads * 2 * model.head_dim * layers + heads * 2 * model.head_dim * layers // MXFP8_SCALE_BLOCK
    return int(heads * 2 * model.head_dim * layers * dtype_bytes)


def is_hybrid_swa(model: ModelSpec, options: SglangOptions) -> bool:
    """SGLang sizes separate full / SWA pools only for the architectures in HYBRID_SWA_ARCHITECTURES."""
    return (
        model.architecture in HYBRID_SWA_ARCHITECTURES
        and not options.disable_hybrid_swa_memory
        and 0 < model.num_sliding_layers < model.num_hidden_layers
    )


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
    ssm_shape: tuple[int, ...]
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
