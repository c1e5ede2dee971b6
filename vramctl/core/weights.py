"""Weight bytes on one rank of each pipeline stage, as vLLM and SGLang shard a checkpoint.

Both engines build the same modules (SGLang copied vLLM's `VocabParallelEmbedding`, `ColumnParallelLinear`,
`RowParallelLinear`, `ReplicatedLinear`), so one function serves both planners. The per-tensor split lives in
`vramctl.core.params.rank_weight_bytes`: q / o / MLP / experts split by TP, k / v by KV heads (replicated
when TP exceeds them), norms, routers and MLA's q_a / kv_a replicated on every rank, the embedding and the
lm_head vocab-parallel with rows padded to a multiple of 64. Dividing the checkpoint by TP misses the
replicated pieces: DeepSeek-R1 at TP 16 holds 40.18 GiB per rank, not 39.18 (datapoint 125 logs 40.32).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from vramctl.core.kv import pp_partition
from vramctl.core.params import is_moe_layer, layer_linears, rank_weight_bytes, serving_dtype_bytes
from vramctl.core.specs import ModelSpec, dtype_bytes


def stage_rank_weight_bytes(
    model: ModelSpec,
    *,
    tp: int,
    pp: int = 1,
    dtype: str | None = None,
    ep: int = 1,
    load_change: LoadTimeChange | None = None,
) -> tuple[int, ...]:
    """Weight bytes on one TP rank of each of the `pp` pipeline stages.

    Decoder layers split as `get_pp_indices` splits them (`pp_partition`); the embedding (and a vision
    tower) sit on the first stage, the final norm and the lm_head on the last — a tied lm_head is
    materialised on the last stage too when pp > 1. `dtype`: a `--dtype` other than the one an
    unquantised checkpoint is served in (`serving_dtype_bytes`) rescales it; quantised checkpoints keep
    their packed sizes. `ep` > 1: routed experts spread whole over ep ranks (`rank_weight_bytes`).
    `load_change`: bytes the engine adds to each MoE layer while preparing the weights (`mxfp4_load_change`).
    """
    rank = rank_weight_bytes(model, tp, pad_vocab=True, ep=ep)
    parts = pp_partition(model.num_hidden_layers, pp)
    ratio = 1.0
    if dtype not in (None, "", "auto") and model.quantization is None:
        try:
            ratio = dtype_bytes(dtype) / serving_dtype_bytes(model)
        except KeyError:
            ratio = 1.0
    out: list[int] = []
    start = 0
    for stage, layers in enumerate(parts):
        stage_bytes = sum(rank.layers[start : start + layers])
        if load_change is not None:
            moe_layers = sum(1 for layer in range(start, start + layers) if is_moe_layer(model, layer))
            stage_bytes += moe_layers * load_change.per_moe_layer_bytes + layers * load_change.per_layer_bytes
        start += layers
        if stage == 0:
            stage_bytes += rank.embedding + rank.vision
        if stage == pp - 1:
            stage_bytes += rank.final_norm + (rank.lm_head if rank.lm_head or pp == 1 else rank.embedding)
        out.append(round(stage_bytes * ratio))
    return tuple(out)


def derived_weight_band(model: ModelSpec) -> float:
    """Half-width of the weights band as a fraction of the weights: 0 for a checkpoint read from its own config
    or headers, > 0 for one derived from its name (`ModelSpec.derived`, vramctl.registry.derived)."""
    if model.derived is None or not model.weight_bytes:
        return 0.0
    return model.derived.weight_band_bytes / model.weight_bytes


MXFP4_BLOCK = 32
"""One uint8 (E8M0) scale per 32 FP4 values."""


@dataclass(frozen=True)
class LoadTimeChange:
    """Bytes a checkpoint gains on one rank while vLLM prepares it for the GPU's kernels."""

    per_moe_layer_bytes: int
    backend: str
    note: str
    per_layer_bytes: int = 0
    """Bytes added to every decoder layer (block-FP8 Marlin's expanded scales); per_moe_layer_bytes then holds what a
    MoE layer adds on top of it."""


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def mxfp4_backend(
    compute_capability: str | None,
    *,
    vendor: str = "nvidia",
    lora: bool = False,
    marlin_on_hopper: bool = False,
    marlin_below_hopper: bool = True,
) -> str | None:
    """The MoE kernel vLLM picks for an MXFP4 checkpoint (`get_mxfp4_backend`,
    vllm/model_executor/layers/quantization/mxfp4.py, 0.11-0.12) with its default environment:

    - SM 8.x (Ampere, Ada) and SM 12.x: `marlin` (triton_kernels are only enabled for 9.0 <= SM < 11.0);
    - SM 9.0 (Hopper): `triton` (OpenAI's triton_kernels; FlashInfer's SM90 path needs
      VLLM_USE_FLASHINFER_MOE_MXFP4_BF16=1);
    - SM 10.x (Blackwell) with FlashInfer, as vLLM's wheels ship it: `flashinfer` (the SM100 BF16 path); with
      LoRA, `triton` (get_mxfp4_backend_with_lora);
    - AMD: `rocm` (no load-time change modelled). None when the capability is unknown.

    `marlin_on_hopper`: the version runs Marlin on SM 9.0 too (vLLM 0.10.1, torch 2.7.1:
    `VllmRules.mxfp4_marlin_on_hopper`). `marlin_below_hopper` False (before 0.10.1: the gpt-oss launch build): SM 8.x
    and 12.x run triton_kernels with strided layouts, `triton_strided` (`VllmRules.mxfp4_marlin_below_hopper`).
    """
    if vendor != "nvidia":
        return "rocm"
    if not compute_capability:
        return None
    try:
        major = int(compute_capability.split(".", 1)[0])
    except ValueError:
        return None
    if major == 9:
        return "marlin" if marlin_on_hopper else "triton"
    if major == 10:
        return "triton" if lora else "flashinfer"
    return "marlin" if marlin_below_hopper else "triton_strided"


def mxfp4_load_change(
    model: ModelSpec,
    *,
    tp: int,
    ep: int,
    compute_capability: str | None,
    vendor: str = "nvidia",
    lora: bool = False,
    marlin_on_hopper: bool = False,
    marlin_below_hopper: bool = True,
) -> LoadTimeChange | None:
    """What vLLM's `Mxfp4MoEMethod` adds to each MoE layer of an MXFP4 checkpoint on one rank
    (vllm/model_executor/layers/quantization/mxfp4.py `create_weights` / `process_weights_after_loading`,
    0.11-0.12; mxfp4_utils.py `_swizzle_mxfp4`):

    - `marlin`: the expert tensors are created padded, the intermediate size per partition to a multiple of 128
      and the hidden size to a multiple of 256 (the Marlin MoE kernel needs n % 256 == 0 and k % 128 == 0);
    - `triton`: the biases become float32 and the scales are swizzled into a new tensor (HopperMXScaleLayout,
      whose rows come in multiples of 2 × num_warps(8) × 2 × 8 = 256) while the loaded `w*_weight_scale`
      parameters stay allocated: a second, padded copy of every expert scale;
    - `flashinfer` (SM100): both sizes padded to a multiple of 256 and the biases float32.

    gpt-oss-120b at TP 1 on an H100 (Triton): +3.54 GiB, 64.30 GiB where vLLM logs 64.38; at TP 4 on an A100
    (Marlin): +1.95 GiB per rank. None for another method, a dense model or an unknown GPU.
    """
    if (model.quantization or "").lower() != "mxfp4" or model.moe is None:
        return None
    backend = mxfp4_backend(
        compute_capability,
        vendor=vendor,
        lora=lora,
        marlin_on_hopper=marlin_on_hopper,
        marlin_below_hopper=marlin_below_hopper,
    )
    if backend is None or backend == "rocm":
        return None
    moe = model.moe
    experts = _round_up(moe.num_experts, ep) // ep if ep > 1 else moe.num_experts
    inter = moe.moe_intermediate_size if ep > 1 else _round_up(moe.moe_intermediate_size, tp) // tp
    hidden = model.hidden_size
    bias = 2 if moe.expert_bias else 0

    def layer_bytes(i: int, h: int, bias_bytes: int) -> int:
        weights = experts * (2 * i * h // 2 + h * i // 2)
        scales = experts * (2 * i * -(-h // MXFP4_BLOCK) + h * -(-i // MXFP4_BLOCK))
        biases = experts * (2 * i + h) * bias_bytes
        return weights + scales + biases

    loaded = layer_bytes(inter, hidden, bias)  # what the checkpoint's shapes give (rank_weight_bytes)
    if backend == "marlin":
        extra = layer_bytes(_round_up(inter, 128), _round_up(hidden, 256), bias) - loaded
        what = "Marlin pads the expert tensors (intermediate per rank to 128, hidden to 256)"
    elif backend == "triton_strided":
        extra = layer_bytes(_round_up(inter, 64), hidden, 4 if bias else 0) - loaded
        what = (
            "triton_kernels with strided layouts below SM 9.0 (no Hopper swizzle, no padded copy of the scales): "
            "only the biases become float32"
        )
    elif backend == "flashinfer":
        extra = layer_bytes(_round_up(inter, 256), _round_up(hidden, 256), 4 if bias else 0) - loaded
        what = "FlashInfer (SM100) pads the expert tensors to multiples of 256 and keeps float32 biases"
    else:
        padded = _round_up(inter, 64)  # create_weights' default rounding
        rows = _round_up(2 * padded, 256) * -(-hidden // MXFP4_BLOCK) + _round_up(hidden, 256) * -(
            -padded // MXFP4_BLOCK
        )
        extra = layer_bytes(padded, hidden, 4 if bias else 0) - loaded + experts * rows
        what = (
            "triton_kernels keeps a swizzled copy of the expert scales (rows padded to 256) beside the loaded "
            "ones and turns the biases into float32"
        )
    return LoadTimeChange(
        per_moe_layer_bytes=max(0, extra),
        backend=backend,
        note=f"MXFP4 on SM {compute_capability} ({backend} backend): {what} "
        + _mxfp4_source(backend, marlin_on_hopper and (compute_capability or "").startswith("9.")),
    )


def _mxfp4_source(backend: str, hopper_marlin: bool) -> str:
    if backend == "triton_strided":
        return (
            "(vllm/model_executor/layers/quantization/mxfp4.py before 0.10.1: the gpt-oss launch build, "
            "vllm-project/vllm PR #22259; Marlin below Hopper from 0.10.1, mxfp4.py:123-135)"
        )
    if backend == "marlin" and hopper_marlin:
        return "(vllm/model_executor/layers/quantization/mxfp4.py:123-135 at 0.10.1: torch 2.7.1 keeps Hopper on Marlin)"
    return "(vllm/model_executor/layers/quantization/mxfp4.py, 0.11-0.12)"


FP8_NATIVE_SM = (8, 9)
"""Ada (SM 8.9) and newer run FP8 GEMMs natively; below it vLLM serves FP8 weights through the Marlin kernel
(`Fp8LinearMethod.use_marlin = not current_platform.has_device_capability(89)`, quantization/fp8.py)."""


def _marlin_scale_extra(model: ModelSpec, layer: int, tp: int, block: int) -> int:
    """Bytes one rank's block-FP8 Linears of decoder `layer` gain when Marlin takes their scales: the checkpoint's
    float32 scale per block × block (booked by rank_weight_bytes, split by tp) becomes one 16-bit scale per
    `block` inputs and per output column (`prepare_fp8_layer_for_marlin` / `prepare_moe_fp8_layer_for_marlin`,
    vllm/model_executor/layers/quantization/utils/marlin_utils_fp8.py: "block-wise quantization -> group-wise
    quantization", `scales.repeat_interleave(block_n, 1)` in the model dtype)."""
    kv = max(1, model.num_key_value_heads)
    extra = 0
    for t in layer_linears(model, layer):
        if not t.quantised:
            continue
        rows, cols = t.rows, t.cols
        if t.tp == "col":
            rows = -(-rows // tp)
        elif t.tp == "row":
            cols = -(-cols // tp)
        elif t.tp == "kv":
            rows = -(-rows * max(1, kv // tp) // kv)
        split = tp if t.tp in ("col", "row") else kv / max(1, kv // tp) if t.tp == "kv" else 1
        loaded = 4 * -(-t.rows // block) * -(-t.cols // block) / split
        extra += round((2 * -(-cols // block) * rows - loaded) * t.count)
    return extra


def fp8_marlin_load_change(
    model: ModelSpec, *, tp: int, compute_capability: str | None, vendor: str = "nvidia"
) -> LoadTimeChange | None:
    """What a block-FP8 checkpoint (`fp8` with `weight_block_size`: DeepSeek-V3, Qwen3-FP8, Qwen3.5 / 3.6-FP8) gains
    on one rank where the GPU has no FP8 GEMM (SM < 8.9: Turing, Ampere; vLLM's Marlin weight-only path): each
    Linear's block scales are expanded to a 16-bit scale per 128 inputs per output column, 2 / 128 bytes per weight
    (+1.5 % of the FP8 weights). The weights themselves are repacked at the same size. None on other GPUs / methods.
    A hybrid's layers are sized by the dense layout (attention-like projections in every layer), within a tenth of
    the change."""
    group = model.quant_group_size
    if (model.quantization or "").lower() != "fp8" or not group or vendor != "nvidia" or not compute_capability:
        return None
    try:
        major, minor = (int(x) for x in compute_capability.split(".", 1))
    except ValueError:
        return None
    if (major, minor) >= FP8_NATIVE_SM or model.num_hidden_layers == 0:
        return None
    first_moe = next((i for i in range(model.num_hidden_layers) if is_moe_layer(model, i)), None)
    first_dense = next((i for i in range(model.num_hidden_layers) if not is_moe_layer(model, i)), None)
    dense = _marlin_scale_extra(model, first_dense, tp, group) if first_dense is not None else 0
    moe = _marlin_scale_extra(model, first_moe, tp, group) if first_moe is not None else 0
    base = dense if first_dense is not None else moe
    return LoadTimeChange(
        per_moe_layer_bytes=moe - base if first_moe is not None else 0,
        backend="marlin",
        per_layer_bytes=base,
        note=f"block FP8 on SM {compute_capability} (no native FP8 GEMM): Marlin keeps a 16-bit scale per {group} "
        "inputs per output column instead of one float32 per block "
        "(vllm/model_executor/layers/quantization/utils/marlin_utils_fp8.py prepare_fp8_layer_for_marlin)",
    )


def rope_cache_bytes(model: ModelSpec, dtype: str | None = None) -> int:
    """vLLM's rotary-embedding cos/sin caches on every rank (`ModelSpec.rope_cache_elements` in the model dtype):
    buffers built with the model, so inside "Model loading took" (vllm/model_executor/layers/rotary_embedding/,
    `RotaryEmbedding.__init__` registers `cos_sin_cache`). 2 MiB for Llama-3-8B, 32 MiB for Llama-3.1 (131,072
    positions), 0.56 GiB for Gemma-3-4B (its global rope is linear-scaled 8× over 131,072 positions). `dtype`: the
    serving `--dtype` (the cache follows the model's dtype)."""
    element: float = serving_dtype_bytes(model)
    if dtype not in (None, "", "auto"):
        with contextlib.suppress(KeyError):  # an unknown --dtype is refused by plan's validation
            element = dtype_bytes(dtype)
    return round(model.rope_cache_elements * element)


def indexer_topk_buffer_bytes(model: ModelSpec, max_num_batched_tokens: int) -> int:
    """DeepSeek-V3.2's `topk_indices_buffer`: `torch.empty(max_num_batched_tokens, index_topk, dtype=int32)` built
    once in `DeepseekV2Model.__init__` and shared by every layer's indexer (vllm/model_executor/models/
    deepseek_v2.py, v0.32.0), on every rank, so inside "Model loading took". 64 MiB at 8,192 batched tokens and
    index_topk 2048. DeepSeek-V4 builds the same buffer (vllm/models/deepseek_v4/nvidia/model.py:1324-1328, 0.32.0):
    16 MiB at index_topk 512. 0 for models without the indexer."""
    if model.dsv4 is not None:
        return max(0, max_num_batched_tokens) * model.dsv4.index_topk * 4
    if model.mla is None or not model.mla.indexer_topk:
        return 0
    return max(0, max_num_batched_tokens) * model.mla.indexer_topk * 4
