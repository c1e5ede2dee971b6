"""What vLLM decides at start-up that the flags do not show: the V1 → V0 fall-back, the sampler its profile
run warms up, whether custom all-reduce carries the tensor-parallel reductions, and the CUDA-graph sets LoRA
adds. Each rule is read from vLLM's own source at the versions named (wheels of 0.8.0 – 0.32.0); the version
boundaries are `VllmRules` fields (vramctl/core/engines/vllm/rules.py, with their citations): this module asks
them and compares no versions itself.

- **V0 fall-back** (`_is_v1_supported_oracle`, vllm/engine/arg_utils.py): 0.8.0 – 0.8.2 fall back for
  bitsandbytes and GGUF (`V1_UNSUPPORTED_QUANT = ["bitsandbytes", "gguf"]`), LoRA and pipeline parallelism
  (`_warn_or_fallback("LORA")` / `("PP")`: V0 unless `VLLM_USE_V1=1`); 0.8.5 keeps GGUF only
  (`V1_UNSUPPORTED_QUANT = ["gguf"]`) and falls back for an fp8 KV cache unless FlashAttention can read it
  (FA3, Hopper); every 0.8 – 0.10 release falls back below compute capability 8.0 and for a float32 `--dtype`
  (0.8.x `V1_SUPPORTED_DTYPES`); 0.11 removed V0.
- **Sampler** (vllm/v1/sample/ops/topk_topp_sampler.py, `TopKTopPSampler.__init__`): the profile run's dummy
  sampler pass (`_dummy_sampler_run`, vllm/v1/worker/gpu_model_runner.py: top-k = vocab − 1, top-p = 0.9,
  no penalties) goes through FlashInfer's `top_k_top_p_sampling_from_logits` or through PyTorch's sort-based
  `apply_top_k_top_p`. 0.8.5 uses FlashInfer only with a FlashInfer older than 0.2.3 (it refuses newer ones);
  0.10.x – 0.11.x use it whenever the `flashinfer` package is present (an extra of the wheel,
  `flashinfer-python; extra == "flashinfer"`, shipped in the vllm/vllm-openai image) and
  `VLLM_USE_FLASHINFER_SAMPLER` is not 0; 0.12.0 – 0.20.0 only with `VLLM_USE_FLASHINFER_SAMPLER=1`
  ("Users must opt in explicitly"); from 0.21.0 the variable defaults to 1 (vllm/envs.py) and FlashInfer is
  a dependency, so it runs unless set to 0, on CUDA cards of compute capability ≥ 8.0
  (`FlashInferBackend.supports_compute_capability`, 0.32.0) — but from the same 0.21.0 the dummy run calls the
  sampler a second time with a generator, which takes the PyTorch path ("Also warm forward_native"), so the
  profile peak is PyTorch's again. The V0 sampler uses FlashInfer only with
  `VLLM_USE_FLASHINFER_SAMPLER=1` (vllm/model_executor/layers/sampler.py, 0.8.5). ROCm and other platforms:
  PyTorch.
- **Custom all-reduce** (vllm/distributed/device_communicators/custom_all_reduce.py, `CustomAllreduce.__init__`,
  0.10.1): off with `--disable-custom-all-reduce`, for a world size other than 2, 4, 6 or 8, for more than
  two GPUs that are not fully NVLink-connected ("not supported on more than two PCIe-only GPUs"), and without
  GPU peer-to-peer access (GeForce cards). Where it is off, NCCL carries the reductions, inside the captured
  graphs too.
- **LoRA slots in V0**: 0.6.6 and 0.7.3 create the adapter slots (`create_lora_manager`) after the weights'
  `DeviceMemoryProfiler` in `load_model` (vllm/worker/model_runner.py), so neither the weights nor the profile
  charge them (vllm#14450); 0.8.0 and 0.8.5 create them inside it.
- **LoRA graphs**: `cudagraph_specialize_lora` (vllm/config/compilation.py, from 0.12.0, default True)
  captures every graph twice, with and without active adapters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from vramctl.core.engines.vllm.rules import VllmRules, rules_for
from vramctl.core.settings import LATEST_VLLM_VERSION
from vramctl.core.specs import GpuSpec

SamplerKind = Literal["flashinfer", "pytorch", "flashinfer+native"]
"""`flashinfer+native`: FlashInfer samples, but the profile run also warms the PyTorch path (0.21 →: "Also warm
forward_native", vllm/v1/worker/gpu_model_runner.py `_dummy_sampler_run`), so the peak is PyTorch's."""


def _rules(version: str) -> VllmRules:
    """The rules of `version`; an unreadable one plans as the newest vLLM vramctl knows."""
    try:
        return rules_for(version)
    except ValueError:
        return rules_for(LATEST_VLLM_VERSION)


def _major(compute_capability: str | None) -> int | None:
    if not compute_capability:
        return None
    try:
        return int(compute_capability.split(".", 1)[0])
    except ValueError:
        return None


def v1_fallback_reason(
    version: str,
    *,
    compute_capability: str | None,
    vendor: str = "nvidia",
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    dtype: str | None = None,
    enable_lora: bool = False,
    pipeline_parallel_size: int = 1,
    use_v1_env: bool = False,
) -> str | None:
    """Why vLLM 0.8 – 0.10 runs its V0 engine for these settings (`_is_v1_supported_oracle`), or None (V1)."""
    r = _rules(version)
    if not r.v0_fallback_window:
        return None
    major = _major(compute_capability)
    if vendor == "nvidia" and major is not None and major < 8:
        return f'compute capability {compute_capability} < 8.0 ("Compute Capability < 8.0")'
    quant = (quantization or "").lower()
    if quant == "gguf" and r.v0_fallback_gguf:
        return "GGUF (V1_UNSUPPORTED_QUANT)"
    if quant in ("bitsandbytes", "bnb") and r.v0_fallback_bitsandbytes:
        return "bitsandbytes (V1_UNSUPPORTED_QUANT of 0.8.0 - 0.8.2)"
    if (dtype or "").lower() in ("float32", "float", "fp32") and r.v0_fallback_float32:
        return "--dtype float32 (V1_SUPPORTED_DTYPES: bfloat16, float16)"
    if (
        kv_cache_dtype.startswith("fp8")
        and r.v0_fallback_fp8_kv_without_fa3
        and vendor == "nvidia"
        and major is not None
        and major != 9
    ):
        return "an fp8 KV cache that FlashAttention 2 cannot read (FA3 needs Hopper)"
    if not use_v1_env and r.v0_fallback_lora_pp:
        if enable_lora:
            return 'LoRA (_warn_or_fallback("LORA"): V0 unless VLLM_USE_V1=1)'
        if pipeline_parallel_size > 1:
            return 'pipeline parallelism (_warn_or_fallback("PP"): V0 unless VLLM_USE_V1=1)'
    return None


def sampler_kind(
    version: str,
    *,
    v0_engine: bool,
    gpu: GpuSpec,
    flashinfer_env: bool | None,
) -> tuple[SamplerKind, str]:
    """The top-p / top-k sampler the profile run warms up, and why (module docstring)."""
    rule = _rules(version).sampler
    major = _major(gpu.compute_capability)
    if gpu.vendor != "nvidia":
        return "pytorch", f"{gpu.vendor} card: PyTorch sampler (FlashInfer's is CUDA only)"
    if v0_engine:
        if flashinfer_env:
            return "flashinfer", "V0 sampler with VLLM_USE_FLASHINFER_SAMPLER=1"
        return "pytorch", "V0 sampler: FlashInfer only with VLLM_USE_FLASHINFER_SAMPLER=1"
    if flashinfer_env is False:
        return "pytorch", "VLLM_USE_FLASHINFER_SAMPLER=0"
    if rule == "pytorch":
        return "pytorch", "V1 before 0.10: FlashInfer's sampler only with FlashInfer < 0.2.3 (refused after)"
    if rule == "flashinfer-if-installed":
        if flashinfer_env:
            return "flashinfer", "VLLM_USE_FLASHINFER_SAMPLER=1 with the flashinfer package installed"
        return (
            "pytorch",
            "0.10-0.11 use FlashInfer's sampler only where the flashinfer extra is installed (the vllm/vllm-openai "
            "image has it: set VLLM_USE_FLASHINFER_SAMPLER=1 to plan that)",
        )
    if rule == "flashinfer-opt-in":
        if flashinfer_env:
            return "flashinfer", "VLLM_USE_FLASHINFER_SAMPLER=1 (opt-in in 0.12-0.20)"
        return "pytorch", "0.12-0.20: FlashInfer's sampler is opt-in (VLLM_USE_FLASHINFER_SAMPLER=1)"
    if major is not None and major < 8:
        return "pytorch", f"compute capability {gpu.compute_capability}: FlashInfer's sampler needs ≥ 8.0"
    return (
        "flashinfer+native",
        "0.21 →: FlashInfer's sampler by default, and the profile run warms the PyTorch one too (its peak counts)",
    )


_GEFORCE = re.compile(r"^rtx-[2-5]0\d0")
_NVLINK_ALL = ("sxm", "h200", "b200", "b300", "gb200", "gb300", "gh200", "mi300", "mi325", "mi355", "mi250")


def _fully_connected(gpu: GpuSpec) -> bool:
    """NVLink / xGMI between every pair of an 8-GPU board (HGX / OAM); PCIe cards and NVL pairs are not."""
    name = gpu.name.lower()
    return any(tag in name for tag in _NVLINK_ALL)


def peer_to_peer(gpu: GpuSpec) -> bool:
    """GPU peer access: GeForce drivers refuse it; data-centre and workstation cards have it."""
    return not _GEFORCE.match(gpu.name.lower())


@dataclass(frozen=True)
class AllReduce:
    custom: bool
    reason: str


CUSTOM_ALL_REDUCE_WORLD_SIZES = frozenset({2, 4, 6, 8})
"""`CustomAllreduce._SUPPORTED_WORLD_SIZES` (vllm/distributed/device_communicators/custom_all_reduce.py, 0.10.1)."""


def custom_all_reduce(tp: int, gpu: GpuSpec, *, disabled: bool = False) -> AllReduce:
    """Whether vLLM's custom all-reduce carries the TP reductions (module docstring), and why not."""
    if tp <= 1:
        return AllReduce(False, "one GPU")
    if disabled:
        return AllReduce(False, "--disable-custom-all-reduce: NCCL carries the reductions")
    if tp not in CUSTOM_ALL_REDUCE_WORLD_SIZES:
        return AllReduce(False, f"world size {tp} is not 2, 4, 6 or 8: NCCL carries the reductions")
    if tp > 2 and not _fully_connected(gpu):
        return AllReduce(False, f"{tp} GPUs without NVLink between every pair: NCCL carries the reductions")
    if gpu.vendor == "nvidia" and not peer_to_peer(gpu):
        return AllReduce(False, "no GPU peer-to-peer access (GeForce): NCCL carries the reductions")
    return AllReduce(True, "custom all-reduce")


def sampler_choice_matters(version: str, *, v0_engine: bool) -> bool:
    """V1 0.10.0 – 0.20.x, where which sampler the profile run warms depends on the environment (the plan says
    which it assumed)."""
    return not v0_engine and _rules(version).sampler in ("flashinfer-if-installed", "flashinfer-opt-in")


def graphs_specialize_lora(version: str, *, v0_engine: bool) -> bool:
    """LoRA graphs captured twice (with and without adapters): `cudagraph_specialize_lora`, 0.12.0 →."""
    return not v0_engine and _rules(version).graphs_specialize_lora


def lora_slots_charged(version: str, *, v0_engine: bool) -> bool:
    """Whether vLLM subtracts the LoRA slots from the budget (V1 always: they are part of "Model loading took")."""
    return not v0_engine or _rules(version).v0_lora_slots_charged
