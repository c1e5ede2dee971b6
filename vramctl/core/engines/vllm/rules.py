"""vLLM's rules by version: every version switch vramctl applies, in one object (`VllmRules`, from `rules_for`).

Every switch cites the vLLM source file:line it comes from (https://github.com/vllm-project/vllm; unlabelled lines
are vLLM 0.33.0 at commit 4ba787ec9, `[0.11.0]`-style labels are older wheels, `[0.32.0]` the CPU wheel; lines
marked `(0.34.0)` are the 0.34.0 wheel). This is
the one module of vramctl that compares vLLM versions: the rest of the package (`defaults`, `kv_manager`,
`budget`, `explain`, `messages`, ...) and `vramctl.core.plan` ask a `VllmRules` which way a switch goes. Adding a
vLLM release means editing `rules_for` (and `messages` if a wording changed).

The functions below the dataclass (`is_v0`, `subtraction_kind`, ...) are the historical one-switch API; each
reads the same `VllmRules`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from vramctl.core.errors import BadInputError
from vramctl.core.settings import LATEST_VLLM_VERSION, parse_version

Version = tuple[int, ...]

Subtraction = Literal["v0", "profile-sum", "consumed"]
"""How non-KV memory is computed (`vllm/utils/mem_utils.py` (vLLM v0.33.0), vLLM's release notes (github.com/vllm-project/vllm/releases)):

- `v0` (≤0.6.x / V0 engine): non_kv = weights + torch peak increase + non-torch growth, with the baseline read
  before NCCL init, so NCCL buffers are charged (`[0.6.6.post1] worker/worker.py:143-258`);
- `profile-sum` (V1 up to 0.26): non_kv = non_torch_increase + torch_peak_increase + weights
  (`[0.26.0] vllm/utils/mem_utils.py:309-313`), snapshot after NCCL init;
- `consumed` (0.28 →): non_kv = total_consumed (free-memory drop since the init snapshot) + transient peak
  headroom (`vllm/utils/mem_utils.py:312-321`).
"""

GraphRegime = Literal["v0", "piecewise", "full-and-piecewise"]
CaptureSizesRule = Literal["v0", "v1-0.8", "v1-0.10", "v1-0.12"]
InFlightRule = Literal["batched-tokens", "two-batches", "pp-plus-one"]
MmItemsRule = Literal["ceil", "floor", "budget"]
MmDummySeqLen = Literal["batched-tokens", "item", "max-model-len"]
SamplerRule = Literal["pytorch", "flashinfer-if-installed", "flashinfer-opt-in", "flashinfer-and-native"]
"""Which top-p / top-k sampler V1's profile run warms (`TopKTopPSampler.__init__`,
vllm/v1/sample/ops/topk_topp_sampler.py; `_dummy_sampler_run`, vllm/v1/worker/gpu_model_runner.py):

- `pytorch` (< 0.10): 0.8.x uses FlashInfer's only with a FlashInfer older than 0.2.3, which it refuses after
  (`[0.8.5] topk_topp_sampler.py`, `TopKTopPSampler.__init__`);
- `flashinfer-if-installed` (0.10 – 0.11): FlashInfer's whenever the `flashinfer` extra is installed and
  `VLLM_USE_FLASHINFER_SAMPLER` is not 0 (`[0.10.1] topk_topp_sampler.py`, `[0.11.0]` the same);
- `flashinfer-opt-in` (0.12 – 0.20): only with `VLLM_USE_FLASHINFER_SAMPLER=1` ("Users must opt in explicitly",
  `[0.12.0] topk_topp_sampler.py`);
- `flashinfer-and-native` (0.21 →): the variable defaults to 1 (`[0.21.0] vllm/envs.py`), and `_dummy_sampler_run`
  calls the sampler a second time with a generator, the PyTorch path ("Also warm forward_native",
  `[0.21.0] vllm/v1/worker/gpu_model_runner.py`), so the profile peak is PyTorch's.
"""

VERSION_TEXT = re.compile(r"[vV]?\d+(\.\d+){1,3}([.+-]?(post|rc|dev|a|b)\d*)?(\+[0-9A-Za-z.]+)?")
"""A release as pip spells it (0.11.0, 0.6.6.post1, 0.10.1rc1, 0.8.5+cpu); `0.x` or `1.x.y` is not one."""

V0_RULES_VERSION = "0.7.3"
"""The last release whose default engine was V0: its rules stand for the V0 engine 0.8-0.10 fall back to."""

OLDEST_VLLM_VERSION = "0.6.0"
"""The oldest vLLM whose memory rules vramctl models (V0 0.6.x; `vllm/engine/arg_utils.py` (vLLM v0.33.0))."""

HYBRID_MIN_VLLM: tuple[int, int, int] = (0, 10, 2)
"""The first vLLM whose hybrid (attention + Mamba / linear attention) models vramctl plans (see `hybrid_supported`)."""

QWEN3_5_MIN_VLLM: tuple[int, int, int] = (0, 17, 0)
"""The first vLLM that serves Qwen3.5 (`Qwen3_5ForConditionalGeneration`, `Qwen3_5MoeForConditionalGeneration`,
vllm/model_executor/models/qwen3_5.py, registered in vllm/model_executor/models/registry.py). Not pinned by a
tagged source file: the v0.17.0 release notes announce Qwen3.5 support, and 0.15.0 / 0.16.0 stop with "Model
architectures ['Qwen3_5MoeForConditionalGeneration'] are not supported for now" (reported in
runpod-workers/worker-vllm#279 and verl-project/verl#5381); older versions are refused, not guessed."""

DEEPSEEK_V4_MIN_VLLM: tuple[int, int, int] = (0, 20, 0)
"""The first vLLM that serves DeepSeek-V4 (`DeepseekV4ForCausalLM`): the v0.20.0 release notes, "Initial DeepSeek V4
support landed (#40860)" (github.com/vllm-project/vllm/releases/tag/v0.20.0). vramctl sizes its weights and its
five-kind KV cache from vLLM 0.32.0's source (vllm/models/deepseek_v4/, vramctl.core.dsv4_cache); the releases
between reorganised the package (0.22) and changed the per-block KV allocation (0.24, #44577), which the plan does
not replay: it says so for a version before 0.32."""
DEEPSEEK_V4_SOURCE_VLLM: tuple[int, int, int] = (0, 32, 0)
"""The vLLM whose DeepSeek-V4 source vramctl's layout is read from."""

GEMMA4_MIN_VLLM: tuple[int, int, int] = (0, 19, 0)
"""The first vLLM that serves Gemma 4 (`Gemma4ForCausalLM`, `Gemma4ForConditionalGeneration`): the v0.19.0 release
notes, "Gemma 4 support: Full Google Gemma 4 architecture support including MoE, multimodal, reasoning, and
tool-use capabilities (#38826, #38847)" (github.com/vllm-project/vllm/releases/tag/v0.19.0). vramctl sizes its
weights and KV cache from vLLM 0.32.0's source (model_executor/models/gemma4.py, v1/core/kv_cache_utils.py,
vramctl.core.gemma4_cache); the plan says so for a version before 0.32."""
GEMMA4_UNIFIED_MIN_VLLM: tuple[int, int, int] = (0, 32, 0)
"""`Gemma4UnifiedForConditionalGeneration` (gemma-4-12B, encoder-free; vllm/model_executor/models/gemma4_unified.py)
came later, with vLLM PR #44429 (merged 2026-06; vllm-project/vllm#46967 reports it absent from an earlier image).
The first release that carries it is not pinned here, so vramctl plans it from 0.32.0, whose source it was read from,
and refuses earlier versions rather than guess."""
GEMMA4_SOURCE_VLLM: tuple[int, int, int] = (0, 32, 0)
"""The vLLM whose Gemma-4 source vramctl's layout is read from."""

REMOVED_HYBRID_ARCHITECTURES: dict[str, tuple[int, int, int]] = {
    "BambaForCausalLM": (0, 23, 0),
    "MiniMaxText01ForCausalLM": (0, 23, 0),
    "Plamo2ForCausalLM": (0, 26, 0),
}
"""Hybrid architectures vLLM has dropped → the last release that served them: `_PREVIOUSLY_SUPPORTED_MODELS`
(vllm/model_executor/models/registry.py at v0.32.0); a later version stops with "Model architecture X was supported
in vLLM until vN, and is not supported anymore"."""

QWEN3_5_SSM_DTYPE_ARCHITECTURES = ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration")
"""MODELS_CONFIG_MAP entries of `Qwen3_5ForConditionalGenerationConfig` (vllm/model_executor/models/config.py):
`verify_and_update_config` turns `--mamba-ssm-cache-dtype auto` into the HF text config's `mamba_ssm_dtype`.
Assumed present from QWEN3_5_MIN_VLLM (the first release that has it is not pinned)."""

QWEN3_5_TEXT_SSM_DTYPE_ARCHITECTURES = ("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM")
"""The text-only classes, mapped to `Qwen3_5ForCausalLMConfig` (a subclass that runs the same `mamba_ssm_dtype`
hook, then drops the M-RoPE fields) in vllm/model_executor/models/config.py:880-887,1104-1106@0.32.0; the engine
tier's `qwen3-5-ssm-dtype-from-config` case (docs/engine-check.md) shows the running 0.32.0 applying it. They
arrived with their registration (vllm-project/vllm#50210, merged 2026-07-29); the first release carrying it is
not pinned, so the hook is applied from QWEN3_5_TEXT_SSM_DTYPE_MIN_VLLM, the version read, and older versions
keep `auto`."""

QWEN3_5_TEXT_SSM_DTYPE_MIN_VLLM: tuple[int, int, int] = (0, 32, 0)
"""See QWEN3_5_TEXT_SSM_DTYPE_ARCHITECTURES."""


def resolve_version(version: str | None) -> str:
    """The version string to plan for (None = the latest vLLM vramctl knows)."""
    text = LATEST_VLLM_VERSION if version is None else version.strip()
    try:
        if not VERSION_TEXT.fullmatch(text):
            raise ValueError(text)
        parse_version(text)
    except ValueError:
        raise BadInputError(
            f"--engine-version {version!r}: not a vLLM version (expected e.g. 0.11.0)"
        ) from None
    return text


def _v(version: str | Version) -> Version:
    return parse_version(version) if isinstance(version, str) else version


@dataclass(frozen=True)
class VllmRules:
    """All version-dependent switches for one vLLM version, resolved once by `rules_for`."""

    version: str
    v0: bool
    """The V0 engine: vLLM < 0.8 (V1 became the default in 0.8; vLLM's release notes)."""
    subtraction: Subtraction
    """Which non-KV formula the version uses (see `Subtraction`); 0.27 is taken as the ≤0.26 rule: the switch is
    between the 0.26.0 and 0.28.0 wheels."""
    default_utilization: float
    """0.90 before 0.20.0, 0.92 from 0.20.0 (PR #38284; `vllm/config/cache.py:215`)."""
    estimate_cudagraphs_default: bool
    """VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS: absent ≤0.17, default "0" in 0.19, "1" from 0.20.0
    (`envs.py:329`; PR #30515, PR #38284)."""
    supports_cudagraph_estimate: bool
    """Whether the version can estimate graph memory at all (the env var exists from 0.19.0, `envs.py:329`)."""
    charges_nccl: bool
    """V0 0.6.x read its baseline before NCCL init, so NCCL buffers were charged (`[0.6.6.post1] worker.py:143`
    vs `:148`); from 0.7 the baseline is a MemorySnapshot (PR #11809 / #12126) and V1 snapshots after
    `init_worker_distributed_environment` (`vllm/v1/worker/gpu_worker.py:504`). The 0.8 V0 datapoints with TP 4
    and 8 of the collected real start-up logs (119, 120) log 0.1-0.5 GiB of non-torch memory: NCCL not charged."""
    enforce_eager_disables_compile: bool
    """Eager = no torch.compile and no graphs from 0.12 (`[0.32.0] vllm/config/vllm.py:1691-1693`: mode NONE,
    cudagraph_mode NONE); ≤0.11 it only disabled graphs."""
    v0_fallback_window: bool
    """0.8-0.10 fall back to V0 below compute capability 8.0 (`_is_v1_supported_oracle`, vllm/engine/arg_utils.py
    0.8-0.10: "Compute Capability < 8.0 is not supported by V1"); 0.11 removed V0."""
    v0_fallback_gguf: bool
    """Inside the fall-back window, GGUF runs V0 up to 0.9 (`V1_UNSUPPORTED_QUANT = ["bitsandbytes", "gguf"]` in
    `[0.8.0]`–`[0.8.2]`, `["gguf"]` from `[0.8.5]`, `_is_v1_supported_oracle`, vllm/engine/arg_utils.py; gone in
    `[0.10.0]`)."""
    v0_fallback_bitsandbytes: bool
    """bitsandbytes runs V0 in 0.8.0 – 0.8.2 (`[0.8.2] vllm/engine/arg_utils.py` `V1_UNSUPPORTED_QUANT`)."""
    v0_fallback_float32: bool
    """`--dtype float32` runs V0 in 0.8.x (`V1_SUPPORTED_DTYPES = [torch.bfloat16, torch.float16]`,
    `[0.8.5] vllm/engine/arg_utils.py` `_is_v1_supported_oracle`)."""
    v0_fallback_fp8_kv_without_fa3: bool
    """An fp8 KV cache runs V0 in 0.8.x unless FlashAttention 3 (Hopper) can read it (`[0.8.5]
    vllm/engine/arg_utils.py` `_is_v1_supported_oracle`: `fp8_attention = self.kv_cache_dtype.startswith("fp8")`)."""
    v0_fallback_lora_pp: bool
    """LoRA and pipeline parallelism run V0 in 0.8.0 – 0.8.2 unless `VLLM_USE_V1=1` (`_warn_or_fallback("LORA")` /
    `("PP")`, `[0.8.2] vllm/engine/arg_utils.py`); `[0.8.5]` runs both on V1."""
    sampler: SamplerRule
    """The profile run's V1 sampler by version (`SamplerRule`); vramctl.core.engines.vllm_runtime.sampler_kind."""
    graphs_specialize_lora: bool
    """`cudagraph_specialize_lora` (`[0.12.0] vllm/config/compilation.py`, default True): with LoRA every graph is
    captured twice, with and without active adapters (0.12 →; V1 only)."""
    v0_lora_slots_charged: bool
    """V0 creates the LoRA slots (`create_lora_manager`) inside the weights' `DeviceMemoryProfiler` in `load_model`
    (`[0.8.0]`, `[0.8.5] vllm/worker/model_runner.py`), so they are charged; `[0.6.6]` and `[0.7.3]` create them
    after it, charged nowhere (vllm#14450). V1 always charges them ("Model loading took")."""
    optimization_levels: bool
    """`-O0` … `-O3` are optimization levels from 0.12 (`OptimizationLevel`, `OPTIMIZATION_LEVEL_00` … `_03`,
    `[0.12.0] vllm/config/vllm.py`): their `cudagraph_mode` is NONE, PIECEWISE, FULL_AND_PIECEWISE,
    FULL_AND_PIECEWISE; before, `-O` was the `--compilation-config` alias and `-O3` the compilation level 3
    (`[0.10.1] vllm/engine/arg_utils.py`), which changes no memory term."""
    cudagraph_mode_key: bool
    """`--compilation-config '{"cudagraph_mode": …}'` (`CUDAGraphMode`, `[0.11.2] vllm/config/compilation.py`; the
    default FULL_AND_PIECEWISE from 0.12, `[0.32.0] vllm/config/compilation.py:618`) is read from 0.11; earlier
    releases are planned with their own graph regime and the key is noted."""
    v1_only: bool
    """From 0.10 a log without an engine banner is read as V1 (read-log's `v1` semantics, vramctl.diagnose.startup):
    V0 is deprecated there (only the Turing fallback, `v0_fallback_window`, still runs it); 0.8-0.9 could run V0
    by choice (`VLLM_USE_V1=0`)."""
    checks_free_memory: bool
    """`request_memory` fails when free < ceil(total × u) (`vllm/v1/worker/utils.py:716-772`): V1 from PR #19312
    (Jun 2025, taken as 0.10.0). Earlier versions had no such check."""
    counts_other_processes: bool
    """Other processes' memory comes out of this instance's KV budget instead of failing a check: V1 0.8–0.9
    (available = total × u − (torch peak + used − torch allocated), fixed by PR #18974 / #19312) and V0 up to
    0.6.4 (utilisation was global, PR #9352; per-instance again with PR #10511; datapoint 131 of the collected
    real start-up logs: a second 0.8.3 V1 instance gets no KV at all)."""
    large_gpu_tier: bool
    """The ≥160 GiB (B200/B300) row of the scheduler defaults: absent in 0.11.0 (`[0.11.0]
    arg_utils.py:1605-1651`), present in 0.33.0 (`arg_utils.py:2940-3039`); assumed from 0.12.0."""
    capture_sizes: CaptureSizesRule
    """Which default CUDA-graph capture list applies (`defaults.default_capture_sizes`): V0 < 0.8, 0.8-0.9
    (`[0.8.x] vllm/config.py _set_cudagraph_sizes`), 0.10-0.11, 0.12 → (`vllm/config/vllm.py:2398-2620`)."""
    graph_regime: GraphRegime
    """How graphs are captured, for the graph-pool estimate: V0 (< 0.8), piecewise (V1 < 0.12), full and piecewise
    (0.12 →: `CUDAGraphMode.FULL_AND_PIECEWISE`, the V1 default, `[0.32.0] vllm/config/compilation.py:618`)."""
    hybrid_kv_manager: bool
    """The hybrid KV cache manager (0.10 →): before it (and always in V0) sliding-window layers of a hybrid model
    are sized as full attention (`unify_hybrid_kv_cache_specs`; datapoint 119: "V0 sizes KV as if every layer
    were full attention"; `unify_hybrid_kv_cache_specs`, `[0.32.0] vllm/v1/core/kv_cache_utils.py:1799`)."""
    hybrid_supported: bool
    """Mamba / linear-attention hybrids are planned from 0.10.2 (`HYBRID_MIN_VLLM`): V1's MambaSpec pages, the
    page-size unification (`vllm/model_executor/models/config.py` HybridAttentionMambaModelConfig) and Qwen3-Next
    all arrive by then; older versions (V0's separate Mamba cache) are refused rather than guessed."""
    nemotron_ssm_float32: bool
    """`NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype` (`[0.32.0] vllm/model_executor/models/config.py:712-726`,
    DEFAULT_MAMBA_SSM_CACHE_DTYPE = "float32") turns an
    `auto` SSM cache dtype into float32; absent from the 0.11 model-config map, applied from 0.12 (neither
    boundary pinned by the reference)."""
    hybrid_align_blackwell_256: bool
    """Hybrid block alignment 32 on compute capability 10.x with head_dim 256 (FlashInfer: "head size 256 and
    block size 16 is not supported on blackwell", vllm/model_executor/models/config.py from 0.11)."""
    hybrid_align_user_block: bool
    """From 0.12 `_align_hybrid_block_size` takes max(alignment, cache_config.block_size)
    (`[0.32.0] vllm/platforms/interface.py:939`; 0.33 `interface.py:940-1140`)."""
    in_flight: InFlightRule
    """Tokens a sliding-window request may still need beyond its window (`vllm/config/vllm.py:588-609`;
    `[0.32.0] vllm/config/vllm.py:577-597` max_concurrent_batches):
    max_num_batched_tokens itself ≤0.11; two batches (pp + … on the V1 runner) 0.12-0.32; pp + 1 batches on the
    V2 model runner, the default from 0.33 (`vllm/v1/kv_cache_interface.py`) and the only one from 0.34
    (`vllm/v1/worker/gpu_model_runner.py` removed; `_make_model_runner`, `vllm/v1/worker/gpu_worker.py:579-588`
    (0.34.0))."""
    reserves_null_block: bool
    """The block pool holds one block back as the null block (`[0.32.0] vllm/v1/core/block_pool.py:187`), and the
    one-request check plans against the usable blocks (`[0.32.0] vllm/v1/core/kv_cache_utils.py:1104-1130`);
    ≤0.11 checked the whole pool."""
    tokens_from_concurrency: bool
    """The logged `GPU KV cache size` is int(max_concurrency × max_model_len) from 0.20.1
    (`_report_kv_cache_config`, `[0.20.1] vllm/v1/core/kv_cache_utils.py:1706`: "Sourcing this from the concurrency
    calculation handles hybrid layouts correctly"; `get_kv_cache_capacity`, `[0.32.0] kv_cache_utils.py:2300-2308`);
    before, num_blocks // len(kv_cache_groups) × the smallest group block size (`[0.20.0] kv_cache_utils.py:1694-1697`,
    `[0.12.0] :1269-1272`, `[0.10.2] :1026` in `get_kv_cache_config_uniform_page_size`). max_concurrency itself is
    num_blocks / Σ over groups cdiv(max_memory_usage_bytes, page) on every V1 version (`[0.10.2] :773-784`,
    `[0.20.2] :872-891`, `[0.32.0] :1195-1227`)."""
    has_auto_fit: bool
    """`--max-model-len auto` / -1 fits the length to the pool (PR #29431, 0.12 →;
    `[0.32.0] vllm/v1/core/kv_cache_utils.py:2436-2480`)."""
    has_max_num_active_seqs: bool
    """`--max-num-active-seqs` (0.31.0 →, `[0.32.0] vllm/config/scheduler.py:69`, checked against max_num_seqs at
    `:336-341`)."""
    mamba_state_blocks: Literal["page", "mamba-block", "mode"]
    """What one request takes from each Mamba / linear-attention state group (`MambaSpec.max_memory_usage_bytes`),
    and what `--enable-prefix-caching` does to a hybrid before prefix caching became its default (0.28):
    `page` (0.10.2-0.11): one page (`[0.11.0] vllm/v1/kv_cache_interface.py` MambaSpec: "We allocate 1 block for
    each request now"); prefix caching is switched off for every hybrid (`[0.11.0]
    vllm/model_executor/models/config.py:295-298` "Hybrid or mamba-based model detected: disabling prefix caching").
    `mamba-block` (0.12-0.14): cdiv(max_model_len, mamba_block_size) pages, mamba_block_size = max_model_len without
    prefix caching (one page; `[0.12.0] vllm/model_executor/models/config.py:311-312`) or the attention block
    with it; prefix caching stays on only for classes with mamba prefix caching (`:292-309`, "without support for
    prefix caching: disabling"). `mode` (0.15 →): by `mamba_cache_mode`, `none` 1 + num_speculative_blocks pages,
    `align` 2 + num_speculative_blocks, `all` cdiv(max_model_len, block) (`[0.15.0] / [0.20.2]
    vllm/v1/kv_cache_interface.py` MambaSpec); `--enable-prefix-caching` picks `all` for the classes with mamba
    prefix caching (SupportsMambaPrefixCaching: the Mamba1 / Mamba2 hybrids, `[0.20.2]` bamba, falcon_h1,
    granitemoehybrid, jamba, nemotron_h, zamba2) and `align` for the others (Gated DeltaNet, KDA, short
    convolution) (`[0.15.0] vllm/model_executor/models/config.py:332-336`, `[0.20.2] :351-371`)."""
    speculative_conv_kinds: tuple[str, ...]
    """State kinds whose conv state gains num_speculative_tokens columns (`conv_kernel - 1 + num_spec`,
    `MambaStateShapeCalculator`, `[0.20.2] mamba_utils.py:171-180`, `[0.32.0] :204-213`): Gated DeltaNet from 0.10.2
    (qwen3_next.py passes `num_spec`; Qwen3.5 from its first release), KDA from 0.15 (`[0.15.0] kimi_linear.py`),
    Mamba2 from 0.17 (`MambaMixer2.get_state_shape` passes `self.num_spec`, `[0.17.0] / [0.20.2]
    layers/mamba/mamba_mixer2.py`; not in 0.12.0 / 0.14.0, 0.15 - 0.16 not read). Mamba1 and short convolution never
    (vramctl.core.engines.vllm_speculative)."""
    speculative_mamba_align: bool
    """`--enable-prefix-caching` with speculative decoding gives a class with mamba prefix caching (the Mamba1 /
    Mamba2 hybrids) mamba_cache_mode 'align' instead of 'all' (`MambaModelConfig.verify_and_update_config`: "Mamba
    cache mode is set to 'align' for %s by default when prefix caching and speculative decoding are enabled",
    `[0.20.2] vllm/model_executor/models/config.py:351-361`; in 0.20.0, not in 0.19.0)."""
    speculative_capture_sizes: Literal["unscaled", "scaled-max", "decode-sizes"]
    """How `--speculative-config` changes the default CUDA-graph capture sizes (`VllmConfig._set_cudagraph_sizes`),
    with decode_query_len = 1 + num_speculative_tokens: `unscaled` (to 0.13: `[0.11.0] vllm/config/__init__.py`
    and `[0.12.0] vllm/config/vllm.py:1038-1042` take min(max_num_seqs × 2, 512)); `scaled-max` (0.14 - 0.29): the
    largest size is
    min(max_num_seqs × decode_query_len × 2, 512) (`[0.14.0] vllm/config/vllm.py:1118-1125`, `[0.20.2] :1477-1484`,
    `[0.24.0] :1689-1691`, `[0.28.0] :1936-1941`); `decode-sizes` (0.30 →): the same ceiling (1024 on SM100) and
    the uniform decode sizes k × decode_query_len for k in the request-count grid [1, 2, 4, 8 … 248, 256 …
    max_num_seqs step 16, max_num_seqs] that fit under it are appended (`[0.30.0] vllm/config/vllm.py:2213-2354`,
    `[0.32.0] :2353-2498`, 0.33.0 `_set_cudagraph_sizes`; 0.34.0 resolves the same sizes off SM100,
    `_split_cudagraph_capture_sizes`, vllm/config/vllm.py (0.34.0)). 0.13 and 0.29 not read: taken as their
    neighbours. Only when vLLM computes the default (no `max_cudagraph_capture_size` / capture sizes given)."""
    speculative_profile_drafters: Literal["none", "eagle", "all"]
    """Which drafters run in the profile run's dummy forward at its token count (max_num_batched_tokens), and have
    CUDA graphs captured with the target's piecewise ones: `none` (`[0.8.5] v1/worker/gpu_model_runner.py`
    `_dummy_run` has no drafter); `eagle` (0.11 - 0.19: EAGLE, EAGLE-3 and MTP, `use_eagle()`, `[0.11.0]
    gpu_model_runner.py:3165-3167`, `[0.14.0] :4474-4500`); `all` (0.20 →: every drafter with a model, EAGLE / MTP /
    draft_model, `[0.20.2] gpu_model_runner.py:5555-5592`, `[0.32.0] :5856-5900`; the V2 runner's
    `speculator.propose(dummy_run=True)` in `_dummy_run`, vllm/v1/worker/gpu/model_runner.py:960-985 (0.34.0),
    0.33.0 :964-981, with its own CudaGraphManager, `profile_cudagraph_memory`, vllm/v1/worker/gpu/cudagraph_utils.py
    (0.33.0)). 0.9 - 0.10 and 0.15 - 0.19 not read: taken as their neighbours (vramctl.core.engines.vllm_speculative)."""
    speculative_rejection_warmup: Literal["none", "overlapped", "bonus-sampler"]
    """`_dummy_sampler_run` also warms the rejection sampler on one dummy draft token per request (`draft_token_ids =
    [[0] for _ in range(num_reqs)]`), after the sampler's own warm-up: `overlapped` (0.8.5 - 0.11): on `target_logits`
    of num_reqs rows beside the sampler's logits, with the bonus tokens given (`[0.8.5] gpu_model_runner.py:1555-1580`,
    `[0.11.0] :3228-3250`), which stays under the sampler warm-up's peak; `bonus-sampler` (0.12 - 0.32): on
    (num_tokens + num_reqs) rows of dummy logits, the rejection sampler running the whole sampler for the bonus
    tokens with `max_num_logprobs=-1` (`[0.12.0] gpu_model_runner.py:4180`, `[0.14.0] :4595`, `[0.20.2] :5676-5700`,
    `[0.32.0] :5998-6045`; vllm/v1/sample/rejection_sampler.py:140-175 (v0.32.0)), which adds to it; `none`: V0,
    0.8.0 - 0.8.4 (not read), and the V2 runner, the default from 0.33, whose `_dummy_sampler_run` has no rejection
    sampler (vllm/v1/worker/gpu/model_runner.py:993-1010 (0.33.0), :1039 (0.34.0))."""
    has_dflash: bool
    """`--speculative-config '{"method": "dflash"}'` exists (`DFlashModelTypes`, vllm/config/speculative.py:68 (0.32.0);
    `DFlashProposer`, vllm/v1/spec_decode/dflash.py); taken to arrive in 0.20 from vLLM's public PR / release notes
    (only the 0.32.0 source was read; 0.19 and earlier are refused in one line)."""
    mamba_cache_modes: tuple[str, ...]
    """The `--mamba-cache-mode` choices (`MambaCacheMode`, vllm/config/cache.py): none before 0.15 (`[0.14.0]
    vllm/config/cache.py` has no such field), ("all", "align", "none") 0.15 - 0.31 (`[0.15.0] cache.py:34`, `[0.31.0]
    cache.py:62`; `--mamba-cache-mode`, `[0.15.0] vllm/engine/arg_utils.py:945`), ("align", "none") from 0.32
    (`[0.32.0] cache.py:63`, 0.33.0 / 0.34.0 `cache.py:176`)."""
    mamba_all_speculative_blocks: bool
    """Mode 'all' keeps cdiv(max_model_len, mamba block) state blocks per request (`MambaSpec.max_memory_usage_bytes`,
    `[0.15.0] / [0.20.2] vllm/v1/kv_cache_interface.py:294-296 / 541-543`), + num_speculative_blocks from 0.24
    (`[0.24.0] :649-652`, `[0.31.0] :1084-1088`; 0.21 - 0.23 not read)."""
    hybrid_prefix_caching_default: bool
    """Hybrids get prefix caching by default, in mamba_cache_mode 'align' (two state blocks per request and state
    group): from 0.28 (`[0.32.0] vllm/engine/arg_utils.py` `_set_default_chunked_prefill_and_prefix_caching_args`,
    `vllm/model_executor/models/config.py` MambaModelConfig, `[0.28.0] :602-610`; `ModelConfig.is_prefix_caching_supported`
    returned False for hybrids through 0.27 (`[0.12.0]` - `[0.20.2] vllm/config/model.py`, 0.26 / 0.27 likewise);
    `vramctl.core.mamba_cache`)."""
    mamba_seqs_within_blocks: bool
    """With full CUDA graphs, a model with Mamba layers must have max_num_seqs ≤ its KV-cache blocks ("Each decode
    sequence requires one Mamba cache block"): `CompilationConfig` raises `max_num_seqs (N) exceeds available Mamba
    cache blocks (M)` at graph set-up (`[0.32.0] vllm/config/compilation.py:1503-1525`; added by PR #38270, merged
    2026-03-26). Binding for pure Mamba models, whose blocks are whole request states, and for hybrids at long
    max_model_len (large blocks). Read at 0.32.0; applied from 0.23.0, the oldest release users report it from
    (vLLM issue #49064: 0.23.1, 0.28.0; kaito-project/kaito#2319: 0.25.1); releases between the PR and 0.23 are
    not pinned and are planned without it."""
    mamba2_prefill_checkpoint: bool
    """Mamba2 layers (`MambaMixer2.get_kv_cache_spec`, `[0.32.0] vllm/model_executor/layers/mamba/mamba_mixer2.py:1098-1108`)
    set `num_prefill_checkpoint_blocks=1`, so in mamba_cache_mode 'align' a request holds `2 + 1` blocks of each
    Mamba2 state group (`MambaSpec.max_memory_usage_bytes`, `[0.32.0] vllm/v1/kv_cache_interface.py:1076-1082`);
    Gated DeltaNet and Kimi-Linear's KDA layers keep 2. Read at 0.32.0 and checked there against the CPU engine
    (Falcon-H1); 0.29-0.31 have the MambaSpec field but their mamba_mixer2.py does not set it (`[0.31.0]`), so 0.32
    is the first release; older ones are planned with 2."""
    ipc_cache_loader: bool
    """`--load-format ipc_cache` (weights mapped from a weight-cache daemon) exists from 0.30
    (vllm/model_executor/model_loader/__init__.py; vramctl.core.engines.vllm_external_weights)."""
    preload_cli: bool
    """The daemon is started with `vllm preload` from 0.31 (before: `python -m
    vllm.model_executor.model_loader.weight_cache.daemon`)."""
    external_weights_subtracted: bool
    """`request_memory(..., external_weight_memory)` subtracts the daemon's weights from u × total (0.32 →,
    `[0.32.0] vllm/v1/worker/utils.py:716-772`); 0.30-0.31 leave them outside the check (`[0.30.0] utils.py:534-554`)."""
    external_weights_exported_bytes: bool
    """The daemon reports the mapped weight storages (`exported_weight_bytes`, 0.33 →) instead of its
    `memory_allocated()` (0.32)."""
    ipc_cache_pipeline: bool
    """The weight-cache daemon accepts pipeline parallelism from 0.32."""
    sleep_nccl_suspend: bool
    """`--enable-nccl-comm-suspend`: sleep also frees the NCCL communicators (0.30 →; vramctl.core.engines.vllm_sleep)."""
    release_kv_endpoint: bool
    """`/release_kv_cache_memory` drops only the KV pool (0.31 →)."""
    sleep_runtime_offload: bool
    """Sleep offloads the runtime pool and, with `--sleep-mode-offload-cudagraph`, the graph pool (0.32 →)."""
    offload_shared_region: bool
    """Native KV offload's host buffer is one /dev/shm region per engine (0.28 →); before, private pinned tensors
    per rank (`[0.26.0] spec.py:135-140`; vramctl.core.engines.vllm_offload)."""
    offload_region_unlinked: bool
    """The /dev/shm region's path is unlinked once every worker has mapped it (0.29 →)."""
    kv_cache_memory_suggestion: bool
    """vLLM logs a `--kv-cache-memory=` suggestion after the graph capture (0.10 →; vramctl.core.engines.vllm_suggestion)."""
    suggestion_double_counts_graphs: bool
    """The suggestion counts the CUDA-graph pool twice: inside the peak activation (`gpu_worker.py:748-749`) and
    again as the captured pool (`:1028-1032`), 0.28 → 0.33 at least (the fix, PR #57983, unreleased as of 0.33.0);
    0.20-0.26 count it once."""
    suggestion_log_debug: bool
    """The suggestion is logged at DEBUG in 0.11-0.25, at INFO otherwise."""
    yarn_unscaled_max_len: bool
    """`_get_and_verify_max_len` leaves yarn-family lengths unscaled from 0.30 (`vllm/config/model.py:2468-2492`);
    0.29 derived original_max_position_embeddings × factor (vramctl.core.engines.vllm_yarn)."""
    extensible_kv_cache: bool
    """The extensible KV cache (0.34 →), on by default on CUDA and ROCm unless `--kv-cache-memory-bytes` (or
    `num_gpu_blocks_override`) is given (`vllm/config/vllm.py:3180-3263` (0.34.0), `vllm/config/cache.py:395-406`
    (0.34.0)): the pool is sized after warm-up and graph capture from the memory then free (`measure_kv_cache_bytes`,
    `vllm/v1/worker/extensible_kv_cache.py:592-618` (0.34.0)), no longer from the profile estimate alone, and
    `--gpu-memory-utilization` defaults to 1.0 (`resolved_gpu_memory_utilization`, `vllm/config/cache.py:494-501`
    (0.34.0)); `request_memory` skips the free-memory check (`vllm/v1/worker/utils.py:783-797` (0.34.0)).
    Off (`--no-enable-extensible-kv-cache`), 0.34 sizes the pool as 0.33 did (vramctl.core.engines.vllm.budget)."""
    block_size_default: int
    """`CacheConfig.DEFAULT_BLOCK_SIZE`: 16 through 0.33 (`vllm/config/cache.py:185`), 64 from 0.34
    (`vllm/config/cache.py:185` (0.34.0)); attention backends may raise it (`get_preferred_block_size`,
    `vllm/v1/attention/backend.py:158-166` (0.34.0): the default when the backend supports it)."""
    block_sizes: tuple[int, ...] | None
    """The `--block-size` values the version accepts; None: any positive size. `choices=[8, 16, 32]` to 0.6.3 and
    in 0.6.5 (`vllm/engine/arg_utils.py`), `[8, 16, 32, 64, 128]` in 0.6.4 and 0.6.6-0.8.4, `BlockSize = Literal[1, 8, 16, 32, 64, 128]`
    0.8.5-0.11.0 (`vllm/config.py`, then `vllm/config/cache.py`; argparse's choices come from the Literal), with 256
    from 0.11.1 to 0.17.0, and `block_size: SkipValidation[int]` from 0.18.0 (`vllm/config/cache.py:36`;
    `Field(gt=0)` at 0.33.0). Read from the PyPI wheels of each version."""
    known_range: Literal["known", "newer", "older"]
    """Where the version lies against the versions vramctl models (`OLDEST_VLLM_VERSION` to
    `LATEST_VLLM_VERSION`): outside, the nearest known rules apply and the plan says so."""
    v1_pre_profile_charge: Literal["none", "communicators", "process"]
    """What a V1 worker holds before it profiles that vLLM charges to the budget as non-torch memory.
    0.8.0-0.9.0 (`process`): available = total × u − (torch peak + used − torch allocated), `non_torch_allocations`
    at `[0.8.5] vllm/v1/worker/gpu_worker.py:200-210`: the CUDA context, cuBLAS and the communicators included.
    0.9.1-0.10.2 (`communicators`): `memory_profiling` from the init snapshot, taken before
    `init_worker_distributed_environment` (`[0.9.1] gpu_worker.py:135` vs `:153`; `[0.10.1] gpu_worker.py:174` vs
    `:192`): NCCL, pynccl and custom all-reduce buffers are charged. From 0.11.0 (`none`) the distributed init comes
    first (`[0.11.0] gpu_worker.py:169` vs `:182`) and only the growth in the profile run is charged. V0: `none`
    (its own rules, `charges_nccl`; see `v0_charges_process`)."""
    v0_charges_process: bool
    """V0 releases whose profile charges everything the device holds outside torch, the CUDA context and cuBLAS
    included (as V1 0.8.0-0.9.0's `process`), instead of the growth since the init snapshot:
    0.6.4-0.6.4.post1 (PR #9352): `total_allocated_bytes = mem_get_info()[1] - mem_get_info()[0]`,
    `peak_memory += total_allocated_bytes - torch allocated` in `Worker.determine_num_available_blocks`
    (vllm/worker/worker.py at commit 6ae52299, the 0.6.4 line), replaced in 0.6.5 by `memory_profiling` from the
    init baseline (PR #10511); 0.2.5-0.3.0 (PR #2031, merged 2023-12-13: `peak_memory = total_gpu_memory -
    free_gpu_memory` after the profile run), re-based on the free memory at init by PR #2863 (Feb 2024, taken as
    0.3.1; 0.3.0 not read). The 0.2.5 start-up of the PR's own thread (s01 of tests/fixtures/startup_eval) logs 95
    blocks (0.74 GiB) fewer than the count before the PR, which the 0.6.6 rule reproduces within 3 blocks."""
    mxfp4_marlin_on_hopper: bool
    """An MXFP4 MoE checkpoint runs on the Marlin kernel on Hopper (SM 9.0) as on Ampere and Ada: 0.10.1
    (not the `+gptoss` launch build, nor 0.10.0, which predate the Marlin path: `mxfp4_marlin_below_hopper`).
    `Mxfp4MoEMethod._should_use_marlin` (`[0.10.1] vllm/model_executor/layers/quantization/mxfp4.py:123-135`)
    picks Marlin on every CUDA GPU but SM 10.0 unless `is_torch_equal_or_newer("2.8.0")`, and the 0.10.1 wheel
    pins torch==2.7.1 (its METADATA); `create_weights` then pads the experts for Marlin (`:156-167`). From 0.10.2
    (torch 2.8.0) Hopper takes the Triton path where `triton_kernels` is importable (`[0.10.2] mxfp4.py:88-97`),
    vendored in the wheel from 0.12.0 (`vllm/third_party/triton_kernels`)."""
    mxfp4_marlin_below_hopper: bool
    """An MXFP4 MoE checkpoint runs on the Marlin kernel, with its padded experts, on Ampere / Ada (SM 8.x) and
    SM 12.x: from 0.10.1 (`Mxfp4MoEMethod._should_use_marlin`, `[0.10.1] vllm/model_executor/layers/quantization/
    mxfp4.py:123-135`, `create_weights` padding `:156-167`). Before it (the gpt-oss launch build, vllm-project/vllm
    PR #22259 of 2025-08-05, shipped as the `vllm/vllm-openai:gptoss` image, a 0.10.1 pre-release) every CUDA GPU but
    SM 10.0 ran OpenAI's triton_kernels `matmul_ogs`; below SM 9.0 its default weight and scale layouts are strided
    (no Hopper swizzle), so the experts load unpadded and only the biases grow to float32 (gpt-oss-20b on an RTX 3090:
    12.88 GiB logged, vllm-project/vllm#22331). False: that Triton path (`MXFP4_MARLIN_FROM_VLLM`)."""
    new_wordings: bool
    """The 0.12 → wordings: "Free memory on device cuda:0 …" (`vllm/v1/worker/utils.py:742`), the CPU-backend
    remarks and docs link of the no-cache / one-request errors (`kv_cache_planning.py:56-87`), and sizes in
    vLLM's GiB format; ≤0.11.0 wordings in `[0.11.0] kv_cache_utils.py:716-723`."""

    mm_items_rule: MmItemsRule = "budget"
    """How many dummy items V1's profile run encodes (vramctl.core.engines.vllm.multimodal), per modality of
    `tokens` LM tokens each, from the encoder budget B = max(max_num_batched_tokens, tokens)
    (`compute_mm_encoder_budget`, `vllm/v1/core/encoder_cache_manager.py:316-362`; `[0.8.3]
    encoder_cache_manager.py:103-141` the same):

    - `ceil` (0.8 – 0.9): min(ceil(B / tokens), max_num_seqs × limit) (`[0.8.3] vllm/v1/worker/gpu_model_runner.py:1506-1580`,
      `[0.9.2] gpu_model_runner.py:2221`);
    - `floor` (0.10.0 – 0.10.1): max(1, min(B // tokens, max_num_seqs × limit)) (`[0.10.0] gpu_model_runner.py:2358-2378`);
    - `budget` (0.10.2 →): `MultiModalBudget._get_max_items`: max(1, min(B // tokens, reqs × max(1, min(limit,
      max_model_len // tokens)))), reqs = max_num_seqs, or min(max_num_seqs, max_num_batched_tokens // tokens)
      without chunked prefill (`vllm/multimodal/encoder_budget.py:137-182` (0.32.0), `[0.10.2] vllm/v1/worker/utils.py:85-125`).
    0.10.1 is not pinned (taken as 0.10.0)."""
    mm_dummy_seq_len: MmDummySeqLen = "max-model-len"
    """The sequence length the dummy item the encoder runs on is built for (it sizes only a Qwen-VL video: frames that
    fit it): `max_num_batched_tokens` through 0.9 and in 0.10.2 (`get_decoder_dummy_data(seq_len=self.max_num_tokens)`,
    `[0.9.2] gpu_model_runner.py:2244-2250`, `[0.10.2] gpu_model_runner.py:2600-2604`), the item's max tokens in 0.10.0
    (`[0.10.0] gpu_model_runner.py:2386-2391`), `max_model_len` from 0.11.0 (`[0.11.0] gpu_model_runner.py:2875-2879`;
    `get_dummy_mm_inputs`, `vllm/multimodal/processing/processor.py:1094-1113` (0.32.0)). The log's budget and item
    count come from the max tokens per item at max_model_len either way, so before 0.11 the item encoded can be
    smaller than the one the budget was sized for."""
    mm_default_limit: int = 999
    """Items per prompt of a modality `--limit-mm-per-prompt` does not name: 999 on V1 from 0.8.5 (`[0.8.5]
    vllm/config.py:2805-2807`; `vllm/config/multimodal.py:695-706`), 1 before and on V0 (`[0.8.0] vllm/config.py:2447`)."""
    mm_counts_subtract_images: bool = False
    """Qwen2-VL's longest dummy video fits `max_model_len` minus one image's tokens (`get_num_frames_with_most_features`,
    `[0.10.0] vllm/model_executor/models/qwen2_vl.py:956-957`) before 0.10.2; the whole `max_model_len` from 0.10.2
    (`[0.10.2] qwen2_vl.py:962`, `qwen2_vl.py:1164-1177` (0.32.0))."""
    qwen_max_frames_per_video: int = 14
    """`_MAX_FRAMES_PER_VIDEO` of Qwen2-VL / Qwen2.5-VL: 16 through 0.10.2 (`[0.8.3] qwen2_vl.py:84`, `[0.10.2]
    qwen2_vl.py:85`), 14 from 0.11.0 (`[0.11.0] qwen2_vl.py:82`, `qwen2_vl.py:120` (0.32.0))."""
    mm_tie_prefers_later_name: bool = True
    """Two modalities with as many tokens (Qwen2-VL's one-frame video and its image): 0.32.0 profiles the later name,
    `video` (`max(..., key=lambda x: (x[1], x[0]))`, `vllm/multimodal/encoder_budget.py:184-188`), 0.10.2 – 0.11.0 the
    first listed, `image` (`[0.11.0] vllm/v1/worker/utils.py:75-77`). 0.12 – 0.31 not pinned (taken as 0.32's); it
    changes only the modality the log line names."""
    qwen3_vl_video_max_pixels: bool = True
    """Qwen3-VL's largest dummy video: two frames at the video processor's `longest_edge` / temporal_patch_size
    (`get_max_video_tokens`, `qwen3_vl.py:1038-1068` (0.32.0); `[0.15.0]`, `[0.16.0]` the same). Before 0.15 it fills
    max_model_len with frames (`_MAX_FRAMES_PER_VIDEO = 24576`, `[0.13.0] qwen3_vl.py:132`, `:710-722`), counted × 12.5
    for the timestamps in 0.11 – 0.12 (`[0.11.0] qwen3_vl.py:658-675`): vramctl does not model that video pass and
    says so (an image-only deployment, `--limit-mm-per-prompt '{"video": 0}'`, is modelled)."""
    qwen_factorised_max_image: bool = True
    """The Qwen2-VL family's largest dummy image: `max_pixels // (patch × merge)²` tokens, factorised into a grid
    (`get_image_size_with_most_features`, `qwen2_vl.py:1077-1128` (0.32.0)); through 0.11.0 a square resize of a huge
    image, floor(√max_pixels / (patch × merge))² tokens (`[0.11.0] qwen2_vl.py`, `smart_resize` of 9999999 px). The
    same at the checkpoints' default (16,384 tokens); 0.12 – 0.31 not pinned (taken as 0.32's)."""
    skips_unused_tower: bool = True
    """A tower whose every modality has limit 0 (`--limit-mm-per-prompt`, `--language-model-only`) is not built nor
    loaded: `SupportsMultiModal._mark_tower_model` (`vllm/model_executor/models/interfaces.py:339-380` (0.32.0);
    `[0.15.0]` the first wheel with it). Before, some models did it themselves (`[0.14.0] qwen2_5_vl.py:1186-1196`);
    vramctl counts the tower's weights there."""
    has_skip_mm_profiling: bool = True
    """`--skip-mm-profiling` exists from 0.10.2 (`[0.10.2] vllm/config/__init__.py:415`; `gpu_model_runner.py:6137`
    (0.32.0): the encoder and its cache are not profiled, and their memory is not in the budget)."""
    has_language_model_only: bool = True
    """`--language-model-only` exists from 0.17.0 (`[0.17.0] vllm/engine/arg_utils.py:475`; every modality's limit 0,
    `vllm/config/multimodal.py:699-700`)."""

    @property
    def version_tuple(self) -> Version:
        return parse_version(self.version)


def _block_sizes(v: Version) -> tuple[int, ...] | None:
    """`VllmRules.block_sizes` (None: any positive size)."""
    if v < (0, 6, 4) or v[:3] == (0, 6, 5):
        return (8, 16, 32)
    if v < (0, 8, 5):
        return (8, 16, 32, 64, 128)
    if v < (0, 11, 1):
        return (1, 8, 16, 32, 64, 128)
    return (1, 8, 16, 32, 64, 128, 256) if v < (0, 18, 0) else None


def _mm_dummy_seq_len(v: Version) -> MmDummySeqLen:
    """`VllmRules.mm_dummy_seq_len`."""
    if v < (0, 10, 0) or (0, 10, 2) <= v < (0, 11, 0):
        return "batched-tokens"
    return "item" if v < (0, 11, 0) else "max-model-len"


@lru_cache(maxsize=256)
def _rules_for_tuple(text: str, v: Version) -> VllmRules:
    return VllmRules(
        version=text,
        v0=v < (0, 8, 0),
        subtraction="v0" if v < (0, 8, 0) else "profile-sum" if v < (0, 28, 0) else "consumed",
        default_utilization=0.92 if v >= (0, 20, 0) else 0.90,
        estimate_cudagraphs_default=v >= (0, 20, 0),
        supports_cudagraph_estimate=v >= (0, 19, 0),
        charges_nccl=v < (0, 7, 0),
        enforce_eager_disables_compile=v > (0, 11, 99),
        v0_fallback_window=(0, 8, 0) <= v < (0, 11, 0),
        v0_fallback_gguf=(0, 8, 0) <= v < (0, 10, 0),
        v0_fallback_bitsandbytes=(0, 8, 0) <= v < (0, 8, 3),
        v0_fallback_float32=(0, 8, 0) <= v < (0, 9, 0),
        v0_fallback_fp8_kv_without_fa3=(0, 8, 0) <= v < (0, 9, 0),
        v0_fallback_lora_pp=(0, 8, 0) <= v < (0, 8, 3),
        sampler="pytorch"
        if v < (0, 10, 0)
        else "flashinfer-if-installed"
        if v < (0, 12, 0)
        else "flashinfer-opt-in"
        if v < (0, 21, 0)
        else "flashinfer-and-native",
        graphs_specialize_lora=v >= (0, 12, 0),
        optimization_levels=v >= (0, 12, 0),
        cudagraph_mode_key=v >= (0, 11, 0),
        v0_lora_slots_charged=v >= (0, 8, 0),
        v1_only=v >= (0, 10, 0),
        checks_free_memory=v >= (0, 10, 0),
        counts_other_processes=v < (0, 6, 5) or (0, 8, 0) <= v < (0, 10, 0),
        large_gpu_tier=v >= (0, 12, 0),
        capture_sizes="v0"
        if v < (0, 8, 0)
        else "v1-0.8"
        if v < (0, 10, 0)
        else "v1-0.10"
        if v < (0, 12, 0)
        else "v1-0.12",
        graph_regime="v0" if v < (0, 8, 0) else "piecewise" if v < (0, 12, 0) else "full-and-piecewise",
        hybrid_kv_manager=v >= (0, 10, 0),
        hybrid_supported=v >= HYBRID_MIN_VLLM,
        nemotron_ssm_float32=v >= (0, 12, 0),
        hybrid_align_blackwell_256=v >= (0, 11, 0),
        hybrid_align_user_block=v >= (0, 12, 0),
        in_flight="batched-tokens" if v <= (0, 11, 99) else "pp-plus-one" if v >= (0, 33, 0) else "two-batches",
        reserves_null_block=v > (0, 11, 99),
        tokens_from_concurrency=v >= (0, 20, 1),
        has_auto_fit=v >= (0, 12, 0),
        has_max_num_active_seqs=v >= (0, 31, 0),
        mamba_state_blocks="page" if v < (0, 12, 0) else "mamba-block" if v < (0, 15, 0) else "mode",
        speculative_conv_kinds=("gated_delta_net",)
        + (("kda",) if v >= (0, 15, 0) else ())
        + (("mamba2",) if v >= (0, 17, 0) else ()),
        speculative_mamba_align=v >= (0, 20, 0),
        speculative_capture_sizes="unscaled"
        if v < (0, 14, 0)
        else "scaled-max"
        if v < (0, 30, 0)
        else "decode-sizes",
        speculative_profile_drafters="none" if v < (0, 11, 0) else "eagle" if v < (0, 20, 0) else "all",
        speculative_rejection_warmup="none"
        if v < (0, 8, 5) or v >= (0, 33, 0)
        else "overlapped"
        if v < (0, 12, 0)
        else "bonus-sampler",
        has_dflash=v >= (0, 20, 0),
        mamba_cache_modes=() if v < (0, 15, 0) else ("all", "align", "none") if v < (0, 32, 0) else ("align", "none"),
        mamba_all_speculative_blocks=v >= (0, 24, 0),
        hybrid_prefix_caching_default=v >= (0, 28, 0),
        mamba2_prefill_checkpoint=v >= (0, 32, 0),
        mamba_seqs_within_blocks=v >= (0, 23, 0),
        ipc_cache_loader=v >= (0, 30, 0),
        preload_cli=v >= (0, 31, 0),
        external_weights_subtracted=v >= (0, 32, 0),
        external_weights_exported_bytes=v >= (0, 33, 0),
        ipc_cache_pipeline=v >= (0, 32, 0),
        sleep_nccl_suspend=v >= (0, 30, 0),
        release_kv_endpoint=v >= (0, 31, 0),
        sleep_runtime_offload=v >= (0, 32, 0),
        offload_shared_region=v >= (0, 28, 0),
        offload_region_unlinked=v >= (0, 29, 0),
        kv_cache_memory_suggestion=v >= (0, 10, 0),
        suggestion_double_counts_graphs=v >= (0, 28, 0),
        suggestion_log_debug=(0, 11, 0) <= v < (0, 26, 0),
        yarn_unscaled_max_len=v >= (0, 30, 0),
        extensible_kv_cache=v >= (0, 34, 0),
        block_size_default=64 if v >= (0, 34, 0) else 16,
        block_sizes=_block_sizes(v),
        known_range="newer"
        if v > parse_version(LATEST_VLLM_VERSION)
        else "older"
        if v < parse_version(OLDEST_VLLM_VERSION)
        else "known",
        new_wordings=v > (0, 11, 99),
        mm_items_rule="ceil" if v < (0, 10, 0) else "floor" if v < (0, 10, 2) else "budget",
        mm_dummy_seq_len=_mm_dummy_seq_len(v),
        mm_default_limit=999 if v >= (0, 8, 5) else 1,
        mm_counts_subtract_images=v < (0, 10, 2),
        qwen_max_frames_per_video=16 if v < (0, 11, 0) else 14,
        mm_tie_prefers_later_name=v >= (0, 12, 0),
        qwen3_vl_video_max_pixels=v >= (0, 15, 0),
        qwen_factorised_max_image=v >= (0, 12, 0),
        skips_unused_tower=v >= (0, 15, 0),
        has_skip_mm_profiling=v >= (0, 10, 2),
        has_language_model_only=v >= (0, 17, 0),
        mxfp4_marlin_on_hopper=(0, 10, 1) <= v < (0, 10, 2) and not _gpt_oss_launch_build(text),
        mxfp4_marlin_below_hopper=v >= MXFP4_MARLIN_FROM_VLLM and not _gpt_oss_launch_build(text),
        v1_pre_profile_charge="none"
        if v < (0, 8, 0) or v >= (0, 11, 0)
        else "process"
        if v < (0, 9, 1)
        else "communicators",
        v0_charges_process=(0, 2, 5) <= v < (0, 3, 1) or (0, 6, 4) <= v < (0, 6, 5),
    )


def rules_for(version: str | Version) -> VllmRules:
    """The rules of one vLLM version (a string as pip spells it, or a parsed tuple); cached."""
    if isinstance(version, str):
        return _rules_for_tuple(version, parse_version(version))
    return _rules_for_tuple(".".join(str(p) for p in version), tuple(version))


# --- the one-switch API (each reads `rules_for`) -----------------------------------------------------------------


def default_gpu_memory_utilization(version: str) -> float:
    """`VllmRules.default_utilization`."""
    return rules_for(version).default_utilization


def estimate_cudagraphs_default(version: str) -> bool:
    """`VllmRules.estimate_cudagraphs_default`."""
    return rules_for(version).estimate_cudagraphs_default


def supports_cudagraph_estimate(version: str) -> bool:
    """`VllmRules.supports_cudagraph_estimate`."""
    return rules_for(version).supports_cudagraph_estimate


def is_v0(version: str) -> bool:
    """`VllmRules.v0`."""
    return rules_for(version).v0


def v0_fallback(version: str, compute_capability: str | None, vendor: str = "nvidia") -> bool:
    """vLLM 0.8-0.10 run the V0 engine instead of V1 on a CUDA card below compute capability 8.0 (Turing: T4,
    RTX 20xx, Quadro RTX): `VllmRules.v0_fallback_window`. 0.11 removed V0 (Turing runs V1 there)."""
    if vendor != "nvidia" or not compute_capability:
        return False
    try:
        major = int(compute_capability.split(".", 1)[0])
    except ValueError:
        return False
    return major < 8 and rules_for(version).v0_fallback_window


def subtraction_kind(version: str) -> Subtraction:
    """`VllmRules.subtraction`."""
    return rules_for(version).subtraction


def charges_nccl_to_budget(version: str) -> bool:
    """`VllmRules.charges_nccl`."""
    return rules_for(version).charges_nccl


def checks_free_memory(version: str) -> bool:
    """`VllmRules.checks_free_memory`."""
    return rules_for(version).checks_free_memory


def counts_other_processes(version: str) -> bool:
    """`VllmRules.counts_other_processes`."""
    return rules_for(version).counts_other_processes


def has_large_gpu_tier(version: str) -> bool:
    """`VllmRules.large_gpu_tier`."""
    return rules_for(version).large_gpu_tier


def graph_regime(version: str) -> str:
    """`VllmRules.graph_regime`."""
    return rules_for(version).graph_regime


OPTIMIZATION_LEVEL_GRAPHS = {0: "NONE", 1: "PIECEWISE", 2: "FULL_AND_PIECEWISE", 3: "FULL_AND_PIECEWISE"}
"""`-O0` … `-O3`'s `cudagraph_mode` (`OPTIMIZATION_LEVEL_00` … `_03`, `[0.12.0] vllm/config/vllm.py`)."""


def cudagraph_mode(version: str, mode: str | None, optimization_level: int | None) -> str | None:
    """The CUDA-graph mode a release runs for `--compilation-config`'s `cudagraph_mode` and `-O N` (the explicit key
    wins, as vLLM's user-set flags win over the level's defaults); None: the release's own regime
    (`VllmRules.graph_regime`), also where the release does not read them (V0, `cudagraph_mode_key`,
    `optimization_levels`)."""
    r = rules_for(version)
    if r.v0:
        return None
    if mode is not None and r.cudagraph_mode_key:
        return mode
    if optimization_level is not None and r.optimization_levels:
        return OPTIMIZATION_LEVEL_GRAPHS.get(optimization_level, "FULL_AND_PIECEWISE")
    return None


def graph_regime_for(version: str, mode: str | None) -> GraphRegime:
    """The graph-pool regime of a release run in `mode` (`cudagraph_mode`): PIECEWISE is the piecewise regime, the
    modes with full graphs (FULL_AND_PIECEWISE, FULL, FULL_DECODE_ONLY) the full-and-piecewise one (an upper
    bound for the last two, which capture fewer graphs); None: the release's default."""
    regime = rules_for(version).graph_regime
    if regime == "v0" or mode is None or mode == "NONE":
        return regime
    return "piecewise" if mode == "PIECEWISE" else "full-and-piecewise"


def default_block_size(version: str) -> int:
    """`VllmRules.block_size_default` (`CacheConfig.DEFAULT_BLOCK_SIZE`); backends may raise it."""
    return rules_for(version).block_size_default


EXTENSIBLE_DEFAULT_UTILIZATION = 1.0
"""`--gpu-memory-utilization` when unset with the extensible KV cache on (`resolved_gpu_memory_utilization`,
`vllm/config/cache.py:494-501` (0.34.0)); 0.92 (`DEFAULT_GPU_MEMORY_UTILIZATION`, `:186`) with it off."""


def extensible_kv_cache(version: str, *, requested: bool | None, kv_cache_memory_bytes: int | None, vendor: str) -> bool:
    """Whether the pool is an extensible KV cache (`VllmRules.extensible_kv_cache`): `--enable-extensible-kv-cache`
    (`requested`, None: not given) where the release has it, on CUDA and ROCm, without `--kv-cache-memory-bytes`
    (`_resolve_extensible_kv_cache`, `vllm/config/vllm.py:3180-3263` (0.34.0)). Asking for it where it cannot run is
    vLLM's error ("enable_extensible_kv_cache: it sizes the KV cache from measured memory, which
    kv_cache_memory_bytes overrides.", `:3262-3263`)."""
    if not rules_for(version).extensible_kv_cache:
        if requested:
            raise BadInputError(
                f"--enable-extensible-kv-cache: vLLM {version} has no extensible KV cache (added in 0.34.0); vLLM "
                "would stop with 'unrecognized arguments'"
            )
        return False
    unsupported = None
    if vendor not in ("nvidia", "amd"):
        unsupported = "it is only supported on CUDA and ROCm"
    elif kv_cache_memory_bytes is not None:
        unsupported = "it sizes the KV cache from measured memory, which kv_cache_memory_bytes overrides"
    if requested and unsupported is not None:
        raise BadInputError(f"--enable-extensible-kv-cache: enable_extensible_kv_cache: {unsupported}. (vLLM's error)")
    return requested is not False and unsupported is None


VllmSemantics = VllmRules
"""The former name of `VllmRules`."""


def semantics(version: str | None) -> VllmRules:
    """The rules of `version` (None = the latest vLLM vramctl knows), the version checked as `resolve_version`."""
    return rules_for(resolve_version(version))


def check_hybrid_supported(model_name: str, version: str, architecture: str = "") -> None:
    """Refuse a hybrid model on a version before `HYBRID_MIN_VLLM` (`VllmRules.hybrid_supported`), a Qwen3.5
    one before `QWEN3_5_MIN_VLLM`, and one whose architecture vLLM has dropped after its last release
    (`REMOVED_HYBRID_ARCHITECTURES`)."""
    if architecture.startswith("Qwen3_5") and parse_version(version) < QWEN3_5_MIN_VLLM:
        first = ".".join(map(str, QWEN3_5_MIN_VLLM))
        raise BadInputError(
            f"--engine-version {version}: {model_name} ({architecture}) is a Qwen3.5 model, which vLLM serves "
            f"from {first} (earlier versions stop with: Model architectures ['{architecture}'] are not supported); "
            f"use --engine-version {first} or later"
        )
    last = REMOVED_HYBRID_ARCHITECTURES.get(architecture)
    if last is not None and parse_version(version) > last:
        until = ".".join(map(str, last))
        raise BadInputError(
            f"--engine-version {version}: Model architecture {architecture} was supported in vLLM until v{until}, "
            f"and is not supported anymore ({model_name}); plan it with --engine-version {until} or earlier"
        )
    if not rules_for(version).hybrid_supported:
        raise BadInputError(
            f"--engine-version {version}: {model_name} has Mamba / linear-attention layers; vramctl plans hybrids "
            f"and pure Mamba models for vLLM {'.'.join(map(str, HYBRID_MIN_VLLM))} and later (V1 MambaSpec pages), "
            "not the V0 / early-V1 mamba cache of this version"
        )


def check_deepseek_v4_supported(model_name: str, version: str, compute_capability: str | None, pp: int) -> None:
    """Refuse DeepSeek-V4 on a vLLM before `DEEPSEEK_V4_MIN_VLLM`, on a card whose DeepSeek-V4 backend vramctl does
    not size (FlashMLA sparse runs on compute capability 9.x / 10.x; SM 12.x defaults to FlashInfer's plain 16-bit
    layout, `_select_dsv4_attn_cls`, vllm/models/deepseek_v4/nvidia/model.py:1013-1044, 0.32.0), and with pipeline
    parallelism (the packed groups are not split per stage here)."""
    if parse_version(version) < DEEPSEEK_V4_MIN_VLLM:
        first = ".".join(map(str, DEEPSEEK_V4_MIN_VLLM))
        raise BadInputError(
            f"--engine-version {version}: {model_name} is DeepSeek-V4 (DeepseekV4ForCausalLM), which vLLM serves from "
            f"{first} (earlier versions stop with: Model architectures ['DeepseekV4ForCausalLM'] are not supported); "
            f"use --engine-version {first} or later"
        )
    major = (compute_capability or "").split(".")[0]
    if major not in ("9", "10"):
        raise BadInputError(
            f"{model_name}: DeepSeek-V4 is sized for vLLM's FlashMLA sparse backend (compute capability 9.x / 10.x: "
            f"H100 / H200 / B200 / B300); this card ({compute_capability or 'unknown'}) runs another backend or none "
            "— not modelled"
        )
    if pp > 1:
        raise BadInputError(
            f"--pipeline-parallel-size {pp}: DeepSeek-V4's packed KV groups are not modelled per pipeline stage; "
            "plan it with tensor (and expert) parallelism"
        )


def check_gemma4_supported(model_name: str, architecture: str, version: str, pp: int) -> None:
    """Refuse Gemma-4 on a vLLM before `GEMMA4_MIN_VLLM` (the unified wrapper before `GEMMA4_UNIFIED_MIN_VLLM`),
    and with pipeline parallelism (its unified pages and groups are not split per stage here)."""
    unified = architecture.startswith("Gemma4Unified")
    floor = GEMMA4_UNIFIED_MIN_VLLM if unified else GEMMA4_MIN_VLLM
    if parse_version(version) < floor:
        first = ".".join(map(str, floor))
        why = (
            "the first release with vLLM PR #44429 is not pinned; vramctl plans it from the source it was read from"
            if unified
            else "earlier versions stop with: Model architectures ['Gemma4ForConditionalGeneration'] are not supported"
        )
        raise BadInputError(
            f"--engine-version {version}: {model_name} is {architecture}, which vramctl plans for vLLM {first} and "
            f"later ({why}); use --engine-version {first} or later"
        )
    if pp > 1:
        raise BadInputError(
            f"--pipeline-parallel-size {pp}: Gemma-4's unified KV groups are not modelled per pipeline stage; plan it "
            "with tensor parallelism"
        )


def gemma4_note(version: str) -> str:
    """The plan's note on a Gemma-4 model: where its layout comes from, and what it leaves out."""
    source = ".".join(map(str, GEMMA4_SOURCE_VLLM))
    older = (
        f"; vLLM {version} predates that source: the layout is {source}'s, not replayed"
        if parse_version(version) < GEMMA4_SOURCE_VLLM
        else ""
    )
    return (
        "Gemma-4: per-layer head sizes and KV heads, K = V global layers (vLLM loads K into the V slot too), "
        "KV-shared layers without a cache; sliding and full pages unified to the larger page (the smaller page's "
        f"block size raised) and grouped by vLLM {source}'s hybrid allocator (docs/models-and-gpus.md#gemma-4)"
        + older
    )


def deepseek_v4_note(version: str) -> str:
    """The plan's note on a DeepSeek-V4 model: where its cache layout comes from, and what it leaves out."""
    source = ".".join(map(str, DEEPSEEK_V4_SOURCE_VLLM))
    older = (
        f"; vLLM {version} predates that source (0.22 reorganised the model, 0.24 changed its per-block KV "
        "allocation): the layout is 0.32.0's, not replayed"
        if parse_version(version) < DEEPSEEK_V4_SOURCE_VLLM
        else ""
    )
    return (
        "DeepSeek-V4: KV pool packed from five caches per vLLM " + source + " (sliding window 584 B/token, C4A / "
        "C128A latents 584 B per 4 / 128 tokens, fp8 indexer keys 132 B per 4 tokens, float32 compressor states), "
        "block 256, every cache replicated on each TP rank (docs/hybrid.md#deepseek-v4); not modelled: the MTP "
        "layers (--speculative-config), MXFP4 experts re-laid out at load on a card without native FP4" + older
    )


NEMOTRON_H_SSM_DTYPE_ARCHITECTURES = frozenset(
    {"NemotronHForCausalLM", "NemotronHPuzzleForCausalLM", "NemotronH_Nano_VL_V2"}
)
"""The architectures `MODELS_CONFIG_MAP` gives Nemotron-H's ssm-dtype hook (`[0.32.0]
vllm/model_executor/models/config.py:1096-1098`: NemotronHForCausalLMConfig, NemotronHNanoVLV2Config on the
text_config); other Nemotron-H wrappers (NemotronH_Omni_Reasoning_V3) keep `auto`."""


def default_mamba_ssm_cache_dtype(architecture: str, config_ssm_dtype: str | None, version: str) -> str:
    """`--mamba-ssm-cache-dtype` as the model runs it when the flag is left at `auto`.

    `auto` = the conv-state dtype = the model dtype (MambaStateDtypeCalculator._mamba_state_dtype), except for
    Nemotron-H: `NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype` (vllm/model_executor/models/config.py,
    registered for NemotronHForCausalLM) replaces `auto` with the HF config's `mamba_ssm_cache_dtype`, else
    DEFAULT_MAMBA_SSM_CACHE_DTYPE = "float32" ("Only `float32` is known to have no accuracy issues by default");
    from 0.12 (`VllmRules.nemotron_ssm_float32`). Qwen3.5 VL checkpoints: the text config's `mamba_ssm_dtype`
    (`QWEN3_5_SSM_DTYPE_ARCHITECTURES`), else `auto`; text-only ones the same from 0.32
    (`QWEN3_5_TEXT_SSM_DTYPE_ARCHITECTURES`).
    """
    if architecture in NEMOTRON_H_SSM_DTYPE_ARCHITECTURES and rules_for(version).nemotron_ssm_float32:
        return config_ssm_dtype or "float32"
    v = parse_version(version)
    if (architecture in QWEN3_5_SSM_DTYPE_ARCHITECTURES and v >= QWEN3_5_MIN_VLLM) or (
        architecture in QWEN3_5_TEXT_SSM_DTYPE_ARCHITECTURES and v >= QWEN3_5_TEXT_SSM_DTYPE_MIN_VLLM
    ):
        return config_ssm_dtype or "auto"  # Qwen3_5ForConditionalGenerationConfig.verify_and_update_config
    return "auto"


MODELOPT_MIXED_ALGO_MIN_VLLM: dict[str, Version] = {
    # quant_algo → the first release whose ModelOptMixedPrecisionConfig.get_quant_method builds it
    # (vllm/model_executor/layers/quantization/modelopt.py of each release; earlier ones leave the layer unquantised
    # and its packed tensors do not load)
    "FP8": (0, 17, 0),  # modelopt_mixed itself: 0.17.0 (absent at 0.16.0)
    "NVFP4": (0, 17, 0),
    "W4A16_NVFP4": (0, 22, 0),  # absent at 0.21.0
    "MXFP8": (0, 26, 0),  # absent at 0.24.0
    "FP8_PER_CHANNEL_PER_TOKEN": (0, 30, 0),  # the LINEAR_ALGOS table; absent at 0.28.0
    "FP8_PB_WO": (0, 30, 0),
    "FP8_BLOCK_SCALES": (0, 30, 0),
}
"""Which vLLM releases load each algo of a ModelOpt MIXED_PRECISION checkpoint (vramctl.registry.modelopt_mixed)."""

CHECKPOINT_KV_DTYPE_MIN_VLLM: Version = (0, 14, 0)
"""`--kv-cache-dtype auto` takes a ModelOpt checkpoint's `kv_cache_quant_algo` / `kv_cache_scheme` from this release
(`resolve_kv_cache_dtype_string` in `EngineArgs.create_engine_config`, vllm/engine/arg_utils.py:2256-2259 and
vllm/utils/torch_utils.py:512-530 at 0.32.0; present at 0.14.0, absent at 0.13.0); earlier ones cache in the model
dtype."""


def reads_checkpoint_kv_dtype(version: str) -> bool:
    """Whether `--kv-cache-dtype auto` takes a ModelOpt checkpoint's declared KV dtype (`CHECKPOINT_KV_DTYPE_MIN_VLLM`)."""
    return parse_version(version) >= CHECKPOINT_KV_DTYPE_MIN_VLLM


def check_quantization_supported(model_name: str, quantization: str | None, algos: tuple[str, ...], version: str) -> None:
    """Refuse a ModelOpt MIXED_PRECISION checkpoint (`modelopt_mixed`) on a release that does not load one of its
    per-module algos (`MODELOPT_MIXED_ALGO_MIN_VLLM`)."""
    if quantization != "modelopt_mixed":
        return
    v = parse_version(version)
    for algo in algos or ("FP8",):
        first = MODELOPT_MIXED_ALGO_MIN_VLLM.get(algo)
        if first is not None and v < first:
            since = ".".join(map(str, first))
            raise BadInputError(
                f"--engine-version {version}: {model_name} is a ModelOpt MIXED_PRECISION checkpoint with {algo} "
                f"layers, which vLLM loads from {since} (modelopt_mixed, "
                "vllm/model_executor/layers/quantization/modelopt.py); use --engine-version "
                f"{since} or later"
            )


MXFP4_MARLIN_FROM_VLLM: Version = (0, 10, 1)
"""The first release whose MXFP4 MoE runs Marlin (padded experts) below Hopper (`VllmRules.mxfp4_marlin_below_hopper`)."""

GPT_OSS_LAUNCH_BUILD = "+gptoss"
"""The local version of the gpt-oss launch wheel (`vllm==0.10.1+gptoss`, the `vllm/vllm-openai:gptoss` image): a 0.10.1
pre-release built before the Marlin MXFP4 path, so `--engine-version 0.10.1+gptoss` keeps the Triton path."""


def _gpt_oss_launch_build(text: str) -> bool:
    return text.strip().lower().endswith(GPT_OSS_LAUNCH_BUILD)


KV_CACHE_DTYPE_ADDED: tuple[tuple[Version, tuple[str, ...]], ...] = (
    # (first release, the `--kv-cache-dtype` choices it added), read from each release's sources; "absent at" is the
    # release read before it
    ((0, 6, 0), ("auto", "fp8", "fp8_e5m2", "fp8_e4m3")),  # argparse choices, vllm/engine/arg_utils.py:295 (0.6.3);
    # CacheDType, vllm/config.py:1291 (0.8.5), :1391 (0.9.0)
    ((0, 10, 0), ("fp8_inc",)),  # CacheDType, vllm/config.py:1609 (0.10.0); absent at 0.9.0
    ((0, 11, 0), ("bfloat16",)),  # vllm/config/cache.py:25-26 (0.11.0); absent at 0.10.2
    ((0, 11, 1), ("fp8_ds_mla",)),  # vllm/config/cache.py:24-32 (0.11.1); absent at 0.11.0
    ((0, 18, 0), ("float16",)),  # vllm/config/cache.py:14-23 (0.18.0); absent at 0.17.0
    (
        (0, 20, 0),  # vllm/config/cache.py:18-34 (0.20.0); absent at 0.19.0
        (
            "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc",
            "int8_per_token_head", "fp8_per_token_head", "nvfp4",
        ),
    ),
    ((0, 25, 0), ("int4_per_token_head",)),  # vllm/config/cache.py:19-36 (0.25.0); absent at 0.24.0
    ((0, 28, 0), ("nvfp4_4over6",)),  # vllm/config/cache.py:19-37 (0.28.0); absent at 0.27.0
    ((0, 30, 0), ("nvfp4_ds_mla",)),  # vllm/config/cache.py:39-58 (0.30.0); absent at 0.29.0
    ((0, 32, 0), ("ultraquant_4bit",)),  # vllm/config/cache.py:39-59 (0.32.0); absent at 0.31.0
    ((0, 33, 0), ("octave_k3v4", "octave_k3v3", "octave_k3v3_compact")),  # vllm/config/cache.py:44-67 (0.33.0, 0.34.0)
)
"""The `--kv-cache-dtype` choices of every vLLM release line vramctl models (`CacheDType`, or argparse `choices`
before it): what a release accepts is every entry up to it."""


def kv_cache_dtype_choices(version: str | Version) -> tuple[str, ...]:
    """The `--kv-cache-dtype` values vLLM `version` accepts (`KV_CACHE_DTYPE_ADDED`); a version before 0.6 (planned
    with 0.6's rules, with a warning) gets 0.6's."""
    v = max(_v(version), KV_CACHE_DTYPE_ADDED[0][0])
    return tuple(name for first, names in KV_CACHE_DTYPE_ADDED if v >= first for name in names)


def check_kv_cache_dtype(value: str | None, version: str) -> None:
    """Refuse a `--kv-cache-dtype` the release does not accept, in one line naming its choices (vLLM stops with
    argparse's "invalid choice"). vLLM compares the exact string: `FP8` and `bf16` are not choices."""
    if value is None or value == "":
        return
    choices = kv_cache_dtype_choices(version)
    if value.strip() not in choices:
        later = next((".".join(map(str, first)) for first, names in KV_CACHE_DTYPE_ADDED if value.strip() in names), None)
        what = f"vLLM accepts it from {later}" if later else "unknown KV cache dtype"
        raise BadInputError(f"--kv-cache-dtype {value}: {what}; vLLM {version} accepts {', '.join(choices)}")
