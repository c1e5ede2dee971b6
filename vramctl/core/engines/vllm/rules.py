"""vLLM's memory semantics by version: defaults, the subtraction, the graph estimate, capture sizes.

Every fact cites the vLLM source file:line it comes from (https://github.com/vllm-project/vllm; unlabelled lines are
vLLM 0.33.0 at commit 4ba787ec9, `[0.11.0]`-style labels are older wheels). This is the one place vramctl
keeps vLLM's versioned rules; `vramctl.core.plan` applies them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from vramctl.core.errors import BadInputError
from vramctl.core.settings import LATEST_VLLM_VERSION, parse_version
from vramctl.core.specs import GpuSpec
from vramctl.core.units import GiB

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


VERSION_TEXT = re.compile(r"[vV]?\d+(\.\d+){1,3}([.+-]?(post|rc|dev|a|b)\d*)?(\+[0-9A-Za-z.]+)?")
"""A release as pip spells it (0.11.0, 0.6.6.post1, 0.10.1rc1, 0.8.5+cpu); `0.x` or `1.x.y` is not one."""


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


def default_gpu_memory_utilization(version: str) -> float:
    """0.90 before 0.20.0, 0.92 from 0.20.0 (PR #38284; `vllm/config/cache.py:215`; `vllm/engine/arg_utils.py` (vLLM v0.33.0))."""
    return 0.92 if _v(version) >= (0, 20, 0) else 0.90


def estimate_cudagraphs_default(version: str) -> bool:
    """VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS: absent ≤0.17, default "0" in 0.19, "1" from 0.20.0
    (`envs.py:329`; PR #30515, PR #38284; `vllm/engine/arg_utils.py` (vLLM v0.33.0))."""
    return _v(version) >= (0, 20, 0)


def supports_cudagraph_estimate(version: str) -> bool:
    """Whether the version can estimate graph memory at all (the env var exists from 0.19.0)."""
    return _v(version) >= (0, 19, 0)


def is_v0(version: str) -> bool:
    """The V0 engine: vLLM < 0.8 (V1 became the default in 0.8; vLLM's release notes (github.com/vllm-project/vllm/releases))."""
    return _v(version) < (0, 8, 0)


V0_RULES_VERSION = "0.7.3"
"""The last release whose default engine was V0: its rules stand for the V0 engine 0.8-0.10 fall back to."""


def v0_fallback(version: str, compute_capability: str | None, vendor: str = "nvidia") -> bool:
    """vLLM 0.8-0.10 run the V0 engine instead of V1 on a CUDA card below compute capability 8.0 (Turing: T4,
    RTX 20xx, Quadro RTX): `_is_v1_supported_oracle` in vllm/engine/arg_utils.py (0.8-0.10) falls back with
    "Compute Capability < 8.0 is not supported by V1". 0.11 removed V0 (Turing runs V1 there)."""
    if vendor != "nvidia" or not compute_capability:
        return False
    try:
        major = int(compute_capability.split(".", 1)[0])
    except ValueError:
        return False
    return major < 8 and (0, 8, 0) <= _v(version) < (0, 11, 0)


def subtraction_kind(version: str) -> Subtraction:
    """Which non-KV formula the version uses (`vllm/utils/mem_utils.py` (vLLM v0.33.0), vLLM's release notes (github.com/vllm-project/vllm/releases)). 0.27 is taken as the ≤0.26 rule: the
    switch is between the 0.26.0 and 0.28.0 wheels."""
    v = _v(version)
    if v < (0, 8, 0):
        return "v0"
    if v < (0, 28, 0):
        return "profile-sum"
    return "consumed"


def charges_nccl_to_budget(version: str) -> bool:
    """V0 0.6.x read its baseline before NCCL init, so NCCL buffers were charged (`[0.6.6.post1] worker.py:143`
    vs `:148`); from 0.7 the baseline is a MemorySnapshot (PR #11809 / #12126) and V1 snapshots after
    `init_worker_distributed_environment` (`gpu_worker.py:504`, `vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0)). The 0.8 V0 datapoints with TP 4
    and 8 of the collected real start-up logs (119, 120) log 0.1-0.5 GiB of non-torch memory: NCCL not charged."""
    return _v(version) < (0, 7, 0)


def checks_free_memory(version: str) -> bool:
    """`request_memory` fails when free < ceil(total × u): V1 from PR #19312 (Jun 2025, taken as 0.10.0;
    `vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0), vLLM's release notes (github.com/vllm-project/vllm/releases)). Earlier versions had no such check."""
    return _v(version) >= (0, 10, 0)


def counts_other_processes(version: str) -> bool:
    """Whether other processes' memory comes out of this instance's KV budget instead of failing a check:
    V1 0.8–0.9 (available = total × u − (torch peak + used − torch allocated), fixed by PR #18974 / #19312) and
    V0 up to 0.6.4 (utilisation was global, PR #9352; per-instance again with PR #10511) (`vllm/engine/arg_utils.py` (vLLM v0.33.0), vLLM's release notes (github.com/vllm-project/vllm/releases);
    datapoint 131 of the collected real start-up logs: a second 0.8.3 V1 instance gets no KV at all)."""
    v = _v(version)
    return v < (0, 6, 5) or (0, 8, 0) <= v < (0, 10, 0)


def has_large_gpu_tier(version: str) -> bool:
    """The ≥160 GiB (B200/B300) row of the scheduler defaults: absent in 0.11.0 (`[0.11.0]
    arg_utils.py:1605-1651`), present in 0.33.0 (`arg_utils.py:2940-3039`). The release that added it is
    not pinned in the reference; vramctl assumes it from 0.12.0."""
    return _v(version) >= (0, 12, 0)


def _is_a100(gpu: GpuSpec) -> bool:
    text = f"{gpu.name} {gpu.display_name}".lower()
    return "a100" in text


def _is_gb10(gpu: GpuSpec) -> bool:
    text = f"{gpu.name} {gpu.display_name}".lower()
    return "gb10" in text and "gb100" not in text


def default_scheduler_limits(
    gpu: GpuSpec | None,
    version: str,
    entrypoint: str = "server",
    world_size: int = 1,
    *,
    max_model_len: int | None = None,
    enable_chunked_prefill: bool | None = None,
    enable_lora: bool = False,
    sliding_window: bool = False,
) -> tuple[int, int]:
    """Default (max_num_batched_tokens, max_num_seqs) before the user's flags (`vllm/engine/arg_utils.py` (vLLM v0.33.0)).

    V1 (0.8 →), `vllm/engine/arg_utils.py:2940-3039`:
      ≥160 GiB (from 0.12, see `has_large_gpu_tier`): 16384 / 1024 for both entry points;
      ≥70 GiB, not A100, not GB10: LLM class 16384 / 1024, OpenAI server 8192 / 1024;
      otherwise (or the device unknown): LLM class 8192 / 256, server 2048 / 256.
    V0 (< 0.8): max_num_seqs 256; batched tokens max(max_model_len, 2048) without chunked prefill, 2048 with
      it (`[0.6.6.post1] vllm/config.py:1427-1442`); V0 turned chunked prefill on by itself for contexts
      above 32K — `use_long_context = max_model_len > 32768` (vllm/engine/arg_utils.py, 0.6-0.10
      `_set_default_args_v0`), so 32768 itself does not — except with LoRA, a sliding window or speculative
      decoding; the server default was then 512 (datapoints 117, 128 of the collected real start-up logs).
    `world_size` matters only for the CPU backend (not planned here); it is accepted for the signature.
    """
    del world_size
    if entrypoint not in ("server", "llm"):
        raise BadInputError(f"entrypoint {entrypoint!r}: expected 'server' or 'llm'")
    if is_v0(version):
        seqs = 256
        long_context = (
            max_model_len is not None and max_model_len > 32768 and not enable_lora and not sliding_window
        )
        chunked = enable_chunked_prefill if enable_chunked_prefill is not None else long_context
        if chunked:
            tokens = 512 if long_context and enable_chunked_prefill is None else 2048
        else:
            tokens = max(max_model_len or 2048, 2048)
        return tokens, seqs
    server = entrypoint == "server"
    total = gpu.cuda_total_bytes if gpu is not None else 0
    if gpu is not None and total >= 160 * GiB and has_large_gpu_tier(version):
        return 16384, 1024
    if gpu is not None and total >= 70 * GiB and not _is_a100(gpu) and not _is_gb10(gpu):
        return (8192 if server else 16384), 1024
    return (2048 if server else 8192), 256


def apply_scheduler_caps(
    max_num_batched_tokens: int,
    max_num_seqs: int,
    max_model_len: int,
    *,
    user_batched_tokens: bool,
    chunked_prefill: bool = True,
) -> tuple[int, int]:
    """vLLM's adjustments after the table (`vllm/engine/arg_utils.py` (vLLM v0.33.0)): without chunked prefill the batch must hold a whole
    prompt (max(max_model_len, default)); batched tokens are capped at max_num_seqs × max_model_len; then
    max_num_seqs = min(max_num_seqs, max_num_batched_tokens)."""
    tokens = max_num_batched_tokens
    if not chunked_prefill and not user_batched_tokens:
        tokens = max(tokens, max_model_len)
    if not user_batched_tokens:
        tokens = min(tokens, max_num_seqs * max_model_len)
    seqs = min(max_num_seqs, tokens)
    return tokens, seqs


def _is_blackwell_datacenter(gpu: GpuSpec | None) -> bool:
    if gpu is None or not gpu.compute_capability:
        return False
    return gpu.compute_capability.split(".")[0] == "10"


def default_max_capture_size(max_num_seqs: int, max_num_batched_tokens: int, gpu: GpuSpec | None) -> int:
    """`max_cudagraph_capture_size` = min(max_num_seqs × 2, 512) (1024 on SM100), capped at
    max_num_batched_tokens (`vllm/config/vllm.py:2398-2620`, 0.33.0; uniform_decode_query_len = 1)."""
    limit = 1024 if _is_blackwell_datacenter(gpu) else 512
    return max(1, min(max_num_seqs * 2, limit, max_num_batched_tokens))


def default_capture_sizes(
    max_num_seqs: int,
    max_num_batched_tokens: int,
    gpu: GpuSpec | None,
    version: str,
    *,
    max_capture_size: int | None = None,
) -> tuple[int, ...]:
    """The batch sizes vLLM captures CUDA graphs for, ascending (`vllm/engine/arg_utils.py` (vLLM v0.33.0), "CUDA-graph capture sizes").

    0.12 → 0.33: [1, 2, 4] + range(8, min(max + 1, 256), 8) + range(256, max + 1, 16), plus
      max_num_batched_tokens when ≤ max and max_num_seqs (the uniform-decode size);
    0.10 – 0.11: [1, 2, 4] + multiples of 8 up to min(max_num_seqs × 2, 512);
    0.8 – 0.9 (V1): [1, 2, 4] + range(8, 513, 8) whatever max_num_seqs, filtered to ≤ max_num_batched_tokens
      (`[0.8.x] vllm/config.py _set_cudagraph_sizes`; datapoint 131 captures 0.41 GiB with max_num_seqs 1);
    V0 (< 0.8): [1, 2, 4] + multiples of 8 up to the first one ≥ max_num_seqs (capped at 512).
    The 0.10 and 0.12 boundaries are vramctl's reading of the history; the reference pins 0.11.0 and 0.33.0.
    """
    v = _v(version)
    if v < (0, 8, 0):
        top = (
            1
            if max_num_seqs <= 1
            else 2
            if max_num_seqs <= 2
            else 4
            if max_num_seqs <= 4
            else -(-max_num_seqs // 8) * 8
        )
        top = min(512, top)
        return tuple(s for s in (1, 2, 4, *range(8, 513, 8)) if s <= top)
    if v < (0, 10, 0):
        top = min(512, max_num_batched_tokens)
        return tuple(s for s in (1, 2, 4, *range(8, 513, 8)) if s <= top)
    if v < (0, 12, 0):
        top = max_capture_size or min(max_num_seqs * 2, 512)
        return tuple(sorted({s for s in (1, 2, 4, *range(8, top + 1, 8)) if s <= top}))
    top = max_capture_size or default_max_capture_size(max_num_seqs, max_num_batched_tokens, gpu)
    top = min(top, max_num_batched_tokens)
    sizes: set[int] = {s for s in (1, 2, 4) if s <= top}
    sizes.update(range(8, min(top + 1, 256), 8))
    sizes.update(range(256, top + 1, 16))
    if max_num_batched_tokens <= top:
        sizes.add(max_num_batched_tokens)
    if max_num_seqs <= top:
        sizes.add(max_num_seqs)
    return tuple(sorted(sizes))


def graph_regime(version: str) -> str:
    """How CUDA graphs are captured, for the graph-pool estimate: V0 (< 0.8), piecewise (V1 < 0.12), full and
    piecewise (0.12 →, `CUDAGraphMode.FULL_AND_PIECEWISE` default; `vllm/config/compilation.py` (vLLM v0.33.0))."""
    v = _v(version)
    if v < (0, 8, 0):
        return "v0"
    if v < (0, 12, 0):
        return "piecewise"
    return "full-and-piecewise"


def default_block_size(version: str) -> int:
    """`CacheConfig.DEFAULT_BLOCK_SIZE = 16` (`vllm/config/cache.py:185`); backends may raise it."""
    del version
    return 16


@dataclass(frozen=True)
class VllmSemantics:
    """All version-dependent switches for one vLLM version, resolved once."""

    version: str
    subtraction: Subtraction
    default_utilization: float
    estimate_cudagraphs_default: bool
    supports_cudagraph_estimate: bool
    charges_nccl: bool
    v0: bool
    enforce_eager_disables_compile: bool
    """0.33: eager = no torch.compile and no graphs; ≤0.11 it only disabled graphs (`vllm/engine/arg_utils.py` (vLLM v0.33.0))."""

    @property
    def version_tuple(self) -> Version:
        return parse_version(self.version)


def semantics(version: str | None) -> VllmSemantics:
    text = resolve_version(version)
    return VllmSemantics(
        version=text,
        subtraction=subtraction_kind(text),
        default_utilization=default_gpu_memory_utilization(text),
        estimate_cudagraphs_default=estimate_cudagraphs_default(text),
        supports_cudagraph_estimate=supports_cudagraph_estimate(text),
        charges_nccl=charges_nccl_to_budget(text),
        v0=is_v0(text),
        enforce_eager_disables_compile=parse_version(text) > (0, 11, 99),
    )


# --- hybrid attention + Mamba / linear-attention models (docs/hybrid.md) --------------------------------------


def check_hybrid_supported(model_name: str, version: str) -> None:
    """Hybrids are planned from vLLM 0.10.2 (`vramctl.core.kv.HYBRID_MIN_VLLM`): V1's MambaSpec pages, the
    hybrid page-size unification (`vllm/model_executor/models/config.py` HybridAttentionMambaModelConfig) and
    Qwen3-Next all arrive by then. Older versions (V0's separate Mamba cache, sized outside the KV blocks) are
    refused rather than guessed."""
    from vramctl.core.kv import HYBRID_MIN_VLLM

    if _v(version) < HYBRID_MIN_VLLM:
        raise BadInputError(
            f"--engine-version {version}: {model_name} is a Mamba / linear-attention hybrid; vramctl plans hybrids "
            f"for vLLM {'.'.join(map(str, HYBRID_MIN_VLLM))} and later (V1 MambaSpec pages), not the V0 / early-V1 "
            "mamba cache of this version"
        )


def default_mamba_ssm_cache_dtype(architecture: str, config_ssm_dtype: str | None, version: str) -> str:
    """`--mamba-ssm-cache-dtype` as the model runs it when the flag is left at `auto`.

    `auto` = the conv-state dtype = the model dtype (MambaStateDtypeCalculator._mamba_state_dtype), except for
    Nemotron-H: `NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype` (vllm/model_executor/models/config.py,
    registered for NemotronHForCausalLM) replaces `auto` with the HF config's `mamba_ssm_cache_dtype`, else
    DEFAULT_MAMBA_SSM_CACHE_DTYPE = "float32" ("Only `float32` is known to have no accuracy issues by default").
    The hook is absent from the 0.11 model-config map and an earlier revision defaulted to float16; vramctl applies
    the float32 rule from 0.12 (the reference pins neither boundary).
    """
    if architecture.startswith("NemotronH") and _v(version) >= (0, 12, 0):
        return config_ssm_dtype or "float32"
    return "auto"
