"""Checkpoint bytes of a pre-quantised Gated DeltaNet hybrid (Qwen3-Next, Qwen3.5 / Qwen3.6) from its config alone.

The dense layout formula of vramctl/core/params.py does not see the state layers, so a ratio of its quantised to
16-bit bytes used to scale the exact 16-bit total. That ratio quantised the vision tower along with the decoder (the
public checkpoints keep it in 16 bits), charged every layer a full-attention block, and kept the Gated DeltaNet
projections packed even where the config leaves them in 16 bits (llm-compressor's FP8-dynamic recipes ignore
`re:.*linear_attn.*`). Here the 16-bit total loses, Linear by Linear, what the method saves on the weights it
quantises:

- the full-attention layers' q (with the output gate, 2 × heads × head_dim rows), k, v and o;
- the Gated DeltaNet layers' in_proj_qkv + in_proj_z (Qwen3-Next: the fused in_proj_qkvz) and out_proj; in_proj_a /
  in_proj_b (in_proj_ba) stay 16-bit (the official FP8 checkpoints, the AutoRound / GPTQ / NVFP4 uploads keep them);
- the dense MLP, routed and shared experts (params.py's parts);

each part less the fraction of its layers the config's ignore lists keep. Embeddings, lm_head, norms, convolution,
routers and the vision tower stay in 16 bits; the MTP layer is not counted (vLLM skips `mtp.*` for a plain serve).
Checked against Qwen/Qwen3.6-27B-FP8 (30.87 GB of safetensors with its MTP layer; an independent tensor walk of the
block-FP8 layout gives 30.87 GB, 30.39 GB without it) and xega-ai/Qwen3.5-35B-A3B-FP8-Dynamic (36.8 GB on its card:
32.61 GB of FP8 tensors + 4.16 GB of BF16 ones).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from vramctl.core.params import linear_bytes, quant_part_bytes, serving_dtype_bytes
from vramctl.core.specs import FULL_ATTENTION, LINEAR_ATTENTION, SLIDING_ATTENTION, ModelSpec

STATE_MIXERS = "state_mixers"
"""The `_kept_parts` key of a hybrid's state-layer projections (Gated DeltaNet `linear_attn`)."""
_FFN_PARTS = ("dense_mlp", "shared_experts", "experts")


def _saving(spec: ModelSpec, shapes: list[tuple[int, int]]) -> int:
    """Bytes the spec's method saves on Linears of these (rows, cols) against 16 bits."""
    high = serving_dtype_bytes(spec)
    return sum(rows * cols * high - linear_bytes(spec, rows, cols) for rows, cols in shapes)


def _kept(kept: Mapping[str, float], part: str) -> float:
    return min(1.0, max(0.0, kept.get(part, 0.0)))


def gated_delta_net_bytes(
    spec: ModelSpec, *, total_16bit: int, gated_q: int, kept: Mapping[str, float]
) -> int | None:
    """Checkpoint bytes of a pre-quantised Gated DeltaNet hybrid (see the module doc); None for other layouts.

    `total_16bit`: every counted tensor (vision tower included, MTP excluded) in the 16-bit serving dtype;
    `gated_q`: 2 when q_proj also yields the output gate (`attn_output_gate`), else 1; `kept`: part → fraction of its
    layers left in 16 bits (registry/models.py `_kept_parts`, with STATE_MIXERS for the linear-attention projections).
    """
    st = spec.state_space
    if st is None or st.kind != "gated_delta_net" or not spec.quantization or spec.mla is not None:
        return None
    h = spec.hidden_size
    n_attn = sum(1 for kind in spec.layer_types if kind in (FULL_ATTENTION, SLIDING_ATTENTION))
    n_state = sum(1 for kind in spec.layer_types if kind == LINEAR_ATTENTION)
    q_width = spec.num_attention_heads * spec.head_dim
    kv_width = spec.num_key_value_heads * spec.head_dim
    attention = _saving(spec, [(q_width * gated_q, h), (kv_width, h), (kv_width, h), (h, q_width)])
    key, value = st.n_groups * st.state_size, st.num_heads * st.head_dim
    fused = spec.architecture.startswith("Qwen3Next")  # in_proj_qkvz (qwen3_next.py) vs in_proj_qkv + in_proj_z
    inputs = [(2 * key + 2 * value, h)] if fused else [(2 * key + value, h), (value, h)]
    state = _saving(spec, [*inputs, (h, value)])
    plain = replace(spec, quantization=None, quant_bits=None, quant_group_size=None)
    packed, high = quant_part_bytes(spec), quant_part_bytes(plain)
    ffn = sum((high[p] - packed[p]) * (1.0 - _kept(kept, p)) for p in _FFN_PARTS)
    saving = n_attn * attention * (1.0 - _kept(kept, "attention"))
    saving += n_state * state * (1.0 - _kept(kept, STATE_MIXERS)) + ffn
    return total_16bit - round(saving)
