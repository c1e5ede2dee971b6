"""SGLang's versioned rule sets and the constants of its memory heuristic, each cited to the SGLang source
file and lines at the version it was read from (`python/sglang/srt/server_args.py` unless named)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from vramctl.core.errors import BadInputError
from vramctl.core.settings import LATEST_SGLANG_VERSION, parse_version
from vramctl.core.units import MiB

SGLANG_REF = "`python/sglang/srt/server_args.py` (SGLang v0.5.23)"


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


SGLANG_KV_DTYPE_FROM: Mapping[str, tuple[int, int, int]] = {
    "mxfp8": (0, 5, 18),  # `_compute_cell_size` adds its 1/32 scale term in 0.5.18 (pool_configurator.py L235)
    "nvfp4": (0, 5, 20),  # `--kv-cache-dtype` choices listed by `launch_server --help` of 0.5.20
    "fp4_mx_block16": (0, 5, 20),  # idem; the recipe fp4_e2m1 selected before (kv_cache_dtype.py)
}
"""The first SGLang release vramctl has read that accepts each newer `--kv-cache-dtype` value (server_args.py
`kv_cache_dtype` choices); an older `--engine-version` is refused in one line."""


# --- constants -----------------------------------------------------------------------------------------
DEFAULT_MAX_PREFILL_TOKENS = 16384
"""`max_prefill_tokens` default (0.5.18 server_args.py L811)."""
METADATA_RESERVE_MIB = 512
"""'Constant meta data (e.g., from attention backend)' (0.5.18 L4948–L4983)."""
ACTIVATION_MIB_PER_TOKEN = 1.5
"""'The coefficient 1.5 is a heuristic value' (0.5.18 L4839–L4862, quoted in the worked example)."""
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
"""`--swa-full-tokens-ratio` default (SGLang server_args.py `swa_full_tokens_ratio: float = 0.8`, read
from the public SGLang source)."""
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


OLDEST_SGLANG_VERSION = "0.4.0"
"""The oldest SGLang whose memory rules vramctl models (`python/sglang/srt/server_args.py` (SGLang v0.5.23))."""


# --- HiCache (the host tier) by version ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HiCacheRules:
    """SGLang's HiCache host-pool switches for one version (`vramctl.core.host_tier.plan_hicache` asks them;
    sources: 0.5.9 `python/sglang/srt/mem_cache/memory_pool_host.py` L137–L190, 0.5.18
    `python/sglang/srt/mem_cache/pool_host/base.py` L119–L170, 0.5.23 the same file L221–L280)."""

    version: str
    buffer_only_ratio: bool
    """`--hicache-ratio` left unset resolves to 1.2 in `--hicache-host-memory-mode buffer_only` (2.0 in `cache`
    mode): 0.5.23 (`server_args.py` `_handle_hicache_ratio_default`; 0.5.18 L7366 resolves it to 2.0 only)."""
    auto_size: bool
    """With neither ratio nor size given, ratio = min(default, fraction × host budget × 0.95 / device KV bytes):
    0.5.23 (`python/sglang/srt/mem_cache/hicache_auto_size.py`, `--hicache-host-memory-fraction` 0.8)."""
    pool_log_has_tokens: bool
    """`Allocating kv hierarchical KV host pool: N tokens, X GB host memory.` from 0.5.18 (`pool_host/base.py`
    L156 / L168 at 0.5.18, L274 at 0.5.23); before, `Allocating X GB host memory for hierarchical KV cache.`
    (0.5.9 `memory_pool_host.py` L187)."""
    small_host_pool_warns: bool
    """A host pool smaller than the device pool only warns ("L2 cache effectiveness is reduced") from 0.5.18
    (`pool_host/base.py`); 0.5.9 asserts "The host memory should be larger than the device memory with the
    current protocol" (`memory_pool_host.py` L137–L190)."""
    available_per_rank: bool
    """The "Not enough host memory" check divides the available RAM (cgroup-bounded) by the ranks on the host:
    0.5.23 (`pool_host/base.py` L221–L280); before, each rank compares with the whole host's free RAM."""


HICACHE_0_5_18 = (0, 5, 18)
HICACHE_0_5_23 = (0, 5, 23)


@lru_cache(maxsize=64)
def hicache_rules(version: str | None = None) -> HiCacheRules:
    """The HiCache switches of `version` (None: the newest SGLang vramctl knows)."""
    text = version or LATEST_SGLANG_VERSION
    v = parse_version(text)
    return HiCacheRules(
        version=text,
        buffer_only_ratio=v >= HICACHE_0_5_23,
        auto_size=v >= HICACHE_0_5_23,
        pool_log_has_tokens=v >= HICACHE_0_5_18,
        small_host_pool_warns=v >= HICACHE_0_5_18,
        available_per_rank=v >= HICACHE_0_5_23,
    )
